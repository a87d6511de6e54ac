"""Client certificates (docs/install.md, "Client certificates"): the webhook with `--client-ca-file`
answers `/mutate` only for a client whose certificate that CA signed; the API server presents one through
its admission configuration (`--admission-control-config-file`, a `WebhookAdmissionConfiguration` whose
kubeconfig names the webhook's host and port), set up as the page tells a user to.

The session's control plane starts without an admission configuration (the API server reads it only at
start), so this module starts a control plane of its own with one.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from devplatform import demo
from devplatform.cluster import addons, controlplane
from devplatform.cluster.pki import KeyPair, issue_cert, make_ca, write_pair
from devplatform.cluster.processes import free_port
from tests.support.gpus import GPU

UNAUTHENTICATED = 'nimbix_burst_admission_errors_total{kind="unauthenticated"}'


def _admission_configuration(directory: Path, *, webhook_host: str, client: KeyPair) -> Path:
    """The two files of docs/install.md's step 2: the AdmissionConfiguration and its kubeconfig."""
    directory.mkdir(parents=True, exist_ok=True)
    write_pair(client, cert_path=directory / "webhook-client.crt", key_path=directory / "webhook-client.key")
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [
            {
                "name": webhook_host,  # a webhook called at a URL: its host and port
                "user": {
                    "client-certificate": str(directory / "webhook-client.crt"),
                    "client-key": str(directory / "webhook-client.key"),
                },
            }
        ],
    }
    (directory / "webhook-kubeconfig.yaml").write_text(yaml.safe_dump(kubeconfig))
    config = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {
                "name": "MutatingAdmissionWebhook",
                "configuration": {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "WebhookAdmissionConfiguration",
                    "kubeConfigFile": str(directory / "webhook-kubeconfig.yaml"),
                },
            }
        ],
    }
    path = directory / "admission-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _post_review(webhook: addons.WebhookProcess, client: KeyPair | None, directory: Path) -> int:
    """POST an (empty) AdmissionReview to /mutate as `client` (None: no certificate); the HTTP status."""
    context = webhook.ssl_context()
    if client is not None:
        cert, key = directory / "caller.crt", directory / "caller.key"
        write_pair(client, cert_path=cert, key_path=key)
        context.load_cert_chain(cert, key)
    request = urllib.request.Request(
        webhook.url + "/mutate", data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code)


def _metric(webhook: addons.WebhookProcess, name: str) -> float:
    status, text = webhook.get("/metrics")  # no certificate needed, as for the kubelet's probes
    assert status == 200, text
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"{name} ")]
    return values[0] if values else 0.0


def test_only_the_api_servers_admission_certificate_may_call_mutate(
    make_control_plane: Callable[..., controlplane.ControlPlane], tmp_path: Path
) -> None:
    client_ca = make_ca("nimbix-burst-client-ca")
    apiserver_client = issue_cert(client_ca, common_name="kube-apiserver-nimbix-burst", client=True)
    port = free_port()
    config = _admission_configuration(tmp_path / "admission", webhook_host=f"127.0.0.1:{port}", client=apiserver_client)
    plane = make_control_plane("client-certs", apiserver_args=(f"--admission-control-config-file={config}",))
    client_ca_file = tmp_path / "client-ca.crt"
    client_ca_file.write_bytes(client_ca.cert_pem)
    run_dir = plane.run_dir / "webhook"
    webhook = addons.start_webhook(
        run_dir, kubeconfig=plane.kubeconfig_path, port=port, args=("--client-ca-file", str(client_ca_file))
    )
    try:
        addons.register_webhook(plane, webhook, name_suffix="-client-certs")
        # The API server presents its admission certificate: a labelled GPU pod is decided, not let through
        # unmutated (the registration's failurePolicy is Ignore: a refused review would leave no decision).
        plane.kubectl("create", "namespace", "team")
        # The API server admits a pod only once its namespace's default ServiceAccount exists, which the
        # controller-manager makes a moment after the namespace.
        demo.wait_for(
            lambda: plane.kubectl("-n", "team", "get", "serviceaccount", "default", check=False).returncode == 0,
            what="namespace team's default ServiceAccount",
            timeout=60,
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": "team", "labels": {"task-type": "Nimbix"}},
            "spec": {
                "containers": [
                    {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU: "1"}}}
                ]
            },
        }
        created = json.loads(plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(pod)).stdout)
        annotations = created["metadata"].get("annotations") or {}
        assert annotations.get("nimbix-burst.io/decision") in ("local", "remote"), annotations
        assert _metric(webhook, UNAUTHENTICATED) == 0.0
        # Anyone else who reaches the port: no certificate, 403 (counted); another CA's, no handshake.
        assert _post_review(webhook, None, tmp_path) == 403
        assert _metric(webhook, UNAUTHENTICATED) == 1.0
        stranger = issue_cert(make_ca("some-other-ca"), common_name="kube-apiserver-nimbix-burst", client=True)
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _post_review(webhook, stranger, tmp_path)
        # A certificate the CA signed is all it takes (not the API server's address).
        assert _post_review(webhook, issue_cert(client_ca, common_name="any-client", client=True), tmp_path) == 400
    finally:
        addons.stop_webhook(webhook)
