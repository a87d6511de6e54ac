"""Following a job: poll its status, stream its output while it runs, print the rest and work out
the exit status once it ends. The remote run's shell for the "following" and "finishing" phases
(`entrypoint.runstate` decides what happens on a failure; this module only reports it)."""

import logging
from collections.abc import Callable
from typing import Any, Final, Literal

from entrypoint import homeward, output, recovery, runsteps, walltime
from entrypoint.candidates import QUEUED_STATUSES
from entrypoint.progress import ShellPart
from jarvice import exitcodes
from jarvice.client import JarviceError, JobNotFound, RequestRejected
from jarvice.model import STATUS_RUNNING, JobEntry

log = logging.getLogger(__name__)

# Poll interval jitter: up to +20 %, so many pods started together drift apart.
POLL_JITTER: Final = 0.2
# Right after a terminal status, output and exit code may lag; try a few times before giving up.
FINAL_FETCH_ATTEMPTS: Final = 5
FINAL_FETCH_PAUSE_SECONDS: Final = 1.0
# How long a checkpoint request may retry before the next poll asks again (the output keeps streaming).
CHECKPOINT_CALL_SECONDS: Final = 30.0
# Output is written to stdout in batches of about this size while a whole output is replayed
# (one write per line would cost a syscall per line; the batch bounds memory).
WRITE_BATCH_BYTES: Final = 64 * 1024


