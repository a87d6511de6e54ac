"""A cluster with a burst budget per namespace (`nimbix-burst.io/max-remote-gpus`), filled through
CacheSync as the watch fills it, and pods as the webhook left them after bursting."""

from __future__ import annotations

from typing import Any

from jarvice import contract
from tests.support.clocks import Clock
from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, node, pod
from webhook.budget import ANNOTATION_MAX_REMOTE_GPUS, ANNOTATION_REMOTE_GPUS
from webhook.cache import ClusterCache
from webhook.sync import CacheSync

NS = "team"


def namespace(name: str, max_remote: str | None) -> dict[str, Any]:
    annotations = {} if max_remote is None else {ANNOTATION_MAX_REMOTE_GPUS: max_remote}
    return {"kind": "Namespace", "metadata": {"name": name, "annotations": annotations}}


def burst_pod(uid: str, gpus: int, *, ns: str = NS, phase: str = "Running", node_name: str = "cpu") -> dict[str, Any]:
    """A pod as the webhook left it after bursting: no GPU request, decision and count annotated."""
    annotations = {contract.ANNOTATION_DECISION: "remote", ANNOTATION_REMOTE_GPUS: str(gpus)}
    return pod(
        container(requests={"cpu": "100m"}),
        annotations=annotations,
        uid=uid,
        name=uid,
        namespace=ns,
        phase=phase,
        node_name=node_name,
    )


def make_sync(*, local_gpus: int = 0, max_remote: str | None = "4", clock: Clock | None = None) -> CacheSync:
    clock = clock or Clock()
    sync = CacheSync(ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60), clock=clock)
    sync.apply_list("nodes", [node("gpu", local_gpus), node("cpu", 0)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [namespace(NS, max_remote), namespace("free", None), KUBE_SYSTEM])
    return sync
