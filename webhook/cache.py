"""The in-memory cluster state the webhook decides from (pure state: no I/O, no locks).

One writer: the event loop applies watch events and admission reservations, and decisions read
the same state in the same tick, so two concurrent admissions can never claim the same GPUs.

Per node:  free = allocatable - used - claimed
  used     effective GPU requests of non-terminal pods bound to the node (terminating ones count)
  claimed  GPUs promised to pods that are not bound yet: unbound GPU pods seen by the watch (placed
           on their nominated node, else best-fit) and reservations for pods this webhook just
           admitted as local but the watch has not shown yet (they expire after a TTL)

Schedulable nodes (Ready, not cordoned) are indexed per GPU resource in buckets keyed by free
count, so finding the best-fit node costs a few dictionary look-ups whatever the cluster size.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from webhook.scheduling import placement_allows
from webhook.types import CPU_MILLI, MEMORY_BYTES, NodeInfo, Placement, PodInfo, Requests

# Stop counting candidate nodes here: the count is advice for humans, and counting every
# fitting node would make local decisions linear in cluster size.
CANDIDATE_CAP = 10


@dataclass(frozen=True, slots=True)
class Claim:
    node: str  # "" when no node could take it: such a claim holds nothing
    requests: Requests
    placement: Placement  # kept so the claim can move when the scheduler fills its node
    expires_at: float | None  # reservations expire; claims of watched pods do not


@dataclass(frozen=True, slots=True)
class FitResult:
    node: NodeInfo | None  # the best-fit node (least free GPUs that still fit), if any
    candidates: int  # nodes that fit, counted up to CANDIDATE_CAP
    excluded_by_placement: int  # nodes with enough free GPUs that taints/selectors rule out
    short_of_compute: int = 0  # nodes with enough free GPUs but not enough CPU or memory


def _add(target: dict[str, int], amounts: Requests, sign: int) -> None:
    for resource, count in amounts.items():
        value = target.get(resource, 0) + sign * count
        if value:
            target[resource] = value
        else:
            target.pop(resource, None)


class ClusterCache:
    def __init__(self, *, gpu_resources: Sequence[str], clock: Callable[[], float], reservation_ttl: float) -> None:
        self.gpu_resources = tuple(gpu_resources)
        self._clock = clock
        self._reservation_ttl = reservation_ttl
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._used: dict[str, dict[str, int]] = {}
        self._claimed: dict[str, dict[str, int]] = {}
        self._claims: dict[str, Claim] = {}
        self._claims_on: dict[str, dict[str, None]] = {}  # node -> claim ids placed there
        self._claimed_total: dict[str, int] = {}  # sum of _claimed: kept so reads need no scan
        self._reservations: OrderedDict[str, float] = OrderedDict()  # id -> expiry, oldest first
        # resource -> free count -> node names (insertion-ordered set) of schedulable nodes
        self._buckets: dict[str, dict[int, dict[str, None]]] = {r: {} for r in self.gpu_resources}
        self._bucket_of: dict[tuple[str, str], int] = {}
        self._max_allocatable: dict[str, int] = dict.fromkeys(self.gpu_resources, 0)
        self._unschedulable_gpu_nodes: set[str] = set()
        # (label key, value) -> node names: a pod pinned by nodeSelector or an `In` affinity visits
        # only matching nodes, instead of every node with free GPUs.
        self._by_label: dict[tuple[str, str], dict[str, None]] = {}

    # ----- reads -------------------------------------------------------------------------------

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def unschedulable_gpu_nodes(self) -> int:
        return len(self._unschedulable_gpu_nodes)

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def free(self, node_name: str) -> dict[str, int]:
        node = self._nodes.get(node_name)
        if node is None:
            return {}
        return {r: self._free_amount(node_name, r, total) for r, total in node.allocatable.items()}

    def _free_amount(self, node_name: str, resource: str, total: int) -> int:
        """free = allocatable - used - claimed, for one resource of one node."""
        used = self._used.get(node_name, {}).get(resource, 0)
        return total - used - self._claimed.get(node_name, {}).get(resource, 0)

    def total_free(self) -> dict[str, int]:
        """Free GPUs per resource over schedulable nodes (for the metrics gauge)."""
        return {r: sum(free * len(names) for free, names in buckets.items()) for r, buckets in self._buckets.items()}

    def claimed_total(self) -> dict[str, int]:
        """GPUs, CPU and memory held by claims placed on a node. A running total: every remote
        decision reads it, and summing the claims each time made those decisions linear in pending pods."""
        return dict(self._claimed_total)

    def _primary(self, requests: Requests) -> str:
        """The GPU resource the pod needs most of: its buckets are the ones scanned."""
        gpus = [r for r in requests if r in self._buckets]
        return max(gpus, key=lambda r: requests[r])

    def find_fit(self, requests: Requests, placement: Placement, *, exclude: str = "") -> FitResult:
        """Best-fit schedulable node (fewest free GPUs that still fit) whose free GPUs, CPU and memory
        cover `requests` and whose filters admit the pod."""
        primary = self._primary(requests)
        need = requests[primary]
        buckets = self._buckets.get(primary, {})
        fitting = range(need, self._max_allocatable.get(primary, 0) + 1)
        pinned = self._pinned_nodes(placement)
        if pinned is not None and len(pinned) < sum(len(buckets.get(free, ())) for free in fitting):
            names: Iterable[str] = (n for n in pinned if self._bucket_of.get((primary, n), -1) in fitting)
            return self._fit_among(names, requests, placement, primary=primary, exclude=exclude, capped=False)
        in_order = (name for free in fitting for name in buckets.get(free, ()))
        return self._fit_among(in_order, requests, placement, primary=primary, exclude=exclude, capped=True)

    def _fit_among(
        self,
        names: Iterable[str],
        requests: Requests,
        placement: Placement,
        *,
        primary: str,
        exclude: str,
        capped: bool,
    ) -> FitResult:
        best: NodeInfo | None = None
        best_free = 0
        candidates = excluded = short = 0
        for name in names:
            if name == exclude:
                continue
            node = self._nodes[name]
            if not placement_allows(placement, node):
                excluded += 1
                continue
            if not self._covers(name, requests, primary):
                short += 1
                continue
            free = self._bucket_of[(primary, name)]
            candidates += 1
            if best is None or free < best_free:
                best, best_free = node, free
            if capped and candidates >= CANDIDATE_CAP:
                break  # names come in ascending free order: the first fit is the best fit
        return FitResult(best, min(candidates, CANDIDATE_CAP), excluded, short)

    def _pinned_nodes(self, placement: Placement) -> Mapping[str, None] | None:
        """A superset of the nodes the pod may use, when its selectors narrow it cheaply."""
        if placement.node_selector:
            return min((self._by_label.get(item, {}) for item in placement.node_selector.items()), key=len)
        if placement.required_terms is not None and len(placement.required_terms) == 1:
            for requirement in placement.required_terms[0].match_expressions:
                if requirement.operator == "In":
                    names: dict[str, None] = {}
                    for value in requirement.values:
                        names.update(self._by_label.get((requirement.key, value), {}))
                    return names
        return None

    def best_partial_fit(self, resource: str, placement: Placement) -> tuple[NodeInfo, int] | None:
        """The eligible node with the most free `resource`, for explaining a remote decision."""
        pinned = self._pinned_nodes(placement)
        if pinned is not None:
            best: tuple[NodeInfo, int] | None = None
            for name in pinned:
                free = self._bucket_of.get((resource, name))
                if free is not None and (best is None or free > best[1]):
                    node = self._nodes[name]
                    if placement_allows(placement, node):
                        best = (node, free)
            return best
        buckets = self._buckets.get(resource, {})
        for free in range(self._max_allocatable.get(resource, 0), -1, -1):
            for name in buckets.get(free, ()):
                node = self._nodes[name]
                if placement_allows(placement, node):
                    return node, free
        return None

    def advertises(self, resource: str) -> bool:
        return self._max_allocatable.get(resource, 0) > 0

    def _covers(self, node_name: str, requests: Requests, primary: str) -> bool:
        """Every other requested resource fits (the bucket already guarantees `primary`). A node
        that does not report CPU or memory is not limited by it."""
        if len(requests) == 1:
            return True
        allocatable = self._nodes[node_name].allocatable
        for resource, amount in requests.items():
            if resource == primary:
                continue
            total = allocatable.get(resource)
            if total is None:
                if resource in (CPU_MILLI, MEMORY_BYTES):
                    continue
                return False
            if self._free_amount(node_name, resource, total) < amount:
                return False
        return True

    # ----- node writes -------------------------------------------------------------------------

    def replace_nodes(self, nodes: Iterable[NodeInfo]) -> None:
        fresh = {n.name: n for n in nodes}
        for name in list(self._nodes):
            if name not in fresh:
                self.delete_node(name)
        for node in fresh.values():
            self.upsert_node(node)

    def upsert_node(self, node: NodeInfo) -> None:
        old = self._nodes.get(node.name)
        if old is not None:
            self._unindex_labels(old)
        self._nodes[node.name] = node
        for item in node.labels.items():
            self._by_label.setdefault(item, {})[node.name] = None
        for resource in self.gpu_resources:
            self._max_allocatable[resource] = max(self._max_allocatable[resource], node.allocatable.get(resource, 0))
        if node.has_gpus and not node.schedulable:
            self._unschedulable_gpu_nodes.add(node.name)
        else:
            self._unschedulable_gpu_nodes.discard(node.name)
        self._reindex(node.name)

    def delete_node(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is not None:
            self._unindex_labels(old)
        self._unschedulable_gpu_nodes.discard(name)
        self._reindex(name)

    def _unindex_labels(self, node: NodeInfo) -> None:
        for item in node.labels.items():
            names = self._by_label[item]
            del names[node.name]
            if not names:
                del self._by_label[item]

    def _reindex(self, name: str) -> None:
        node = self._nodes.get(name)
        allocatable = node.allocatable if node is not None and node.schedulable else {}
        for resource in self.gpu_resources:
            old = self._bucket_of.pop((resource, name), None)
            if old is not None:
                bucket = self._buckets[resource][old]
                del bucket[name]
                if not bucket:
                    # Drop it: a dict keeps the slots of deleted keys until it next grows, and
                    # iterating one that every node passed through (the all-free bucket during the
                    # initial sync) walks all of them, making each decision linear in cluster size.
                    del self._buckets[resource][old]
            if resource in allocatable:
                key = max(self._free_amount(name, resource, allocatable[resource]), 0)
                self._buckets[resource].setdefault(key, {})[name] = None
                self._bucket_of[(resource, name)] = key

    # ----- pod writes --------------------------------------------------------------------------

    def replace_pods(self, pods: Iterable[PodInfo]) -> None:
        """Apply a full list of the pods that hold something (see model.parse_pod)."""
        fresh = {pod.uid: pod for pod in pods}
        for uid in list(self._pods):
            if uid not in fresh:
                self.delete_pod(uid)
        for pod in fresh.values():
            self.upsert_pod(pod)

    def upsert_pod(self, pod: PodInfo) -> None:
        old = self._pods.get(pod.uid)
        if pod.reservation_id:
            self.release_reservation(pod.reservation_id)
        if old is not None and self._same_holding(old, pod):
            self._pods[pod.uid] = pod
            return
        if old is not None:
            self._drop_holding(old)
        self._pods[pod.uid] = pod
        self._take_holding(pod)

    def delete_pod(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is not None:
            if old.reservation_id:
                self.release_reservation(old.reservation_id)
            self._drop_holding(old)

    @staticmethod
    def _same_holding(old: PodInfo, new: PodInfo) -> bool:
        return (old.node_name, old.terminal, old.nominated_node) == (new.node_name, new.terminal, new.nominated_node)

    def _take_holding(self, pod: PodInfo) -> None:
        if pod.terminal:
            return
        if pod.node_name:
            _add(self._used.setdefault(pod.node_name, {}), pod.requests, 1)
            if self._holds_gpus(pod.requests):  # CPU/memory alone leave the GPU buckets as they are
                self._reindex(pod.node_name)
            self._move_excess_claims(pod.node_name)
            return
        node = pod.nominated_node if pod.nominated_node in self._nodes else ""
        if not node:
            fit = self.find_fit(pod.requests, pod.placement)
            node = fit.node.name if fit.node is not None else ""
        self._add_claim(
            "pod:" + pod.uid, Claim(node=node, requests=pod.requests, placement=pod.placement, expires_at=None)
        )

    def _holds_gpus(self, requests: Requests) -> bool:
        return any(resource in self._buckets for resource in requests)

    def _move_excess_claims(self, node_name: str) -> None:
        """The scheduler bound a pod where we had placed other claims: move those that no longer
        fit to other nodes (best-fit). Left in place, the node's deficit would be hidden (the index
        clamps at zero) while the claims' real destinations showed phantom free GPUs."""
        for claim_id in list(self._claims_on.get(node_name, ())):
            if all(free >= 0 for free in self.free(node_name).values()):
                return
            claim = self._claims[claim_id]
            fit = self.find_fit(claim.requests, claim.placement, exclude=node_name)
            if fit.node is not None:
                self._add_claim(claim_id, Claim(fit.node.name, claim.requests, claim.placement, claim.expires_at))

    def _drop_holding(self, pod: PodInfo) -> None:
        if pod.terminal:
            return
        if pod.node_name:
            _add(self._used.setdefault(pod.node_name, {}), pod.requests, -1)
            if self._holds_gpus(pod.requests):
                self._reindex(pod.node_name)
        else:
            self._remove_claim("pod:" + pod.uid)

    # ----- claims and reservations -------------------------------------------------------------

    def reserve(self, reservation_id: str, *, node: str, requests: Requests, placement: Placement) -> None:
        """Hold GPUs, CPU and memory on `node` for a pod just admitted as local, until the watch shows it."""
        expires_at = self._clock() + self._reservation_ttl
        claim = Claim(node=node, requests=requests, placement=placement, expires_at=expires_at)
        self._add_claim("res:" + reservation_id, claim)
        self._reservations[reservation_id] = expires_at

    def release_reservation(self, reservation_id: str) -> None:
        if self._reservations.pop(reservation_id, None) is not None:
            self._remove_claim("res:" + reservation_id)

    def expire_reservations(self) -> int:
        now = self._clock()
        expired = 0
        while self._reservations:
            reservation_id, expires_at = next(iter(self._reservations.items()))
            if expires_at > now:
                break
            self.release_reservation(reservation_id)
            expired += 1
        return expired

    @property
    def reservation_count(self) -> int:
        return len(self._reservations)

    def _add_claim(self, claim_id: str, claim: Claim) -> None:
        self._remove_claim(claim_id)
        self._claims[claim_id] = claim
        if claim.node:
            _add(self._claimed.setdefault(claim.node, {}), claim.requests, 1)
            _add(self._claimed_total, claim.requests, 1)
            self._claims_on.setdefault(claim.node, {})[claim_id] = None
            self._reindex(claim.node)

    def _remove_claim(self, claim_id: str) -> None:
        claim = self._claims.pop(claim_id, None)
        if claim is not None and claim.node:
            _add(self._claimed.setdefault(claim.node, {}), claim.requests, -1)
            _add(self._claimed_total, claim.requests, -1)
            del self._claims_on[claim.node][claim_id]
            self._reindex(claim.node)

    # ----- introspection for tests and the replay's independent checker -------------------------

    def nodes(self) -> Iterator[NodeInfo]:
        return iter(self._nodes.values())

    def pods(self) -> Mapping[str, PodInfo]:
        return self._pods
