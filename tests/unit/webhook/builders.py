"""Small builders for raw pod/node JSON, so test tables stay readable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GPU = "nvidia.com/gpu"


def container(
    name: str = "app",
    *,
    gpus: int | None = None,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    env: Sequence[Mapping[str, Any]] | None = None,
    restart_policy: str | None = None,
    resource: str = GPU,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "example/app"}
    res: dict[str, Any] = {}
    lim = dict(limits or {})
    req = dict(requests or {})
    if gpus is not None:
        lim[resource] = str(gpus)
        req[resource] = str(gpus)  # the API server defaults requests from limits
    if lim:
        res["limits"] = lim
    if req:
        res["requests"] = req
    if res:
        c["resources"] = res
    if env is not None:
        c["env"] = list(env)
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def pod(
    *containers: dict[str, Any],
    init: Sequence[dict[str, Any]] = (),
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    name: str = "p",
    namespace: str = "ns",
    uid: str = "",
    node_name: str = "",
    phase: str = "Pending",
    **spec_extra: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {"task-type": "Nimbix"})}
    if annotations:
        meta["annotations"] = dict(annotations)
    if uid:
        meta["uid"] = uid
    spec: dict[str, Any] = {"containers": list(containers) or [container()], **spec_extra}
    if init:
        spec["initContainers"] = list(init)
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def node(
    name: str,
    gpus: int,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready: bool = True,
    resource: str = GPU,
) -> dict[str, Any]:
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    if gpus:
        alloc[resource] = str(gpus)
    spec: dict[str, Any] = {"taints": list(taints)} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
        "status": {
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


# The kube-system namespace every cluster has: its UID names the cluster in every JARVICE job label.
KUBE_SYSTEM_UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CLUSTER_ID = "0f1e2d3c4b5a"  # contract.cluster_identity(KUBE_SYSTEM_UID) worked out by hand


def namespace(name: str, *, uid: str = "", annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": dict(annotations or {})}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


KUBE_SYSTEM = namespace("kube-system", uid=KUBE_SYSTEM_UID)
