"""Starts our own programs beside the control plane: the webhook (and its registration).

Used by the e2e tests, `make dev-up`, the demo and the benchmarks, so all of them run the webhook
the same way: a real `python -m webhook` process over HTTPS, registered with the API server from
the MutatingWebhookConfiguration that `deploy/` ships (only the url and caBundle differ).
"""

from __future__ import annotations

import json
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests import manifests
from tests.cluster.controlplane import ControlPlane
from tests.cluster.pki import KeyPair, issue_cert, make_ca, write_pair
from tests.cluster.processes import ManagedProcess, free_port, is_running, read_log_tail, start_process, stop_process

READY_TIMEOUT_SECONDS = 60.0


class AddonError(RuntimeError):
    pass


@dataclass(frozen=True)
class WebhookProcess:
    process: ManagedProcess
    url: str  # https://127.0.0.1:<port>
    ca: KeyPair
    tls_dir: Path

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca.cert_pem.decode())

    def get(self, path: str, *, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, context=self.ssl_context(), timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def make_webhook_tls(tls_dir: Path, *, ca: KeyPair | None = None) -> KeyPair:
    """A CA and a serving cert for 127.0.0.1/localhost, laid out like a cert-manager Secret."""
    ca = ca or make_ca("nimbix-burst-dev-ca")
    serving = issue_cert(
        ca, common_name="nimbix-burst-webhook", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True
    )
    tls_dir.mkdir(parents=True, exist_ok=True)
    write_pair(serving, cert_path=tls_dir / "tls.crt", key_path=tls_dir / "tls.key")
    (tls_dir / "ca.crt").write_bytes(ca.cert_pem)
    return ca


def start_webhook(
    run_dir: Path,
    *,
    kubeconfig: Path,
    args: Sequence[str] = (),
    port: int | None = None,
    ca: KeyPair | None = None,
    wait: bool = True,
) -> WebhookProcess:
    tls_dir = run_dir / "webhook-tls"
    ca = make_webhook_tls(tls_dir, ca=ca)
    port = port or free_port()
    argv = [
        sys.executable, "-m", "webhook",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--tls-dir", str(tls_dir),
        "--kubeconfig", str(kubeconfig),
        *args,
    ]  # fmt: skip
    process = start_process("webhook", argv, log_path=run_dir / "logs" / "webhook.log")
    webhook = WebhookProcess(process=process, url=f"https://127.0.0.1:{port}", ca=ca, tls_dir=tls_dir)
    if wait:
        wait_ready(webhook)
    return webhook


def wait_ready(webhook: WebhookProcess, *, timeout: float = READY_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not is_running(webhook.process):
            raise AddonError(f"webhook exited during start; log tail:\n{read_log_tail(webhook.process.log_path)}")
        try:
            status, text = webhook.get("/readyz", timeout=2)
            if status == 200:
                return
            last = f"{status} {text}"
        except OSError as error:
            last = str(error)
        time.sleep(0.1)
    raise AddonError(f"webhook not ready after {timeout:g}s ({last}); log: {webhook.process.log_path}")


def stop_webhook(webhook: WebhookProcess) -> None:
    stop_process(webhook.process)


def register_webhook(control_plane: ControlPlane, webhook: WebhookProcess, *, name_suffix: str = "") -> str:
    """Applies the shipped MutatingWebhookConfiguration, pointed at the host webhook."""
    objects = manifests.render_kustomize(control_plane.bin_dir / "kubectl")
    config = manifests.webhook_configuration_for_url(
        objects, url=webhook.url + "/mutate", ca_bundle_pem=webhook.ca.cert_pem, name_suffix=name_suffix
    )
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(config))
    return str(config["metadata"]["name"])
