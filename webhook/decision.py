"""decide(): local iff some single node can host the pod's whole GPU request.

Reads the cache's ClusterView (webhook.fitting: the fit search and the explanation are pure); the
caller reserves GPUs on the chosen node in the same tick. The one change a decision may make: when
no node fits as the claims of pods not bound yet sit, those claims move to make room
(ClusterCache.make_room), which changes where they sit, never what they hold.
"""

from __future__ import annotations

from webhook import budget
from webhook.cache import ClusterCache
from webhook.fitting import CANDIDATE_CAP, ClusterView, FitResult, best_partial_fit, find_fit
from webhook.types import Decision, GpuCounts, Placement, Requests


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def describe_need(gpus: GpuCounts) -> str:
    return " + ".join(f"{count} {resource}" for resource, count in sorted(gpus.items()))


def decide(requests: Requests, placement: Placement, cache: ClusterCache, *, namespace: str = "") -> Decision:
    """`requests`: the pod's GPU counts, plus everything else it takes from a node (cpu, memory,
    pods, ...: see model.pod_compute), which must fit on the same node. `namespace` is the
    admission's, for the cap on outstanding reservations."""
    view = cache.view
    gpus = {r: n for r, n in requests.items() if r in view.gpu_resources}
    if not gpus:
        return Decision(kind="skipped", reason="pod requests no GPU")
    fit = find_fit(view, requests, placement)
    moved = ""
    if fit.node is None:
        room = cache.make_room(requests, placement)
        if room.node is not None:
            fit, moved = room, " (claims of pods not bound yet moved to other nodes)"
    if fit.node is not None:
        refusal = cache.reservation_refusal(namespace)
        if refusal:
            # Local without a reservation could promise these GPUs twice and leave the pod Pending;
            # bursting keeps the promise that a pod left local finds its GPUs.
            return Decision(kind="remote", reason=f"needs {describe_need(gpus)}; {refusal}", capped=True)
        shown = f"{fit.candidates}+" if fit.candidates >= CANDIDATE_CAP else str(fit.candidates)
        return Decision(
            kind="local",
            reason=f"{shown} candidate node(s) can host {describe_need(gpus)}; best fit {fit.node.name}{moved}",
            node=fit.node.name,
            candidates=fit.candidates,
        )
    return Decision(kind="remote", reason=explain_no_fit(gpus, placement, view, fit))


def remote_gpus(gpus: GpuCounts) -> int:
    """What a burst pod counts against its namespace's budget: its effective GPU request (the one the
    decision used), summed over GPU resources. Never less than what its JARVICE jobs use."""
    return sum(gpus.values())


def budget_refusal(gpus: GpuCounts, cache: ClusterCache, *, namespace: str) -> str:
    """Why this pod may not burst now ("" when it may): its namespace's burst budget would be exceeded."""
    return budget.over_budget(
        cache.budget(namespace), namespace=namespace, in_use=cache.remote_in_use(namespace), need=remote_gpus(gpus)
    )


def explain_no_fit(gpus: GpuCounts, placement: Placement, view: ClusterView, fit: FitResult) -> str:
    """A human reason naming why no node fit, e.g.
    'needs 4 nvidia.com/gpu; best node gpu-a has 2 free; 3 GPU nodes cordoned or not ready'."""
    parts = [f"needs {describe_need(gpus)}"]
    primary = max(gpus, key=lambda r: gpus[r])
    if placement.node_name:
        parts.append(f"spec.nodeName pins it to {placement.node_name}")
    if not view.advertises(primary):
        parts.append(f"no node advertises {primary}")
    else:
        best = best_partial_fit(view, primary, placement)
        if best is None:
            parts.append("no schedulable node matches the pod's node name, selectors and tolerations")
        else:
            node, free = best
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
    if view.unschedulable_gpu_nodes:
        parts.append(f"{_plural(len(view.unschedulable_gpu_nodes), 'GPU node')} cordoned or not ready")
    reserved = view.claimed_total.get(primary, 0)
    if reserved:
        parts.append(f"{reserved} {primary} claimed by pods not bound yet")
    return "; ".join(parts)
