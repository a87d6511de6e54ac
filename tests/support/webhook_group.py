"""One e2e test's nodes and pods, pinned together by a label (nodes are cluster-wide and shared by
the session), created with kubectl so admission warnings show as a user sees them; and what a burst
pod looks like after the webhook rewrote it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from devplatform.cluster import nodes
from devplatform.cluster.controlplane import ControlPlane
from tests.support.at_once import run_at_once
from tests.support.gpus import GPU, GPU_TAINT, GPU_TOLERATION

LEGACY = "alpha.kubernetes.io/nvidia-gpu"
# The host webhook's flags in the modules that use a Group: burst pods lose the GPU toleration, as in a
# cluster whose GPU nodes are tainted, and a watch silent for 5 s makes it unready.
WEBHOOK_ARGS = ("--strip-toleration-keys", GPU, "--watch-stale-seconds", "5")


class Group:
    """One test's nodes and pods, pinned together by a label."""

    def __init__(self, control_plane: ControlPlane, core: Any, namespace: str, make_gpu_node: Callable[..., str]):
        self.cp = control_plane
        self.core = core
        self.namespace = namespace
        self.label = {"nb-group": namespace}
        self._make_node = make_gpu_node

    def gpu_node(self, gpus: int, *, taint: bool = True, resource: str = GPU, **kwargs: Any) -> str:
        taints = [GPU_TAINT] if taint else []
        labels = {**self.label, **kwargs.pop("labels", {})}
        return self._make_node(
            gpus=gpus, labels=labels, taints=taints + kwargs.pop("taints", []), gpu_resource=resource, **kwargs
        )

    def cpu_node(self, *, cpu: str = "2", memory: str = "4Gi") -> str:
        return self._make_node(gpus=0, cpu=cpu, memory=memory, labels=self.label)

    def pod(
        self,
        gpus: int = 1,
        *,
        labeled: bool = True,
        resource: str = GPU,
        containers: list[dict[str, Any]] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        name = f"p-{uuid.uuid4().hex[:8]}"
        container: dict[str, Any] = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
        if gpus:
            container["resources"] = {"limits": {resource: str(gpus)}}
        body_spec = {
            "containers": containers or [container],
            "nodeSelector": {**self.label, **spec.pop("nodeSelector", {})},
            "tolerations": [GPU_TOLERATION, *spec.pop("tolerations", [])],
            **spec,
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {"task-type": "Nimbix"} if labeled else {},
            },
            "spec": body_spec,
        }

    def create(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """kubectl create, so admission warnings are visible as a user sees them."""
        result = self.cp.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body))
        return json.loads(result.stdout), result.stderr

    def create_all(self, bodies: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
        """`create` for every body at once, one thread each; none may fail."""
        results, errors = run_at_once(self.create, bodies)
        assert errors == []
        return results

    def bound_node(self, name: str) -> str:
        return nodes.wait_for_pod_bound(self.core, self.namespace, name, timeout=30)


def annotations_of(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations", {}))


def env(pod: dict[str, Any], index: int = 0) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][index].get("env", [])}


def all_resources(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod["spec"]
    return [c.get("resources", {}) for c in spec["containers"] + spec.get("initContainers", [])]


def assert_remote(pod: dict[str, Any], stderr: str, gpus: int) -> None:
    assert annotations_of(pod)["nimbix-burst.io/decision"] == "remote", annotations_of(pod)
    for resources in all_resources(pod):
        for source in ("requests", "limits"):
            assert GPU not in resources.get(source, {}) and LEGACY not in resources.get(source, {})
    assert env(pod)["REMOTE"] == "1"
    assert env(pod)["NUM_GPUS"] == str(gpus)
    assert "Warning: nimbix-burst: this pod will run on Nimbix JARVICE" in stderr
