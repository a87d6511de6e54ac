"""The decision: local iff some single node can host the pod's whole GPU request.

choose() is pure: plain data in (the pod's requests and placement, the cache's ClusterView, why no
reservation may be made), a Choice out: the Decision and, when no node fit as the claims of pods
not bound yet sat, the claim moves that make room (fitting.plan_room), which change where claims sit,
never what they hold. decide() is its shell: it reads the cache, chooses, and has the cache apply
the moves; the caller then reserves GPUs on the chosen node, in the same tick.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook import budget
from webhook.cache import ClusterCache
from webhook.fitting import CANDIDATE_CAP, advertises, best_partial_fit, find_fit, plan_room
from webhook.types import ClaimMove, ClusterView, Decision, FitResult, GpuCounts, Placement, Requests


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def describe_need(gpus: GpuCounts) -> str:
    return " + ".join(f"{count} {resource}" for resource, count in sorted(gpus.items()))


@dataclass(frozen=True, slots=True)
class Choice:
    decision: Decision
    # Claims of pods not bound yet to move, in order, to make room (see fitting.plan_room): the cache
    # applies them whatever the decision (a capped one included), as make_room moved them in place.
    moves: tuple[ClaimMove, ...] = ()


def choose(requests: Requests, placement: Placement, view: ClusterView, *, reservation_refusal: str = "") -> Choice:
    """The decision, from plain data: `requests`, the pod's GPU counts plus everything else it takes
    from a node (cpu, memory, pods, ...: see model.pod_compute), which must fit on the same node;
    `view`, the cluster as the cache holds it; `reservation_refusal`, why no reservation may be made
    now ("" when one may: see reservations.reservation_refusal)."""
    gpus = {r: n for r, n in requests.items() if r in view.gpu_resources}
    if not gpus:
        return Choice(Decision(kind="skipped", reason="pod requests no GPU"))
    fit = find_fit(view, requests, placement)
    moved = ""
    moves: tuple[ClaimMove, ...] = ()
    if fit.node is None:
        room = plan_room(view, requests, placement)
        moves, view = room.moves, room.after
        if room.fit.node is not None:
            fit, moved = room.fit, " (claims of pods not bound yet moved to other nodes)"
    if fit.node is None:
        return Choice(Decision(kind="remote", reason=explain_no_fit(gpus, placement, view, fit)), moves)
    if reservation_refusal:
        # Local without a reservation could promise these GPUs twice and leave the pod Pending;
        # bursting keeps the promise that a pod left local finds its GPUs.
        reason = f"needs {describe_need(gpus)}; {reservation_refusal}"
        return Choice(Decision(kind="remote", reason=reason, capped=True), moves)
    shown = f"{fit.candidates}+" if fit.candidates >= CANDIDATE_CAP else str(fit.candidates)
    decision = Decision(
        kind="local",
        reason=f"{shown} candidate node(s) can host {describe_need(gpus)}; best fit {fit.node.name}{moved}",
        node=fit.node.name,
        candidates=fit.candidates,
    )
    return Choice(decision, moves)


def decide(requests: Requests, placement: Placement, cache: ClusterCache, *, namespace: str = "") -> Decision:
    """choose() over the cache's view, the claim moves it planned applied to the cache. `namespace`
    is the admission's, for the cap on outstanding reservations. The caller reserves."""
    refusal = cache.reservation_refusal(namespace)
    choice = choose(requests, placement, cache.view, reservation_refusal=refusal)
    if choice.moves:
        cache.move_claims(choice.moves)
    return choice.decision


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
    if not advertises(view, primary):
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
