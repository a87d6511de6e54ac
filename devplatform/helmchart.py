"""The Helm chart (charts/nimbix-burst) on the local platform: render it, compare it with the
kustomize install, install/upgrade/roll back/uninstall a release with the project-built helm.

    helm = gotools.ensure_tool("helm")
    objects = helmchart.render(helm, namespace="nimbix-burst")
    helmchart.find_render_differences(kustomize_objects, objects)     # [] when both install the same
    helmchart.install(helm, kubeconfig, values=helmchart.build_local_values(settings))

The pure builders and comparisons come first; the I/O below them runs helm and nothing else.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devplatform import manifests

CHART_DIR = manifests.REPO_ROOT / "charts" / "nimbix-burst"
RELEASE = "nimbix-burst"
NAMESPACE = "nimbix-burst"
# Labels Helm's conventions add to every object of the chart; the kustomize install has none of them.
HELM_LABELS = (
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)
# The Namespace is the one object the chart leaves out: Helm keeps its release record in it, so it
# must exist before `helm install` (docs/helm.md has the two commands that create and label it).
NOT_IN_CHART = (("Namespace", "", NAMESPACE),)
# The pod security labels the kustomize install gives the namespace (deploy/namespace.yaml).
NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
}
# A cold install on a busy 2-core machine: pods start in ~10 s, cert-manager issues in about one.
HELM_TIMEOUT_SECONDS = 300

ObjectKey = tuple[str, str, str]  # kind, namespace, name


# -- pure ---------------------------------------------------------------------------------------------


def build_object_key(obj: Mapping[str, Any]) -> ObjectKey:
    metadata = obj.get("metadata", {})
    return (str(obj.get("kind", "")), str(metadata.get("namespace", "")), str(metadata.get("name", "")))


def strip_helm_labels(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy without Helm's own labels (an empty labels map dropped, as kustomize would leave none)."""
    stripped = copy.deepcopy(dict(obj))
    labels = stripped.get("metadata", {}).get("labels")
    if isinstance(labels, dict):
        for label in HELM_LABELS:
            labels.pop(label, None)
        if not labels:
            del stripped["metadata"]["labels"]
    return stripped


def find_render_differences(
    kustomize_objects: Sequence[Mapping[str, Any]], chart_objects: Sequence[Mapping[str, Any]]
) -> list[str]:
    """What differs between the two renders, object by object (Helm's labels aside, and the
    Namespace the chart leaves to the user). Empty when both install the same objects."""
    expected = {build_object_key(o): dict(o) for o in kustomize_objects if build_object_key(o) not in NOT_IN_CHART}
    actual = {build_object_key(o): strip_helm_labels(o) for o in chart_objects}
    differences = [f"only in kustomize: {'/'.join(key)}" for key in sorted(expected.keys() - actual.keys())]
    differences += [f"only in the chart: {'/'.join(key)}" for key in sorted(actual.keys() - expected.keys())]
    for key in sorted(expected.keys() & actual.keys()):
        differences += [f"{'/'.join(key)}: {path}" for path in _diff_paths(expected[key], actual[key], path="")]
    return differences


