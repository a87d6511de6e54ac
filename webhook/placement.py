"""The placement (pure): where a pod could run here, a single pod's fit or a whole gang's packing.

The decision's second step (webhook.decision.decide), for every kind of pod:
  - a pod alone is local iff some single node can host its whole request (choose): its placement
    rules are applied once (scheduling.eligibility) and the fit search (fitting) works over them,
    making room by moving claims of pods not bound yet when no node fits as they sit
    (room.search_room): moves change where claims sit, never what they hold;
  - a gang's first pod is local only when every pod of the gang fits at once (pack), and then every
    rank's place is known;
  - a later pod of a gang decided local takes its rank's reserved place, or a fit now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from webhook.fitting import CANDIDATE_CAP, find_fit
from webhook.gang_decision import GangPart, describe_gang_need
from webhook.reasons import describe_need, explain_no_fit
from webhook.room import Trial, search_room
from webhook.scheduling import eligibility
from webhook.types import ClaimMove, ClusterView, Decision, Placement, PodNeeds, Requests, Snapshot

# A gang larger than this is not packed node by node (it bursts): the packing check runs inside an
# admission, under the cache's lock, and a JARVICE job spans far fewer machines anyway.
MAX_GANG_SIZE = 256
# The decision of a pod that carries one already (see decision.Ask's `reinvoked`).
ALREADY_REMOTE = Decision(kind="remote", reason="already decided: remote")


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class Choice:
    """Where the placement put a pod: `decision` local (on its node) or remote (why no node could
    host it); `moves`, claims of pods not bound yet moved, in order, to make room (see
    room.plan_room): the cache applies them whatever follows (a capped decision's and a dry run's
    too), as make_room moved them in place; `nodes`, a gang's ranks' nodes when the whole gang fits;
    `waits`, a later pod of a gang decided local that finds no place now (it waits for local GPUs:
    its gang runs here)."""

    decision: Final[Decision]
    moves: Final[tuple[ClaimMove, ...]]
    nodes: Final[tuple[str, ...]]
    waits: Final[bool]

    def __init__(
        self,
        decision: Decision,
        moves: tuple[ClaimMove, ...] = (),
        nodes: tuple[str, ...] = (),
        waits: bool = False,
    ) -> None:
        self.decision = decision
        self.moves = moves
        self.nodes = nodes
        self.waits = waits


def choose(requests: Requests, placement: Placement, view: ClusterView, *, reservation_refusal: str = "") -> Choice:
    """The placement of a pod alone, from plain data: `requests`, the pod's GPU counts plus everything
    else it takes from a node (cpu, memory, pods, ...: see model.pod_compute), which must fit on the
    same node; `view`, the cluster as the cache holds it; `reservation_refusal`, why no reservation
    may be made now ("" when one may: see reservations.reservation_refusal)."""
    gpus = {r: n for r, n in requests.items() if r in view.gpu_resources}
    if not gpus:
        return Choice(Decision(kind="skipped", reason="pod requests no GPU"))
    eligible = eligibility(placement)
    fit = find_fit(view, requests, eligible)
    moves: tuple[ClaimMove, ...] = ()
    moved = ""
    if fit.node is None:
        found = search_room(view, requests, eligible, missed=fit)
        fit, moves = found.fit, found.moves
        if fit.node is None:
            reason = explain_no_fit(
                gpus,
                node_name=placement.node_name,
                primary=found.primary,
                advertised=found.advertised,
                partial=found.partial,
                fit=fit,
                unschedulable_gpu_nodes=view.unschedulable_gpu_nodes,
                claimed=found.claimed,
            )
            return Choice(Decision(kind="remote", reason=reason), moves)
        moved = " (claims of pods not bound yet moved to other nodes)"
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


@dataclass(init=False, unsafe_hash=True, slots=True)
class Packing:
    nodes: Final[tuple[str, ...]]  # the node of each rank placed, in rank order
    size: Final[int]

    def __init__(self, nodes: tuple[str, ...], size: int) -> None:
        self.nodes = nodes
        self.size = size

    @property
    def fits(self) -> bool:
        return len(self.nodes) == self.size


def pack(view: ClusterView, requests: Requests, placement: Placement, *, size: int) -> Packing:
    """Each of `size` pods asking `requests` on a node, one after the other, best fit first, on a
    trial (room.Trial: what a placement writes, its own, over the shared view), so the resources one
    pod takes are never counted for another. Pods of a gang are alike, so filling nodes in this order
    places as many as any order would. Stops at the first pod that has no node."""
    if size > MAX_GANG_SIZE:
        return Packing((), size)
    trial = Trial(view)
    eligible = eligibility(placement)  # the pod's placement rules, read once for every rank
    nodes: list[str] = []
    for _ in range(size):
        fit = find_fit(trial.view, requests, eligible)
        if fit.node is None:
            break
        nodes.append(fit.node.name)
        trial.hold(fit.node.name, requests)
    return Packing(tuple(nodes), size)


def place(needs: PodNeeds, snapshot: Snapshot, *, gang: GangPart | None, local_refusal: str, reinvoked: bool) -> Choice:
    """The placement of one pod (a gang's pod by its GangPart: the first decides for all, a later one
    of a local gang takes its rank's place; one that follows another decision is not placed)."""
    refusal = snapshot.reservation_refusal
    if reinvoked:
        return Choice(ALREADY_REMOTE)
    if gang is None:  # a pod alone
        choice = choose(needs.requests, needs.placement, snapshot.view, reservation_refusal=refusal)
        if choice.decision.kind == "local" and local_refusal:
            return Choice(
                Decision(kind="remote", reason=f"{choice.decision.reason}, but {local_refusal}"), choice.moves
            )
        return choice
    if gang.kind == "local":  # a later pod of a gang decided local: its rank's reserved place, or one now
        if gang.node:
            return Choice(Decision(kind="local", reason=gang.reason, node=gang.node))
        choice = choose(needs.requests, needs.placement, snapshot.view, reservation_refusal=refusal)
        if choice.decision.kind != "local":
            why = f"{gang.reason}; this pod waits for local GPUs ({choice.decision.reason})"
            return Choice(Decision(kind="remote", reason=why), choice.moves, waits=True)
        return Choice(Decision(kind="local", reason=gang.reason, node=choice.decision.node), choice.moves)
    if gang.kind is not None or gang.terms is None:  # it follows a decision made before
        return Choice(Decision(kind="remote", reason=gang.reason))
    size, rank = gang.terms.size, gang.terms.rank
    need = describe_gang_need(needs.gpus, size)
    packing = pack(snapshot.view, needs.requests, needs.placement, size=size)
    room = snapshot.reservation_room
    if not refusal and room is not None and size > room.places:
        refusal = (
            f"it would make {size} reservations (one per pod) and {max(0, room.places)} more may be made"
            f" {room.scope} (cap {room.cap})"
        )
    if packing.fits and not local_refusal and not refusal:
        places = ", ".join(sorted(set(packing.nodes)))
        reason = f"all {size} pods of {gang.name} fit at once ({need}) on {places}"
        node, candidates = packing.nodes[rank], len(set(packing.nodes))
        return Choice(Decision(kind="local", reason=reason, node=node, candidates=candidates), nodes=packing.nodes)
    if packing.fits:
        reason = f"all {size} pods of {gang.name} fit ({need}), but {local_refusal or refusal}"
    else:
        reason = f"{gang.name} needs {need} at once; only {len(packing.nodes)} of its {size} pods fit on the nodes now"
    return Choice(Decision(kind="remote", reason=reason))
