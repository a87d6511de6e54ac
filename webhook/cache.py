"""The in-memory cluster state the webhook decides from (pure state: no I/O, no locks).

One at a time: the watch threads apply events and the event loop decides and reserves, each
holding CacheSync.lock for the whole of it, so a decision reads one consistent state and two
concurrent admissions can never claim the same GPUs.

Its parts, one responsibility each:
  ClusterCache (here)      applies the watch's nodes, pods and namespaces to the parts below, and
                           what each pod holds (claims_gpus, holding); hands out snapshots
  node_index               a node's place in the view's indexes: labels, cordoned and not-ready GPU nodes
  NamespaceIndex           burst budgets, cost caps, namespaces' settings, the cluster's identity
  (webhook.namespace_index)
  ClaimLedger              the accounting of what is used and claimed on each node, the claims and
  (webhook.accounting)     their moves, and the free-count index the fit search reads
  Reservations             what this webhook promised before the watch showed the pod, and its expiry
  (webhook.reservations)
  JobMoves                 what it remembers of Jobs' moves: waits before bursting, Jobs whose pods
  (webhook.job_moves)      burst, the GPUs held for a pod coming home
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

from jarvice.gpubudget import NamespaceBudget
from kubeplumbing.leadership import HandedOver
from webhook.accounting import ClaimLedger
from webhook.fitting import CANDIDATE_CAP, best_partial_fit, find_fit
from webhook.gangs import GangIndex, GangSnapshot
from webhook.job_moves import JobMoves
from webhook.namespace_index import CLUSTER_NAMESPACE, NamespaceIndex
from webhook.node_index import index_node, unindex_labels, unindex_node
from webhook.provenance import IssuedTokens
from webhook.reservations import Reservations
from webhook.scheduling import eligibility
from webhook.spend_ledger import SpendLedger
from webhook.spending import DEFAULT_MAX_RECORD_AGE_SECONDS, InUse
from webhook.types import (
    Claim,
    ClaimMove,
    FitResult,
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
        # What it remembers of Jobs' moves: waits, bursts, homecomings (webhook.job_moves).
        self.job_moves = JobMoves(view=self.view, reservations=self.reservations, wall_clock=self._wall_clock)
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
            self.job_moves.remember_wait(*effects.wait)
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
        if old is not None:
            unindex_labels(self.view, old)
        self._nodes[node.name] = node
        index_node(self.view, node)
        self.ledger.reindex(node.name)
        self.ledger.rehome_claims(node.name)
        self.ledger.node_changed(node.name)
        self.ledger.settle()

    def delete_node(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is not None:
            unindex_labels(self.view, old)
        unindex_node(self.view, name)
        self.ledger.reindex(name)
        # Bound pods keep their usage under the name (a node re-registering finds them); claims move.
        self.ledger.rehome_claims(name)
        self.ledger.settle()

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
            self.job_moves.saw_burst_pod(pod)
        if old is not None:
            self.namespaces.count_remote(old, -1)
            self.spend.count(old, -1)
        self.namespaces.count_remote(pod, 1)
        self.spend.count(pod, 1)
        if old is not None and holding(old, self._scheduler_names) == holding(pod, self._scheduler_names):
            self._pods[pod.uid] = pod
        else:
            if old is not None:
                self.ledger.drop_holding(old)
            self._pods[pod.uid] = pod
            self.ledger.take_holding(pod, claims_gpus=claims_gpus(pod, self._scheduler_names))
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


# ----- what a watched pod holds (pure) -------------------------------------------------------------


def claims_gpus(pod: PodInfo, scheduler_names: Collection[str]) -> bool:
    """Whether an unbound pod competes for GPUs now, i.e. kube-scheduler is trying to place it:
    not held back by scheduling gates, handled by a scheduler we account for (`scheduler_names`), and
    not already found unschedulable for a reason other than GPUs (unless preemption nominated a node
    for it)."""
    if pod.gated or pod.scheduler_name not in scheduler_names:
        return False
    return not pod.blocked_elsewhere or bool(pod.nominated_node)


def holding(pod: PodInfo, scheduler_names: Collection[str]) -> tuple[object, ...]:
    """Everything that decides what a pod holds and where: when it changes (an in-place resize
    changes `requests`), the pod is re-accounted."""
    if pod.terminal:
        return (True,)
    if pod.node_name:
        return (pod.node_name, pod.requests)
    return ("", pod.requests, pod.nominated_node, pod.placement, claims_gpus(pod, scheduler_names))
