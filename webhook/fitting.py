"""Where a pod fits, read off a ClusterView: the fit search every decision runs (pure).

The cache keeps, per node and resource, what is used and claimed, and indexes schedulable nodes
per GPU resource in buckets keyed by free count (see webhook.cache). A ClusterView hands those
structures to the decision read-only and without a copy (a review at 5,000 nodes must not copy
per-node data), so finding the best-fit node costs a few dictionary look-ups whatever the cluster
size. A pod's placement rules come as an Eligibility (scheduling.eligibility, built once per pod):
the search asks it whether a node may host the pod. Nothing here writes the view.

Making room (plan_room): a claim is a guess at where the scheduler will put a pod not bound yet
(or one just admitted). Kept where it was placed best-fit, it could block the only node able to
host a newcomer after a tighter node freed up (the replay's openb-pod-5858 and openb-pod-4640).
So when no node fits a pod as the claims sit, plan_room looks for a node that would, once the
claims on it (not on a nominated node: the scheduler chose it) move to other nodes that fit them.
Moves change where claims sit, never what they hold; nothing moves unless the whole request then
fits. The plan is worked out on a Trial: copies, made on first write, of what a move changes, over
the shared view. A node tried in vain has its claims moved back, and those moves are in the plan
too, so the cache's orderings (ties between equally free nodes) come out as the trial's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from webhook.types import (
    CPU_MILLI,
    MEMORY_BYTES,
    STANDARD_RESOURCES,
    ClaimMove,
    ClusterView,
    Eligibility,
    FitResult,
    NodeInfo,
    Placement,
    Requests,
)

# Stop counting candidate nodes here: the count is advice for humans, and counting every
# fitting node would make local decisions linear in cluster size.
CANDIDATE_CAP = 10

_NOTHING: Mapping[str, int] = {}  # read-only stand-in for a node nothing is used or claimed on


NO_FIT = FitResult(None, 0, 0)


def advertises(view: ClusterView, resource: str) -> bool:
    return view.max_allocatable.get(resource, 0) > 0


def free_amount(view: ClusterView, node_name: str, resource: str, total: int) -> int:
    """free = allocatable - used - claimed, for one resource of one node."""
    used = view.used.get(node_name, _NOTHING).get(resource, 0)
    return total - used - view.claimed.get(node_name, _NOTHING).get(resource, 0)


def primary_resource(view: ClusterView, requests: Requests) -> str:
    """The GPU resource the pod needs most of: its buckets are the ones scanned."""
    gpus = [r for r in requests if r in view.buckets]
    return max(gpus, key=lambda r: requests[r])


def holds_gpus(view: ClusterView, requests: Requests) -> bool:
    return any(resource in view.buckets for resource in requests)


def refile(view: ClusterView, name: str, owned: set[tuple[str, int]] | None = None) -> None:
    """Put the node in the free-count bucket its free GPUs now say, per GPU resource (out of them
    all when it is gone or not schedulable). `owned`: for a trial view whose buckets are the shared
    view's until written (webhook.room), the (resource, free count) buckets it has copied already."""
    node = view.nodes.get(name)
    allocatable = node.allocatable if node is not None and node.schedulable else {}
    for resource in view.gpu_resources:
        buckets = view.buckets[resource]
        old = view.bucket_of.pop((resource, name), None)
        if old is not None:
            bucket = buckets[old] if owned is None else _own_bucket(buckets, resource, old, owned)
            del bucket[name]
            if not bucket:
                # Drop it: a dict keeps the slots of deleted keys until it next grows, and
                # iterating one that every node passed through (the all-free bucket during the
                # initial sync) walks all of them, making each decision linear in cluster size.
                del buckets[old]
        if resource in allocatable:
            key = max(free_amount(view, name, resource, allocatable[resource]), 0)
            if owned is None:
                buckets.setdefault(key, {})[name] = None
            else:
                _own_bucket(buckets, resource, key, owned)[name] = None
            view.bucket_of[(resource, name)] = key


def _own_bucket(
    buckets: dict[int, dict[str, None]], resource: str, key: int, owned: set[tuple[str, int]]
) -> dict[str, None]:
    bucket = buckets.get(key)
    if bucket is None:
        bucket = buckets[key] = {}
        owned.add((resource, key))
    elif (resource, key) not in owned:
        bucket = buckets[key] = dict(bucket)
        owned.add((resource, key))
    return bucket


def add_amounts(target: dict[str, int], amounts: Requests, sign: int) -> None:
    """Add (sign 1) or take away (sign -1) `amounts`, keeping no zero entries."""
    for resource, count in amounts.items():
        value = target.get(resource, 0) + sign * count
        if value:
            target[resource] = value
        else:
            target.pop(resource, None)


# What a pod needs besides its primary GPU resource, each with whether it is a standard resource
# (one a node may leave unreported): read off the request once per decision.
Needs = list[tuple[str, int, bool]]


def other_needs(requests: Requests, primary: str) -> Needs:
    return [(r, amount, r in STANDARD_RESOURCES) for r, amount in requests.items() if r != primary]


