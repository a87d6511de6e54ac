"""The words of a decision (pure): what a pod needs, and why no node could host it.

A decision's reason is written on the pod (the decision annotation's reason) and in its warning, so
a user can tell what to change; the fit search (webhook.fitting) words its own answer here when no
node fits, from what it found.
"""

from __future__ import annotations

from collections.abc import Set

from webhook.types import FitResult, GpuCounts, NodeInfo


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def describe_need(gpus: GpuCounts) -> str:
    return " + ".join(f"{count} {resource}" for resource, count in sorted(gpus.items()))


def explain_no_fit(
    gpus: GpuCounts,
    *,
    node_name: str,
    primary: str,
    advertised: bool,
    partial: tuple[NodeInfo, int] | None,
    fit: FitResult,
    unschedulable_gpu_nodes: Set[str],
    claimed: int,
) -> str:
    """A human reason naming why no node fit, e.g.
    'needs 4 nvidia.com/gpu; best node gpu-a has 2 free; 3 GPU nodes cordoned or not ready'.
    `node_name`: the pod's spec.nodeName; `primary`: the GPU resource it needs most of; `advertised`:
    some node advertises it; `partial`: the eligible node with the most free `primary`; `fit`: the
    search's counts; `claimed`: `primary` held by claims of pods not bound yet."""
    parts = [f"needs {describe_need(gpus)}"]
    if node_name:
        parts.append(f"spec.nodeName pins it to {node_name}")
    if not advertised:
        parts.append(f"no node advertises {primary}")
    elif partial is None:
        parts.append("no schedulable node matches the pod's node name, selectors and tolerations")
    else:
        node, free = partial
        if free:
            parts.append(f"best node {node.name} has {free} free")
        else:
            parts.append(f"every eligible node's {primary} is in use")
    if fit.short_of_compute:
        what = _plural(fit.short_of_compute, "node")
        parts.append(f"{what} with enough free GPUs lack the CPU, memory, pod slots or other resources")
    if fit.excluded_by_placement:
        what = _plural(fit.excluded_by_placement, "node")
        parts.append(f"{what} with enough free GPUs excluded by taints or selectors")
    if unschedulable_gpu_nodes:
        parts.append(f"{_plural(len(unschedulable_gpu_nodes), 'GPU node')} cordoned or not ready")
    if claimed:
        parts.append(f"{claimed} {primary} claimed by pods not bound yet")
    return "; ".join(parts)
