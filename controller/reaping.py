"""Terminates JARVICE jobs whose pod is gone (I/O shell around `orphans`).

A runner cancels its job when its pod is deleted; a job is orphaned when that did not happen (the
node died with the pod, the pod was force-deleted, the runner was killed). Acts only while this
replica leads, and only while the pod watch is fresh: an empty or stale store would make every
job look orphaned. A new leader starts the grace period afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from controller import orphans
from controller.metrics import Metrics
from controller.store import PodStore
from entrypoint.jarvice import JarviceError, JobNotFound
from entrypoint.model import JobEntry

log = logging.getLogger(__name__)


class JobsApi(Protocol):
    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]: ...
    def terminate(self, number: int, *, deadline: float | None = None) -> None: ...


class Reaper:
    def __init__(
        self,
        *,
        store: PodStore,
        jarvice: JobsApi,
        grace: float,
        interval: float,
        dry_run: bool,
        stale_after: float,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._jarvice = jarvice
        self._grace = grace
        self._interval = interval
        self._dry_run = dry_run
        self._stale_after = stale_after
        self._metrics = metrics
        self._is_leader = is_leader
        self._clock = clock
        self._first_seen: dict[int, float] = {}
        self._done: set[int] = set()  # terminated (or reported, in a dry run): never twice

    def round(self) -> float:
        """One round; returns the seconds until the next one: the interval, or sooner when an
        orphan's grace period ends first (so it is terminated at most one interval after its pod
        went, plus the grace period)."""
        if not self._is_leader():
            self._first_seen.clear()
            return self._interval
        fresh, why = self._store.fresh(stale_after=self._stale_after)
        if not fresh:
            log.warning("orphan round skipped", extra={"reason": why})
            return self._interval
        before = self._store.uids()
        try:
            entries = self._jarvice.fetch_jobs(completed=False)
        except JarviceError as exc:
            self._metrics.errors.labels(kind="jarvice-list").inc()
            log.warning("JARVICE jobs not listed", extra={"error": str(exc)})
            return self._interval
        # Pods seen before or after the list: a pod created meanwhile is not taken for gone.
        uids = before | self._store.uids()
        jobs = [orphans.Job(number=e.number, label=e.label or "", state=e.state) for e in entries.values()]
        now = self._clock()
        planned = orphans.plan_round(jobs, pod_uids=uids, first_seen=self._first_seen, now=now, grace=self._grace)
        self._first_seen = planned.first_seen
        self._done &= set(entries)
        self._metrics.orphans_pending.set(len(planned.orphans))
        for orphan in planned.newly_seen:
            self._metrics.orphans_seen.inc()
            log.info("orphan job seen", extra=_context(orphan, now=now, grace_s=self._grace))
        for orphan in planned.due:
            if orphan.number not in self._done:
                self._terminate(orphan, now=now)
        return orphans.next_round_in(planned, now=now, grace=self._grace, interval=self._interval)

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


def _context(orphan: orphans.Orphan, *, now: float, **extra: object) -> dict[str, object]:
    return {
        "job": orphan.number,
        "job_label": orphan.label,
        "pod_uid": orphan.pod_uid,
        "orphaned_s": round(now - orphan.first_seen, 1),
        **extra,
    }
