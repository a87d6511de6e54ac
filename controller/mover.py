"""Moves running burst jobs home from their checkpoints (I/O shell around `controller.moving`).

The homecomer hands it a burst pod whose JARVICE job runs and which a local node could run now (the
webhook's dry run said so). It reads the pod's checkpoint contract (the pod's and its namespace's
annotations), prices the rest of the walltime on the job's machine, and, only when that would go,
asks the gateway for the newest checkpoint in the job's vault directory (unanswered: not known, the
move may go as without a gateway). When `moving.decide` says go, it marks the pod
(`nimbix-burst.io/move-home: <job>`): the runner asks its job for the checkpoint. Each round then
advances every move from what the API server and JARVICE say (`moving.advance`), records its steps
as Events on the Job, takes the mark away from a move given up before the job ended, and terminates
a job still live after its pod left with the checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from controller import moving
from controller.kube import PodGone
from controller.metrics import Metrics
from controller.model import TERMINAL_PHASES, OwnerState, PodView, burst_containers, log_context
from jarvice import contract
from jarvice.checkpoint import CheckpointContractError, parse_checkpoint_contract
from jarvice.exitcodes import EXIT_MOVED_HOME
from jarvice.labels import parse_job_label
from jarvice.model import JobEntry, Machine

log = logging.getLogger(__name__)

_MARK_PATH = "/metadata/annotations/" + contract.ANNOTATION_MOVE_HOME.replace("/", "~1")


class MoverJarvice(Protocol):
    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> Mapping[int, JobEntry]: ...
    def fetch_machines(self) -> Mapping[str, Machine]: ...
    def terminate(self, number: int, *, deadline: float | None = None) -> None: ...


class MoverCheckpoints(Protocol):
    def newest_checkpoint(self, namespace: str, name: str, uid: str) -> moving.LastCheckpoint: ...


class MoverKube(Protocol):
    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...
    def list_namespace_annotations(self) -> dict[str, Mapping[str, str]]: ...
    def patch_pod_json(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None: ...
    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = ...
    ) -> None: ...


def exit_code_of(pod: Mapping[str, Any]) -> int | None:
    """The ended pod's exit: a move home's if a container exited with it, else the first container's."""
    codes = [
        int(terminated["exitCode"])
        for status in (pod.get("status") or {}).get("containerStatuses") or ()
        if isinstance(terminated := (status.get("state") or {}).get("terminated"), Mapping)
        and isinstance(terminated.get("exitCode"), int)
    ]
    if EXIT_MOVED_HOME in codes:
        return EXIT_MOVED_HOME
    return codes[0] if codes else None


def _pods_of(owner_uid: str, pods: Iterable[PodView]) -> frozenset[str]:
    return frozenset(p.uid for p in pods if p.owner is not None and p.owner.uid == owner_uid)


