"""The shipped install against a real kube-apiserver.

- Every object `kubectl kustomize deploy/` produces is accepted by the API server (server-side dry run
  with strict field validation, no warnings), cert-manager's Issuers and Certificates included: the
  session's cert-manager (devplatform.certmanager) installs its CRDs, so their real schemas apply.
- The webhook pod passes the "restricted" Pod Security Standard the namespace enforces.
- The examples users apply in their own namespaces (deploy/examples/) are accepted too.
- The shipped MutatingWebhookConfiguration, pointed at a host URL, is registered and reads back
  unchanged, and its objectSelector and matchConditions (CEL) send exactly the labelled GPU pods.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from devplatform import certmanager, manifests
from devplatform.cluster import controlplane
from devplatform.manifests import Manifest
from jarvice import contract

NAMESPACE = "nimbix-burst"
CERT_MANAGER_GROUP = "cert-manager.io"
# Created for real before the dry run: the namespace the others live in, and what a pod of the
# Deployment needs to exist to be admitted (ServiceAccount and Priority admission plugins).
PREREQUISITE_KINDS = ("Namespace", "ServiceAccount", "PriorityClass")
# How long a new webhook configuration may take to reach the API server's admission chain.
WEBHOOK_ACTIVATION_TIMEOUT_SECONDS = 15.0
POLL_INTERVAL_SECONDS = 0.2


@pytest.fixture(scope="module")
def objs(control_plane: controlplane.ControlPlane) -> list[Manifest]:
    return manifests.render_kustomize(control_plane.bin_dir / controlplane.KUBECTL)


@pytest.fixture(scope="module")
def prerequisites(control_plane: controlplane.ControlPlane, objs: list[Manifest]) -> Iterator[None]:
    created = [obj for kind in PREREQUISITE_KINDS for obj in manifests.find_objects(objs, kind=kind)]
    for obj in created:
        _kubectl(control_plane, "apply", "-f", "-", obj=obj)
    yield
    # Removed again, the cluster-scoped PriorityClass included: a later module installs the add-on
    # with Helm, which refuses to adopt an object it did not create.
    for obj in reversed(created):
        _kubectl(control_plane, "delete", "--ignore-not-found", "--wait=true", "-f", "-", obj=obj)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that is bound but not listening: every connection to it is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_every_object_is_accepted_by_the_api_server(
    control_plane: controlplane.ControlPlane,
    objs: list[Manifest],
    prerequisites: None,
    cert_manager: certmanager.CertManager,
) -> None:
    cert_manager_objects = [o for o in objs if o["apiVersion"].startswith(f"{CERT_MANAGER_GROUP}/")]
    assert len(cert_manager_objects) == 5  # two Issuers, three Certificates (CA, webhook, gateway)
    problems = []
    for obj in objs:
        result = _kubectl(
            control_plane, "apply", "--dry-run=server", "--validate=strict", "-f", "-", obj=obj, check=False
        )
        if result.returncode != 0 or "Warning" in result.stderr:
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {result.stderr.strip()}")
    assert problems == []


def test_webhook_pod_meets_the_namespaces_restricted_pod_security(
    control_plane: controlplane.ControlPlane, objs: list[Manifest], prerequisites: None
) -> None:
    namespace = manifests.find_object(objs, kind="Namespace", name=NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    template = manifests.find_object(objs, kind="Deployment", name="nimbix-burst-webhook")["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": "webhook-dry-run", "namespace": NAMESPACE},
        "spec": template["spec"],
    }
    result = _kubectl(control_plane, "create", "--dry-run=server", "-f", "-", obj=pod, check=False)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr


@pytest.mark.parametrize("filename", ["job.yaml", "checkpoint-job.yaml", "jarvice-credentials.yaml.example"])
def test_examples_are_accepted_by_the_api_server(
    control_plane: controlplane.ControlPlane, namespace: str, filename: str
) -> None:
    (obj,) = manifests.parse_manifests((manifests.DEPLOY_DIR / "examples" / filename).read_text())
    result = _kubectl(
        control_plane,
        "-n",
        namespace,
        "create",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        obj=obj,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr


def test_shipped_webhook_configuration_registers_and_reads_back(
    control_plane: controlplane.ControlPlane, objs: list[Manifest], refused_port: int
) -> None:
    config = manifests.webhook_configuration_for_url(
        objs,
        url=f"https://127.0.0.1:{refused_port}/mutate",
        ca_bundle_pem=control_plane.ca_cert_path.read_bytes(),
        name_suffix="-e2e-registration",
    )
    with _registered(control_plane, config):
        stored = json.loads(
            _kubectl(
                control_plane, "get", "mutatingwebhookconfiguration", config["metadata"]["name"], "-o", "json"
            ).stdout
        )
    # Everything we set comes back as set (the server only adds defaults, none of which we rely on).
    assert [w["name"] for w in stored["webhooks"]] == [w["name"] for w in config["webhooks"]]
    for sent, got in zip(config["webhooks"], stored["webhooks"], strict=True):
        assert {key: got[key] for key in sent} == sent
    assert stored["metadata"]["labels"] == config["metadata"]["labels"]


def test_only_labelled_pods_with_a_gpu_reach_the_webhook(
    control_plane: controlplane.ControlPlane, objs: list[Manifest], namespace: str, refused_port: int
) -> None:
    """The shipped selectors and matchConditions, made observable: the webhook's address refuses
    connections and failurePolicy is Fail, so a pod that is sent is rejected and one that is not sent
    is admitted. The namespaceSelector is narrowed to this test's namespace so no other test is
    affected while the configuration exists."""
    config = manifests.webhook_configuration_for_url(
        objs,
        url=f"https://127.0.0.1:{refused_port}/mutate",
        ca_bundle_pem=control_plane.ca_cert_path.read_bytes(),
        name_suffix="-e2e-match",
    )
    # The pods' webhook alone: the Jobs' one (a Job's podFailurePolicy) is not what this test observes.
    config["webhooks"] = [w for w in config["webhooks"] if w["name"] == manifests.PODS_WEBHOOK]
    (webhook,) = config["webhooks"]
    webhook["failurePolicy"] = "Fail"
    webhook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    label = {contract.LABEL_TASK_TYPE: contract.LABEL_TASK_TYPE_VALUE}
    gpu = {"limits": {"nvidia.com/gpu": "1"}}
    legacy_gpu = {"limits": {"alpha.kubernetes.io/nvidia-gpu": "1"}}
    cpu_only = {"limits": {"cpu": "1", "memory": "64Mi"}}

    with _registered(control_plane, config):
        _wait_until_rejected(control_plane, _pod(namespace, "gpu", labels=label, resources=gpu))
        sent = {
            "legacy-gpu-resource": _pod(namespace, "legacy", labels=label, resources=legacy_gpu),
            "gpu-in-init-container-only": _pod(namespace, "init", labels=label, init_resources=gpu),
            "gpu-in-second-container": _pod(namespace, "second", labels=label, resources=cpu_only, extra_gpu=True),
        }
        not_sent = {
            "labelled-without-gpu": _pod(namespace, "cpu", labels=label, resources=cpu_only),
            "labelled-without-resources": _pod(namespace, "bare", labels=label),
            "gpu-without-label": _pod(namespace, "unlabelled", labels={}, resources=gpu),
            "wrong-label-value": _pod(namespace, "other", labels={contract.LABEL_TASK_TYPE: "Local"}, resources=gpu),
        }
        outcomes = {case: _dry_run_create(control_plane, pod) for case, pod in {**sent, **not_sent}.items()}

    for case in sent:
        error = outcomes[case]
        assert error is not None, f"{case}: admitted, but it should have been sent to the webhook"
        assert "failed calling webhook" in error, error
    for case in not_sent:
        assert outcomes[case] is None, f"{case}: sent to the webhook: {outcomes[case]}"


# --- helpers ------------------------------------------------------------------------------------


def _kubectl(
    control_plane: controlplane.ControlPlane, *args: str, obj: Mapping[str, Any] | None = None, check: bool = True
) -> Any:
    return control_plane.kubectl(*args, check=check, input=None if obj is None else json.dumps(obj))


@contextlib.contextmanager
def _registered(control_plane: controlplane.ControlPlane, config: Manifest) -> Iterator[None]:
    _kubectl(control_plane, "create", "-f", "-", obj=config)
    try:
        yield
    finally:
        _kubectl(
            control_plane, "delete", "mutatingwebhookconfiguration", config["metadata"]["name"], "--ignore-not-found"
        )


def _pod(
    namespace: str,
    name: str,
    *,
    labels: Mapping[str, str],
    resources: Mapping[str, Any] | None = None,
    init_resources: Mapping[str, Any] | None = None,
    extra_gpu: bool = False,
) -> Manifest:
    def container(container_name: str, container_resources: Mapping[str, Any] | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": container_name, "image": "example.com/my-app:latest"}
        if container_resources is not None:
            spec["resources"] = dict(container_resources)
        return spec

    containers = [container("main", resources)]
    if extra_gpu:
        containers.append(container("gpu", {"limits": {"nvidia.com/gpu": "1"}}))
    spec: dict[str, Any] = {"containers": containers, "restartPolicy": "Never"}
    if init_resources is not None:
        spec["initContainers"] = [container("init", init_resources)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
    }


def _dry_run_create(control_plane: controlplane.ControlPlane, pod: Manifest) -> str | None:
    """None if the pod is admitted (server-side dry run), else the API server's error."""
    result = _kubectl(control_plane, "create", "--dry-run=server", "-f", "-", obj=pod, check=False)
    return None if result.returncode == 0 else str(result.stderr).strip()


def _wait_until_rejected(control_plane: controlplane.ControlPlane, pod: Manifest) -> None:
    """Waits for a new webhook configuration to take effect: until a pod it must see is rejected."""
    deadline = time.monotonic() + WEBHOOK_ACTIVATION_TIMEOUT_SECONDS
    while (error := _dry_run_create(control_plane, pod)) is None:
        assert time.monotonic() < deadline, "the webhook configuration never took effect"
        time.sleep(POLL_INTERVAL_SECONDS)
    assert "failed calling webhook" in error, error
