"""The in-memory cluster state the webhook decides from (pure state: no I/O, no locks).

One at a time: the watch threads apply events and the event loop decides and reserves, each
holding CacheSync.lock for the whole of it, so a decision reads one consistent state and two
concurrent admissions can never claim the same GPUs.

Per node and per resource (GPUs, cpu, memory, ephemeral-storage, pods, any extended resource):
  free     = allocatable - used - claimed
  used     effective requests of non-terminal pods bound to the node (terminating ones count; every
           such pod takes one of the node's `pods`), as kube-scheduler's NodeResourcesFit counts them
  claimed  what pods not bound yet will take: unbound GPU pods the scheduler is trying to place
           (see claims_gpus; placed on their nominated node, else best-fit) and reservations for pods
           this webhook just admitted as local but the watch has not shown yet (they expire after a TTL)

Claims follow the cluster: when a node is deleted, loses allocatable, becomes ineligible for a
claim, or is filled by a pod the scheduler bound there, its claims move to another node that fits
(or hold nothing if none does); a node that appears or grows takes claims that had no node.
Claims are guesses, so they also move to make room: when no node fits a new pod as they sit,
make_room moves the claims off a node that could host it to other nodes that fit them (never a
claim on a nominated node), and the pod stays local.

Schedulable nodes (Ready, not cordoned) are indexed per GPU resource in buckets keyed by free
count, so finding the best-fit node costs a few dictionary look-ups whatever the cluster size.
Cordoned nodes are kept aside (few, and only pods tolerating the unschedulable taint may use them).

Burst budgets (see webhook.budget): per namespace, the GPUs its burst pods run remotely (a finished
one until its jobs are known to be gone), kept as a running total on every pod add, change and
delete, plus remote reservations: GPUs of remote
decisions whose pod the watch has not shown yet (released when it appears, expired after the TTL,
handed over with the local ones). A budget check is then two look-ups.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from kubeplumbing.leadership import HandedOver
from webhook.scheduling import placement_allows, tolerates_unschedulable
from webhook.types import (
    CPU_MILLI,
    MEMORY_BYTES,
    STANDARD_RESOURCES,
    NamespaceBudget,
    NamespaceInfo,
    NodeInfo,
    Placement,
    PodInfo,
    Requests,
)

# Stop counting candidate nodes here: the count is advice for humans, and counting every
# fitting node would make local decisions linear in cluster size.
CANDIDATE_CAP = 10
# make_room gives up after trying this many nodes: it runs only when no node fits, and a cluster
# with a backlog of pending pods has claims on every node with room; a few tries find the room
# that moving one or two claims makes, without making a remote decision linear in pending pods.
MAKE_ROOM_NODE_CAP = 16
REMOTE_GPUS_KEY = "gpus"  # the one "resource" of a handed-over remote reservation
DEFAULT_SCHEDULERS = ("default-scheduler",)
# Every cluster has it and it is never deleted: its UID names the cluster (contract.cluster_identity).
CLUSTER_NAMESPACE = "kube-system"


@dataclass(frozen=True, slots=True)
class Claim:
    node: str  # "" when no node could take it: such a claim holds nothing
    requests: Requests
    placement: Placement  # kept so the claim can move when the scheduler fills its node
    expires_at: float | None  # reservations expire; claims of watched pods do not
    pinned: bool = False  # on the pod's nominated node: the scheduler chose it, it stays while the node exists


@dataclass(frozen=True, slots=True)
class FitResult:
    node: NodeInfo | None  # the best-fit node (least free GPUs that still fit), if any
    candidates: int  # nodes that fit, counted up to CANDIDATE_CAP
    excluded_by_placement: int  # nodes with enough free GPUs that taints/selectors rule out
    short_of_compute: int = 0  # nodes with enough free GPUs but not enough CPU, memory, pods...
    best_free: int = 0  # free GPUs (of the resource scanned) on `node`


_NO_FIT = FitResult(None, 0, 0)
_NOTHING: Mapping[str, int] = {}  # read-only stand-in for a node nothing is used or claimed on


def _add(target: dict[str, int], amounts: Requests, sign: int) -> None:
    for resource, count in amounts.items():
        value = target.get(resource, 0) + sign * count
        if value:
            target[resource] = value
        else:
            target.pop(resource, None)


# What a pod needs besides its primary GPU resource, each with whether it is a standard resource
# (one a node may leave unreported): read off the request once per decision.
_Needs = list[tuple[str, int, bool]]


def _other_needs(requests: Requests, primary: str) -> _Needs:
    return [(r, amount, r in STANDARD_RESOURCES) for r, amount in requests.items() if r != primary]


class ClusterCache:
    def __init__(
        self,
        *,
        gpu_resources: Sequence[str],
        clock: Callable[[], float],
        reservation_ttl: float,
        scheduler_names: Collection[str] = DEFAULT_SCHEDULERS,
        max_reservations: int | None = None,
        max_reservations_per_namespace: int | None = None,
    ) -> None:
        self.gpu_resources = tuple(gpu_resources)
        self._clock = clock
        self._reservation_ttl = reservation_ttl
        self._scheduler_names = frozenset(scheduler_names)
        self._max_reservations = max_reservations
        self._max_reservations_per_namespace = max_reservations_per_namespace
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._used: dict[str, dict[str, int]] = {}
        self._claimed: dict[str, dict[str, int]] = {}
        self._claims: dict[str, Claim] = {}
        self._claims_on: dict[str, dict[str, None]] = {}  # node -> claim ids placed there
        self._unplaced: dict[str, None] = {}  # claim ids no node could take, oldest first
        self._claimed_total: dict[str, int] = {}  # sum of _claimed: kept so reads need no scan
        self._reservations: OrderedDict[str, float] = OrderedDict()  # id -> expiry, oldest first
        self._reservation_namespace: dict[str, str] = {}
        self._reservations_in: dict[str, int] = {}  # namespace -> outstanding reservations
        self.reservation_cap_hits = 0  # reviews decided remote because a cap was reached
        self._budgets: dict[str, NamespaceBudget] = {}  # namespaces with a max-remote-gpus annotation
        self._default_walltimes: dict[str, str] = {}  # namespaces with a default-walltime annotation
        self._kube_system_uid = ""
        self._remote_in_use: dict[str, int] = {}  # namespace -> GPUs of its watched burst pods
        # Remote reservations: id -> (namespace, GPUs), oldest first, and their expiry.
        self._remote_reservations: OrderedDict[str, tuple[str, int, float]] = OrderedDict()
        self._remote_reserved_in: dict[str, int] = {}  # namespace -> GPUs held by remote reservations
        # resource -> free count -> node names (insertion-ordered set) of schedulable nodes
        self._buckets: dict[str, dict[int, dict[str, None]]] = {r: {} for r in self.gpu_resources}
        self._bucket_of: dict[tuple[str, str], int] = {}
        self._max_allocatable: dict[str, int] = dict.fromkeys(self.gpu_resources, 0)
        self._unschedulable_gpu_nodes: set[str] = set()
        self._cordoned: dict[str, None] = {}  # Ready but cordoned GPU nodes: outside the buckets
        # (label key, value) -> node names: a pod pinned by nodeSelector or an `In` affinity visits
        # only matching nodes, instead of every node with free GPUs.
        self._by_label: dict[tuple[str, str], dict[str, None]] = {}

    # ----- reads -------------------------------------------------------------------------------

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def pod_count(self) -> int:
        """Pods accounted: bound non-terminal pods of any kind, and every GPU pod (see model.parse_pod)."""
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

    @property
    def kube_system_uid(self) -> str:
        """The UID of the kube-system namespace, which names this cluster ("" until the watch shows it)."""
        return self._kube_system_uid

    def default_walltime(self, namespace: str) -> str | None:
        """The namespace's `nimbix-burst.io/default-walltime` as written (None: not set)."""
        return self._default_walltimes.get(namespace)

    def budget(self, namespace: str) -> NamespaceBudget | None:
        return self._budgets.get(namespace)

    @property
    def budgeted_namespaces(self) -> int:
        return len(self._budgets)

    def remote_in_use(self, namespace: str) -> int:
        """GPUs counted against the namespace's budget: its burst pods whose jobs may run (running, or
        finished without word that their jobs ended), plus remote decisions whose pod has not appeared yet."""
        return self._remote_in_use.get(namespace, 0) + self._remote_reserved_in.get(namespace, 0)

    def claims_gpus(self, pod: PodInfo) -> bool:
        """Whether an unbound pod competes for GPUs now, i.e. kube-scheduler is trying to place it:
        not held back by scheduling gates, handled by a scheduler we account for, and not already
        found unschedulable for a reason other than GPUs (unless preemption nominated a node for it)."""
        if pod.gated or pod.scheduler_name not in self._scheduler_names:
            return False
        return not pod.blocked_elsewhere or bool(pod.nominated_node)

    def _primary(self, requests: Requests) -> str:
        """The GPU resource the pod needs most of: its buckets are the ones scanned."""
        gpus = [r for r in requests if r in self._buckets]
        return max(gpus, key=lambda r: requests[r])

    def find_fit(self, requests: Requests, placement: Placement, *, exclude: str = "") -> FitResult:
        """Best-fit node (fewest free GPUs that still fit) whose free resources cover `requests`
        and whose filters admit the pod."""
        primary = self._primary(requests)
        if placement.node_name:
            return self._fit_among((placement.node_name,), requests, placement, primary, exclude, capped=False)
        need = requests[primary]
        buckets = self._buckets.get(primary, {})
        fitting = range(need, self._max_allocatable.get(primary, 0) + 1)
        pinned = self._pinned_nodes(placement)
        if pinned is not None and len(pinned) < sum(len(buckets.get(free, ())) for free in fitting):
            names = _in_buckets(pinned, self._bucket_of, primary, fitting)
            fit = self._fit_among(names, requests, placement, primary, exclude, capped=False)
        else:
            fit = self._fit_among(_by_free(buckets, fitting), requests, placement, primary, exclude, capped=True)
        if self._cordoned and tolerates_unschedulable(placement):
            fit = _merge(fit, self._fit_among(self._cordoned, requests, placement, primary, exclude, capped=False))
        return fit

    def _fit_among(
        self,
        names: Iterable[str],
        requests: Requests,
        placement: Placement,
        primary: str,
        exclude: str,
        *,
        capped: bool,
    ) -> FitResult:
        best: NodeInfo | None = None
        best_free = 0
        candidates = excluded = short = 0
        need = requests[primary]
        others = _other_needs(requests, primary)  # once per decision, not once per candidate
        nodes, bucket_of = self._nodes, self._bucket_of
        for name in names:
            node = nodes.get(name)
            if name == exclude or node is None or primary not in node.allocatable:
                continue
            free = bucket_of.get((primary, name))  # indexed nodes: one look-up
            if free is None:  # cordoned, or named by spec.nodeName: outside the buckets
                free = self._free_amount(name, primary, node.allocatable[primary])
            if free < need:
                continue
            if not placement_allows(placement, node):
                excluded += 1
                continue
            if not self._covers_needs(name, node.allocatable, others):
                short += 1
                continue
            candidates += 1
            if best is None or free < best_free:
                best, best_free = node, free
            if capped and candidates >= CANDIDATE_CAP:
                break  # names come in ascending free order: the first fit is the best fit
        return FitResult(best, min(candidates, CANDIDATE_CAP), excluded, short, best_free)

    def _pinned_nodes(self, placement: Placement) -> Mapping[str, None] | None:
        """A superset of the nodes the pod may use, when its selectors narrow it cheaply."""
        if placement.node_selector:
            return min((self._by_label.get(item, {}) for item in placement.node_selector.items()), key=len)
        if placement.required_terms is not None and len(placement.required_terms) == 1:
            term = placement.required_terms[0]
            for requirement in term.match_expressions:
                if requirement.operator == "In":
                    names: dict[str, None] = {}
                    for value in requirement.values:
                        names.update(self._by_label.get((requirement.key, value), {}))
                    return names
            for requirement in term.match_fields:
                if requirement.operator == "In" and requirement.key == "metadata.name":
                    return {value: None for value in requirement.values if value in self._nodes}
        return None

    def make_room(self, requests: Requests, placement: Placement) -> FitResult:
        """When no node fits `requests` as the claims sit now (find_fit found none): a node that
        would, once the claims on it move to other nodes that fit them, with those claims moved.

        A claim is a guess at where the scheduler will put a pod not bound yet (or one just admitted):
        placed best-fit when it appeared and kept there, it could block the only node able to host a
        newcomer after a tighter node freed up, and the webhook burst a pod that had a node (the
        replay's openb-pod-5858 and openb-pod-4640). Claims on a nominated node stay (the scheduler
        chose it). Moves change where claims sit, never what they hold; nothing moves unless the whole
        request then fits. Returns no node when none can be made room on."""
        primary = self._primary(requests)
        tried = 0
        for node_name, claim_ids in list(self._claims_on.items()):
            node = self._nodes.get(node_name)
            if node is None or primary not in node.allocatable or not placement_allows(placement, node):
                continue
            movable = [claim_id for claim_id in claim_ids if not self._claims[claim_id].pinned]
            if not movable or not self._covers_without(node_name, requests, movable):
                continue
            if self._move_claims_off(node_name, movable, requests):
                return FitResult(node, 1, 0, 0, self._free_amount(node_name, primary, node.allocatable[primary]))
            tried += 1
            if tried >= MAKE_ROOM_NODE_CAP:
                break
        return _NO_FIT

    def _covers_without(self, node_name: str, requests: Requests, claim_ids: Iterable[str]) -> bool:
        """Whether `requests` would fit on the node if the claims `claim_ids` held nothing there."""
        released: dict[str, int] = {}
        for claim_id in claim_ids:
            _add(released, self._claims[claim_id].requests, 1)
        allocatable = self._nodes[node_name].allocatable
        for resource, amount in requests.items():
            total = allocatable.get(resource)
            if total is None:
                if resource in STANDARD_RESOURCES:
                    continue
                return False
            if self._free_amount(node_name, resource, total) + released.get(resource, 0) < amount:
                return False
        return True

    def _move_claims_off(self, node_name: str, claim_ids: Sequence[str], requests: Requests) -> bool:
        """Move claims off the node, biggest first, each to its best fit elsewhere, until `requests`
        fits there; if it never does, put every moved claim back and return False."""
        moved: list[tuple[str, Claim]] = []
        for claim_id in sorted(claim_ids, key=lambda c: _size(self._claims[c].requests), reverse=True):
            if self._covers(node_name, requests):
                break
            claim = self._claims[claim_id]
            fit = self.find_fit(claim.requests, claim.placement, exclude=node_name)
            if fit.node is not None:
                moved.append((claim_id, claim))
                self._add_claim(claim_id, replace(claim, node=fit.node.name))
        if self._covers(node_name, requests):
            return True
        for claim_id, claim in reversed(moved):
            self._add_claim(claim_id, claim)
        return False

    def best_partial_fit(self, resource: str, placement: Placement) -> tuple[NodeInfo, int] | None:
        """The eligible node with the most free `resource`, for explaining a remote decision."""
        pinned: Iterable[str] | None = self._pinned_nodes(placement)
        if placement.node_name:
            pinned = (placement.node_name,)
        elif pinned is None:
            buckets = self._buckets.get(resource, {})
            found: tuple[NodeInfo, int] | None = None
            for free in range(self._max_allocatable.get(resource, 0), -1, -1):
                for name in buckets.get(free, ()):
                    node = self._nodes[name]
                    if placement_allows(placement, node):
                        found = (node, free)
                        break
                if found is not None:
                    break
            if not (self._cordoned and tolerates_unschedulable(placement)):
                return found
            return _most_free(found, self._eligible_free(self._cordoned, resource, placement))
        return self._eligible_free(pinned, resource, placement)

    def _eligible_free(self, names: Iterable[str], resource: str, placement: Placement) -> tuple[NodeInfo, int] | None:
        """The first node of `names` with the most free `resource` that `placement` allows. The
        placement check (the costly part) runs only for a node that would beat the best so far: a
        pod pinned to hundreds of full nodes (the Alibaba trace's T4s) checked every one of them."""
        best: tuple[NodeInfo, int] | None = None
        for name in names:
            node = self._nodes.get(name)
            if node is None:
                continue
            total = node.allocatable.get(resource)
            if total is None:
                continue
            free = self._bucket_of.get((resource, name))  # indexed nodes: max(free, 0), one look-up
            if free is None:  # cordoned, or named by spec.nodeName: outside the buckets
                free = max(self._free_amount(name, resource, total), 0)
            if best is not None and free <= best[1]:
                continue
            if placement_allows(placement, node):
                best = (node, free)
        return best

    def advertises(self, resource: str) -> bool:
        return self._max_allocatable.get(resource, 0) > 0

    def _covers(self, node_name: str, requests: Requests) -> bool:
        """Every requested resource fits (see _covers_needs)."""
        return self._covers_needs(node_name, self._nodes[node_name].allocatable, _other_needs(requests, ""))

    def _covers_needs(self, node_name: str, allocatable: Mapping[str, int], needs: _Needs) -> bool:
        """Each of `needs` fits. A node that does not report one of the standard resources (cpu,
        memory, ephemeral-storage, pods) is not limited by it; any other resource the node does not
        advertise does not fit (NodeResourcesFit: allocatable 0)."""
        # _free_amount inlined, the node's maps read once: every candidate of every decision comes here.
        used = self._used.get(node_name, _NOTHING)
        claimed = self._claimed.get(node_name, _NOTHING)
        for resource, amount, standard in needs:
            total = allocatable.get(resource)
            if total is None:
                if standard:
                    continue
                return False
            if total - used.get(resource, 0) - claimed.get(resource, 0) < amount:
                return False
        return True

    def _overcommitted(self, node_name: str) -> bool:
        node = self._nodes[node_name]
        return any(self._free_amount(node_name, r, total) < 0 for r, total in node.allocatable.items())

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
        if old == node:
            return  # a status heartbeat: nothing accounting reads has changed
        if old is not None:
            self._unindex_labels(old)
        self._nodes[node.name] = node
        for item in node.labels.items():
            self._by_label.setdefault(item, {})[node.name] = None
        has_gpus = False
        for resource in self.gpu_resources:
            if resource in node.allocatable:
                has_gpus = True
                self._max_allocatable[resource] = max(self._max_allocatable[resource], node.allocatable[resource])
        if has_gpus and not node.schedulable:
            self._unschedulable_gpu_nodes.add(node.name)
        else:
            self._unschedulable_gpu_nodes.discard(node.name)
        if has_gpus and node.ready and node.unschedulable:
            self._cordoned[node.name] = None
        else:
            self._cordoned.pop(node.name, None)
        self._reindex(node.name)
        self._rehome_claims(node.name)
        self._place_unplaced(node.name)

    def delete_node(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is not None:
            self._unindex_labels(old)
        self._unschedulable_gpu_nodes.discard(name)
        self._cordoned.pop(name, None)
        self._reindex(name)
        # Bound pods keep their usage under the name (a node re-registering finds them); claims move.
        self._rehome_claims(name)

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

    # ----- namespace writes --------------------------------------------------------------------

    def replace_namespaces(self, namespaces: Iterable[NamespaceInfo]) -> None:
        self._budgets = {}
        self._default_walltimes = {}
        self._kube_system_uid = ""
        for namespace in namespaces:
            self.upsert_namespace(namespace)

    def upsert_namespace(self, namespace: NamespaceInfo) -> None:
        name = namespace.name
        if namespace.budget is None:
            self._budgets.pop(name, None)
        else:
            self._budgets[name] = namespace.budget
        if namespace.default_walltime is None:
            self._default_walltimes.pop(name, None)
        else:
            self._default_walltimes[name] = namespace.default_walltime
        if name == CLUSTER_NAMESPACE:
            self._kube_system_uid = namespace.uid

    def delete_namespace(self, name: str) -> None:
        self._budgets.pop(name, None)
        self._default_walltimes.pop(name, None)
        if name == CLUSTER_NAMESPACE:
            self._kube_system_uid = ""

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
        if old is not None:
            self._count_remote(old, -1)
        self._count_remote(pod, 1)
        if old is not None and self._holding(old) == self._holding(pod):
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
            self._count_remote(old, -1)
            self._drop_holding(old)

    def _count_remote(self, pod: PodInfo, sign: int) -> None:
        # A finished burst pod still carries remote_gpus while its job may run (see model.parse_pod).
        if pod.remote_gpus:
            left = self._remote_in_use.get(pod.namespace, 0) + sign * pod.remote_gpus
            if left:
                self._remote_in_use[pod.namespace] = left
            else:
                del self._remote_in_use[pod.namespace]

    def _holding(self, pod: PodInfo) -> tuple[object, ...]:
        """Everything that decides what a pod holds and where: when it changes (an in-place resize
        changes `requests`), the pod is re-accounted."""
        if pod.terminal:
            return (True,)
        if pod.node_name:
            return (pod.node_name, pod.requests)
        return ("", pod.requests, pod.nominated_node, pod.placement, self.claims_gpus(pod))

    def _take_holding(self, pod: PodInfo) -> None:
        if pod.terminal:
            return
        if pod.node_name:
            _add(self._used.setdefault(pod.node_name, {}), pod.requests, 1)
            if self._holds_gpus(pod.requests):  # other resources leave the GPU buckets as they are
                self._reindex(pod.node_name)
            self._rehome_claims(pod.node_name)
            return
        if not self.claims_gpus(pod) or not self._holds_gpus(pod.requests):
            return  # an unbound pod without GPUs (a burst pod) claims nothing
        claim_id = "pod:" + pod.uid
        if pod.nominated_node in self._nodes:
            self._add_claim(claim_id, Claim(pod.nominated_node, pod.requests, pod.placement, None, pinned=True))
            return
        fit = self.find_fit(pod.requests, pod.placement)
        node = fit.node.name if fit.node is not None else ""
        self._add_claim(claim_id, Claim(node=node, requests=pod.requests, placement=pod.placement, expires_at=None))

    def _holds_gpus(self, requests: Requests) -> bool:
        return any(resource in self._buckets for resource in requests)

    def _rehome_claims(self, node_name: str) -> None:
        """Move the claims on `node_name` that it can no longer honour: the node is gone, no longer
        admits the pod (cordoned, tainted, relabelled, not ready), or is over-committed (a drop in
        allocatable, or the scheduler bound another pod there). Left in place, the node's deficit
        would be hidden (the index clamps at zero) while the claims' real destinations showed
        phantom free capacity."""
        node = self._nodes.get(node_name)
        for claim_id in list(self._claims_on.get(node_name, ())):
            claim = self._claims[claim_id]
            if node is not None and claim.pinned:
                continue  # the scheduler nominated this node (it may preempt there): the claim stays
            if node is not None and placement_allows(claim.placement, node):
                if not self._overcommitted(node_name):
                    continue
                fit = self.find_fit(claim.requests, claim.placement, exclude=node_name)
                if fit.node is None:
                    continue  # nowhere else fits: the deficit stays visible where it is
            else:
                fit = self.find_fit(claim.requests, claim.placement, exclude=node_name)
            new_node = fit.node.name if fit.node is not None else ""
            self._add_claim(claim_id, replace(claim, node=new_node, pinned=False))

    def _place_unplaced(self, node_name: str) -> None:
        """A node appeared or changed: claims no node could take may fit there now."""
        node = self._nodes[node_name]
        for claim_id in list(self._unplaced):
            claim = self._claims[claim_id]
            if placement_allows(claim.placement, node) and self._covers(node_name, claim.requests):
                self._add_claim(claim_id, replace(claim, node=node_name))

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

    def reservation_refusal(self, namespace: str) -> str:
        """Why a new reservation may not be made ("" when it may): the caps on outstanding
        reservations, so reviews nobody follows with a pod cannot hold every GPU."""
        total_cap, namespace_cap = self._max_reservations, self._max_reservations_per_namespace
        if total_cap is not None and len(self._reservations) >= total_cap:
            return f"{len(self._reservations)} local admissions await their pods (cap {total_cap})"
        outstanding = self._reservations_in.get(namespace, 0)
        if namespace_cap is not None and outstanding >= namespace_cap:
            return f"{outstanding} local admissions in namespace {namespace} await their pods (cap {namespace_cap})"
        return ""

    def reserve(
        self,
        reservation_id: str,
        *,
        node: str,
        requests: Requests,
        placement: Placement,
        namespace: str = "",
        ttl: float | None = None,
    ) -> None:
        """Hold resources on `node` for a pod just admitted as local, until the watch shows it."""
        self.release_reservation(reservation_id)
        expires_at = self._clock() + (self._reservation_ttl if ttl is None else ttl)
        claim = Claim(node=node, requests=requests, placement=placement, expires_at=expires_at)
        self._add_claim("res:" + reservation_id, claim)
        self._reservations[reservation_id] = expires_at
        self._reservation_namespace[reservation_id] = namespace
        self._reservations_in[namespace] = self._reservations_in.get(namespace, 0) + 1

    def reserve_remote(self, reservation_id: str, *, namespace: str, gpus: int, ttl: float | None = None) -> None:
        """Count a remote decision's GPUs against its namespace's budget until the watch shows the pod."""
        self.release_reservation(reservation_id)
        expires_at = self._clock() + (self._reservation_ttl if ttl is None else ttl)
        self._remote_reservations[reservation_id] = (namespace, gpus, expires_at)
        self._remote_reserved_in[namespace] = self._remote_reserved_in.get(namespace, 0) + gpus

    @property
    def remote_reservation_count(self) -> int:
        return len(self._remote_reservations)

    def release_reservation(self, reservation_id: str) -> None:
        remote = self._remote_reservations.pop(reservation_id, None)
        if remote is not None:
            namespace, gpus = remote[0], remote[1]
            left = self._remote_reserved_in[namespace] - gpus
            if left:
                self._remote_reserved_in[namespace] = left
            else:
                del self._remote_reserved_in[namespace]
        if self._reservations.pop(reservation_id, None) is not None:
            self._remove_claim("res:" + reservation_id)
            namespace = self._reservation_namespace.pop(reservation_id)
            left = self._reservations_in[namespace] - 1
            if left:
                self._reservations_in[namespace] = left
            else:
                del self._reservations_in[namespace]

    def export_reservations(self) -> list[HandedOver]:
        """Outstanding reservations, for the replica that leads after us (see kubeplumbing.leadership)."""
        now = self._clock()
        out = []
        for reservation_id, expires_at in self._reservations.items():
            claim = self._claims.get("res:" + reservation_id)
            if claim is None or not claim.node or expires_at <= now:
                continue
            out.append(
                HandedOver(
                    reservation_id=reservation_id,
                    namespace=self._reservation_namespace.get(reservation_id, ""),
                    node=claim.node,
                    requests=dict(claim.requests),
                    expires_in=expires_at - now,
                )
            )
        for reservation_id, (namespace, gpus, expires_at) in self._remote_reservations.items():
            if expires_at > now:
                # node "" marks a remote reservation; the budget counts GPUs, so one resource carries them.
                out.append(HandedOver(reservation_id, namespace, "", {REMOTE_GPUS_KEY: gpus}, expires_at - now))
        return out

    def adopt_reservations(self, handed: Sequence[HandedOver]) -> None:
        """Take over a previous leader's reservations: on the node it promised, until they expire
        or their pod appears. A pod already in the cache holds its own claim: not taken twice."""
        if not handed:
            return
        # Once per change of leader: a scan is fine, and it keeps the pod path free of bookkeeping.
        arrived = {pod.reservation_id for pod in self._pods.values() if pod.reservation_id}
        for item in handed:
            if item.reservation_id in arrived:
                continue
            if not item.node:
                gpus = sum(item.requests.values())
                ttl = min(item.expires_in, self._reservation_ttl)
                self.reserve_remote(item.reservation_id, namespace=item.namespace, gpus=gpus, ttl=ttl)
                continue
            self.reserve(
                item.reservation_id,
                node=item.node,
                requests=item.requests,
                placement=Placement(node_name=item.node),
                namespace=item.namespace,
                ttl=min(item.expires_in, self._reservation_ttl),
            )

    def expire_reservations(self) -> int:
        now = self._clock()
        expired = 0
        while self._reservations:
            reservation_id, expires_at = next(iter(self._reservations.items()))
            if expires_at > now:
                break
            self.release_reservation(reservation_id)
            expired += 1
        while self._remote_reservations:
            reservation_id, (_, _, expires_at) = next(iter(self._remote_reservations.items()))
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
        else:
            self._unplaced[claim_id] = None

    def _remove_claim(self, claim_id: str) -> None:
        claim = self._claims.pop(claim_id, None)
        if claim is None:
            return
        if claim.node:
            _add(self._claimed.setdefault(claim.node, {}), claim.requests, -1)
            _add(self._claimed_total, claim.requests, -1)
            on_node = self._claims_on[claim.node]
            del on_node[claim_id]
            if not on_node:
                del self._claims_on[claim.node]
            self._reindex(claim.node)
        else:
            del self._unplaced[claim_id]

    # ----- introspection for tests and the replay's independent checker -------------------------

    def nodes(self) -> Iterator[NodeInfo]:
        return iter(self._nodes.values())

    def pods(self) -> Mapping[str, PodInfo]:
        return self._pods

    def claims(self) -> Mapping[str, Claim]:
        """Claim id ("pod:<uid>" or "res:<reservation id>") -> where it sits and what it holds."""
        return self._claims


def _size(requests: Requests) -> tuple[int, int, int]:
    """GPUs (any resource), CPU, memory: the order make_room moves claims in, biggest first."""
    gpus = sum(amount for resource, amount in requests.items() if resource not in STANDARD_RESOURCES)
    return gpus, requests.get(CPU_MILLI, 0), requests.get(MEMORY_BYTES, 0)


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
