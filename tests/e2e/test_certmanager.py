"""The real cert-manager (built from its Go module, devplatform.certmanager) issues the project's
certificates on the local control plane.

- `deploy/certificates.yaml`, applied unchanged (SelfSigned -> CA -> serving certificate), ends with
  the serving Certificate Ready and its Secret holding tls.crt, tls.key and ca.crt, where tls.crt is
  signed by ca.crt for the Service's DNS names.
- cainjector fills the caBundle of a MutatingWebhookConfiguration annotated
  `cert-manager.io/inject-ca-from: nimbix-burst/nimbix-burst-webhook` with that Secret's ca.crt.
- A renewal asked for through the API (what `cmctl renew` does) replaces the certificate: a new
  serial and, with rotationPolicy Always, a new key; the CA, hence the caBundle, stays.

Timings (apply -> Ready, apply -> injected, renew -> new certificate) are printed (`pytest -s`).
"""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from devplatform import certmanager, demo, manifests
from devplatform.cluster import controlplane

NAMESPACE = "nimbix-burst"
CA_CERTIFICATE = "nimbix-burst-ca"
CA_SECRET = "nimbix-burst-ca"
SERVING_CERTIFICATE = "nimbix-burst-webhook"
SERVING_SECRET = "nimbix-burst-webhook-tls"
CERTIFICATES_FILE = manifests.DEPLOY_DIR / "certificates.yaml"
NAMESPACE_FILE = manifests.DEPLOY_DIR / "namespace.yaml"
WEBHOOK_CONFIGURATION_SUFFIX = "-e2e-cainjector"
# The reference run took 5.4 s to Ready and 5.5 s to inject on this kind of machine; the bound leaves
# room for a loaded 2-core box without letting a stuck controller pass.
ISSUE_TIMEOUT_SECONDS = 90.0
POLL_INTERVAL_SECONDS = 0.1

T = TypeVar("T")


@dataclass(frozen=True)
class Issued:
    webhook_configuration: str
    ready_seconds: float
    injected_seconds: float


@pytest.fixture(scope="module")
def custom(api_client: Any) -> Any:
    return k8s_client.CustomObjectsApi(api_client)


@pytest.fixture(scope="module")
def admission(api_client: Any) -> Any:
    return k8s_client.AdmissionregistrationV1Api(api_client)


@pytest.fixture(scope="module")
def issued(
    control_plane: controlplane.ControlPlane,
    cert_manager: certmanager.CertManager,
    core: Any,
    custom: Any,
    admission: Any,
) -> Iterator[Issued]:
    """Applies the namespace, deploy/certificates.yaml and an inert copy of the shipped webhook
    configuration at the same moment, then waits for the serving certificate and the injection."""
    timings = cert_manager.timings
    print(f"\ncert-manager: CRDs Established {timings.crds_established_seconds:.2f} s, controller and "
          f"cainjector ready {timings.ready_seconds:.2f} s after install()")  # fmt: skip
    config = _inert_webhook_configuration(control_plane)
    name = config["metadata"]["name"]
    control_plane.kubectl("apply", "-f", str(NAMESPACE_FILE))
    began = time.monotonic()
    control_plane.kubectl("apply", "-f", str(CERTIFICATES_FILE))
    control_plane.kubectl("create", "-f", "-", input=json.dumps(config))
    try:
        demo.wait_for(
            lambda: certmanager.is_ready(_certificate(custom, SERVING_CERTIFICATE)),
            what="serving Certificate Ready",
            timeout=ISSUE_TIMEOUT_SECONDS,
        )
        ready_seconds = time.monotonic() - began
        demo.wait_for(
            lambda: _ca_bundle(admission, name) is not None, what="caBundle injected", timeout=ISSUE_TIMEOUT_SECONDS
        )
        injected_seconds = time.monotonic() - began
        print(f"\ncert-manager: serving Certificate Ready {ready_seconds:.2f} s after apply, "
              f"caBundle injected {injected_seconds:.2f} s after apply")  # fmt: skip
        yield Issued(webhook_configuration=name, ready_seconds=ready_seconds, injected_seconds=injected_seconds)
    finally:
        control_plane.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")
        control_plane.kubectl("delete", "-f", str(CERTIFICATES_FILE), "--ignore-not-found")
        control_plane.kubectl(
            "-n", NAMESPACE, "delete", "secret", CA_SECRET, SERVING_SECRET, "--ignore-not-found"
        )  # fmt: skip


