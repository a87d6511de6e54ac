"""Plays one policy: creations and deletions at their compressed trace times, and for the
"on-failure" policy the small controller that bursts pods the scheduler could not place (I/O).

With a burst-after setting (the webhook policy), each GPU pod is created owned by a Job of its own
(made inert beforehand: no kube-controller-manager runs here) and carries the setting, and the
driver plays the Job controller's one part that matters: when the real burst controller deletes a
pod that waited in vain, the driver creates its replacement, which the webhook decides again.

A dispatcher thread sleeps until each event is due and hands it to a pool of workers, so a slow
API call never delays the next event. A pod's deletion waits for its own creation to finish.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from jarvice import contract
from jarvice.gpubudget import ANNOTATION_BUDGET
from replay import accounting, cluster, gangs, objects
from replay.accounting import PodOutcome, Policy
from replay.gangs import Gang
from replay.history import GPU, Observation
from replay.plan import Plan
from replay.recorder import Recorder
from webhook.spending import ANNOTATION_COST_PER_HOUR

# Enough workers for the trace's densest bursts of arrivals (about 100 creations in one wall
# second at the default compression) while each CREATE waits a few ms on the API server.
WORKERS = 16
PROGRESS_SECONDS = 5.0
LEAD_SECONDS = 0.5  # between starting the clock and the first event
SETTLE_POLL_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class DriverResult:
    wall_start: float
    wall_end: float
    replay_wall_seconds: float
    max_lag_seconds: float
    truncated: bool
    create_latencies_ms: list[float]


def _note_money(outcome: PodOutcome, annotations: Mapping[str, str]) -> None:
    """What the webhook's answer says of money: why a burst was held back by a budget or cost cap,
    and the price per hour a burst was counted for (only where the namespace has a cost cap)."""
    outcome.budget = annotations.get(ANNOTATION_BUDGET, "") or outcome.budget
    with contextlib.suppress(ValueError):  # not a figure: nothing counted for it
        outcome.cost_per_hour = float(annotations.get(ANNOTATION_COST_PER_HOUR, "") or outcome.cost_per_hour)


class Driver:
    def __init__(
        self,
        core: Any,
        plan: Plan,
        *,
        policy: Policy,
        namespace: str,
        compression: float,
        model_label: str,
        stranded_timeout: float,
        say: Callable[[str], None],
        burst_after: str = "",
        jobs: Mapping[str, str] | None = None,
        gang_list: Sequence[Gang] = (),
    ) -> None:
        """`burst_after`: the annotation's value (wall time) on the GPU pods ("": none); `jobs`: pod name ->
        the UID of the Job made for it (objects.build_inert_job), its controller; `gang_list`: the trace's
        multi-pod jobs, whose pods are created as a pod group (replay.gangs)."""
        self._core = core
        self._gangs = gangs.membership(gang_list)
        self._burst_after = burst_after
        self._jobs = dict(jobs or {})
        self._plan = plan
        self._policy = policy
        self._namespace = namespace
        self._compression = compression
        self._model_label = model_label
        self._stranded_timeout = stranded_timeout
        self._say = say
        self.outcomes: dict[str, PodOutcome] = {
            name: PodOutcome(name=name, key=f"{namespace}/{name}", row=plan.pods[name].row) for name in plan.replay
        }
        self._locks: dict[str, threading.Lock] = {name: threading.Lock() for name in plan.pods}
        self._deleted: set[str] = set()
        self._creates: dict[str, Future[None]] = {}
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="replay")
        self._stats_lock = threading.Lock()
        self._create_latencies: list[float] = []
        self._counts = {"created": 0, "deleted": 0, "local": 0, "remote": 0, "errors": 0}
        self._recorder: Recorder | None = None
        self._closing = threading.Event()  # no new bursts once the pool is shutting down

    # -- the on-failure controller ------------------------------------------------------------------

    def on_pod(self, observation: Observation) -> None:
        """Recorder callback (its watch thread): burst pods the scheduler failed for lack of GPUs;
        with a burst-after setting, replace the pods the burst controller deleted."""
        if self._burst_after and observation.kind == "pod-deleted":
            self._on_deleted(observation)
            return
        if self._policy != "on-failure" or observation.pod is None:
            return
        pod = observation.pod
        namespace, _, name = observation.name.partition("/")
        outcome = self.outcomes.get(name)
        if namespace != self._namespace or outcome is None or pod.node or not pod.requests.get(GPU):
            return
        if not accounting.mentions_gpus(pod.unschedulable_message):
            return
        with self._stats_lock:
            if outcome.burst_seen is not None or self._closing.is_set():
                return
            outcome.burst_seen = observation.at
            self._pool.submit(self._burst, name, pod.unschedulable_message)

    def _burst(self, name: str, message: str) -> None:
        outcome = self.outcomes[name]
        with self._locks[name]:
            recorder = self._recorder
            bound_since = recorder is not None and bool(recorder.live_pods.get(outcome.key, ("", 0))[0])
            if name in self._deleted or bound_since:
                outcome.burst_seen = None  # deleted by the trace, or bound meanwhile: no burst
                return
            copy = f"{name}-nimbix"
            try:
                cluster.delete_pod(self._core, self._namespace, name)
                body = objects.build_burst_copy(
                    outcome.row, name=copy, namespace=self._namespace, reason=f"kube-scheduler: {message}"
                )
                cluster.create_pod(self._core, self._namespace, body)
            except ApiException as error:
                outcome.burst_error = f"{error.status} {error.reason}"
                return
            outcome.burst_done = time.monotonic()
            outcome.burst_key = f"{self._namespace}/{copy}"
        with self._stats_lock:
            self._counts["remote"] += 1

    # -- the Job controller's part (burst-after) -----------------------------------------------------

    def _on_deleted(self, observation: Observation) -> None:
        namespace, _, name = observation.name.partition("/")
        outcome = self.outcomes.get(name)
        if namespace != self._namespace or outcome is None or name not in self._jobs:
            return
        with self._stats_lock:
            if outcome.burst_seen is not None or self._closing.is_set() or name in self._deleted:
                return  # the trace's own deletion (marked before its call), or replaced already
            outcome.burst_seen = observation.at
            self._pool.submit(self._replace, name)

    def _replace(self, name: str) -> None:
        """The Job's replacement of a pod the controller deleted: decided afresh by the webhook."""
        outcome = self.outcomes[name]
        with self._locks[name]:
            if name in self._deleted:
                outcome.burst_seen = None  # the trace deleted it meanwhile: nothing to replace
                return
            copy = f"{name}-r"
            try:
                created = cluster.create_pod(self._core, self._namespace, self._body(outcome, copy))
            except ApiException as error:
                outcome.burst_error = f"{error.status} {error.reason}"
                return
            outcome.burst_key = f"{self._namespace}/{copy}"
            annotations: Mapping[str, str] = (created.get("metadata") or {}).get("annotations") or {}
            _note_money(outcome, annotations)
            if annotations.get(contract.ANNOTATION_DECISION) != contract.DECISION_REMOTE:
                return  # local GPUs freed meanwhile: the replacement stays here
            outcome.burst_done = time.monotonic()
        with self._stats_lock:
            self._counts["remote"] += 1

    def _body(self, outcome: PodOutcome, name: str) -> dict[str, Any]:
        body = objects.build_replay_pod(
            outcome.row, name=name, namespace=self._namespace, model_label=self._model_label
        )
        gang = self._gangs.get(outcome.name)
        if gang is not None:
            labels, annotations = gangs.pod_group_marks(gang)
            body["metadata"]["labels"].update(labels)
            body["metadata"]["annotations"].update(annotations)
        job = self._jobs.get(outcome.name)
        if job is not None:
            body["metadata"]["annotations"][contract.ANNOTATION_BURST_AFTER] = self._burst_after
            body["metadata"]["ownerReferences"] = [objects.job_owner_reference(outcome.name, job)]
        return body

    # -- events -------------------------------------------------------------------------------------

    def _create(self, name: str) -> None:
        outcome = self.outcomes[name]
        body = self._body(outcome, name)
        outcome.create_sent = time.monotonic()
        try:
            created = cluster.create_pod(self._core, self._namespace, body)
        except ApiException as error:
            outcome.create_error = f"{error.status} {error.reason}: {str(error.body)[:300]}"
            with self._stats_lock:
                self._counts["errors"] += 1
            return
        outcome.create_done = time.monotonic()
        annotations: Mapping[str, str] = (created.get("metadata") or {}).get("annotations") or {}
        outcome.decision = annotations.get(contract.ANNOTATION_DECISION, "")
        outcome.reason = annotations.get(contract.ANNOTATION_REASON, "")
        _note_money(outcome, annotations)
        with self._stats_lock:
            self._create_latencies.append((outcome.create_done - outcome.create_sent) * 1000)
            self._counts["created"] += 1
            if outcome.decision in ("local", "remote"):
                self._counts[outcome.decision] += 1

    def _delete(self, name: str) -> None:
        creating = self._creates.get(name)
        if creating is not None:
            creating.result()
        with self._locks[name]:
            self._deleted.add(name)
            outcome = self.outcomes.get(name)
            target = name
            if outcome is not None and outcome.burst_key:
                target = outcome.burst_key.partition("/")[2]
            try:
                cluster.delete_pod(self._core, self._namespace, target)
            except ApiException as error:
                with self._stats_lock:
                    self._counts["errors"] += 1
                if outcome is not None:
                    outcome.create_error = outcome.create_error or f"delete failed: {error.status} {error.reason}"
                return
            if outcome is not None:
                outcome.deleted = time.monotonic()
        with self._stats_lock:
            self._counts["deleted"] += 1

    # -- the run ------------------------------------------------------------------------------------

    def run(self, recorder: Recorder, *, deadline: float) -> DriverResult:
        """Plays every event due before `deadline` (monotonic); returns when settled."""
        self._recorder = recorder
        plan = self._plan
        wall_start = time.monotonic() + LEAD_SECONDS
        max_lag = 0.0
        truncated = False
        stop_progress = threading.Event()
        progress = threading.Thread(
            target=self._progress, args=(wall_start, stop_progress), name="replay-progress", daemon=True
        )
        progress.start()
        last_due = wall_start
        try:
            for event in plan.events:
                due = wall_start + (event.at - plan.start) / self._compression
                if due > deadline:
                    truncated = True
                    break
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                max_lag = max(max_lag, time.monotonic() - due)
                last_due = due
                if event.kind == "create":
                    self._creates[event.pod] = self._pool.submit(self._create, event.pod)
                else:
                    self._pool.submit(self._delete, event.pod)
            replay_wall = time.monotonic() - wall_start
            for future in list(self._creates.values()):
                future.result()
            self._settle(recorder, since=max(last_due, time.monotonic()))
        finally:
            stop_progress.set()
            with self._stats_lock:
                self._closing.set()
            self._pool.shutdown(wait=True)
            progress.join()
        self._report_progress(wall_start, final=True)
        with self._stats_lock:
            latencies = list(self._create_latencies)
        return DriverResult(
            wall_start=wall_start,
            wall_end=time.monotonic(),
            replay_wall_seconds=replay_wall,
            max_lag_seconds=max_lag,
            truncated=truncated,
            create_latencies_ms=latencies,
        )

    def _settle(self, recorder: Recorder, *, since: float) -> None:
        """Give the last pods the stranded timeout to bind (or burst), but stop as soon as no
        GPU pod is left unbound."""
        deadline = since + self._stranded_timeout
        prefix = self._namespace + "/"
        while time.monotonic() < deadline:
            _, unbound = recorder.count_pods(prefix)
            if unbound == 0:
                return
            time.sleep(SETTLE_POLL_SECONDS)

    def _progress(self, wall_start: float, stop: threading.Event) -> None:
        while not stop.wait(PROGRESS_SECONDS):
            self._report_progress(wall_start, final=False)

    def _report_progress(self, wall_start: float, *, final: bool) -> None:
        elapsed = time.monotonic() - wall_start
        trace_hours = max(0.0, elapsed) * self._compression / 3600
        with self._stats_lock:
            c = dict(self._counts)
        bound, unbound = (0, 0)
        if self._recorder is not None:
            bound, unbound = self._recorder.count_pods(self._namespace + "/")
        total = len(self._plan.replay)
        decided = f"local {c['local']} remote {c['remote']}" if self._policy != "no-bursting" else "no bursting"
        self._say(
            f"  [{self._policy}] {'done' if final else 't+'}{elapsed:6.1f}s  trace +{trace_hours:6.1f}h  "
            f"created {c['created']}/{total}  deleted {c['deleted']}  {decided}  "
            f"GPU pods bound {bound} unbound {unbound}  errors {c['errors']}"
        )
