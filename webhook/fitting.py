"""Where a pod fits, read off a ClusterView: the fit search every decision runs (pure).

The cache keeps, per node and resource, what is used and claimed, and indexes schedulable nodes
per GPU resource in buckets keyed by free count (see webhook.cache). A ClusterView hands those
structures to the decision read-only and without a copy (a review at 5,000 nodes must not copy
per-node data), so finding the best-fit node costs a few dictionary look-ups whatever the cluster
size. A pod's placement rules come as an Eligibility (scheduling.eligibility, built once per pod):
the search asks it whether a node may host the pod. Nothing here writes the view.
Making room when no node fits as the claims sit is webhook.room's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from webhook.types import (
    STANDARD_RESOURCES,
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
_NO_BUCKETS: Mapping[int, Mapping[str, None]] = {}
_NO_COUNTS: Mapping[int, int] = {}
NOT_FILED = -1  # a trial's re-filed node that is outside the buckets (see room.Trial)


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


def refile(view: ClusterView, name: str) -> None:
    """Put the node in the free-count bucket its free GPUs now say, per GPU resource (out of them
    all when it is gone or not schedulable)."""
    node = view.nodes.get(name)
    allocatable = node.allocatable if node is not None and node.schedulable else {}
    for resource in view.gpu_resources:
        buckets, bucket_of = view.buckets[resource], view.bucket_of[resource]
        old = bucket_of.pop(name, None)
        if old is not None:
            bucket = buckets[old]
            del bucket[name]
            if not bucket:
                # Drop it: a dict keeps the slots of deleted keys until it next grows, and
                # iterating one that every node passed through (the all-free bucket during the
                # initial sync) walks all of them, making each decision linear in cluster size.
                del buckets[old]
        if resource in allocatable:
            key = max(free_amount(view, name, resource, allocatable[resource]), 0)
            buckets.setdefault(key, {})[name] = None
            bucket_of[name] = key
    _index_claim_room(view, name, node)


def _index_claim_room(view: ClusterView, name: str, node: NodeInfo | None) -> None:
    """Keep ClusterView.claim_room for the node: what it would have free with its claims gone, while
    it has claims (whether it is schedulable is for the eligibility to say, as making room reads it)."""
    has_claims = node is not None and name in view.claims_on
    for resource in view.gpu_resources:
        by_node = view.claim_room.setdefault(resource, {})
        counts = view.claim_room_counts.setdefault(resource, {})
        old = by_node.pop(name, None)
        if old is not None:
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
        total = node.allocatable.get(resource) if has_claims and node is not None else None
        if total is not None:
            room = total - view.used.get(name, _NOTHING).get(resource, 0)
            by_node[name] = room
            counts[room] = counts.get(room, 0) + 1


def claim_room_reaches(view: ClusterView, resource: str, need: int) -> bool:
    """Whether some node with claims would have `need` of `resource` free once its claims moved."""
    return any(room >= need for room in view.claim_room_counts.get(resource, _NO_COUNTS))


def _filed(bucket_of: Mapping[str, int], refiled: Mapping[str, int], name: str) -> int | None:
    """The node's free-count bucket (None: outside the buckets), a trial's re-filing first (see room.Trial)."""
    key = refiled.get(name)
    if key is None:
        return bucket_of.get(name)
    return None if key == NOT_FILED else key


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
    fitting = range(need, view.max_allocatable.get(primary, 0) + 1)
    pinned = pinned_nodes(view, placement)
    if pinned is not None and len(pinned) < _bucket_sizes(view, primary, fitting):
        names = _in_buckets(view, pinned, primary, fitting)
        fit = _fit_among(view, names, requests, eligible, primary=primary, exclude=exclude, capped=False)
    else:
        fit = _fit_among(
            view, _by_free(view, primary, fitting), requests, eligible, primary=primary, exclude=exclude, capped=True
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
    nodes, allows = view.nodes, eligible.allows
    bucket_of, refiled = view.bucket_of.get(primary, _NOTHING), view.refiled.get(primary, _NOTHING)
    for name in names:
        node = nodes.get(name)
        if name == exclude or node is None or primary not in node.allocatable:
            continue
        # Indexed nodes: one look-up (a trial's view: its re-filed nodes first).
        free = _filed(bucket_of, refiled, name) if refiled else bucket_of.get(name)
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
        found: tuple[NodeInfo, int] | None = None
        for free in range(view.max_allocatable.get(resource, 0), -1, -1):
            for name in _by_free(view, resource, range(free, free + 1)):
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
    bucket_of, refiled = view.bucket_of.get(resource, _NOTHING), view.refiled.get(resource, _NOTHING)
    for name in names:
        node = view.nodes.get(name)
        if node is None:
            continue
        total = node.allocatable.get(resource)
        if total is None:
            continue
        free = _filed(bucket_of, refiled, name)  # indexed nodes: max(free, 0), one look-up
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


def _bucket_sizes(view: ClusterView, resource: str, fitting: range) -> int:
    buckets = view.buckets.get(resource, _NO_BUCKETS)
    total = 0
    for free in fitting:
        total += len(buckets.get(free, ()))
    bucket_of = view.bucket_of.get(resource, _NOTHING)
    for name, key in view.refiled.get(resource, _NOTHING).items():  # a trial's view: its moves
        total += (key in fitting) - (bucket_of.get(name, NOT_FILED) in fitting)
    return total


# Generator functions, not generator expressions: compiled with mypyc (issue 15), an expression
# passed as an argument becomes a list, which would walk every bucket for a capped search.
def _by_free(view: ClusterView, resource: str, fitting: range) -> Iterator[str]:
    """Node names, fewest free GPUs first (best fit), each bucket in its order. A trial's view (see
    room.Trial) reads as if its re-filed nodes had left their buckets and joined the end of their new ones,
    as the cache's own refile does."""
    buckets = view.buckets.get(resource, _NO_BUCKETS)
    refiled = view.refiled.get(resource)
    for free in fitting:
        if not refiled:
            yield from buckets.get(free, ())
            continue
        for name in buckets.get(free, ()):
            if name not in refiled:
                yield name
        for name, key in refiled.items():
            if key == free:
                yield name


def _in_buckets(view: ClusterView, names: Iterable[str], resource: str, fitting: range) -> Iterator[str]:
    """The names whose free count of `resource` is in `fitting`."""
    bucket_of, refiled = view.bucket_of.get(resource, _NOTHING), view.refiled.get(resource, _NOTHING)
    for name in names:
        key = _filed(bucket_of, refiled, name)
        if key is not None and key in fitting:
            yield name
