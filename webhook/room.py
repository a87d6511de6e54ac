"""Making room (pure): where claims of pods not bound yet could move so that a pod fits, worked out
on a trial over the shared view (webhook.fitting is the fit search it runs).

A claim is a guess at where the scheduler will put a pod not bound yet (or one just admitted).
Kept where it was placed best-fit, it could block the only node able to host a newcomer after a
tighter node freed up (the replay's openb-pod-5858 and openb-pod-4640). So when no node fits a pod
as the claims sit, plan_room looks for a node that would, once the claims on it (not on a nominated
node: the scheduler chose it) move to other nodes that fit them. Moves change where claims sit,
never what they hold; nothing moves unless the whole request then fits. The plan is worked out on a
Trial, which owns only what it changes (the claimed amounts of the nodes it touched, the nodes it
re-filed, read over the shared buckets). A node tried in vain has its claims moved back, and those
moves are in the plan too, so the cache's orderings (ties between equally free nodes) come out as
the trial's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from webhook.fitting import (
    NO_FIT,
    NOT_FILED,
    add_amounts,
    advertises,
    best_partial_fit,
    claim_room_reaches,
    covers,
    find_fit,
    free_amount,
    pinned_nodes,
    primary_resource,
)
from webhook.types import (
    CPU_MILLI,
    MEMORY_BYTES,
    STANDARD_RESOURCES,
    ClaimMove,
    ClusterView,
    Eligibility,
    FitResult,
    NodeInfo,
    Requests,
)

_NOTHING: Mapping[str, int] = {}  # read-only stand-in for a node nothing is used on


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class RoomSearch:
    """What making room found for a pod no node fits as the claims sit (placement.choose reads it):
    a node once claims of pods not bound yet move (plan_room), or what explains that none fits."""

    fit: Final[FitResult]  # the node made room on, or find_fit's miss with its counts
    moves: Final[tuple[ClaimMove, ...]]  # what the cache applies, in order, whatever the decision
    # No fit: what explains it (reasons.explain_no_fit), read off the cluster once the moves are applied:
    # the GPU resource needed most, whether a node advertises it, the eligible node with the most
    # of it free, and how many are claimed by pods not bound yet.
    primary: Final[str]
    advertised: Final[bool]
    partial: Final[tuple[NodeInfo, int] | None]
    claimed: Final[int]

    def __init__(
        self,
        fit: FitResult,
        moves: tuple[ClaimMove, ...] = (),
        primary: str = "",
        advertised: bool = True,
        partial: tuple[NodeInfo, int] | None = None,
        *,
        claimed: int = 0,
    ) -> None:
        self.fit = fit
        self.moves = moves
        self.primary = primary
        self.advertised = advertised
        self.partial = partial
        self.claimed = claimed


def search_room(view: ClusterView, requests: Requests, eligible: Eligibility, *, missed: FitResult) -> RoomSearch:
    """After find_fit `missed` (no node fits `requests` as the claims sit): plan_room, and with no
    room made either, what explains it."""
    room = plan_room(view, requests, eligible)
    if room.fit.node is not None:
        return RoomSearch(room.fit, room.moves)
    after = room.after
    primary = primary_resource(view, requests)
    advertised = advertises(after, primary)
    partial = best_partial_fit(after, primary, eligible) if advertised else None
    claimed = after.claimed_total.get(primary, 0)
    return RoomSearch(missed, room.moves, primary=primary, advertised=advertised, partial=partial, claimed=claimed)


# ----- making room -------------------------------------------------------------------------------

# plan_room gives up after trying this many nodes: it runs only when no node fits, and a cluster
# with a backlog of pending pods has claims on every node with room; a few tries find the room
# that moving one or two claims makes, without making a remote decision linear in pending pods.
MAKE_ROOM_NODE_CAP = 16


@dataclass(init=False, unsafe_hash=True, slots=True)
class Room:
    fit: Final[FitResult]  # the node made room on (candidates 1), or none
    moves: Final[tuple[ClaimMove, ...]]  # what the cache applies, in order
    # The cluster as it is once they are applied: a node tried in vain has its claims back, but the
    # order of equally free nodes (which an explanation's "best node" reads) is the moves'.
    after: Final[ClusterView]

    def __init__(self, fit: FitResult, moves: tuple[ClaimMove, ...], after: ClusterView) -> None:
        self.fit = fit
        self.moves = moves
        self.after = after


def plan_room(view: ClusterView, requests: Requests, eligible: Eligibility) -> Room:
    """When no node fits `requests` as the claims sit (find_fit found none): a node that would,
    once the claims on it move to other nodes that fit them, and those moves."""
    primary = primary_resource(view, requests)
    need = requests[primary]
    if need > view.max_allocatable.get(primary, 0) or not claim_room_reaches(view, primary, need):
        # No node has that many at all, or none with claims would even with them gone: no move can
        # make room (the index answers what the walk below would find, without it).
        return Room(NO_FIT, (), view)
    trial: Trial | None = None
    moves: list[ClaimMove] = []
    tried = 0
    pinned = pinned_nodes(view, eligible.placement)  # a superset of the allowed nodes, when selectors narrow it cheaply
    for node_name, claim_ids in view.claims_on.items():
        if pinned is not None and node_name not in pinned:
            continue
        node = view.nodes.get(node_name)
        total = None if node is None else node.allocatable.get(primary)
        # Cheapest first: even with every claim gone, the node's unused GPUs must cover the pod.
        if node is None or total is None or total - view.used.get(node_name, _NOTHING).get(primary, 0) < need:
            continue
        if not eligible.allows(node):
            continue
        movable = [claim_id for claim_id in claim_ids if not view.claims[claim_id].pinned]
        if not movable or not _covers_without(view, node_name, requests, movable):
            continue
        if trial is None:
            trial = Trial(view)
        if trial.move_claims_off(node_name, movable, requests, moves):
            free = free_amount(trial.view, node_name, primary, node.allocatable[primary])
            return Room(FitResult(node, 1, 0, 0, free), tuple(moves), trial.view)
        tried += 1
        if tried >= MAKE_ROOM_NODE_CAP:
            break
    return Room(NO_FIT, tuple(moves), view if trial is None else trial.view)


def _covers_without(view: ClusterView, node_name: str, requests: Requests, claim_ids: Sequence[str]) -> bool:
    """Whether `requests` would fit on the node if the claims `claim_ids` held nothing there.
    (Read from the shared view: a node tried in vain has every claim back, so its amounts are the trial's.)"""
    released: dict[str, int] = {}
    for claim_id in claim_ids:
        add_amounts(released, view.claims[claim_id].requests, 1)
    allocatable = view.nodes[node_name].allocatable
    for resource, amount in requests.items():
        total = allocatable.get(resource)
        if total is None:
            if resource in STANDARD_RESOURCES:
                continue
            return False
        if free_amount(view, node_name, resource, total) + released.get(resource, 0) < amount:
            return False
    return True


class Trial:
    """A ClusterView whose claimed amounts and free-count index may differ from the shared one's.
    Only what a trial changes is its own: the claimed amounts of the nodes it touched (copied on
    first write) and, per GPU resource, the nodes it re-filed (`refiled`, read over the shared
    buckets). Copying the buckets or their index cost ~100 ns a node on a large cache (a gang's
    packing, a remote decision that tries to make room: 400-500 us at 5,000 nodes)."""

    def __init__(self, shared: ClusterView) -> None:
        self.view = ClusterView(
            gpu_resources=shared.gpu_resources,
            nodes=shared.nodes,
            used=shared.used,
            claimed=dict(shared.claimed),
            claimed_total=shared.claimed_total,
            buckets=shared.buckets,
            bucket_of=shared.bucket_of,
            max_allocatable=shared.max_allocatable,
            cordoned=shared.cordoned,
            unschedulable_gpu_nodes=shared.unschedulable_gpu_nodes,
            by_label=shared.by_label,
            claims=shared.claims,
            claims_on=shared.claims_on,
            claim_room=shared.claim_room,
            claim_room_counts=shared.claim_room_counts,
            refiled={resource: {} for resource in shared.gpu_resources},
        )
        self._own_claimed: set[str] = set()

    def move_claims_off(self, node_name: str, claim_ids: list[str], requests: Requests, moves: list[ClaimMove]) -> bool:
        """Move claims off the node, biggest first, each to its best fit elsewhere, until `requests`
        fits there; if it never does, move every one back and return False. Every move is added to
        `moves`."""
        view = self.view
        moved: list[tuple[str, str]] = []  # (claim id, the node it moved to)
        for claim_id in sorted(claim_ids, key=lambda c: _size(view.claims[c].requests), reverse=True):
            if covers(view, node_name, requests):
                break
            claim = view.claims[claim_id]
            fit = find_fit(view, claim.requests, claim.eligibility, exclude=node_name)
            if fit.node is not None:
                moved.append((claim_id, fit.node.name))
                self._move(claim.requests, node_name, fit.node.name)
                moves.append((claim_id, fit.node.name))
        if covers(view, node_name, requests):
            return True
        for claim_id, destination in reversed(moved):
            self._move(view.claims[claim_id].requests, destination, node_name)
            moves.append((claim_id, node_name))
        return False

    def hold(self, node_name: str, requests: Requests) -> None:
        """Count `requests` as taken on the node (a gang's pods placed one after the other: webhook.gangs)."""
        self._shift(node_name, requests, 1)

    def _move(self, requests: Requests, origin: str, destination: str) -> None:
        """As ClaimLedger.add_claim moves a claim: off its node (re-filed), then onto the other (re-filed)."""
        self._shift(origin, requests, -1)
        self._shift(destination, requests, 1)

    def _shift(self, node_name: str, requests: Requests, sign: int) -> None:
        claimed = self.view.claimed
        if node_name not in self._own_claimed:
            claimed[node_name] = dict(claimed.get(node_name, {}))
            self._own_claimed.add(node_name)
        add_amounts(claimed[node_name], requests, sign)
        self._refile(node_name)

    def _refile(self, name: str) -> None:
        """As refile, into `refiled`: the node leaves its bucket and joins the end of its new one."""
        view = self.view
        node = view.nodes.get(name)
        allocatable = node.allocatable if node is not None and node.schedulable else {}
        for resource in view.gpu_resources:
            refiled = view.refiled[resource]
            refiled.pop(name, None)  # re-inserted: last in its new bucket
            if resource in allocatable:
                refiled[name] = max(free_amount(view, name, resource, allocatable[resource]), 0)
            else:
                refiled[name] = NOT_FILED


def _size(requests: Requests) -> tuple[int, int, int]:
    """GPUs (any resource), CPU, memory: the order claims move in, biggest first."""
    gpus = 0
    for resource, amount in requests.items():
        if resource not in STANDARD_RESOURCES:
            gpus += amount
    return gpus, requests.get(CPU_MILLI, 0), requests.get(MEMORY_BYTES, 0)