@dataclass(frozen=True, slots=True)
class RoomSearch:
    """What making room found for a pod no node fits as the claims sit (placement.choose reads it):
    a node once claims of pods not bound yet move (plan_room), or what explains that none fits."""

    fit: FitResult  # the node made room on, or find_fit's miss with its counts
    moves: tuple[ClaimMove, ...] = ()  # what the cache applies, in order, whatever the decision
    # No fit: what explains it (reasons.explain_no_fit), read off the cluster once the moves are applied:
    # the GPU resource needed most, whether a node advertises it, the eligible node with the most
    # of it free, and how many are claimed by pods not bound yet.
    primary: str = ""
    advertised: bool = True
    partial: tuple[NodeInfo, int] | None = None
    claimed: int = 0


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


def find_fit(view: ClusterView, requests: Requests, eligible: Eligibility, *, exclude: str = "") -> FitResult:
    """Best-fit node (fewest free GPUs that still fit) whose free resources cover `requests`
    and whose filters admit the pod."""
    primary = primary_resource(view, requests)
    placement = eligible.placement
    if placement.node_name:
        return _fit_among(
            view, (placement.node_name,), requests, eligible, primary=primary, exclude=exclude, capped=False
        )
    need = requests[primary]
    buckets = view.buckets.get(primary, {})
    fitting = range(need, view.max_allocatable.get(primary, 0) + 1)
    pinned = pinned_nodes(view, placement)
    if pinned is not None and len(pinned) < _bucket_sizes(buckets, fitting):
        names = _in_buckets(pinned, view.bucket_of, primary, fitting)
        fit = _fit_among(view, names, requests, eligible, primary=primary, exclude=exclude, capped=False)
    else:
        fit = _fit_among(
            view, _by_free(buckets, fitting), requests, eligible, primary=primary, exclude=exclude, capped=True
        )
    if view.cordoned and eligible.cordoned_ok():
        fit = _merge(
            fit, _fit_among(view, view.cordoned, requests, eligible, primary=primary, exclude=exclude, capped=False)
        )
    return fit


def _fit_among(
    view: ClusterView,
    names: Iterable[str],
    requests: Requests,
    eligible: Eligibility,
    *,
    primary: str,
    exclude: str,
    capped: bool,
) -> FitResult:
    best: NodeInfo | None = None
    best_free = 0
    candidates = excluded = short = 0
    need = requests[primary]
    others = other_needs(requests, primary)  # once per decision, not once per candidate
    nodes, bucket_of, allows = view.nodes, view.bucket_of, eligible.allows
    for name in names:
        node = nodes.get(name)
        if name == exclude or node is None or primary not in node.allocatable:
            continue
        free = bucket_of.get((primary, name))  # indexed nodes: one look-up
        if free is None:  # cordoned, or named by spec.nodeName: outside the buckets
            free = free_amount(view, name, primary, node.allocatable[primary])
        if free < need:
            continue
        if not allows(node):
            excluded += 1
            continue
        if not covers_needs(view, name, node.allocatable, others):
            short += 1
            continue
        candidates += 1
        if best is None or free < best_free:
            best, best_free = node, free
        if capped and candidates >= CANDIDATE_CAP:
            break  # names come in ascending free order: the first fit is the best fit
    return FitResult(best, min(candidates, CANDIDATE_CAP), excluded, short, best_free)


def pinned_nodes(view: ClusterView, placement: Placement) -> Mapping[str, None] | None:
    """A superset of the nodes the pod may use, when its selectors narrow it cheaply."""
    if placement.node_selector:
        return min((view.by_label.get(item, {}) for item in placement.node_selector.items()), key=len)
    if placement.required_terms is not None and len(placement.required_terms) == 1:
        term = placement.required_terms[0]
        for requirement in term.match_expressions:
            if requirement.operator == "In":
                names: dict[str, None] = {}
                for value in requirement.values:
                    names.update(view.by_label.get((requirement.key, value), {}))
                return names
        for requirement in term.match_fields:
            if requirement.operator == "In" and requirement.key == "metadata.name":
                return {value: None for value in requirement.values if value in view.nodes}
    return None


def best_partial_fit(view: ClusterView, resource: str, eligible: Eligibility) -> tuple[NodeInfo, int] | None:
    """The eligible node with the most free `resource`, for explaining a remote decision."""
    placement = eligible.placement
    pinned: Iterable[str] | None = pinned_nodes(view, placement)
    if placement.node_name:
        pinned = (placement.node_name,)
    elif pinned is None:
        buckets = view.buckets.get(resource, {})
        found: tuple[NodeInfo, int] | None = None
        for free in range(view.max_allocatable.get(resource, 0), -1, -1):
            for name in buckets.get(free, ()):
                node = view.nodes[name]
                if eligible.allows(node):
                    found = (node, free)
                    break
            if found is not None:
                break
        if not (view.cordoned and eligible.cordoned_ok()):
            return found
        return _most_free(found, _eligible_free(view, view.cordoned, resource, eligible))
    return _eligible_free(view, pinned, resource, eligible)


