"""The naive baseline (issue 6 item 4): list nodes and pods from the API server on every request.

What a simple webhook does (like toy-scheduler's per-request listing, the anti-pattern in
kubernetes.md A2): GET every node and every non-terminal pod, add up the GPUs requested on each
node, and pick the best-fit node that is ready, not cordoned and whose taints the pod tolerates.
Two variants, both honest:
  models   the kubernetes client as usually written (responses turned into model objects);
  raw      the same two calls read as raw JSON (`_preload_content=False`), the fastest a
           list-per-request design can go with this client.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.resources import parse_device_count

GPU = "nvidia.com/gpu"
NON_TERMINAL = "status.phase!=Succeeded,status.phase!=Failed"


def _tolerates(toleration: Mapping[str, str], key: str, value: str, effect: str) -> bool:
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == key
    return toleration.get("key") == key and toleration.get("value", "") == value


def _tolerated(taints: Iterable[tuple[str, str, str]], tolerations: Sequence[Mapping[str, str]]) -> bool:
    return all(
        any(_tolerates(t, key, value, effect) for t in tolerations)
        for key, value, effect in taints
        if effect in ("NoSchedule", "NoExecute")
    )


def pick_best_fit(
    nodes: Iterable[tuple[str, int, bool, list[tuple[str, str, str]]]],
    used: Mapping[str, int],
    *,
    need: int,
    tolerations: Sequence[Mapping[str, str]],
) -> str:
    """(name, allocatable GPUs, schedulable, taints) per node -> best-fit node name, or ""."""
    best, best_free = "", 0
    for name, allocatable, schedulable, taints in nodes:
        free = allocatable - used.get(name, 0)
        fits = allocatable and schedulable and free >= need and (not best or free < best_free)
        if fits and _tolerated(taints, tolerations):
            best, best_free = name, free
    return best


def decide_with_models(core: Any, *, need: int, tolerations: Sequence[Mapping[str, str]]) -> str:
    """List through the kubernetes client's models, then decide."""
    node_list = core.list_node()
    pod_list = core.list_pod_for_all_namespaces(field_selector=NON_TERMINAL)
    used: dict[str, int] = {}
    for pod in pod_list.items:
        if not pod.spec.node_name:
            continue
        for container in pod.spec.containers:
            limits = (container.resources.limits if container.resources else None) or {}
            if GPU in limits:
                used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + parse_device_count(limits[GPU])
    nodes = []
    for node in node_list.items:
        allocatable = parse_device_count((node.status.allocatable or {}).get(GPU, "0"))
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or ())
        taints = [(t.key, t.value or "", t.effect) for t in node.spec.taints or ()]
        nodes.append((node.metadata.name, allocatable, ready and not node.spec.unschedulable, taints))
    return pick_best_fit(nodes, used, need=need, tolerations=tolerations)


def decide_with_raw_json(core: Any, *, need: int, tolerations: Sequence[Mapping[str, str]]) -> str:
    """The same two lists, read as raw JSON."""
    node_list = json.loads(core.list_node(_preload_content=False).data)
    pod_list = json.loads(core.list_pod_for_all_namespaces(field_selector=NON_TERMINAL, _preload_content=False).data)
    used: dict[str, int] = {}
    for pod in pod_list["items"]:
        node_name = pod["spec"].get("nodeName")
        if not node_name:
            continue
        for container in pod["spec"]["containers"]:
            limits = (container.get("resources") or {}).get("limits") or {}
            if GPU in limits:
                used[node_name] = used.get(node_name, 0) + parse_device_count(limits[GPU])
    nodes = []
    for node in node_list["items"]:
        status = node.get("status") or {}
        spec = node.get("spec") or {}
        allocatable = parse_device_count((status.get("allocatable") or {}).get(GPU, "0"))
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
        taints = [(t["key"], t.get("value", ""), t["effect"]) for t in spec.get("taints") or ()]
        nodes.append((node["metadata"]["name"], allocatable, ready and not spec.get("unschedulable"), taints))
    return pick_best_fit(nodes, used, need=need, tolerations=tolerations)
