"""decide(): local iff some single node can host the pod's whole GPU request (pure).

Reads the cache, writes nothing; the caller reserves GPUs on the chosen node in the same tick.
"""

from __future__ import annotations

from webhook.cache import CANDIDATE_CAP, ClusterCache
from webhook.types import Decision, GpuCounts, Placement


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def describe_need(gpus: GpuCounts) -> str:
    return " + ".join(f"{count} {resource}" for resource, count in sorted(gpus.items()))


def decide(gpus: GpuCounts, placement: Placement, cache: ClusterCache) -> Decision:
    if not gpus:
        return Decision(kind="skipped", reason="pod requests no GPU")
    fit = cache.find_fit(gpus, placement)
    if fit.node is not None:
        shown = f"{fit.candidates}+" if fit.candidates >= CANDIDATE_CAP else str(fit.candidates)
        return Decision(
            kind="local",
            reason=f"{shown} candidate node(s) can host {describe_need(gpus)}; best fit {fit.node.name}",
            node=fit.node.name,
            candidates=fit.candidates,
        )
    return Decision(kind="remote", reason=explain_no_fit(gpus, placement, cache, fit.excluded_by_placement))


def explain_no_fit(gpus: GpuCounts, placement: Placement, cache: ClusterCache, excluded: int) -> str:
    """A human reason naming why no node fit, e.g.
    'needs 4 nvidia.com/gpu; best node gpu-a has 2 free; 3 GPU nodes cordoned or not ready'."""
    parts = [f"needs {describe_need(gpus)}"]
    primary = max(gpus, key=lambda r: gpus[r])
    if not cache.advertises(primary):
        parts.append(f"no node advertises {primary}")
    else:
        best = cache.best_partial_fit(primary, placement)
        if best is None:
            parts.append("no schedulable node matches the pod's selectors and tolerations")
        else:
            node, free = best
            parts.append(f"best node {node.name} has {free} free")
    if excluded:
        parts.append(f"{_plural(excluded, 'node')} with enough free GPUs excluded by taints or selectors")
    if cache.unschedulable_gpu_nodes:
        parts.append(f"{_plural(cache.unschedulable_gpu_nodes, 'GPU node')} cordoned or not ready")
    reserved = cache.reserved_gpus().get(primary, 0)
    if reserved:
        parts.append(f"{reserved} {primary} claimed by pods not bound yet")
    return "; ".join(parts)
