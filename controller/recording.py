"""Records what happens to each burst pod's JARVICE jobs as Events and annotations on the pod
(I/O shell around `jobrecords`).

Acts only while this replica leads and its pod watch is fresh. One round lists the account's live
jobs (and, only when a pod needs it, the ended ones), matches them to burst pods by the pod UID in
their label, and applies at most `pods_per_round` pod plans: the annotation patch first (it tests
the ledger it was planned from), then the Events. A refused patch costs the pod a round and no
Event; an Event that fails after its patch is lost rather than repeated (the annotations still say
what happened). The machines' rates come from the controller's one listing (`MachineRates`), listed
again when a job names a machine it lacks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from controller import jobrecords
from controller.kube import PodChangedOrGone
from controller.machinerates import MachineRates
from controller.metrics import Metrics
from controller.store import PodStore
from jarvice import contract
from jarvice.client import JarviceError
from jarvice.labels import parse_job_label
from jarvice.model import JobEntry

log = logging.getLogger(__name__)

# API calls per round at most (one patch and a few Events per pod): a backlog, such as the first
# round after an upgrade, is worked off over a few rounds instead of in one burst.
PODS_PER_ROUND = 50
# A pod looked up in the job history without a change is looked up again after this, doubling to the cap.
HISTORY_WAIT_SECONDS, HISTORY_WAIT_CAP_SECONDS = 60.0, 3600.0


class JobsApi(Protocol):
    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]: ...


class PodWriter(Protocol):
    def patch_pod_json(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None: ...
    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = ...
    ) -> None: ...


def to_facts(entry: JobEntry) -> jobrecords.JobFacts:
    return jobrecords.JobFacts(
        number=entry.number,
        state=entry.state,
        substatus_text=entry.substatus_text,
        exitcode=entry.exitcode,
        machine=entry.machine,
        nodes=entry.nodes,
        start_time=entry.start_time,
        end_time=entry.end_time,
    )


class JobRecorder:
    def __init__(
        self,
        *,
        store: PodStore,
        jarvice: JobsApi,
        kube: PodWriter,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        interval: float,
        cost_refresh: float,
        rates: MachineRates,
        stale_after: float,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        pods_per_round: int = PODS_PER_ROUND,
    ) -> None:
        self._store = store
        self._jarvice = jarvice
        self._kube = kube
        self._metrics = metrics
        self._is_leader = is_leader
        self._interval = interval
        self._cost_refresh = cost_refresh
        self._machine_rates = rates
        self._stale_after = stale_after
        self._clock = clock
        self._wall_clock = wall_clock
        self._pods_per_round = pods_per_round
        self._ended: dict[int, tuple[str, jobrecords.JobFacts]] = {}  # ended jobs never change: pod UID, facts
        # pod UID -> (the ledger it was looked up in the history with, not again before, the next wait)
        self._searched: dict[str, tuple[str, float, float]] = {}
        self._money_at: dict[str, float] = {}  # pod UID -> when its GPU-hours/cost were last patched
        self._warned: set[str] = set()  # pods whose unreadable ledger was logged

    def round(self) -> float:
        if not self._is_leader():
            self._searched.clear()
            self._money_at.clear()
            return self._interval
        fresh, why = self._store.fresh(stale_after=self._stale_after)
        if not fresh:
            log.warning("job records round skipped", extra={"reason": why})
            return self._interval
        pods = self._store.burst_pods()
        uids = {pod.uid for pod in pods}
        self._prune(uids)
        # A job's label names its pod, or its gang (recorded on the gang's submitting rank).
        owners = jobrecords.record_owners(pods)
        if not pods:
            return self._interval  # no burst pod: JARVICE is not asked anything
        live = self._list(completed=False, kind="jarvice-list")
        if live is None:
            return self._interval
        jobs_of = self._match(live.values(), owners)
        lookups = jobrecords.needs_finished_jobs(
            pods,
            known=set(live) | set(self._ended),
            live_pods=set(jobs_of),
            searched={uid: text for uid, (text, until, _) in self._searched.items() if self._clock() < until},
        )
        if lookups:
            ended = self._list(completed=True, kind="jarvice-history")
            if ended is None:
                return self._interval
            for uid, facts in self._match(ended.values(), owners).items():
                for job in facts:
                    self._ended[job.number] = (uid, job)
            self._note_lookups(pods, lookups)
        for number, (uid, job) in self._ended.items():
            if number not in live:
                jobs_of.setdefault(uid, []).append(job)
        named = {job.machine for jobs in jobs_of.values() for job in jobs if job.machine}
        rates = self._machine_rates.current(named=named)
        plans = jobrecords.plan_round(pods, jobs_of, rates=rates, now=self._wall_clock())
        applied = 0
        for plan in plans:
            if applied >= self._pods_per_round:
                break
            last = self._money_at.get(plan.pod.uid)
            if plan.money_only and last is not None and self._clock() - last < self._cost_refresh:
                continue  # a running job's cost: refreshed every cost_refresh seconds, not every round
            applied += 1
            self._apply(plan)
        return self._interval

    def _note_lookups(self, pods: Sequence[jobrecords.BurstPod], lookups: Sequence[str]) -> None:
        """A pod looked up in the history is not looked up again with the same ledger for a while:
        1 minute, doubling up to an hour (a job JARVICE has forgotten, a pod that never submitted),
        so a job that reached the history late is still found, and none costs a listing every round."""
        now = self._clock()
        by_uid = {pod.uid: pod for pod in pods}
        for uid in lookups:
            text = by_uid[uid].annotations.get(contract.ANNOTATION_JOB_LEDGER, "")
            before = self._searched.get(uid)
            wait = (
                min(before[2] * 2, HISTORY_WAIT_CAP_SECONDS) if before and before[0] == text else HISTORY_WAIT_SECONDS
            )
            self._searched[uid] = (text, now + wait, wait)

    def _prune(self, uids: set[str]) -> None:
        self._ended = {number: held for number, held in self._ended.items() if held[0] in uids}
        self._searched = {uid: looked for uid, looked in self._searched.items() if uid in uids}
        self._money_at = {uid: at for uid, at in self._money_at.items() if uid in uids}
        self._warned &= uids

    def _list(self, *, completed: bool, kind: str) -> dict[int, JobEntry] | None:
        try:
            return self._jarvice.fetch_jobs(completed=completed)
        except JarviceError as exc:
            self._metrics.errors.labels(kind=kind).inc()
            log.warning("JARVICE jobs not listed", extra={"completed": completed, "error": str(exc)})
            return None

    @staticmethod
    def _match(entries: Iterable[JobEntry], owners: Mapping[str, str]) -> dict[str, list[jobrecords.JobFacts]]:
        """The jobs whose label names one of the burst pods (or their gangs: `owners` maps the UID a
        label carries to the pod that records its jobs), by pod UID (a UID is unique to its cluster:
        no cluster identity is needed to read, only to act)."""
        jobs_of: dict[str, list[jobrecords.JobFacts]] = {}
        for entry in entries:
            parsed = parse_job_label(entry.label or "")
            pod_uid = owners.get(parsed.pod_uid) if parsed is not None else None
            if pod_uid is not None:
                jobs_of.setdefault(pod_uid, []).append(to_facts(entry))
        return jobs_of

    def _apply(self, plan: jobrecords.PodPlan) -> None:
        pod = plan.pod
        context: dict[str, object] = {"uid": pod.uid, "namespace": pod.namespace, "pod": pod.name}
        if plan.problem and pod.uid not in self._warned:
            self._warned.add(pod.uid)
            log.warning("job ledger unreadable", extra={**context, "reason": plan.problem})
        if plan.patch:
            try:
                self._kube.patch_pod_json(pod.namespace, pod.name, plan.patch)
            except PodChangedOrGone as exc:
                log.info("job records not written: pod changed or gone", extra={**context, "reason": str(exc)})
                return
            except Exception as exc:  # noqa: BLE001 - a failed API call costs this pod one round, not the loop
                self._metrics.errors.labels(kind="kubernetes").inc()
                log.warning("job records not written", extra={**context, "error": str(exc)[:500]})
                return
            self._money_at[pod.uid] = self._clock()
        involved = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}
        for event in plan.events:
            try:
                self._kube.record_event(
                    namespace=pod.namespace,
                    involved=involved,
                    reason=event.reason,
                    message=event.message,
                    event_type=event.event_type,
                )
            except Exception as exc:  # noqa: BLE001 - the annotations say it; the Event is lost, never repeated
                self._metrics.errors.labels(kind="kubernetes").inc()
                log.warning("job event not recorded", extra={**context, "job": event.job, "error": str(exc)[:500]})
                continue
            self._metrics.job_events.labels(reason=event.reason).inc()
            log.info("job event recorded", extra={**context, "job": event.job, "reason": event.reason})