class Mover:
    def __init__(
        self,
        *,
        jarvice: MoverJarvice,
        kube: MoverKube,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        checkpoints: MoverCheckpoints | None = None,
    ) -> None:
        self._jarvice = jarvice
        self._checkpoints = checkpoints  # the gateway (None: the checkpoint's age is never known)
        self._kube = kube
        self._metrics = metrics
        self._clock = clock
        self._wall_clock = wall_clock
        self.moves: dict[str, tuple[PodView, moving.Move]] = {}  # by pod UID, until finished
        # Pods whose move this leader finished: their mark may still show in the watch for a moment.
        self._finished: set[str] = set()

    def consider(
        self, pod: PodView, owner: OwnerState, jobs: Sequence[JobEntry], pods: Iterable[PodView] = ()
    ) -> tuple[bool, str, bool]:
        """Start moving `pod` home (True) or say why not (False, the reason, and whether it may pass in a
        later round: a stale checkpoint). `pods`: the pods seen now (those of its Job are never its replacement)."""
        if pod.uid in self.moves:
            return False, "its move home is under way", False
        if len(jobs) != 1:
            return False, "it has more than one JARVICE job (one per burst container): it does not move home", False
        (job,) = jobs
        read = self._kube.read_pod(pod.namespace, pod.name)
        annotations = (read.get("metadata") or {}).get("annotations") or {}
        namespace = self._kube.list_namespace_annotations().get(pod.namespace, {})
        try:
            terms = parse_checkpoint_contract(annotations, namespace)
        except CheckpointContractError as exc:
            return False, f"its checkpoint annotations cannot be used: {exc}", False
        machine = self._jarvice.fetch_machines().get(job.machine)
        policy_ignores_move = owner.moves_home(burst_containers(read))

        def decide(checkpoint: moving.LastCheckpoint | None) -> moving.MoveChoice:
            return moving.decide(
                terms,
                job,
                price_per_hour=machine.price_for(job.nodes) if machine is not None else None,
                gpus=machine.gpus * job.nodes if machine is not None else 0,
                now=self._wall_clock(),
                checkpoint=checkpoint,
                policy_ignores_move=policy_ignores_move,
                parallel_unindexed=0 if owner.indexed else owner.parallelism,
            )

        choice = decide(None)
        if choice.go and self._checkpoints is not None:  # asked only when it decides: a vault read each
            choice = decide(self._last_checkpoint(pod, job))
        if not choice.go:
            return False, choice.reason, choice.again
        assert pod.owner is not None
        self._kube.patch_pod_json(
            pod.namespace, pod.name, [{"op": "add", "path": _MARK_PATH, "value": str(job.number)}]
        )
        progress = moving.start(
            pod.uid,
            pod.owner.uid,
            job.number,
            now=self._clock(),
            gpu_hours=choice.gpu_hours,
            before=_pods_of(pod.owner.uid, pods),
        )
        self.moves[pod.uid] = (pod, progress.move)
        self._report(pod, progress)
        log.info("moving a running burst job home", extra=log_context(pod, job=job.number, reason=choice.reason))
        return True, choice.reason, False

    def _last_checkpoint(self, pod: PodView, job: JobEntry) -> moving.LastCheckpoint | None:
        """The newest checkpoint the gateway found; None when it did not answer (the move may go, as
        without a gateway: an unreachable vault must not keep every job remote)."""
        assert self._checkpoints is not None
        try:
            found = self._checkpoints.newest_checkpoint(pod.namespace, pod.name, pod.uid)
        except Exception:
            self._metrics.errors.labels(kind="gateway-checkpoint").inc()
            log.warning("checkpoint not known", extra=log_context(pod, job=job.number), exc_info=True)
            return None
        log.info(
            "checkpoint looked at",
            extra=log_context(pod, job=job.number, checkpoint=found.name, written=found.written),
        )
        return found

    def round(self, pods: Iterable[PodView]) -> dict[str, frozenset[str]]:
        """Advances every move; returns, by Job UID, those whose pod left with its checkpoint this round (their
        replacement is to be accounted as a homecoming's) and the Job's pods that are never the replacement:
        the Job may have created it already, so the pods seen now would count it among them."""
        current = list(pods)
        self._take_over(current)
        if not self.moves:
            return {}
        listed = self._jobs_by_number()
        left: dict[str, frozenset[str]] = {}
        for uid, (pod, move) in list(self.moves.items()):
            try:
                seen = self._seen(pod, move, listed.get(move.job_number), current)
            except Exception:  # a failed call costs this move one round
                self._metrics.errors.labels(kind="kubernetes").inc()
                log.warning("move home round failed", extra=log_context(pod), exc_info=True)
                continue
            progress = moving.advance(move, seen, now=self._clock())
            self._act(pod, progress)
            self.moves[uid] = (pod, progress.move)
            if progress.move.step == "copied_back" and move.step != "copied_back":
                left[move.owner_uid] = move.before | {move.pod_uid}
            if progress.move.step == "withdrawn" and move.step != "withdrawn":  # given up, as said
                self._metrics.moves_home.labels(outcome="given_up").inc()
            if moving.finished(progress.move):
                del self.moves[uid]
                self._finished.add(uid)
                if not (move.step == "withdrawn" and progress.move.step == "given_up"):  # counted once
                    self._metrics.moves_home.labels(outcome=progress.move.step).inc()
                if progress.move.step == "resumed":
                    self._metrics.gpu_hours_moved_home.inc(progress.move.gpu_hours)
        return left

    def under_way(self) -> bool:
        """A move that may take local GPUs soon: no other pod comes home meanwhile."""
        return any(moving.under_way(move) for _, move in self.moves.values())

    def _take_over(self, pods: Sequence[PodView]) -> None:
        """Moves another leader started: a running pod carrying the mark this leader did not set. A pod
        that has ended is not taken over (its runner finished the move; the Job creates the replacement)."""
        live = {pod.uid for pod in pods}
        self._finished &= live  # what the watch no longer shows needs no memory
        for pod in pods:
            if pod.moving_home is None or pod.uid in self.moves or pod.uid in self._finished or pod.owner is None:
                continue
            if pod.phase in TERMINAL_PHASES or pod.deleting:
                continue
            before = _pods_of(pod.owner.uid, pods)
            self.moves[pod.uid] = (
                pod,
                moving.adopt(pod.uid, pod.owner.uid, pod.moving_home, now=self._clock(), before=before),
            )
            log.info("move home taken over", extra=log_context(pod, job=pod.moving_home))

    def _jobs_by_number(self) -> dict[int, JobEntry]:
        found: dict[int, JobEntry] = {}
        for completed in (True, False):  # live last: a live listing wins
            found.update(self._jarvice.fetch_jobs(completed=completed))
        return found

    def _seen(self, pod: PodView, move: moving.Move, job: JobEntry | None, pods: Sequence[PodView]) -> moving.Seen:
        if job is not None and (parsed := parse_job_label(job.label or "")) is not None and parsed.pod_uid != pod.uid:
            job = None  # a number reused for another pod's job is not this move's
        try:
            body = self._kube.read_pod(pod.namespace, pod.name)
            uid = str((body.get("metadata") or {}).get("uid") or "")
            phase = str((body.get("status") or {}).get("phase") or "")
            gone, code = (uid != pod.uid or phase in ("Failed", "Succeeded")), exit_code_of(body)
        except PodGone:
            gone, code = True, None
        node, remote = "", False
        for other in pods:
            if other.owner is None or other.owner.uid != move.owner_uid or other.uid in move.before | {pod.uid}:
                continue
            node = node or (other.node_name if other.decision != contract.DECISION_REMOTE else "")
            remote = remote or other.decision == contract.DECISION_REMOTE
        return moving.Seen(job, gone, code, node, remote)

    def _act(self, pod: PodView, progress: moving.Progress) -> None:
        for action in progress.actions:
            try:
                if action == "unmark":
                    self._kube.patch_pod_json(pod.namespace, pod.name, [{"op": "remove", "path": _MARK_PATH}])
                else:
                    self._jarvice.terminate(progress.move.job_number)
            except Exception:  # the runner's own rules, and the orphan reaper, still end a stray job
                self._metrics.errors.labels(kind=f"move-{action}").inc()
                log.warning("move home action failed", extra=log_context(pod, action=action), exc_info=True)
        self._report(pod, progress)

    def _report(self, pod: PodView, progress: moving.Progress) -> None:
        assert pod.owner is not None
        for reason, message in progress.events:
            log.info("move home step", extra=log_context(pod, step=reason, detail=message))
            self._kube.record_event(
                namespace=pod.namespace,
                involved=pod.owner.reference(),
                reason=reason,
                message=f"pod {pod.name}: {message}",
                event_type="Warning" if reason == "NimbixMoveGivenUp" else "Normal",
            )
