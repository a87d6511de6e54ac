"""Brings burst pods home while their JARVICE jobs are still queued (I/O shell around `homecoming`).

Acts only while this replica leads and its pod watch is fresh. One round lists the account's live
jobs (only when some Job's burst pod is live), and for each pod whose jobs have not started asks the
webhook, through a dry-run create of the pod its Job would create, whether a local node could run it
now. If one could: the pod is read again and the jobs listed again (a job that started meanwhile
keeps the pod where it is), the pod is deleted (preconditions on its uid and resourceVersion), its
jobs are terminated (its runner, stopping, terminates them too), and an Event on the Job says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from controller import homecoming, stranding
from controller.kube import PodChangedOrGone
from controller.metrics import Metrics
from controller.model import PodView, log_context, parse_job, parse_pod
from controller.mover import Mover
from controller.store import PodStore
from jarvice.labels import parse_job_label
from jarvice.model import JobEntry

log = logging.getLogger(__name__)

REASON_CAME_HOME = "NimbixCameHome"


class JobsApi(Protocol):
    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]: ...
    def terminate(self, number: int, *, deadline: float | None = None) -> None: ...


class KubeCalls(Protocol):
    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...
    def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...
    def dry_run_create_pod(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]: ...
    def read_claim_and_volume(
        self, namespace: str, claim: str
    ) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]: ...
    def evict_pod(self, pod: PodView) -> None: ...
    def patch_pod_json(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None: ...
    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = ...
    ) -> None: ...


def jobs_by_pod(jobs: Mapping[int, JobEntry]) -> dict[str, list[JobEntry]]:
    """Live jobs by the pod UID their label carries (a pod's UID is unique: whichever cluster part)."""
    found: dict[str, list[JobEntry]] = {}
    for job in jobs.values():
        parsed = parse_job_label(job.label or "")
        if parsed is None:
            continue
        found.setdefault(parsed.pod_uid, []).append(job)
    return found


class Homecomer:
    def __init__(
        self,
        *,
        store: PodStore,
        jarvice: JobsApi,
        kube: KubeCalls,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        interval: float,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
        mover: Mover | None = None,
        came_home: set[str] | None = None,
    ) -> None:
        self._store = store
        self._jarvice = jarvice
        self._kube = kube
        self._metrics = metrics
        self._is_leader = is_leader
        self._interval = interval
        self._stale_after = stale_after
        self._clock = clock
        # Job UIDs a pod came home for: at most once per Job (shared with the re-burster, which sends a pod
        # of such a Job that cannot bind back to its burst within a round).
        self.came_home: set[str] = set() if came_home is None else came_home
        # The homecoming whose replacement has not bound yet: until it does, the GPUs it came home for
        # are not counted as used by the webhook's dry runs, so no other pod comes home.
        self._settling: homecoming.Settling | None = None
        self._noted: set[str] = set()  # pod UIDs whose "stays, its job started" was looked at
        # Pods refused a move for now only (a stale checkpoint), looked at each round: the note last written.
        self._waiting: dict[str, str] = {}
        # Running burst jobs move home from their checkpoints (None: they stay remote to the end).
        self._mover = mover

    def round(self) -> float:
        if not self._is_leader():
            return self._interval
        fresh, why = self._store.fresh(stale_after=self._stale_after)
        if not fresh:
            log.warning("homecoming round skipped", extra={"reason": why})
            return self._interval
        self._advance_moves()
        # Every round, candidates or not: may_bring_home() tells the truth between rounds too.
        self._settling = homecoming.still_settling(self._settling, self._store.labeled(), now=self._clock())
        pods = [pod for pod in self._store.labeled() if homecoming.is_candidate(pod)]
        candidates = {pod.uid for pod in pods}
        self._noted &= candidates
        self._waiting = {uid: note for uid, note in self._waiting.items() if uid in candidates}
        if not pods:
            return self._interval
        try:
            live = jobs_by_pod(self._jarvice.fetch_jobs(completed=False))
        except Exception:  # JARVICE unreachable: nothing comes home this round
            self._metrics.errors.labels(kind="jarvice-list").inc()
            log.warning("homecoming round failed", exc_info=True)
            return self._interval
        # Oldest queued first (the lowest JARVICE job number); at most one comes home (or starts moving
        # home) a round, none while the last one's replacement has not bound or a move is under way.
        may_bring_home = self.may_bring_home()
        for pod in sorted(pods, key=lambda p: homecoming.queue_order(live.get(p.uid, []))):
            owner = pod.owner.uid if pod.owner else ""
            assessment = homecoming.assess(pod, live.get(pod.uid, []), came_home_before=owner in self.came_home)
            if assessment.verdict == "ignore" or (assessment.verdict == "stay" and pod.uid in self._noted):
                continue
            # A started job may move home: only a pod that names a checkpoint directory is looked at again.
            moves = assessment.verdict == "check" or (self._mover is not None and pod.checkpoints)
            if moves and not may_bring_home:
                continue
            try:
                if self._consider(pod, assessment, live.get(pod.uid, [])):
                    may_bring_home = False
            except PodChangedOrGone as exc:
                log.info("homecoming pod changed before we acted", extra=log_context(pod, reason=str(exc)))
            except Exception:  # a failed call costs this pod one round, not the loop
                self._metrics.errors.labels(kind="kubernetes").inc()
                log.warning("homecoming action failed", extra=log_context(pod), exc_info=True)
        return self._interval

    def may_bring_home(self) -> bool:
        """No homecoming settling and no move home under way (a move given up while its job runs on is not)."""
        return self._settling is None and not (self._mover is not None and self._mover.under_way())

    def _advance_moves(self) -> None:
        """Moves under way go on, whether or not a burst pod is live (their pods have ended)."""
        if self._mover is None:
            return
        try:
            left = self._mover.round(self._store.labeled())
        except Exception:  # JARVICE unreachable: the moves wait for the next round
            self._metrics.errors.labels(kind="jarvice-list").inc()
            log.warning("move home round failed", exc_info=True)
            return
        for owner_uid, never in left.items():  # the pod left with its checkpoint: its replacement settles
            self._settling = homecoming.Settling(owner_uid, never, self._clock())
        # A move another leader started and this one took over counts as the Job's one move, as its own do.
        self.came_home |= {move.owner_uid for _, move in self._mover.moves.values()}

    def _consider(self, pod: PodView, assessment: homecoming.Assessment, jobs: Sequence[JobEntry]) -> bool:
        """True when the pod came home (or started moving home)."""
        assert pod.owner is not None  # is_candidate(): a Job controls it
        if assessment.verdict == "stay" and (self._mover is None or not pod.checkpoints):
            self._noted.add(pod.uid)  # looked at once: a started job never goes back to the queue
        job = self._kube.read_job(pod.namespace, pod.owner.name)
        why_not = "owner not found" if job is None else stranding.check_owner(pod, parse_job(job))
        if why_not == stranding.NOT_FREE and pod.uid not in self._noted:
            self._noted.add(pod.uid)  # said once: the Job's failure policy cannot change
            self._note(pod, homecoming.not_free_note())
            log.info("burst pod never brought home: the move would cost its Job a retry", extra=log_context(pod))
        if job is None or why_not:
            return False  # the Job would not recreate it, or would count its eviction: it stays where it is
        body = homecoming.dry_run_pod(job, pod)
        pinned = [name for name in homecoming.claim_names(body["spec"]) if self._pins_nodes(pod.namespace, name)]
        if rule := homecoming.unmodelled_rule(body["spec"], pinned_claims=pinned):
            if pod.uid not in self._noted:
                self._noted.add(pod.uid)  # said once: the Job's template cannot change
                self._note(pod, homecoming.unmodelled_note(rule))
            return False
        decided = self._kube.dry_run_create_pod(pod.namespace, body)
        fits, reason = homecoming.fits_locally(decided)
        if not fits:
            return False
        if assessment.verdict == "stay":
            if self._mover is not None and job is not None:
                # A failed call: asked again next round. The Job's pods now are never its replacement.
                moved, why, again = self._mover.consider(pod, parse_job(job), jobs, self._store.labeled())
                if moved:
                    self.came_home.add(pod.owner.uid)
                    return True
                assessment = homecoming.Assessment("stay", f"{assessment.reason}; not moved home: {why}")
                if again:  # a stale checkpoint: the next one may be on time; said once per text
                    note = homecoming.started_note(assessment, reason=reason)
                    if self._waiting.get(pod.uid) != note:
                        self._note(pod, note)
                        self._waiting[pod.uid] = note
                    return False
            self._noted.add(pod.uid)  # looked at once it fits: a move home is decided then or never
            self._note(pod, homecoming.started_note(assessment, reason=reason))
            log.info("burst pod stays: its job started", extra=log_context(pod, reason=assessment.reason))
            return False
        return self._bring_home(pod, reason=reason)

    def _pins_nodes(self, namespace: str, claim: str) -> bool:
        try:
            found, volume = self._kube.read_claim_and_volume(namespace, claim)
        except Exception:  # unreadable: as if it were tied to some nodes (never strands a pod)
            log.warning("claim unreadable", exc_info=True, extra={"namespace": namespace, "claim": claim})
            return True
        return homecoming.volume_pins_nodes(found, volume)

    def _note(self, pod: PodView, note: str) -> None:
        ops = [{"op": "add", "path": "/metadata/annotations/nimbix-burst.io~1homecoming", "value": note}]
        self._kube.patch_pod_json(pod.namespace, pod.name, ops)

    def _bring_home(self, pod: PodView, *, reason: str) -> bool:
        assert pod.owner is not None
        # Decided again on what the API server and JARVICE say now: a job that started meanwhile stays.
        fresh = parse_pod(self._kube.read_pod(pod.namespace, pod.name))
        jobs = jobs_by_pod(self._jarvice.fetch_jobs(completed=False)).get(pod.uid, [])
        again = homecoming.assess(fresh, jobs, came_home_before=pod.owner.uid in self.came_home)
        if fresh.uid != pod.uid or again.verdict != "check":
            log.info("homecoming given up on a second look", extra=log_context(pod, reason=again.reason))
            return False
        # A step of it that already ran (another burst container's job ended) would run again here.
        ran = homecoming.one_that_ran(jobs_by_pod(self._jarvice.fetch_jobs(completed=True)).get(pod.uid, []))
        if ran is not None:
            self._noted.add(pod.uid)
            self._note(pod, homecoming.ran_note(ran))
            log.info("burst pod stays: a job of it already ran", extra=log_context(pod, job=ran.number))
            return False
        # Marked first: the webhook, seeing the marked pod evicted, holds the GPUs it comes home to for its
        # Job's next pod (until that pod's admission), so no other pod is decided onto them meanwhile.
        self._kube.patch_pod_json(pod.namespace, pod.name, homecoming.coming_home_mark(fresh))
        fresh = parse_pod(self._kube.read_pod(pod.namespace, pod.name))
        if fresh.uid != pod.uid:
            return False
        self._kube.evict_pod(fresh)  # precondition: this uid and resourceVersion
        self.came_home.add(pod.owner.uid)
        self._settling = homecoming.settling(pod.owner.uid, self._store.labeled(), now=self._clock())
        for number in again.jobs:  # its runner terminates them too on SIGTERM; this makes sure
            try:
                self._jarvice.terminate(number)
            except Exception:  # the runner's stop and the orphan reaper still end it
                self._metrics.errors.labels(kind="jarvice-terminate").inc()
                log.warning("homecoming terminate failed", extra=log_context(pod, job=number), exc_info=True)
        self._metrics.homecomings.inc()
        log.info("burst pod came home", extra=log_context(pod, owner=pod.owner.name, jobs=list(again.jobs)))
        self._kube.record_event(
            namespace=pod.namespace,
            involved=pod.owner.reference(),
            reason=REASON_CAME_HOME,
            message=homecoming.build_message(pod, jobs=again.jobs, reason=reason),
            event_type="Normal",
        )
        return True