def _diff_paths(a: Any, b: Any, *, path: str) -> Iterable[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            if key not in b:
                yield f"{path}.{key} only in kustomize"
            elif key not in a:
                yield f"{path}.{key} only in the chart"
            else:
                yield from _diff_paths(a[key], b[key], path=f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _diff_paths(x, y, path=f"{path}[{index}]")
    elif a != b:
        yield f"{path}: kustomize {json.dumps(a)} != chart {json.dumps(b)}"


def build_local_values(
    *,
    gateway: str,
    node_label: str,
    taint: Mapping[str, str],
    gpu_models: Mapping[str, Sequence[str]],
    gateway_service_ip: str,
) -> dict[str, Any]:
    """Values for the local platform: the same local-only changes devplatform/overlay makes to the
    kustomize install (the image from the node's containerd, never pulled; pods on the real node;
    the API server's address in the NetworkPolicy; the emulator's GPU model mapping; the JARVICE
    gateway's Service at a fixed address its certificate names, since no cluster DNS runs there).
    ``gateway`` is the node's bridge address, ``gateway_service_ip`` the JARVICE gateway's."""
    placement = {"nodeSelector": {node_label: "true"}, "tolerations": [dict(taint)]}
    return {
        "image": {"repository": "localhost/nimbix-burst-webhook", "tag": "0.1.0", "pullPolicy": "Never"},
        "webhook": {
            **copy.deepcopy(placement),
            "gpuModels": {model: list(machines) for model, machines in gpu_models.items()},
        },
        "controller": copy.deepcopy(placement),
        "gateway": {**copy.deepcopy(placement), "clusterIP": gateway_service_ip},
        "networkPolicy": {"apiServerCIDRs": [f"{gateway}/32"]},
    }


# -- I/O ----------------------------------------------------------------------------------------------


class HelmError(RuntimeError):
    """helm failed; the message has its exit status and stderr."""


def render(
    helm: Path, *, namespace: str = NAMESPACE, values: Mapping[str, Any] | None = None, kube_version: str = ""
) -> list[dict[str, Any]]:
    """``helm template`` of the chart, parsed into objects (in output order)."""
    args = ["template", RELEASE, str(CHART_DIR), "--namespace", namespace]
    if kube_version:
        args += ["--kube-version", kube_version]
    return manifests.parse_manifests(run_helm(helm, *args, values=values).stdout)


def install(
    helm: Path,
    kubeconfig: Path,
    *,
    values: Mapping[str, Any],
    namespace: str = NAMESPACE,
    timeout_seconds: int = HELM_TIMEOUT_SECONDS,
) -> str:
    """``helm install --wait``: returns once every Deployment is rolled out (or raises)."""
    args = _cluster_args(kubeconfig, namespace, timeout_seconds=timeout_seconds)
    return run_helm(helm, "install", RELEASE, str(CHART_DIR), *args, values=values).stdout


def upgrade(helm: Path, kubeconfig: Path, *, values: Mapping[str, Any], namespace: str = NAMESPACE) -> str:
    return run_helm(
        helm, "upgrade", RELEASE, str(CHART_DIR), *_cluster_args(kubeconfig, namespace), values=values
    ).stdout


def rollback(helm: Path, kubeconfig: Path, *, revision: int, namespace: str = NAMESPACE) -> str:
    return run_helm(helm, "rollback", RELEASE, str(revision), *_cluster_args(kubeconfig, namespace)).stdout


def uninstall(helm: Path, kubeconfig: Path, *, namespace: str = NAMESPACE) -> str:
    return run_helm(helm, "uninstall", RELEASE, *_cluster_args(kubeconfig, namespace)).stdout


def read_history(helm: Path, kubeconfig: Path, *, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """``helm history -o json``: one entry per revision (revision, status, description)."""
    result = run_helm(helm, "history", RELEASE, "--kubeconfig", str(kubeconfig), "--namespace", namespace, "-o", "json")
    history: list[dict[str, Any]] = json.loads(result.stdout)
    return history


def _cluster_args(kubeconfig: Path, namespace: str, *, timeout_seconds: int = HELM_TIMEOUT_SECONDS) -> list[str]:
    return ["--kubeconfig", str(kubeconfig), "--namespace", namespace, "--wait", f"--timeout={timeout_seconds}s"]


def run_helm(helm: Path, *args: str, values: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs helm; ``values`` go in on stdin (``-f -``), so no secret lands in a file or an argv."""
    argv = [str(helm), *args]
    if values is not None:
        argv += ["--values", "-"]
    result = subprocess.run(
        argv,
        input=json.dumps(values) if values is not None else None,
        capture_output=True,
        text=True,
        check=False,
        timeout=HELM_TIMEOUT_SECONDS + 60,
    )
    if result.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result