class Follower(ShellPart):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Whether a queued job moves to the next machine (job, state, seconds queued; the submitter's
        # `queued_too_long`); None: no job moves.
        self.mover: Callable[[int, str, float], runsteps.QueuedTooLong | None] | None = None
        self.queued_since: dict[int, float] = {}  # job -> when this runner first saw it queued (clock)
        self.checkpoint_asked: set[int] = set()  # jobs asked for a checkpoint to move home (homeward)
        self.move_refused: set[int] = set()  # marked jobs this runner cannot move (nothing is staged back)

    @property
    def mirrors_only(self) -> bool:
        """A gang's following rank: state lines on stdout, never the job's output (rank 0 prints it)."""
        return self.plan.gang is not None and not self.plan.gang.submits

    def follow(self, number: int) -> runsteps.JobEnded | runsteps.QueuedTooLong:
        last_state: str | None = None
        while True:
            status = self.backend.fetch_status(number)
            self.note(runsteps.StatusSeen())
            if status.state != last_state:
                log.info(
                    "job state changed",
                    extra={
                        "job": number,
                        "job_name": status.name,
                        "state": status.state,
                        "previous_state": last_state,
                        "substatus": status.substatus,
                    },
                )
                last_state = status.state
                if self.mirrors_only:
                    gang = self.plan.gang
                    assert gang is not None
                    self.say(
                        f"rank {gang.rank} of {gang.size} follows JARVICE job {number} ({status.name}): {status.state}"
                    )
            if status.terminal:
                return runsteps.JobEnded(status)
            moved = self._queued_too_long(number, status.state)
            if moved is not None:
                return moved
            if status.state == STATUS_RUNNING and not self.mirrors_only:
                self._ask_checkpoint_if_moving(number)
                self._stream_tail(number)
            self.deps.sleep(self.tuning.poll_seconds * (1 + self.deps.rng.uniform(0, POLL_JITTER)))

    def _ask_checkpoint_if_moving(self, number: int) -> None:
        """Once the controller marked the pod to move home from this job: ask the job for a checkpoint.
        A refused call is asked again at the next poll; the job goes on running meanwhile."""
        if number in self.checkpoint_asked or self.deps.move_mark() != number:
            return
        if self.deps.data is None:  # nothing would come back: the program would stop for nothing
            if number not in self.move_refused:
                self.move_refused.add(number)
                log.warning("cannot move home: this pod stages no data back", extra={"job": number})
            return
        try:
            self.backend.signal(
                number, homeward.CHECKPOINT_SIGNAL, deadline=self.deps.clock() + CHECKPOINT_CALL_SECONDS
            )
        except JarviceError as exc:
            log.warning("checkpoint request failed; asking again", extra={"job": number, "error": str(exc)})
            return
        self.checkpoint_asked.add(number)
        log.info("asked the job for a checkpoint to move home", extra={"job": number})

    def _queued_too_long(self, number: int, state: str) -> runsteps.QueuedTooLong | None:
        if self.mover is None or state.strip().upper() not in QUEUED_STATUSES:
            return None
        since = self.queued_since.setdefault(number, self.deps.clock())
        return self.mover(number, state, self.deps.clock() - since)

    def pause_before_retry(self, retry: runsteps.Retry) -> None:
        delay = recovery.retry_delay(
            retry.attempt - 1,
            base_seconds=self.tuning.retry_base_seconds,
            cap_seconds=self.tuning.retry_cap_seconds,
        ) * (1 + self.deps.rng.uniform(0, POLL_JITTER))
        log.warning(
            "JARVICE failed while following the job; trying again",
            extra={
                "job": retry.number,
                "error": retry.error,
                "action": retry.how,
                "attempt": retry.attempt,
                "retry_in": round(delay, 3),
            },
        )
        self.deps.sleep(delay)

    def _stream_tail(self, number: int) -> None:
        lines = self.tuning.tail_lines
        try:
            if lines > 0:
                step = output.advance(
                    self.progress.stream, self.backend.fetch_tail(number, lines=lines), requested=lines
                )
                if step.anomaly:
                    log.warning("remote output looks inconsistent", extra={"job": number, "reason": step.anomaly})
                if not step.need_full:
                    self.progress.emit(step.emit, step.state)
                    return
                log.debug("tail window cannot be placed; replaying the whole output", extra={"job": number})
            self.replay(number, endpoint="tail", final=False)
        except (JobNotFound, RequestRejected) as exc:
            # tail answers only while the job runs; it may have just finished.
            log.debug("tail not available", extra={"job": number, "error": str(exc)})

    def replay(
        self, number: int, *, endpoint: Literal["tail", "output"], final: bool, deadline: float | None = None
    ) -> None:
        """Stream the whole output, printing only what was not printed yet, in bounded memory."""
        replay = output.Replay(self.progress.stream, memory=self.tuning.tail_lines, final=final)
        batch: list[str] = []
        size = 0
        with self.backend.open_output(number, endpoint=endpoint, deadline=deadline) as lines:
            for line in lines:
                emit = replay.feed(line)
                if emit:
                    batch.extend(emit)
                    size += sum(len(e) for e in emit)
                    if size >= WRITE_BATCH_BYTES:
                        self.progress.emit(batch, replay.state, force_save=False)
                        batch, size = [], 0
            batch.extend(replay.close())
        if replay.anomaly:
            log.warning("remote output looks inconsistent", extra={"job": number, "reason": replay.anomaly})
        self.progress.emit(batch, replay.state)

    # --- finish --------------------------------------------------------------------------------

    def finish(self, action: runsteps.Finish) -> runsteps.ResultKnown:
        status = action.status
        number = status.number
        if action.print_output:
            if self._print_final_output(number):
                self.note(runsteps.OutputPrinted())
            else:
                log.warning("final output unavailable; some output may be missing", extra={"job": number})
        entry = self._fetch_entry(number)
        if entry is None:
            log.warning("job not found in /jarvice/jobs?completed=true; exit code unknown", extra={"job": number})
        exitcode = entry.exitcode if entry is not None else None
        # Only a job this runner did not stop gets here: a TERMINATED one was stopped by JARVICE at
        # its walltime (its substatus text, or its run time, says so) or by someone else.
        walltime_exceeded = walltime.decide_walltime_stop(
            status.state,
            substatus_text=entry.substatus_text if entry is not None else "",
            start_time=status.start_time,
            end_time=status.end_time,
            walltime_seconds=walltime.parse_walltime_seconds(self.plan.walltime),
        )
        decision = exitcodes.from_job(status.state, exitcode, walltime_exceeded=walltime_exceeded)
        if walltime_exceeded:
            log.error(
                "JARVICE stopped the job at its walltime",
                extra={
                    "job": number,
                    "walltime": self.plan.walltime,
                    "substatus": entry.substatus_text if entry is not None else "",
                    "reason": "raise the pod's activeDeadlineSeconds (or JARVICE_WALLTIME) if the job needs longer",
                },
            )
        if decision.warning:
            log.warning(decision.warning, extra={"job": number, "state": status.state})
        log.info(
            "job finished",
            extra={
                "job": number,
                "state": status.state,
                "job_exitcode": exitcode,
                "exit_code": decision.code,
                "reason": decision.reason,
            },
        )
        if self.mirrors_only:
            self.say(f"JARVICE job {number} ended {status.state}; exiting {decision.code} ({decision.reason})")
        return runsteps.ResultKnown(decision.code)

    def _print_final_output(self, number: int) -> bool:
        for attempt in range(FINAL_FETCH_ATTEMPTS):
            try:
                self.replay(number, endpoint="output", final=True)
                return True
            except (JobNotFound, RequestRejected) as exc:
                log.debug("output not available yet", extra={"job": number, "error": str(exc), "attempt": attempt + 1})
                self.deps.sleep(min(FINAL_FETCH_PAUSE_SECONDS, self.tuning.poll_seconds))
        return False

    def _fetch_entry(self, number: int) -> JobEntry | None:
        """The finished job's /jarvice/jobs entry (exit code, substatus text); None if not listed."""
        for _ in range(FINAL_FETCH_ATTEMPTS):
            entry = self.backend.fetch_jobs(completed=True).get(number)
            if entry is not None:
                return entry
            self.deps.sleep(min(FINAL_FETCH_PAUSE_SECONDS, self.tuning.poll_seconds))
        return None
