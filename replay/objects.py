"""Kubernetes JSON for the replay's nodes and pods (pure builders).

Nodes are fake (no kubelet): capacity and allocatable go through the status subresource, and the
not-ready taint the API server adds on creation is removed by replacing the spec (see
kubernetes.md C6). Pods never run, so they use the pause image, no service-account token and a
zero grace period.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from devplatform.cluster import nodes
from jarvice import contract
from replay.plan import Holder
from replay.trace import NodeRow, PodRow

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_MODEL_LABEL = "nimbix-burst.io/gpu-model"
ROLE_LABEL = "replay.nimbix-burst.io/role"  # replay | preload | background
TRACE_NAME_ANNOTATION = "replay.nimbix-burst.io/trace-name"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# The kubelet default; the replay never comes near it (about 2 pods per node).
MAX_PODS_PER_NODE = 110
# What a burst pod keeps locally: the runner that submits to Nimbix and streams the output. The
# same footprint as the webhook's defaults (--remote-cpu 100m, --remote-memory 128Mi).
REMOTE_CPU = "100m"
REMOTE_MEMORY = "128Mi"

Json = dict[str, Any]


def build_node_with_status(row: NodeRow, *, model_label: str) -> Json:
    labels = {"kubernetes.io/hostname": row.name, ROLE_LABEL: "replay"}
    if row.model and row.gpus > 0:
        labels[model_label] = row.model
    resources = nodes.node_resources(
        gpus=row.gpus,
        cpu=f"{row.cpu_milli}m",
        memory=f"{row.memory_mib}Mi",
        pods=MAX_PODS_PER_NODE,
        gpu_resource=GPU_RESOURCE,
    )
    return nodes.build_fake_node(row.name, resources=resources, labels=labels, message="no kubelet (replay)")


def build_node(row: NodeRow, *, model_label: str) -> Json:
    # spec.taints empty: also used for the replace that drops the not-ready taint added at creation.
    node = build_node_with_status(row, model_label=model_label)
    del node["status"]
    return node


def build_list(items: Sequence[Json]) -> Json:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def _model_affinity(models: Sequence[str], model_label: str) -> Json:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": model_label, "operator": "In", "values": list(models)}]}
                ]
            }
        }
    }


def build_pod(
    name: str,
    *,
    namespace: str,
    cpu: str,
    memory: str,
    gpus: int,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    node_name: str = "",
    gpu_models: Sequence[str] = (),
    model_label: str = DEFAULT_MODEL_LABEL,
    env: Sequence[tuple[str, str]] = (),
) -> Json:
    requests = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    resources: Json = {"requests": requests}
    if gpus > 0:
        # Extended resources go in limits; the API server defaults the request from it.
        resources["limits"] = {GPU_RESOURCE: str(gpus)}
    container: Json = {"name": "main", "image": PAUSE_IMAGE, "resources": resources}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env]
    spec: Json = {
        "containers": [container],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
    }
    if node_name:
        spec["nodeName"] = node_name
    if gpu_models:
        spec["affinity"] = _model_affinity(gpu_models, model_label)
    metadata: Json = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _quantities(row: PodRow) -> tuple[str, str]:
    return (f"{row.cpu_milli}m" if row.cpu_milli else "", f"{row.memory_mib}Mi" if row.memory_mib else "")


def build_replay_pod(row: PodRow, *, name: str, namespace: str, model_label: str) -> Json:
    """A replayed pod: labeled task-type: Nimbix, so the webhook (when registered) sees it."""
    cpu, memory = _quantities(row)
    return build_pod(
        name,
        namespace=namespace,
        cpu=cpu,
        memory=memory,
        gpus=row.gpus,
        labels={contract.LABEL_TASK_TYPE: contract.LABEL_TASK_TYPE_VALUE, ROLE_LABEL: "replay"},
        annotations={TRACE_NAME_ANNOTATION: row.name},
        gpu_models=row.gpu_models,
        model_label=model_label,
    )


def build_preload_pod(row: PodRow, *, name: str, namespace: str, node: str, model_label: str) -> Json:
    """A pod already running when the slice starts: bound directly, unlabeled (no webhook)."""
    cpu, memory = _quantities(row)
    return build_pod(
        name,
        namespace=namespace,
        cpu=cpu,
        memory=memory,
        gpus=row.gpus,
        labels={ROLE_LABEL: "preload"},
        annotations={TRACE_NAME_ANNOTATION: row.name},
        node_name=node,
        gpu_models=row.gpu_models,
        model_label=model_label,
    )


def build_holder_pod(holder: Holder, *, namespace: str) -> Json:
    return build_pod(
        f"background-{holder.node}"[:63].rstrip("-"),
        namespace=namespace,
        cpu=f"{holder.cpu_milli}m",
        memory=f"{holder.memory_mib}Mi",
        gpus=holder.gpus,
        labels={ROLE_LABEL: "background"},
        node_name=holder.node,
    )


def build_burst_copy(row: PodRow, *, name: str, namespace: str, reason: str) -> Json:
    """The original design's burst: the pod recreated without GPUs, as a small runner pod."""
    return build_pod(
        name,
        namespace=namespace,
        cpu=REMOTE_CPU,
        memory=REMOTE_MEMORY,
        gpus=0,
        labels={contract.LABEL_TASK_TYPE: contract.LABEL_TASK_TYPE_VALUE, ROLE_LABEL: "replay"},
        annotations={
            TRACE_NAME_ANNOTATION: row.name,
            contract.ANNOTATION_DECISION: contract.DECISION_REMOTE,
            contract.ANNOTATION_REASON: reason[:1000],
        },
        env=((contract.ENV_REMOTE, "1"), (contract.ENV_NUM_GPUS, str(row.gpus))),
    )


def build_inert_job(name: str, *, namespace: str) -> Json:
    """A Job that owns one replayed pod under a burst-after setting: only what the webhook and the
    burst controller read of it (its UID, not finished, not suspended). Nothing runs it here (no
    kube-controller-manager): the driver creates its pod, and the replacement of a pod the controller
    deletes."""
    template = build_pod("unused", namespace=namespace, cpu="", memory="", gpus=0, labels={ROLE_LABEL: "replay"})
    del template["metadata"]["name"], template["metadata"]["namespace"]
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {ROLE_LABEL: "replay"}},
        "spec": {"template": {"metadata": template["metadata"], "spec": template["spec"]}, "backoffLimit": 6},
    }


def job_owner_reference(name: str, uid: str) -> Json:
    """The controller reference of a pod its Job (build_inert_job) owns."""
    return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}
