"""The in-memory cluster state the webhook decides from (pure state: no I/O, no locks).

One at a time: the watch threads apply events and the event loop decides and reserves, each
holding CacheSync.lock for the whole of it, so a decision reads one consistent state and two
concurrent admissions can never claim the same GPUs.

Three parts, one responsibility each:
  ClusterCache (here)      indexes nodes, pods and namespaces from the watch: labels, cordoned and
                           not-ready GPU nodes, burst budgets, and what each pod holds
  ClaimLedger              the accounting of what is used and claimed on each node, the claims and
  (webhook.accounting)     their moves, and the free-count index the fit search reads
  Reservations             what this webhook promised before the watch showed the pod, and its expiry
  (webhook.reservations)
They share one ClusterView (webhook.types; webhook.fitting searches it): the structures a decision
reads, handed out without a copy. An admission takes one Snapshot (snapshot_for: the view and what
its namespace and the reservations say), and a gang's pod one GangSnapshot beside it (gang_snapshot_for);
the decision (webhook.decision.decide) is pure over them, and the cache applies the effects of what it
chose in one call (apply): the claim moves that make room, then the reservations.

Schedulable nodes (Ready, not cordoned) are indexed per GPU resource in buckets keyed by free
count, so finding the best-fit node costs a few dictionary look-ups whatever the cluster size.
Cordoned nodes are kept aside (few, and only pods tolerating the unschedulable taint may use them).

Burst budgets (see webhook.budget): per namespace, the GPUs its burst pods run remotely (a finished
one until its jobs are known to be gone), kept as a running total on every pod add, change and
delete, plus remote reservations: GPUs of remote decisions whose pod the watch has not shown yet
(released when it appears, expired after the TTL, handed over with the local ones). A budget check
is then two look-ups.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from jarvice import contract
from jarvice.gpubudget import NamespaceBudget
from kubeplumbing.leadership import HandedOver
from webhook.accounting import ClaimLedger
from webhook.fitting import CANDIDATE_CAP, best_partial_fit, find_fit
from webhook.gangs import GangIndex, GangSnapshot
from webhook.provenance import IssuedTokens
from webhook.reservations import Reservations
from webhook.scheduling import eligibility
from webhook.spend_ledger import SpendLedger
from webhook.spending import DEFAULT_MAX_RECORD_AGE_SECONDS, CostCaps, InUse
from webhook.types import (
    Claim,
    ClaimMove,
    FitResult,
    NamespaceInfo,
    NamespaceMachines,
    NodeInfo,
    Placement,
    PodInfo,
    Requests,
    Snapshot,
    empty_view,
)
from webhook.verdict import Effects

__all__ = ["CANDIDATE_CAP", "CLUSTER_NAMESPACE", "DEFAULT_SCHEDULERS", "Claim", "ClusterCache", "FitResult"]

DEFAULT_SCHEDULERS = ("default-scheduler",)
# Every cluster has it and it is never deleted: its UID names the cluster (contract.cluster_identity).
CLUSTER_NAMESPACE = "kube-system"
# How long a Job's wait deadline is remembered after it passed: its replacement pods, created within
# seconds of the controller's scan, burst at once; a pod the Job creates much later may wait again.
WAIT_MEMORY_SECONDS = 3600.0
# How long the GPUs a pod comes home to are held for its Job's next pod: the evicted runner stops
# (within its grace period), then the Job creates the replacement; a hold no pod takes over expires.
HOMECOMING_HOLD_SECONDS = 120.0
_HOME_PREFIX = "home-"
_NO_KUBE_SYSTEM = "the kube-system namespace is not in the webhook's cache, so the cluster's identity is unknown"


class NamespaceIndex:
    """What the watch shows of namespaces: burst budgets and the GPUs their burst pods count against
    them (kept by the pod writes), default walltimes, the cluster's identity."""

    def __init__(self) -> None:
        self.budgets: dict[str, NamespaceBudget] = {}  # namespaces with a max-remote-gpus annotation
        self.default_walltimes: dict[str, str] = {}  # namespaces with a default-walltime annotation
        self.caps: dict[str, CostCaps] = {}  # namespaces with a cost cap
        self.apps: dict[str, str] = {}  # namespaces that name their JARVICE application
        self.burst_afters: dict[str, str] = {}  # namespaces with a burst-after annotation
        self.machines: dict[str, NamespaceMachines] = {}  # namespaces with a machines or max-remote-queue annotation
        self.own_accounts: set[str] = set()  # namespaces that pay with their own key
        self.kube_system_uid = ""
        self.remote_in_use: dict[str, int] = {}  # namespace -> GPUs of its watched burst pods
        # (kube-system UID, cluster name) -> (identity, why unknown): worked out once, not per review.
        self._identity: tuple[str, str, tuple[str, str]] = ("", "", ("", _NO_KUBE_SYSTEM))

    def replace(self, namespaces: Iterable[NamespaceInfo]) -> None:
        self.budgets = {}
        self.default_walltimes = {}
        self.caps = {}
        self.apps = {}
        self.burst_afters = {}
        self.machines = {}
        self.own_accounts = set()
        self.kube_system_uid = ""
        for namespace in namespaces:
            self.upsert(namespace)

    def upsert(self, namespace: NamespaceInfo) -> None:
        name = namespace.name
        if namespace.budget is None:
            self.budgets.pop(name, None)
        else:
            self.budgets[name] = namespace.budget
        if namespace.default_walltime is None:
            self.default_walltimes.pop(name, None)
        else:
            self.default_walltimes[name] = namespace.default_walltime
        if namespace.cost_caps is None:
            self.caps.pop(name, None)
        else:
            self.caps[name] = namespace.cost_caps
        if namespace.app:
            self.apps[name] = namespace.app
        else:
            self.apps.pop(name, None)
        if namespace.burst_after is None:
            self.burst_afters.pop(name, None)
        else:
            self.burst_afters[name] = namespace.burst_after
        if namespace.machines is None:
            self.machines.pop(name, None)
        else:
            self.machines[name] = namespace.machines
        if namespace.own_account:
            self.own_accounts.add(name)
        else:
            self.own_accounts.discard(name)
        if name == CLUSTER_NAMESPACE:
            self.kube_system_uid = namespace.uid

    def count_remote(self, pod: PodInfo, sign: int) -> None:
        # A finished burst pod still carries remote_gpus while its job may run (see model.parse_pod).
        if pod.remote_gpus:
            left = self.remote_in_use.get(pod.namespace, 0) + sign * pod.remote_gpus
            if left:
                self.remote_in_use[pod.namespace] = left
            else:
                del self.remote_in_use[pod.namespace]

    def cluster_identity(self, cluster_name: str) -> tuple[str, str]:
        """(the cluster's identity, "") or ("", why it is unknown). Every job a burst pod submits
        carries it, so the reaper of this cluster, and only that one, may stop the job."""
        uid = self.kube_system_uid
        known_uid, known_name, identity = self._identity
        if uid == known_uid and cluster_name == known_name:
            return identity
        if not uid:
            identity = "", _NO_KUBE_SYSTEM
        else:
            try:
                identity = contract.cluster_identity(uid, cluster_name), ""
            except ValueError as exc:
                identity = "", f"the cluster's identity is unknown: {exc}"
        self._identity = (uid, cluster_name, identity)
        return identity

    def delete(self, name: str) -> None:
        self.budgets.pop(name, None)
        self.default_walltimes.pop(name, None)
        self.caps.pop(name, None)
        self.apps.pop(name, None)
        self.burst_afters.pop(name, None)
        self.machines.pop(name, None)
        if name == CLUSTER_NAMESPACE:
            self.kube_system_uid = ""


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
        max_spend_record_age: float = DEFAULT_MAX_RECORD_AGE_SECONDS,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        """`clock`: for reservations (monotonic); `wall_clock`: epoch seconds, for the deadlines of
        pods waiting to burst (None: `clock`)."""
        self._wall_clock = wall_clock or clock
        # Job UID -> the deadline its pods wait until before bursting (webhook.waiting). In memory:
        # a new leader gives a Job a new wait (the controller's re-burst cap bounds the repeats).
        self.waits: dict[str, float] = {}
        # Job UID -> when the watch last showed a burst pod of it: such a Job never waits again.
        self.burst_jobs: dict[str, float] = {}
        # Job UID -> the reservation holding the GPUs a pod of it comes home to, for its next pod.
        self.homecomings: dict[str, str] = {}
        self.gpu_resources = tuple(gpu_resources)
        self._scheduler_names = frozenset(scheduler_names)
        # The view's structures are mutated in place, never rebound: the view stays valid.
        self.view = empty_view(self.gpu_resources)
        self._nodes = self.view.nodes
        self.ledger = ClaimLedger(self.view)
        self.reservations = Reservations(
            self.ledger,
            clock=clock,
            ttl=reservation_ttl,
            max_reservations=max_reservations,
            max_reservations_per_namespace=max_reservations_per_namespace,
        )
        self._pods: dict[str, PodInfo] = {}
        self.issued = IssuedTokens(clock=clock)  # admissions decided, pod not seen yet (webhook.provenance)
        # The spend record says when (Unix time) JARVICE was listed: its age is read on the wall clock.
        self.spend = SpendLedger(clock=self._wall_clock, max_record_age=max_spend_record_age)  # GPUs, money
        self.reservation_cap_hits = 0  # reviews decided remote because a cap was reached
        self.namespaces, self.gang_index = NamespaceIndex(), GangIndex()  # gangs: kept by webhook.sync

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
        return len(self.view.unschedulable_gpu_nodes)

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def free(self, node_name: str) -> dict[str, int]:
        return self.ledger.free(node_name)

    def total_free(self) -> dict[str, int]:
        """Free GPUs per resource over schedulable nodes (for the metrics gauge)."""
        return {r: sum(free * len(names) for free, names in b.items()) for r, b in self.view.buckets.items()}

    def claimed_total(self) -> dict[str, int]:
        """GPUs, CPU and memory held by claims placed on a node. A running total: every remote
        decision reads it, and summing the claims each time made those decisions linear in pending pods."""
        return dict(self.view.claimed_total)

    @property
    def kube_system_uid(self) -> str:
        """The UID of the kube-system namespace, which names this cluster ("" until the watch shows it)."""
        return self.namespaces.kube_system_uid

    def budget(self, namespace: str) -> NamespaceBudget | None:
        return self.namespaces.budgets.get(namespace)

    @property
    def budgeted_namespaces(self) -> int:
        return len(self.namespaces.budgets)

    def remote_in_use(self, namespace: str) -> int:
        """GPUs counted against the namespace's budget: its burst pods whose jobs may run (running, or
        finished without word that their jobs ended), plus remote decisions whose pod has not appeared yet."""
        return self.namespaces.remote_in_use.get(namespace, 0) + self.reservations.remote_gpus_in(namespace)

    def claims_gpus(self, pod: PodInfo) -> bool:
        """Whether an unbound pod competes for GPUs now, i.e. kube-scheduler is trying to place it:
        not held back by scheduling gates, handled by a scheduler we account for, and not already
        found unschedulable for a reason other than GPUs (unless preemption nominated a node for it)."""
        if pod.gated or pod.scheduler_name not in self._scheduler_names:
            return False
        return not pod.blocked_elsewhere or bool(pod.nominated_node)

    def find_fit(self, requests: Requests, placement: Placement, *, exclude: str = "") -> FitResult:
        """Best-fit node for `requests` (see webhook.fitting.find_fit)."""
        return find_fit(self.view, requests, eligibility(placement), exclude=exclude)

    def best_partial_fit(self, resource: str, placement: Placement) -> tuple[NodeInfo, int] | None:
        return best_partial_fit(self.view, resource, eligibility(placement))

    def snapshot_for(self, namespace: str, *, cluster_name: str) -> Snapshot:
        """What an admission in `namespace` decides from, now (expired reservations dropped first)."""
        self.reservations.expire()
        self.ledger.settle()
        cluster, unknown = self.namespaces.cluster_identity(cluster_name)
        budget, caps = self.namespaces.budgets.get(namespace), self.namespaces.caps.get(namespace)
        in_use = InUse()
        if budget is not None or caps is not None:  # counted only where something caps it
            gpus_reserved = self.reservations.remote_gpus_in(namespace)
            live = self.reservations.hold
            in_use = self.spend.in_use(namespace, gpus_reserved=gpus_reserved, live=lambda rid: live(rid) is not None)
        record = self.spend.record
        return Snapshot(
            view=self.view,
            reservation_refusal=self.reservations.refusal(namespace),
            reservation_room=self.reservations.room(namespace),
            budget=budget,
            remote_in_use=in_use.gpus if budget is not None else self.remote_in_use(namespace),
            cost_caps=caps,
            app=self.namespaces.apps.get(namespace, ""),
            in_use=in_use,
            spend_refusal=self.spend.refusal(namespace) if caps is not None else "",
            machines=record.machines if record is not None else None,
            cluster=cluster,
            cluster_unknown=unknown,
            default_walltime=self.namespaces.default_walltimes.get(namespace),
            burst_after=self.namespaces.burst_afters.get(namespace),
            namespace_machines=self.namespaces.machines.get(namespace),
            own_account=namespace in self.namespaces.own_accounts,
        )

    def wall_now(self) -> float:
        """Epoch seconds: a waiting pod's deadline is written on it, so it is wall-clock time."""
        return self._wall_clock()

    def burst_deadlines(self) -> Mapping[str, float]:
        """The deadlines Jobs' pods wait until (webhook.waiting), those long past forgotten first."""
        forget = self._wall_clock() - WAIT_MEMORY_SECONDS
        for key in [key for key, deadline in self.waits.items() if deadline < forget]:
            del self.waits[key]
        return self.waits

    def job_burst_before(self, job_uid: str) -> bool:
        """Whether a pod of the Job burst (a burst pod of it seen within WAIT_MEMORY_SECONDS)."""
        seen = self.burst_jobs.get(job_uid)
        if seen is not None and seen < self._wall_clock() - WAIT_MEMORY_SECONDS:
            del self.burst_jobs[job_uid]
            return False
        return seen is not None

    def _hold_for_homecoming(self, pod: PodInfo) -> None:
        """Hold the GPUs a burst pod comes home to (on the node that fits them best now) for its Job's
        next pod, which takes them over at its admission (`take_over_homecoming`); until then every
        other decision, dry runs included, finds them taken. Once per pod; a leader that adopted the
        hold from the last one takes it as it is."""
        for job, held in list(self.homecomings.items()):  # holds expired with no pod taking them over
            if self.reservations.hold(held) is None:
                del self.homecomings[job]
        reservation_id = _HOME_PREFIX + pod.uid
        if self.reservations.hold(reservation_id) is None:
            requests = dict(pod.coming_home)
            fit = find_fit(self.view, requests, eligibility(Placement()))
            if fit.node is None:
                return  # nothing free to hold: the next pod is decided on what there is
            self.reserve(
                reservation_id,
                node=fit.node.name,
                requests=requests,
                placement=Placement(),
                namespace=pod.namespace,
                ttl=HOMECOMING_HOLD_SECONDS,
            )
            self.ledger.settle()
        self.homecomings[pod.job_uid] = reservation_id

    def take_over_homecoming(self, job_uid: str) -> None:
        """A pod of the Job is being admitted: the GPUs held for it are released for its decision (which
        reserves them again under its own admission when it stays local)."""
        reservation_id = self.homecomings.pop(job_uid, None) if job_uid else None
        if reservation_id is not None:
            self.release_reservation(reservation_id)

    def apply(self, effects: Effects) -> None:
        """An admission's verdict, applied at once (see verdict.Effects): its claim moves, a cap it
        met, the reservations it releases and makes, a gang's decision to remember."""
        self.move_claims(effects.moves)
        if effects.capped:
            self.reservation_cap_hits += 1
        if effects.release or effects.local or effects.remote:
            self.reservations.apply(release=effects.release, local=effects.local, remote=effects.remote)
            for reservation in effects.remote:
                self.spend.reserve(reservation)
        if effects.record is not None:
            self.gang_index.book.put(effects.gang, effects.record)
        if effects.wait is not None:
            key, deadline = effects.wait
            self.waits[key] = deadline
        self.ledger.settle()

    def gang_snapshot_for(self, meta: Mapping[str, Any], *, namespace: str, cluster: str) -> GangSnapshot | None:
        """The pod's gang as its decision reads it now (GangIndex.snapshot: None for a pod decided alone)."""
        held = self.reservations
        return self.gang_index.snapshot(meta, namespace=namespace, cluster=cluster, now=held.now(), ttl=held.ttl,
                                        hold=held.hold)  # fmt: skip

    def move_claims(self, moves: Sequence[ClaimMove]) -> None:
        """Move claims of pods not bound yet as a decision planned, to make room (see room.plan_room)."""
        if moves:
            self.ledger.move_claims(moves)

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
        view = self.view
        if old is not None:
            self._unindex_labels(old)
        self._nodes[node.name] = node
        for item in node.labels.items():
            view.by_label.setdefault(item, {})[node.name] = None
        has_gpus = False
        for resource in self.gpu_resources:
            if resource in node.allocatable:
                has_gpus = True
                view.max_allocatable[resource] = max(view.max_allocatable[resource], node.allocatable[resource])
        if has_gpus and not node.schedulable:
            view.unschedulable_gpu_nodes.add(node.name)
        else:
            view.unschedulable_gpu_nodes.discard(node.name)
        if has_gpus and node.ready and node.unschedulable:
            view.cordoned[node.name] = None
        else:
            view.cordoned.pop(node.name, None)
        self.ledger.reindex(node.name)
        self.ledger.rehome_claims(node.name)
        self.ledger.node_changed(node.name)
        self.ledger.settle()

    def delete_node(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is not None:
            self._unindex_labels(old)
        self.view.unschedulable_gpu_nodes.discard(name)
        self.view.cordoned.pop(name, None)
        self.ledger.reindex(name)
        # Bound pods keep their usage under the name (a node re-registering finds them); claims move.
        self.ledger.rehome_claims(name)
        self.ledger.settle()

    def _unindex_labels(self, node: NodeInfo) -> None:
        by_label = self.view.by_label
        for item in node.labels.items():
            names = by_label[item]
            del names[node.name]
            if not names:
                del by_label[item]

    # ----- namespace writes --------------------------------------------------------------------

    def replace_namespaces(self, namespaces: Iterable[NamespaceInfo]) -> None:
        self.namespaces.replace(namespaces)

    def upsert_namespace(self, namespace: NamespaceInfo) -> None:
        self.namespaces.upsert(namespace)

    def delete_namespace(self, name: str) -> None:
        self.namespaces.delete(name)

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
        if pod.admission:
            self.issued.take(pod.admission)
        if pod.reservation_id:
            self.reservations.release(pod.reservation_id)
        if pod.job_uid:
            self.burst_jobs[pod.job_uid] = self._wall_clock()
            if pod.coming_home and pod.job_uid not in self.homecomings:
                self._hold_for_homecoming(pod)
        if old is not None:
            self.namespaces.count_remote(old, -1)
            self.spend.count(old, -1)
        self.namespaces.count_remote(pod, 1)
        self.spend.count(pod, 1)
        if old is not None and self._holding(old) == self._holding(pod):
            self._pods[pod.uid] = pod
        else:
            if old is not None:
                self.ledger.drop_holding(old)
            self._pods[pod.uid] = pod
            self.ledger.take_holding(pod, claims_gpus=self.claims_gpus(pod))
        self.ledger.settle()  # after the whole change: a pod binding frees its claim and fills its node at once

    def delete_pod(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is not None:
            if old.reservation_id:
                self.reservations.release(old.reservation_id)
            self.namespaces.count_remote(old, -1)
            self.spend.count(old, -1)
            self.ledger.drop_holding(old)
            self.ledger.settle()

    def _holding(self, pod: PodInfo) -> tuple[object, ...]:
        """Everything that decides what a pod holds and where: when it changes (an in-place resize
        changes `requests`), the pod is re-accounted."""
        if pod.terminal:
            return (True,)
        if pod.node_name:
            return (pod.node_name, pod.requests)
        return ("", pod.requests, pod.nominated_node, pod.placement, self.claims_gpus(pod))

    # ----- reservations ------------------------------------------------------------------------

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
        self.reservations.reserve(
            reservation_id, node=node, requests=requests, placement=placement, namespace=namespace, ttl=ttl
        )

    def reserve_remote(self, reservation_id: str, *, namespace: str, gpus: int, ttl: float | None = None) -> None:
        """Count a remote decision's GPUs against its namespace's budget until the watch shows the pod."""
        self.reservations.reserve_remote(reservation_id, namespace=namespace, gpus=gpus, ttl=ttl)

    def release_reservation(self, reservation_id: str) -> None:
        self.reservations.release(reservation_id)
        self.ledger.settle()

    def export_reservations(self) -> list[HandedOver]:
        return self.reservations.export()

    def adopt_reservations(self, handed: Sequence[HandedOver]) -> None:
        if not handed:
            return
        # Once per change of leader: a scan is fine, and it keeps the pod path free of bookkeeping.
        arrived = {pod.reservation_id for pod in self._pods.values() if pod.reservation_id}
        self.reservations.adopt(handed, arrived=arrived)
        self.ledger.settle()

    def expire_reservations(self) -> int:
        expired = self.reservations.expire()
        self.ledger.settle()
        return expired

    @property
    def reservation_count(self) -> int:
        return self.reservations.local_count

    @property
    def remote_reservation_count(self) -> int:
        return self.reservations.remote_count

    # ----- introspection for tests and the replay's independent checker -------------------------

    def nodes(self) -> Iterator[NodeInfo]:
        return iter(self._nodes.values())

    def pods(self) -> Mapping[str, PodInfo]:
        return self._pods

    def claims(self) -> Mapping[str, Claim]:
        """Claim id ("pod:<uid>" or "res:<reservation id>") -> where it sits and what it holds."""
        return self.ledger.claims
