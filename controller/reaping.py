"""Terminates the JARVICE jobs of this cluster that nobody wants, and records on burst pods that
their job is gone (I/O shell around `orphans`).

A runner cancels its job when its pod is deleted; a job is orphaned when that did not happen (the
node died with the pod, the pod was force-deleted, the runner was OOM-killed or SIGKILLed). Acts
only while this replica leads, and only while the pod watch is fresh: an empty or stale store
would make every job look orphaned. A new leader starts the grace period afresh. Jobs with a
legacy label or another cluster's are never touched: they are counted, and logged once each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from controller import orphans
from controller.kube import PodChangedOrGone
from controller.metrics import Metrics
from controller.model import ReapView
from controller.store import PodStore
from jarvice.client import JarviceError, JobNotFound
from jarvice.model import JobEntry

log = logging.getLogger(__name__)

# Pods marked job-state: ended per round at most: a backlog (the first round after an upgrade)
# is worked off over a few rounds instead of in one burst of API calls.
RECORDS_PER_ROUND = 50


class JobsApi(Protocol):
    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]: ...
    def terminate(self, number: int, *, deadline: float | None = None) -> None: ...


class PodRecorder(Protocol):
    def record_job_ended(self, pod: ReapView) -> None: ...


class Reaper:
    def __init__(
        self,
        *,
        store: PodStore,
        jarvice: JobsApi,
        kube: PodRecorder,
        cluster: str,
        grace: float,
        interval: float,
        dry_run: bool,
        stale_after: float,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        records_per_round: int = RECORDS_PER_ROUND,
    ) -> None:
        self._store = store
        self._jarvice = jarvice
        self._kube = kube
        self._cluster = cluster
        self._grace = grace
        self._interval = interval
        self._dry_run = dry_run
        self._stale_after = stale_after
        self._metrics = metrics
        self._is_leader = is_leader
        self._clock = clock
        self._wall_clock = wall_clock
        self._records_per_round = records_per_round
        self._first_seen: dict[int, float] = {}
        self._done: set[int] = set()  # terminated (or reported, in a dry run): never twice
        self._reported_not_ours: set[int] = set()  # logged once each
        self._recorded: set[str] = set()  # pod UIDs patched; the watch shows the annotation a little later

    def round(self) -> float:
        """One round; returns the seconds until the next one: the interval, or sooner when an
        orphan's grace period ends first (so it is terminated at most one interval after it
        became unwanted, plus the grace period)."""
        if not self._is_leader():
            self._first_seen.clear()
            return self._interval
        fresh, why = self._store.fresh(stale_after=self._stale_after)
        if not fresh:
            log.warning("orphan round skipped", extra={"reason": why})
            return self._interval
        before = self._store.reap_views()
        try:
            entries = self._jarvice.fetch_jobs(completed=False)
        except JarviceError as exc:
            self._metrics.errors.labels(kind="jarvice-list").inc()
            log.warning("JARVICE jobs not listed", extra={"error": str(exc)})
            return self._interval
        # The pods as of after the list: a pod created meanwhile is not taken for gone.
        now_pods = self._store.reap_views()
        jobs = [orphans.Job(number=e.number, label=e.label or "", state=e.state) for e in entries.values()]
        now = self._clock()
        planned = orphans.plan_round(
            jobs,
            pods=now_pods,
            cluster=self._cluster,
            first_seen=self._first_seen,
            now=now,
            wall_now=self._wall_clock(),
            grace=self._grace,
        )
        self._first_seen = planned.first_seen
        self._done &= set(entries)
        self._report(planned, now=now)
        for orphan in planned.due:
            if orphan.number not in self._done:
                self._terminate(orphan, now=now)
        self._record(before, now_pods, carried_uids=planned.carried_uids)
        return orphans.next_round_in(planned, now=now, grace=self._grace, interval=self._interval)

    def _report(self, planned: orphans.Round, *, now: float) -> None:
        self._metrics.orphans_pending.set(len(planned.orphans))
        for orphan in planned.newly_seen:
            self._metrics.orphans_seen.labels(reason=orphan.reason).inc()
            log.info("orphan job seen", extra=_context(orphan, now=now, grace_s=self._grace))
        for kind in ("legacy-label", "other-cluster"):
            self._metrics.jobs_not_ours.labels(kind=kind).set(sum(1 for j in planned.not_ours if j.kind == kind))
        self._reported_not_ours &= {job.number for job in planned.not_ours}
        for job in planned.not_ours:
            if job.number not in self._reported_not_ours:
                self._reported_not_ours.add(job.number)
                log.info(
                    "job left alone: not this cluster's",
                    extra={
                        "job": job.number,
                        "job_label": job.label,
                        "kind": job.kind,
                        "job_cluster": job.cluster,
                        "cluster": self._cluster,
                    },
                )

    def _terminate(self, orphan: orphans.Orphan, *, now: float) -> None:
        if self._dry_run:
            self._done.add(orphan.number)
            self._metrics.orphans_dry_run.inc()
            log.info("orphan job not terminated (dry run)", extra=_context(orphan, now=now))
            return
        try:
            self._jarvice.terminate(orphan.number)
        except JobNotFound:
            log.info("orphan job already gone", extra=_context(orphan, now=now))
        except JarviceError as exc:
            self._metrics.errors.labels(kind="jarvice-terminate").inc()
            log.warning("orphan job terminate failed", extra=_context(orphan, now=now, error=str(exc)))
            return
        else:
            self._metrics.orphans_terminated.inc()
            log.info("orphan job terminated", extra=_context(orphan, now=now))
        self._done.add(orphan.number)
        self._first_seen.pop(orphan.number, None)

    def _record(
        self, before: dict[str, ReapView], now_pods: dict[str, ReapView], *, carried_uids: frozenset[str]
    ) -> None:
        """Mark `job-state: ended` on burst pods no live job carries (the budget stops counting
        their GPUs): bounded per round; a pod changed or gone meanwhile is skipped, not an error."""
        self._recorded &= set(now_pods)
        pending = {uid: view for uid, view in now_pods.items() if uid not in self._recorded}
        chosen = orphans.plan_records(
            before,
            pods_now=pending,
            carried_uids=carried_uids,
            wall_now=self._wall_clock(),
            limit=self._records_per_round,
        )
        for pod in chosen:
            context = {"uid": pod.uid, "namespace": pod.namespace, "pod": pod.name}
            try:
                self._kube.record_job_ended(pod)
            except PodChangedOrGone as exc:
                log.info("job end not recorded: pod changed or gone", extra={**context, "reason": str(exc)})
            except Exception as exc:  # noqa: BLE001 - a failed API call costs this pod one round, not the loop
                self._metrics.errors.labels(kind="kubernetes").inc()
                log.warning("job end not recorded", extra={**context, "error": str(exc)[:500]})
                continue
            else:
                self._metrics.job_ended_recorded.inc()
                log.info("job end recorded", extra=context)
            self._recorded.add(pod.uid)


def _context(orphan: orphans.Orphan, *, now: float, **extra: object) -> dict[str, object]:
    context: dict[str, object] = {
        "job": orphan.number,
        "job_label": orphan.label,
        "pod_uid": orphan.pod_uid,
        "reason": orphan.reason,
        "orphaned_s": round(now - orphan.first_seen, 1),
        **extra,
    }
    if orphan.kept is not None:
        context["kept_job"] = orphan.kept
    return context