def test_serving_certificate_is_issued_by_the_projects_ca(issued: Issued, core: Any) -> None:
    data = _secret_data(core, SERVING_SECRET)
    assert {"tls.crt", "tls.key", "ca.crt"} <= data.keys()
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    # Signed by the CA that the CA Certificate put in its own Secret.
    assert data["ca.crt"] == _secret_data(core, CA_SECRET)["tls.crt"]
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == [
        "nimbix-burst-webhook.nimbix-burst.svc",
        "nimbix-burst-webhook.nimbix-burst.svc.cluster.local",
    ]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]
    key = serialization.load_pem_private_key(data["tls.key"], password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp256r1"
    assert key.public_key() == cert.public_key()


def test_ca_bundle_is_injected_from_the_serving_secret(issued: Issued, core: Any, admission: Any) -> None:
    assert _ca_bundle(admission, issued.webhook_configuration) == _secret_data(core, SERVING_SECRET)["ca.crt"]


def test_renewal_issues_a_new_certificate_and_key_from_the_same_ca(
    control_plane: controlplane.ControlPlane, issued: Issued, core: Any, custom: Any, admission: Any
) -> None:
    before = _secret_data(core, SERVING_SECRET)
    serial_before = x509.load_pem_x509_certificate(before["tls.crt"]).serial_number

    began = time.monotonic()
    certmanager.renew(control_plane, namespace=NAMESPACE, name=SERVING_CERTIFICATE)

    def renewed() -> dict[str, bytes] | None:
        data = _secret_data(core, SERVING_SECRET)
        serial = x509.load_pem_x509_certificate(data["tls.crt"]).serial_number
        return data if serial != serial_before else None

    after = _wait_for(renewed, "a new serving certificate")
    renewed_seconds = time.monotonic() - began
    # Done: Ready again, and nothing left asking for another issuance (the request was consumed).
    demo.wait_for(
        lambda: _settled(_certificate(custom, SERVING_CERTIFICATE)),
        what="Ready, not Issuing, after renewal",
        timeout=ISSUE_TIMEOUT_SECONDS,
    )
    print(f"\ncert-manager: renewal wrote a new certificate {renewed_seconds:.2f} s after the request")

    assert after["tls.key"] != before["tls.key"]  # rotationPolicy: Always
    assert after["ca.crt"] == before["ca.crt"]
    x509.load_pem_x509_certificate(after["tls.crt"]).verify_directly_issued_by(
        x509.load_pem_x509_certificate(after["ca.crt"])
    )
    assert _ca_bundle(admission, issued.webhook_configuration) == after["ca.crt"]


# --- helpers ------------------------------------------------------------------------------------


def _inert_webhook_configuration(control_plane: controlplane.ControlPlane) -> manifests.Manifest:
    """The shipped MutatingWebhookConfiguration, renamed and selecting no namespace: it keeps the
    inject-ca-from annotation and its service reference, and never sees a request."""
    objs = manifests.render_kustomize(control_plane.bin_dir / controlplane.KUBECTL)
    config = copy.deepcopy(manifests.find_object(objs, kind=manifests.WEBHOOK_CONFIGURATION_KIND))
    assert config["metadata"]["annotations"][manifests.CA_INJECTION_ANNOTATION] == (
        f"{NAMESPACE}/{SERVING_CERTIFICATE}"
    )
    config["metadata"]["name"] += WEBHOOK_CONFIGURATION_SUFFIX
    for webhook in config["webhooks"]:
        webhook.get("clientConfig", {}).pop("caBundle", None)
        webhook["namespaceSelector"] = {"matchLabels": {"nimbix-burst-test/never": "matches"}}
    return config


def _settled(certificate: dict[str, Any]) -> bool:
    return certmanager.is_ready(certificate) and not certmanager.is_issuing(certificate)


def _certificate(custom: Any, name: str) -> dict[str, Any]:
    try:
        return dict(custom.get_namespaced_custom_object("cert-manager.io", "v1", NAMESPACE, "certificates", name))
    except ApiException as error:
        if error.status == 404:
            return {}
        raise


def _secret_data(core: Any, name: str) -> dict[str, bytes]:
    secret = core.read_namespaced_secret(name, NAMESPACE)
    return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}


def _ca_bundle(admission: Any, name: str) -> bytes | None:
    """The first webhook's caBundle, decoded (None while empty); read raw, as the API sends it."""
    response = admission.read_mutating_webhook_configuration(name, _preload_content=False)
    config = json.loads(response.data)
    encoded = config["webhooks"][0].get("clientConfig", {}).get("caBundle")
    return base64.b64decode(encoded) if encoded else None


def _wait_for(probe: Callable[[], T | None], what: str) -> T:
    """Polls ``probe`` until it returns something other than None."""
    deadline = time.monotonic() + ISSUE_TIMEOUT_SECONDS
    while (result := probe()) is None:
        if time.monotonic() >= deadline:
            pytest.fail(f"no {what} after {ISSUE_TIMEOUT_SECONDS:.0f} s")
        time.sleep(POLL_INTERVAL_SECONDS)
    return result
