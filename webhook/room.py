"""Making room: which claims of pods not bound yet to move so that a new pod fits (pure).

A claim is a guess at where the scheduler will put a pod not bound yet (or one just admitted):
placed best-fit when it appeared and kept there, it could block the only node able to host a
newcomer after a tighter node freed up, and the webhook burst a pod that had a node (the
replay's openb-pod-5858 and openb-pod-4640). So when no node fits a pod as the claims sit,
plan_room looks for a node that would, once the claims on it move to other nodes that fit them.
Claims on a nominated node stay (the scheduler chose it). Moves change where claims sit, never
what they hold; nothing moves unless the whole request then fits.

The plan is worked out on a Trial: copies, made on first write, of the few structures a move
changes (the claimed amounts of the nodes involved, their free-count buckets), over the shared
ClusterView. The cache then applies the plan's moves in order (ClaimLedger.move_claims). A node
tried in vain has its claims moved back: those moves are in the plan too, so the cache's orderings
(which break ties between equally free nodes) come out as the trial's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webhook.fitting import NO_FIT, ClusterView, FitResult, add_amounts, covers, find_fit, refile
from webhook.scheduling import placement_allows
from webhook.types import CPU_MILLI, MEMORY_BYTES, STANDARD_RESOURCES, Placement, Requests

# plan_room gives up after trying this many nodes: it runs only when no node fits, and a cluster
# with a backlog of pending pods has claims on every node with room; a few tries find the room
# that moving one or two claims makes, without making a remote decision linear in pending pods.
MAKE_ROOM_NODE_CAP = 16

ClaimMove = tuple[str, str]  # (claim id, the node it moves to)


@dataclass(frozen=True, slots=True)
class Room:
    fit: FitResult  # the node made room on (candidates 1), or none
    moves: tuple[ClaimMove, ...]  # what the cache applies, in order
    # The cluster as it is once they are applied: a node tried in vain has its claims back, but the
    # order of equally free nodes (which an explanation's "best node" reads) is the moves'.
    after: ClusterView


def plan_room(view: ClusterView, requests: Requests, placement: Placement) -> Room:
    """When no node fits `requests` as the claims sit (find_fit found none): a node that would,
    once the claims on it move to other nodes that fit them, and those moves."""
    primary = view.primary(requests)
    trial: Trial | None = None
    moves: list[ClaimMove] = []
    tried = 0
    for node_name, claim_ids in view.claims_on.items():
        node = view.nodes.get(node_name)
        if node is None or primary not in node.allocatable or not placement_allows(placement, node):
            continue
        movable = [claim_id for claim_id in claim_ids if not view.claims[claim_id].pinned]
        if not movable or not _covers_without(view, node_name, requests, movable):
            continue
        if trial is None:
            trial = Trial(view)
        if trial.move_claims_off(node_name, movable, requests, moves):
            free = trial.view.free_amount(node_name, primary, node.allocatable[primary])
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
        if view.free_amount(node_name, resource, total) + released.get(resource, 0) < amount:
            return False
    return True


class Trial:
    """A ClusterView whose claimed amounts and free-count index may differ from the shared one's:
    the structures a claim move writes are copied on first write, the rest is shared."""

    def __init__(self, shared: ClusterView) -> None:
        self.view = ClusterView(
            gpu_resources=shared.gpu_resources,
            nodes=shared.nodes,
            used=shared.used,
            claimed=dict(shared.claimed),
            claimed_total=shared.claimed_total,
            buckets={resource: dict(buckets) for resource, buckets in shared.buckets.items()},
            bucket_of=dict(shared.bucket_of),
            max_allocatable=shared.max_allocatable,
            cordoned=shared.cordoned,
            unschedulable_gpu_nodes=shared.unschedulable_gpu_nodes,
            by_label=shared.by_label,
            claims=shared.claims,
            claims_on=shared.claims_on,
        )
        self._own_claimed: set[str] = set()
        self._own_buckets: set[tuple[str, int]] = set()

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
            fit = find_fit(view, claim.requests, claim.placement, exclude=node_name)
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
        refile(self.view, node_name, self._own_buckets)


def _size(requests: Requests) -> tuple[int, int, int]:
    """GPUs (any resource), CPU, memory: the order claims move in, biggest first."""
    gpus = 0
    for resource, amount in requests.items():
        if resource not in STANDARD_RESOURCES:
            gpus += amount
    return gpus, requests.get(CPU_MILLI, 0), requests.get(MEMORY_BYTES, 0)
