"""Starts our own programs beside the control plane: the webhook (and its registration) and the
JARVICE emulator.

Used by the e2e tests, `make dev-up`, the demo and the benchmarks, so all of them run the webhook
the same way: a real `python -m webhook` process over HTTPS, registered with the API server from
the MutatingWebhookConfiguration that `deploy/` ships (only the url and caBundle differ).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from devplatform import manifests
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.pki import KeyPair, issue_cert, make_ca, write_pair
from devplatform.cluster.processes import (
    ManagedProcess,
    free_port,
    is_running,
    read_log_tail,
    start_process,
    stop_process,
)

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
            with error:  # it holds the response's socket
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
    cwd: Path | None = None,
) -> WebhookProcess:
    """`cwd`: the checkout whose `webhook` package runs (default: the one Python finds from ours)."""
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
    process = start_process("webhook", argv, log_path=run_dir / "logs" / "webhook.log", cwd=cwd)
    webhook = WebhookProcess(process=process, url=f"https://127.0.0.1:{port}", ca=ca, tls_dir=tls_dir)
    if wait:
        wait_ready(webhook)
    return webhook


def start_gateway(
    run_dir: Path,
    *,
    kubeconfig: Path,
    accounts_json: str,
    namespace: str,
    port: int | None = None,
    ca: KeyPair | None = None,
    extra_args: Sequence[str] = (),
) -> WebhookProcess:
    """`python -m gateway` on 127.0.0.1 with its own serving certificate (signed by `ca`, or a new CA)
    and the accounts file (and `extra_args`), returned once /readyz answers. Same shape as a webhook process."""
    tls_dir = run_dir / "gateway-tls"
    ca = make_webhook_tls(tls_dir, ca=ca)
    accounts = run_dir / "accounts.json"
    accounts.write_text(accounts_json)
    accounts.chmod(0o600)
    port = port or free_port()
    argv = [
        sys.executable, "-m", "gateway",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--tls-dir", str(tls_dir),
        "--kubeconfig", str(kubeconfig),
        "--accounts-file", str(accounts),
        "--namespace", namespace,
        *extra_args,
    ]  # fmt: skip
    process = start_process("gateway", argv, log_path=run_dir / "logs" / "gateway.log")
    gateway = WebhookProcess(process=process, url=f"https://127.0.0.1:{port}", ca=ca, tls_dir=tls_dir)
    wait_ready(gateway)
    return gateway


def wait_ready(webhook: WebhookProcess, *, timeout: float = READY_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not is_running(webhook.process):
            tail = read_log_tail(webhook.process.log_path)
            raise AddonError(f"{webhook.process.name} exited during start; log tail:\n{tail}")
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


@contextlib.contextmanager
def registered_webhook(
    control_plane: ControlPlane,
    run_dir: Path,
    *,
    name_suffix: str,
    args: Sequence[str] = (),
    kubeconfig: Path | None = None,
) -> Iterator[WebhookProcess]:
    """A host webhook (start_webhook; the control plane's kubeconfig unless another is given)
    registered under the shipped configuration while the block runs; unregistered, then stopped."""
    webhook = start_webhook(run_dir, kubeconfig=kubeconfig or control_plane.kubeconfig_path, args=args)
    try:
        name = register_webhook(control_plane, webhook, name_suffix=name_suffix)
        try:
            yield webhook
        finally:
            control_plane.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")
    finally:
        stop_webhook(webhook)


@dataclass(frozen=True)
class EmulatorProcess:
    process: ManagedProcess
    url: str
    env_file: Path  # shell-sourceable JARVICE_API_URL, JARVICE_USERNAME, JARVICE_APIKEY, APP_NAME, APP_COMMAND

    def runner_env(self) -> dict[str, str]:
        """The env file as a mapping, for starting runners against this emulator."""
        env: dict[str, str] = {}
        for line in self.env_file.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not line.startswith("#"):
                env[key.removeprefix("export ").strip()] = shlex.split(value)[0] if value else ""
        return env


# The example application's image is built FROM the base image, which sets JARVICE_SIGNAL_OVERRIDE: the
# emulator runs the base image's script from this checkout for /jarvice/signal (a move home's checkpoint).
SIGNAL_OVERRIDE_ARGS: Final = (
    "--image-env",
    "nimbix-burst-example:JARVICE_SIGNAL_OVERRIDE="
    + str(Path(__file__).resolve().parents[2] / "images" / "base" / "nimbix-burst-signal"),
)


def start_jarvice_emulator(
    run_dir: Path,
    *,
    args: Sequence[str] = (),
    host: str = "127.0.0.1",
    timeout: float = READY_TIMEOUT_SECONDS,
    on_start: Callable[[ManagedProcess], None] | None = None,
) -> EmulatorProcess:
    """`python -m devplatform.emulator` as its own process; returns once it is listening.

    ``host``: where it listens; the real node's ``gateway_address`` for runners in pods.
    ``on_start``: called with the process the moment it is started (dev-up records it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    state_file, env_file = run_dir / "jarvice-emulator.json", run_dir / "jarvice.env"
    state_file.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", "devplatform.emulator",
        "--state-file", str(state_file),
        "--env-file", str(env_file),
        "--workdir", str(run_dir / "jobs"),
        "--host", host,
        *args,
    ]  # fmt: skip
    process = start_process("jarvice-emulator", argv, log_path=run_dir / "logs" / "jarvice-emulator.log")
    if on_start is not None:
        on_start(process)
    deadline = time.monotonic() + timeout
    while not state_file.exists() or not state_file.read_text().strip():
        if not is_running(process):
            raise AddonError(f"JARVICE emulator exited during start; log tail:\n{read_log_tail(process.log_path)}")
        if time.monotonic() > deadline:
            stop_process(process)
            raise AddonError(f"JARVICE emulator not listening after {timeout:g}s; log: {process.log_path}")
        time.sleep(0.05)
    url = str(json.loads(state_file.read_text())["url"])
    return EmulatorProcess(process=process, url=url, env_file=env_file)


def stop_jarvice_emulator(emulator: EmulatorProcess) -> None:
    stop_process(emulator.process)