def _eligible_free(
    view: ClusterView, names: Iterable[str], resource: str, eligible: Eligibility
) -> tuple[NodeInfo, int] | None:
    """The first node of `names` with the most free `resource` that the pod may use. The
    placement check (the costly part) runs only for a node that would beat the best so far: a
    pod pinned to hundreds of full nodes (the Alibaba trace's T4s) checked every one of them."""
    best: tuple[NodeInfo, int] | None = None
    for name in names:
        node = view.nodes.get(name)
        if node is None:
            continue
        total = node.allocatable.get(resource)
        if total is None:
            continue
        free = view.bucket_of.get((resource, name))  # indexed nodes: max(free, 0), one look-up
        if free is None:  # cordoned, or named by spec.nodeName: outside the buckets
            free = max(free_amount(view, name, resource, total), 0)
        if best is not None and free <= best[1]:
            continue
        if eligible.allows(node):
            best = (node, free)
    return best


def covers(view: ClusterView, node_name: str, requests: Requests) -> bool:
    """Every requested resource fits (see covers_needs)."""
    return covers_needs(view, node_name, view.nodes[node_name].allocatable, other_needs(requests, ""))


def covers_needs(view: ClusterView, node_name: str, allocatable: Mapping[str, int], needs: Needs) -> bool:
    """Each of `needs` fits. A node that does not report one of the standard resources (cpu,
    memory, ephemeral-storage, pods) is not limited by it; any other resource the node does not
    advertise does not fit (NodeResourcesFit: allocatable 0)."""
    # free_amount inlined, the node's maps read once: every candidate of every decision comes here.
    used = view.used.get(node_name, _NOTHING)
    claimed = view.claimed.get(node_name, _NOTHING)
    for resource, amount, standard in needs:
        total = allocatable.get(resource)
        if total is None:
            if standard:
                continue
            return False
        if total - used.get(resource, 0) - claimed.get(resource, 0) < amount:
            return False
    return True


def _merge(a: FitResult, b: FitResult) -> FitResult:
    """Two scans over disjoint node sets, as one: the best fit of both, counts added."""
    best = b if b.node is not None and (a.node is None or b.best_free < a.best_free) else a
    return FitResult(
        best.node,
        min(a.candidates + b.candidates, CANDIDATE_CAP),
        a.excluded_by_placement + b.excluded_by_placement,
        a.short_of_compute + b.short_of_compute,
        best.best_free,
    )


def _most_free(a: tuple[NodeInfo, int] | None, b: tuple[NodeInfo, int] | None) -> tuple[NodeInfo, int] | None:
    if a is None:
        return b
    if b is None:
        return a
    return b if b[1] > a[1] else a


def _bucket_sizes(buckets: Mapping[int, Mapping[str, None]], fitting: range) -> int:
    total = 0
    for free in fitting:
        total += len(buckets.get(free, ()))
    return total


# Generator functions, not generator expressions: compiled with mypyc (issue 15), an expression
# passed as an argument becomes a list, which would walk every bucket for a capped search.
def _by_free(buckets: Mapping[int, Iterable[str]], fitting: range) -> Iterator[str]:
    """Node names, fewest free GPUs first (best fit)."""
    for free in fitting:
        yield from buckets.get(free, ())


def _in_buckets(
    names: Iterable[str], bucket_of: Mapping[tuple[str, str], int], primary: str, fitting: range
) -> Iterator[str]:
    """The names whose free count of `primary` is in `fitting`."""
    for name in names:
        if bucket_of.get((primary, name), -1) in fitting:
            yield name


# ----- making room -------------------------------------------------------------------------------

# plan_room gives up after trying this many nodes: it runs only when no node fits, and a cluster
# with a backlog of pending pods has claims on every node with room; a few tries find the room
# that moving one or two claims makes, without making a remote decision linear in pending pods.
MAKE_ROOM_NODE_CAP = 16


@dataclass(frozen=True, slots=True)
class Room:
    fit: FitResult  # the node made room on (candidates 1), or none
    moves: tuple[ClaimMove, ...]  # what the cache applies, in order
    # The cluster as it is once they are applied: a node tried in vain has its claims back, but the
    # order of equally free nodes (which an explanation's "best node" reads) is the moves'.
    after: ClusterView


def plan_room(view: ClusterView, requests: Requests, eligible: Eligibility) -> Room:
    """When no node fits `requests` as the claims sit (find_fit found none): a node that would,
    once the claims on it move to other nodes that fit them, and those moves."""
    primary = primary_resource(view, requests)
    need = requests[primary]
    if need > view.max_allocatable.get(primary, 0):
        return Room(NO_FIT, (), view)  # no node has that many at all: no move can make room
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
        refile(self.view, node_name, self._own_buckets)


def _size(requests: Requests) -> tuple[int, int, int]:
    """GPUs (any resource), CPU, memory: the order claims move in, biggest first."""
    gpus = 0
    for resource, amount in requests.items():
        if resource not in STANDARD_RESOURCES:
            gpus += amount
    return gpus, requests.get(CPU_MILLI, 0), requests.get(MEMORY_BYTES, 0)
