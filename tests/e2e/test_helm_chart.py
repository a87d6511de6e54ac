"""The Helm chart (charts/nimbix-burst) on the real node, the way docs/helm.md has a user run it:
`helm template` accepted by the API server (server-side dry run, strict field validation), then
`helm install` with cert-manager issuing, `helm upgrade` with a changed value, `helm rollback`,
`helm uninstall`.

The chart installs the same objects (same names) as the kustomize install that other modules share
(conftest's `installed_addon`), so the two installs never meet: that one is uninstalled before this
module runs (this module uses no `installed_addon`), and this one uninstalls its release and deletes
the namespace before its test ends. The real node is the session's; a control plane of its own would
have no node to run the pods.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs

from devplatform import certmanager, gotools, helmchart
from devplatform.cluster import install
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.node import RealNode

DECISION = "nimbix-burst.io/decision"
WEBHOOK = "nimbix-burst-webhook"
GATEWAY_SELECTOR = "app.kubernetes.io/name=nimbix-burst-gateway"
# Every object the chart makes outside the namespace: all must go with `helm uninstall`.
CLUSTER_OBJECTS = (
    ("mutatingwebhookconfiguration", "nimbix-burst"),
    ("clusterrole", "nimbix-burst-webhook"),
    ("clusterrole", "nimbix-burst-controller"),
    ("clusterrole", "nimbix-burst-gateway"),
    ("clusterrolebinding", "nimbix-burst-webhook"),
    ("clusterrolebinding", "nimbix-burst-controller"),
    ("clusterrolebinding", "nimbix-burst-gateway"),
    ("priorityclass", "nimbix-burst-webhook"),
    ("validatingadmissionpolicy", "nimbix-burst-budget"),
    ("validatingadmissionpolicybinding", "nimbix-burst-budget"),
)
# Every option switched away from its default, for the dry run (monitoring stays off: the
# PrometheusRule CRD is not installed here).
EVERY_OPTION = {
    "webhook": {
        "replicas": 3,
        "failurePolicy": "Fail",
        "clientCASecret": "api-client-ca",
        "gpuResources": ["nvidia.com/gpu", "amd.com/gpu"],
        "namespaceSelectorExpressions": [{"key": "nimbix-burst.io/enabled", "operator": "In", "values": ["true"]}],
        "env": {
            "WEBHOOK_OVER_BUDGET": "deny",
            "NIMBIX_BURST_CLUSTER_NAME": "prod-eu",
            "WEBHOOK_GATEWAY_AUDIENCE": "burst-gateway",
        },
        "podDisruptionBudget": {"minAvailable": 2},
        "gpuModels": {"Tesla-T4": ["ng1"], "NVIDIA-A100-SXM4-80GB": ["ng1a", "ng8"]},
    },
    "controller": {
        "jarvice": {"create": True, "username": "ada", "apikey": "k3y"},
        "env": {"CONTROLLER_ORPHAN_DRY_RUN": "true", "CONTROLLER_COST_REFRESH_SECONDS": "600"},
    },
    "gateway": {"replicas": 3, "accountsSecret": "team-accounts", "nodeSelector": {"pool": "system"}},
    "certManager": {"issuerRef": {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp-ca"}},
    "networkPolicy": {"apiServerCIDRs": ["10.0.0.0/24", "10.0.1.0/24"]},
}


@pytest.fixture(scope="module")
def helm() -> Path:
    return gotools.ensure_tool("helm")


def _kubectl(plane: ControlPlane, *args: str, input: str | None = None) -> str:
    return plane.kubectl(*args, input=input).stdout


def _dry_run_namespace(plane: ControlPlane) -> Iterator[str]:
    name = f"helm-dry-{uuid.uuid4().hex[:8]}"
    _kubectl(plane, "create", "namespace", name)
    try:
        yield name
    finally:
        _kubectl(plane, "delete", "namespace", name, "--wait=false")


@pytest.fixture
def dry_run_namespace(control_plane: ControlPlane) -> Iterator[str]:
    yield from _dry_run_namespace(control_plane)


@pytest.mark.parametrize("values", [{}, EVERY_OPTION], ids=["defaults", "every-option"])
def test_helm_template_is_accepted_by_the_api_server_strictly(
    control_plane: ControlPlane,
    cert_manager: certmanager.CertManager,
    helm: Path,
    dry_run_namespace: str,
    values: dict[str, Any],
) -> None:
    objects = helmchart.render(helm, namespace=dry_run_namespace, values=values)
    rendered = yaml.safe_dump_all(objects)
    out = _kubectl(
        control_plane, "apply", "--dry-run=server", "--validate=strict", "-o", "name", "-f", "-", input=rendered
    )
    assert len(out.split()) == len(objects)


def _webhook_deployment(plane: ControlPlane) -> dict[str, Any]:
    deployment: dict[str, Any] = json.loads(
        _kubectl(plane, "-n", helmchart.NAMESPACE, "get", "deployment", WEBHOOK, "-o", "json")
    )
    return deployment


def _served_setting(plane: ControlPlane, key: str) -> str:
    """The setting as the webhook pods get it: from the ConfigMap their Deployment names."""
    configmap = _webhook_deployment(plane)["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"][
        "name"
    ]
    data = json.loads(_kubectl(plane, "-n", helmchart.NAMESPACE, "get", "configmap", configmap, "-o", "json"))["data"]
    return str(data[key])


def _decision_of_a_dry_run_gpu_pod(plane: ControlPlane) -> str:
    """A labelled one-GPU pod created with --dry-run=server in the default namespace: the webhook
    decides it (local or remote, by the fake GPU nodes other modules left) and nothing is stored."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"helm-{uuid.uuid4().hex[:8]}", "namespace": "default", "labels": {"task-type": "Nimbix"}},
        "spec": {
            "containers": [
                {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    created = json.loads(_kubectl(plane, "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod)))
    return str(created["metadata"].get("annotations", {}).get(DECISION, "unmutated"))


def _revisions(helm: Path, plane: ControlPlane) -> list[tuple[int, str]]:
    return [(int(r["revision"]), str(r["status"])) for r in helmchart.read_history(helm, plane.kubeconfig_path)]


def test_install_upgrade_rollback_uninstall_on_the_real_node(
    control_plane: ControlPlane, real_node: RealNode, cert_manager: certmanager.CertManager, helm: Path
) -> None:
    plane = control_plane
    values = install.read_chart_values(real_node)
    try:
        # Install: cert-manager issues, cainjector fills the caBundle, every Deployment rolls out on
        # the real node and a replica takes the Lease (install_addon's checks), and the webhook decides.
        installed = install.install_addon(plane, real_node, helm=helm)
        assert len(installed.pods) == 2 and installed.leader in installed.pods
        assert len(install.read_serving_pods(plane, GATEWAY_SELECTOR)) == 2  # the gateway, with its certificate
        assert _revisions(helm, plane) == [(1, "deployed")]
        assert _served_setting(plane, "WEBHOOK_LOG_LEVEL") == "INFO"
        assert _decision_of_a_dry_run_gpu_pod(plane) in {"local", "remote"}
        first_template = _webhook_deployment(plane)["spec"]["template"]

        # Upgrade with a changed value: a new ConfigMap (another content hash), the pods rolled.
        upgraded = {**values, "webhook": {**values["webhook"], "env": {"WEBHOOK_LOG_LEVEL": "DEBUG"}}}
        helmchart.upgrade(helm, plane.kubeconfig_path, values=upgraded)
        assert _revisions(helm, plane) == [(1, "superseded"), (2, "deployed")]
        assert _served_setting(plane, "WEBHOOK_LOG_LEVEL") == "DEBUG"
        assert _webhook_deployment(plane)["spec"]["template"] != first_template
        serving = {pod["metadata"]["name"] for pod in install.read_serving_pods(plane, install.APP_SELECTOR)}
        assert serving.isdisjoint(installed.pods)  # maxUnavailable 0: replaced one by one, all new
        assert _decision_of_a_dry_run_gpu_pod(plane) in {"local", "remote"}

        # Roll back to the first revision: its setting is served again, as a third revision.
        helmchart.rollback(helm, plane.kubeconfig_path, revision=1)
        assert _revisions(helm, plane) == [(1, "superseded"), (2, "superseded"), (3, "deployed")]
        assert _served_setting(plane, "WEBHOOK_LOG_LEVEL") == "INFO"
        assert _webhook_deployment(plane)["spec"]["template"] == first_template
        assert _decision_of_a_dry_run_gpu_pod(plane) in {"local", "remote"}
    finally:
        install.uninstall(plane, helm=helm)

    # Uninstalled: nothing of the chart is left, in the namespace or outside it.
    for kind, name in CLUSTER_OBJECTS:
        result = plane.kubectl("get", kind, name, "--ignore-not-found", "-o", "name", check=False)
        assert result.stdout.strip() == "", f"{kind}/{name} outlived helm uninstall"
    assert plane.kubectl("get", "namespace", helmchart.NAMESPACE, check=False).returncode != 0
    assert _decision_of_a_dry_run_gpu_pod(plane) == "unmutated"
