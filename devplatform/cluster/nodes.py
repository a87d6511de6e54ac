"""Fake GPU nodes, namespaces and pod waits against a real API server (no kubelet anywhere).

Every function takes a ``kubernetes.client.CoreV1Api``. The request bodies are built by pure
``build_*`` functions; the rest is I/O. See kubernetes.md C6 for why a fake node needs a status
patch and a hand-removed not-ready taint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

# Added to every new Node by the TaintNodesByCondition admission plugin; only the node-lifecycle
# controller (disabled here, there are no kubelet heartbeats) would ever remove it.
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
# Conflicts come from controllers annotating a new node (e.g. the TTL controller); a handful of
# retries is plenty.
CONFLICT_RETRIES = 10
POLL_INTERVAL_SECONDS = 0.1
# Bounds every API call so a wedged server fails the test instead of hanging it.
REQUEST_TIMEOUT_SECONDS = 30.0


class PodWaitTimeoutError(TimeoutError):
    """A pod did not reach the expected scheduling state in time."""


def node_resources(*, gpus: int, cpu: str, memory: str, pods: int, gpu_resource: str) -> dict[str, str]:
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus > 0:
        resources[gpu_resource] = str(gpus)
    return resources


def build_fake_node(
    name: str,
    *,
    resources: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    message: str = "no kubelet; created by devplatform/cluster/nodes.py",
) -> dict[str, Any]:
    """The one fake-node shape used by the tests, the benchmarks and the replay: a Node whose
    status says Ready with ``resources`` as capacity and allocatable.

    Against a real API server the status is dropped on create, so it is written again through the
    status subresource (``build_node_status`` / ``kubectl replace --subresource=status``).
    """
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"taints": [dict(taint) for taint in taints], "unschedulable": unschedulable},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "FakeNode", "message": message}],
        },
    }


def build_node(
    name: str,
    *,
    labels: Mapping[str, str] | None,
    taints: Sequence[Mapping[str, str]],
    unschedulable: bool,
) -> dict[str, Any]:
    """The create body: the fake node without its status."""
    node = build_fake_node(name, resources={}, labels=labels, taints=taints, unschedulable=unschedulable)
    del node["status"]
    return node


def build_node_status(*, gpus: int, cpu: str, memory: str, pods: int, gpu_resource: str) -> dict[str, Any]:
    """The status subresource patch: capacity = allocatable, and a Ready condition."""
    resources = node_resources(gpus=gpus, cpu=cpu, memory=memory, pods=pods, gpu_resource=gpu_resource)
    return {"status": build_fake_node("", resources=resources)["status"]}


def build_taints_without(taints: Sequence[Any] | None, key: str) -> list[Any]:
    return [taint for taint in taints or () if taint.key != key]


def create_gpu_node(
    core: Any,
    name: str,
    *,
    gpus: int,
    cpu: str = "16",
    memory: str = "64Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    gpu_resource: str = "nvidia.com/gpu",
    unschedulable: bool = False,
) -> None:
    """Creates a node that kube-scheduler can bind pods to, advertising ``gpus`` x ``gpu_resource``.

    ``taints`` are dicts like ``{"key": ..., "value": ..., "effect": "NoSchedule"}``.
    """
    core.create_node(
        build_node(name, labels=labels, taints=taints, unschedulable=unschedulable),
        _request_timeout=REQUEST_TIMEOUT_SECONDS,
    )
    core.patch_node_status(
        name,
        build_node_status(gpus=gpus, cpu=cpu, memory=memory, pods=pods, gpu_resource=gpu_resource),
        _request_timeout=REQUEST_TIMEOUT_SECONDS,
    )
    remove_node_taint(core, name, key=NOT_READY_TAINT_KEY)


def remove_node_taint(core: Any, name: str, *, key: str) -> None:
    """Removes every taint with ``key`` from the node, retrying on update conflicts."""
    for _ in range(CONFLICT_RETRIES):
        node = core.read_node(name, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        remaining = build_taints_without(node.spec.taints, key)
        if len(remaining) == len(node.spec.taints or ()):
            return
        # A full replace carries the resourceVersion we read, so a concurrent change yields 409
        # instead of being overwritten.
        node.spec.taints = remaining
        try:
            core.replace_node(name, node, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as error:
            if error.status != HTTP_CONFLICT:
                raise
            continue
        return
    raise RuntimeError(f"node {name}: taint {key} still present after {CONFLICT_RETRIES} conflicts")


def create_namespace(core: Any, name: str, *, labels: Mapping[str, str] | None = None) -> None:
    """Creates a namespace and its ``default`` ServiceAccount.

    Without a controller-manager nothing creates that ServiceAccount, and the ServiceAccount
    admission plugin rejects every pod; with one, it may win the race (409, ignored).
    """
    core.create_namespace(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}},
        _request_timeout=REQUEST_TIMEOUT_SECONDS,
    )
    ensure_default_service_account(core, name)


def ensure_default_service_account(core: Any, namespace: str) -> None:
    """The ``default`` ServiceAccount, without waiting for the controller-manager to make it."""
    try:
        core.create_namespaced_service_account(
            namespace,
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
            _request_timeout=REQUEST_TIMEOUT_SECONDS,
        )
    except ApiException as error:
        if error.status != HTTP_CONFLICT:
            raise


def wait_for_pod_bound(core: Any, namespace: str, name: str, *, timeout: float = 30) -> str:
    """Waits until the scheduler binds the pod; returns the node name.

    Pods never run here (no kubelet), so "bound" (``spec.nodeName`` set) is the end state.
    """
    pod = _poll_pod(core, namespace, name, timeout=timeout, done=lambda pod: bool(pod.spec.node_name))
    if pod is None or not pod.spec.node_name:
        raise PodWaitTimeoutError(f"pod {namespace}/{name} not bound after {timeout:g} s: {_scheduled_message(pod)}")
    return str(pod.spec.node_name)


def wait_for_pod_unschedulable(core: Any, namespace: str, name: str, *, saying: str = "", timeout: float = 30) -> str:
    """Waits until the scheduler gives up on the pod (PodScheduled=False) with a message containing
    `saying`; returns the message. The scheduler tries again when a node changes: a first attempt may
    still see a node as it was a moment ago (a new node's not-ready taint, before its removal reached
    the scheduler's cache), so the reason to wait for is named, not the first one taken."""

    def marked(pod: Any) -> bool:
        return _is_marked_unschedulable(pod) and saying in str(_pod_scheduled_condition(pod).message or "")

    pod = _poll_pod(core, namespace, name, timeout=timeout, done=marked)
    if pod is None or not marked(pod):
        state = f"bound to {pod.spec.node_name}" if pod is not None and pod.spec.node_name else "pending"
        wanted = f" saying {saying!r}" if saying else ""
        raise PodWaitTimeoutError(
            f"pod {namespace}/{name} not marked unschedulable{wanted} after {timeout:g} s ({state}:"
            f" {_scheduled_message(pod)})"
        )
    return str(_pod_scheduled_condition(pod).message or "")


def delete_pod_now(core: Any, namespace: str, name: str) -> None:
    """Deletes a pod with no grace period: there is no kubelet to confirm a graceful stop."""
    try:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _request_timeout=REQUEST_TIMEOUT_SECONDS)
    except ApiException as error:
        if error.status != HTTP_NOT_FOUND:
            raise


