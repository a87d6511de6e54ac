"""Finds stranded local pods and re-bursts or reports them (I/O shell around `stranding`).

Runs in a worker thread (the kubernetes client is synchronous). Acts only while this replica
leads. A pod is moved by evicting it (Kube.evict_pod), only when its Job's podFailurePolicy ignores
the eviction (stranding.check_owner): a move costs the Job no retry. Per-owner re-burst counts are
kept in memory (see docs/controller.md for why not on the owner): a new leader starts from zero. A
pod that waited in vain (burst-after) is not counted: a Job waits once (its replacements burst at
once), so every pod of a parallel Job is moved however many it has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from controller import homecoming, stranding
from controller.kube import PodChanged, PodChangedOrGone, PodGone
from controller.metrics import Metrics
from controller.model import PodView, format_time, log_context, parse_job, parse_pod, pod_reference
from controller.store import PodStore

log = logging.getLogger(__name__)

REASON_REBURST = "NimbixReBurst"
REASON_STRANDED = "NimbixStranded"
REASON_CAP = "NimbixReBurstCapReached"
REASON_BURST_AFTER = "NimbixBurstAfterWait"
# A gang's pod whose eviction keeps meeting a change is read again and retried this often in one pass.
GANG_EVICTION_ATTEMPTS = 5  # a pod that waited for a node in vain (burst-after) was replaced


class KubeWrites(Protocol):
    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...
    def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...
    def dry_run_create_pod(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]: ...
    def evict_pod(self, pod: PodView) -> None: ...
    def annotate_stranded(self, pod: PodView, *, since: str) -> None: ...
    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = ...
    ) -> None: ...


class Reburster:
    def __init__(
        self,
        *,
        store: PodStore,
        kube: KubeWrites,
        policy: stranding.Policy,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        wall_clock: Callable[[], float],
        came_home: Collection[str] = frozenset(),
    ) -> None:
        self._store = store
        self._kube = kube
        self._policy = policy
        self._metrics = metrics
        self._is_leader = is_leader
        self._now = wall_clock
        self._came_home = came_home  # Job UIDs a pod came home for (the homecomer's, shared): never again
        self.rebursts_by_owner: dict[str, int] = {}
        self._handled: set[str] = set()  # pod UIDs acted on; the watch shows the result a little later
        self._rechecked: dict[str, float] = {}  # namespace -> when a pod its budget holds was last asked about

    def scan(self) -> None:
        if not self._is_leader():
            return
        pods = self._store.labeled()
        present = {pod.uid for pod in pods}
        self._handled &= present
        stranded_gangs: dict[str, list[tuple[PodView, stranding.Assessment]]] = {}
        for pod in pods:
            if pod.uid in self._handled:
                continue
            assessment = self._assess(pod)
            if assessment.verdict == "gang":
                stranded_gangs.setdefault(pod.gang, []).append((pod, assessment))
                continue
            self._act(pod, assessment)
        for gang, stranded in stranded_gangs.items():
            self._act_on_gang([pod for pod in pods if pod.gang == gang], stranded)

    def _assess(self, pod: PodView) -> stranding.Assessment:
        owner_uid = pod.owner.uid if pod.owner else ""
        count = self.rebursts_by_owner.get(owner_uid, 0)
        came_home = owner_uid in self._came_home
        return stranding.assess(pod, now=self._now(), policy=self._policy, rebursts=count, came_home=came_home)

    def _act(self, pod: PodView, assessment: stranding.Assessment) -> None:
        try:
            if assessment.verdict == "reburst":
                self._reburst(pod)
            elif assessment.verdict == "recheck":
                self._recheck(pod, assessment)
            elif assessment.verdict in ("note", "cap-hit"):
                self._note(pod, assessment)
        except PodChangedOrGone as exc:  # the re-burst's read or delete: the report's own are caught in _note
            self._metrics.reburst_aborted.labels(reason="changed").inc()
            log.info("stranded pod changed before we acted", extra=log_context(pod, reason=str(exc)))
        except Exception:  # a failed API call costs this pod one scan, not the loop
            self._metrics.errors.labels(kind="kubernetes").inc()
            log.warning("stranded pod action failed", extra=log_context(pod), exc_info=True)

    def _act_on_gang(self, members: list[PodView], stranded: list[tuple[PodView, stranding.Assessment]]) -> None:
        """A gang with stranded pods: re-burst whole (every pod deleted, its Job recreates them and the
        webhook decides the gang afresh), or its stranded pods reported; never one pod alone."""
        first = stranded[0][0]
        owner_uid = first.owner.uid if first.owner else ""
        since = min(a.stranded_since or self._now() for _, a in stranded)
        verdict = stranding.assess_gang(
            members, stranded_since=since, policy=self._policy, rebursts=self.rebursts_by_owner.get(owner_uid, 0)
        )
        if verdict.verdict == "reburst":
            try:
                self._reburst_gang(members, stranded=[pod for pod, _ in stranded])
            except Exception:  # a failed API call costs this gang one scan, not the loop
                self._metrics.errors.labels(kind="kubernetes").inc()
                log.warning("stranded gang action failed", extra=log_context(first, gang=first.gang), exc_info=True)
            return
        for pod, _ in stranded:
            self._act(pod, stranding.Assessment(verdict.verdict, verdict.reason, stranded_since=since))

    def _reburst_gang(self, members: list[PodView], *, stranded: list[PodView]) -> None:
        first = stranded[0]
        assert first.owner is not None  # assess_gang() said reburst: one Job owns every pod
        why_not = stranding.check_owner(first, parse_job(self._kube.read_job(first.namespace, first.owner.name)))
        if why_not:
            for pod in stranded:
                self._act(pod, stranding.Assessment("note", why_not, stranded_since=pod.scheduled_since))
            return
        # Re-read the stranded pods right before deleting: one bound meanwhile means the gang is not stranded.
        for pod in stranded:
            fresh = parse_pod(self._kube.read_pod(pod.namespace, pod.name))
            again = stranding.assess(fresh, now=self._now(), policy=self._policy, rebursts=0)
            if fresh.uid != pod.uid or again.verdict != "gang":
                self._metrics.reburst_aborted.labels(reason="no-longer-stranded").inc()
                log.info("stranded gang recovered before re-burst", extra=log_context(pod, reason=again.reason))
                return
        deleted = 0
        for pod in stranding.gang_to_delete(members):
            deleted += self._evict_gang_member(pod)
            self._handled.add(pod.uid)
        self._metrics.rebursts.inc()
        if any(pod.burst_deadline is not None for pod in stranded):  # waited until its deadline (burst-after), in vain
            message = stranding.build_gang_burst_after_message(first, size=len(members))
            log.info(
                "waiting gang burst after its deadline",
                extra=log_context(first, gang=first.gang, owner=first.owner.name, deleted=deleted),
            )
            self._event_on_owner(first, reason=REASON_BURST_AFTER, message=message)
            return
        count = self.rebursts_by_owner.get(first.owner.uid, 0) + 1
        self.rebursts_by_owner[first.owner.uid] = count
        message = stranding.build_gang_reburst_message(first, size=len(members), count=count, cap=self._policy.cap)
        log.info(
            "stranded gang re-burst",
            extra=log_context(first, gang=first.gang, owner=first.owner.name, deleted=deleted, count=count),
        )
        self._event_on_owner(first, reason=REASON_REBURST, message=message)

    def _evict_gang_member(self, pod: PodView) -> int:
        """Evict one pod of a gang being moved whole: 1 if evicted, 0 if gone. A change since the read
        (409: a running rank's status moves with the kubelet) is read again and retried, a few times:
        a rank left running would split the gang between here and its replacements on Nimbix."""
        for _attempt in range(GANG_EVICTION_ATTEMPTS):
            try:
                fresh = parse_pod(self._kube.read_pod(pod.namespace, pod.name))
                if fresh.uid != pod.uid or fresh.deleting:
                    return 0  # replaced or already going: nothing of this pod is left to run
                self._kube.evict_pod(fresh)
                return 1
            except PodGone:
                return 0
            except PodChanged as exc:
                log.info("gang pod changed before we evicted it", extra=log_context(pod, reason=str(exc)))
        self._metrics.errors.labels(kind="kubernetes").inc()
        log.warning("gang pod not evicted: it kept changing", extra=log_context(pod, gang=pod.gang))
        return 0

    def _reburst(self, pod: PodView) -> None:
        assert pod.owner is not None  # assess() said reburst: a Job owns it
        owner = parse_job(self._kube.read_job(pod.namespace, pod.owner.name))
        why_not = stranding.check_owner(pod, owner)
        if why_not:
            self._note(pod, stranding.Assessment("note", why_not, stranded_since=pod.scheduled_since))
            return
        # Re-read right before deleting: the decision is made again on what the API server says now.
        fresh = parse_pod(self._kube.read_pod(pod.namespace, pod.name))
        count = self.rebursts_by_owner.get(pod.owner.uid, 0)
        again = self._assess(fresh)
        if fresh.uid != pod.uid or again.verdict != "reburst":
            self._metrics.reburst_aborted.labels(reason="no-longer-stranded").inc()
            log.info("stranded pod recovered before re-burst", extra=log_context(pod, reason=again.reason))
            return
        self._kube.evict_pod(fresh)  # precondition: this uid and resourceVersion, so a bind in between fails
        self._handled.add(pod.uid)
        self._metrics.rebursts.inc()
        waited = self._now() - (fresh.scheduled_since or self._now())
        if fresh.burst_deadline is not None:  # waited for a node until its deadline (burst-after), in vain
            message = stranding.build_burst_after_message(fresh, waited=waited)
            log.info(
                "waiting pod burst after its deadline",
                extra=log_context(fresh, owner=pod.owner.name, waited_s=round(waited, 1)),
            )
            self._event_on_owner(pod, reason=REASON_BURST_AFTER, message=message)
            return
        count += 1
        self.rebursts_by_owner[pod.owner.uid] = count
        message = stranding.build_reburst_message(fresh, waited=waited, count=count, cap=self._policy.cap)
        log.info(
            "stranded pod re-burst",
            extra=log_context(
                fresh, owner=pod.owner.name, count=count, cap=self._policy.cap, waited_s=round(waited, 1)
            ),
        )
        self._event_on_owner(pod, reason=REASON_REBURST, message=message)

    def _recheck(self, pod: PodView, assessment: stranding.Assessment) -> None:
        """A Job's pod its namespace's budget kept local: reported once, then the webhook is asked (a
        dry-run create of the Job's next pod) whether it would burst it now; if so it is evicted, its
        replacement bursts. One per namespace every BUDGET_RECHECK_SECONDS: the dry run reserves nothing."""
        assert pod.owner is not None  # assess() said recheck: a Job owns it
        if not pod.stranded_since:
            self._note(pod, assessment)
            self._handled.discard(pod.uid)  # reported, but looked at again
        now = self._now()
        if (
            now - self._rechecked.get(pod.namespace, -stranding.BUDGET_RECHECK_SECONDS)
            < stranding.BUDGET_RECHECK_SECONDS
        ):
            return
        self._rechecked[pod.namespace] = now
        job = self._kube.read_job(pod.namespace, pod.owner.name)
        if job is None or stranding.check_owner(pod, parse_job(job)):
            return
        decided = self._kube.dry_run_create_pod(pod.namespace, homecoming.dry_run_pod(job, pod))
        if not homecoming.would_burst(decided):
            return
        fresh = parse_pod(self._kube.read_pod(pod.namespace, pod.name))
        if fresh.uid != pod.uid or self._assess(fresh).verdict != "recheck":
            return
        self._kube.evict_pod(fresh)  # precondition: this uid and resourceVersion
        self._handled.add(pod.uid)
        self._metrics.rebursts.inc()
        log.info(
            "budget-held pod moved: the budget allows its burst now", extra=log_context(fresh, owner=pod.owner.name)
        )
        self._event_on_owner(pod, reason=REASON_REBURST, message=stranding.build_budget_allows_message(fresh))

    def _note(self, pod: PodView, assessment: stranding.Assessment) -> None:
        since = assessment.stranded_since if assessment.stranded_since is not None else self._now()
        waited = self._now() - since
        reason = assessment.reason
        try:
            self._kube.annotate_stranded(pod, since=format_time(since))
        except PodChangedOrGone as exc:  # the annotation is guarded by the resourceVersion we decided on
            self._metrics.reburst_aborted.labels(reason="report-changed").inc()
            log.info("stranded pod changed before we reported it", extra=log_context(pod, reason=str(exc)))
            return
        self._handled.add(pod.uid)
        message = stranding.build_note_message(pod, waited=waited, reason=reason)
        if assessment.verdict == "cap-hit":
            self._metrics.cap_hits.inc()
            self._metrics.stranded_noted.labels(reason="cap").inc()
            if pod.owner is not None:
                self._event_on_owner(pod, reason=REASON_CAP, message=message)
        else:
            self._metrics.stranded_noted.labels(reason=_noted_label(pod)).inc()
        log.info("stranded pod reported", extra=log_context(pod, reason=reason, verdict=assessment.verdict))
        self._kube.record_event(
            namespace=pod.namespace,
            involved=pod_reference(pod),
            reason=REASON_STRANDED,
            message=message,
        )

    def _event_on_owner(self, pod: PodView, *, reason: str, message: str) -> None:
        assert pod.owner is not None
        self._kube.record_event(
            namespace=pod.namespace,
            involved=pod.owner.reference(),
            reason=reason,
            message=message,
        )


def _noted_label(pod: PodView) -> str:
    if pod.held_by_budget:
        return "budget"
    if pod.held_by_model:
        return "gpu-model"
    return "no-owner" if pod.owner is None else "owner"