def _poll_pod(core: Any, namespace: str, name: str, *, timeout: float, done: Callable[[Any], bool]) -> Any:
    """Reads the pod until ``done(pod)`` or the timeout; returns the last pod read (None if never)."""
    deadline = time.monotonic() + timeout
    pod = None
    while True:
        try:
            pod = core.read_namespaced_pod(name, namespace, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as error:
            # The pod may not exist yet if the caller is racing its creation.
            if error.status != HTTP_NOT_FOUND:
                raise
        if pod is not None and done(pod):
            return pod
        if time.monotonic() >= deadline:
            return pod
        time.sleep(POLL_INTERVAL_SECONDS)


def _pod_scheduled_condition(pod: Any) -> Any:
    for condition in (pod.status.conditions if pod.status else None) or ():
        if condition.type == "PodScheduled":
            return condition
    return None


def _is_marked_unschedulable(pod: Any) -> bool:
    condition = _pod_scheduled_condition(pod)
    return condition is not None and condition.status == "False"


def _scheduled_message(pod: Any) -> str:
    if pod is None:
        return "pod not found"
    condition = _pod_scheduled_condition(pod)
    if condition is None:
        return "no PodScheduled condition yet"
    return f"PodScheduled={condition.status} reason={condition.reason}: {condition.message}"
