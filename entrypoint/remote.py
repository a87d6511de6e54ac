"""The remote run: re-attach or submit once, follow, stream output, exit like a local process.

Imperative shell around the pure modules. Everything it touches comes in through `RemoteDeps`
(the JARVICE backend, the output sink, sleep, clock, randomness and the cancel token), so tests
drive it with a fake backend and a fake clock.
"""

import dataclasses
import logging
import random
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from entrypoint import budget, duplicates, exitcodes, output, recovery, restart, termination, walltime
from entrypoint.jarvice import (
    ApplicationNotFound,
    CredentialsRejected,
    JarviceError,
    JobNotFound,
    ProtocolError,
    RequestRejected,
    StreamBroken,
    SubmitOutcomeUnknown,
    SubmitRefused,
    Unavailable,
)
from entrypoint.model import STATUS_RUNNING, JobEntry, JobStatus, Machine, SubmitBody, SubmitResult, is_terminal
from entrypoint.plan import NoMachineFits, RemotePlan, build_submit_body, select_machine

log = logging.getLogger(__name__)

# Poll interval jitter: up to +20 %, so many pods started together drift apart.
POLL_JITTER: Final = 0.2
# While cancelling, poll at least this often to notice the job stopping.
CANCEL_POLL_SECONDS: Final = 1.0
# After the grace period, what is left for the terminate call itself (see entrypoint.termination).
TERMINATE_SECONDS: Final = termination.TERMINATE_SECONDS
# Right after a terminal status, output and exit code may lag; try a few times before giving up.
FINAL_FETCH_ATTEMPTS: Final = 5
FINAL_FETCH_PAUSE_SECONDS: Final = 1.0
# Between looks for a job created by an unanswered submit.
RESOLVE_PAUSE_SECONDS: Final = 1.0
# Output is written to stdout in batches of about this size while a whole output is replayed
# (one write per line would cost a syscall per line; the batch bounds memory).
WRITE_BATCH_BYTES: Final = 64 * 1024
# While a long output is replayed, the printed count is saved at most this often (each save is an
# fsync); a runner killed in between prints those lines again after its restart, never loses them.
PROGRESS_SAVE_SECONDS: Final = 1.0


class JobBackend(Protocol):
    """What the runner needs from JARVICE (`entrypoint.jarvice.JarviceClient` implements it)."""

    def fetch_machines(self) -> Mapping[str, Machine]: ...

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> Mapping[int, JobEntry]: ...

    def submit(self, body: SubmitBody) -> SubmitResult: ...

    def fetch_status(self, number: int, *, deadline: float | None = None) -> JobStatus: ...

    def fetch_tail(self, number: int, *, lines: int) -> str: ...

    def open_output(
        self, number: int, *, endpoint: Literal["tail", "output"], deadline: float | None = None
    ) -> AbstractContextManager[Iterator[str]]: ...

    def shutdown(self, number: int, *, deadline: float | None = None) -> None: ...

    def terminate(self, number: int, *, deadline: float | None = None) -> None: ...


class OutputSink(Protocol):
    def write(self, lines: Sequence[str]) -> None: ...


class Journal(Protocol):
    """Where the restart state goes (`entrypoint.statefile.StateFile` implements it)."""

    def save(self, state: restart.RunnerState) -> None: ...


class NoJournal:
    """Without NIMBIX_BURST_STATE_DIR: nothing is kept, restarts re-attach by label only."""

    def save(self, state: restart.RunnerState) -> None:
        pass


class TerminationLog(Protocol):
    """Where the termination message goes (best effort: a failure is the writer's to log)."""

    def write(self, message: str) -> None: ...


class NoTerminationLog:
    def write(self, message: str) -> None:
        pass


class GiveUp(Exception):
    """The failure table said give up: exit with `recovery.exit_code` (after stopping the job)."""

    def __init__(self, decision: recovery.Recovery, error: JarviceError) -> None:
        super().__init__(decision.reason)
        self.decision = decision
        self.error = error


class CancelRequested(BaseException):
    """Raised (from a signal handler) to abandon whatever the runner is waiting on.

    A BaseException, like KeyboardInterrupt, so no `except Exception` on the way swallows it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class CancelToken:
    """Records the first SIGTERM/SIGINT; interrupts the runner only where that is safe.

    Inside `interruptible()` a request raises CancelRequested at once (the signal handler runs in
    the main thread, so a blocked HTTP read or sleep is abandoned). Inside `deferred()` it is only
    recorded and raised on leaving: used around the submit POST, whose outcome must be known.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._interruptible = False

    def request(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        if self._interruptible:
            self._interruptible = False
            raise CancelRequested(self.signum)

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        previous = self._interruptible
        self._interruptible = True
        try:
            if self.signum is not None:
                self._interruptible = False
                raise CancelRequested(self.signum)
            yield
        finally:
            self._interruptible = previous

    @contextmanager
    def deferred(self) -> Iterator[None]:
        previous = self._interruptible
        self._interruptible = False
        try:
            yield
        finally:
            self._interruptible = previous
            if previous and self.signum is not None:
                # Also when the body failed: the cancel wins, and its handler settles the outcome.
                self._interruptible = False
                raise CancelRequested(self.signum)


@dataclass(frozen=True, slots=True)
class RemoteDeps:
    backend: JobBackend
    out: OutputSink
    sleep: Callable[[float], None]
    clock: Callable[[], float]
    rng: random.Random
    cancel: CancelToken
    journal: Journal = field(default_factory=NoJournal)
    termination: TerminationLog = field(default_factory=NoTerminationLog)


FIRST_START: Final = restart.decide_start(None)


def _failure_of(exc: JarviceError) -> recovery.Failure:
    if isinstance(exc, CredentialsRejected):
        return "credentials"
    if isinstance(exc, ApplicationNotFound):
        return "app_not_found"
    if isinstance(exc, JobNotFound):
        return "job_not_found"
    if isinstance(exc, RequestRejected):
        return "rejected"
    if isinstance(exc, StreamBroken):
        return "stream_broken"
    if isinstance(exc, Unavailable | SubmitOutcomeUnknown | SubmitRefused):
        return "unavailable"
    return "protocol"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


@dataclass(frozen=True, slots=True)
class Refused:
    """The run was refused before anything was submitted (no machine fits, over the GPU budget)."""

    exit_code: int


class _RemoteRun:
    def __init__(self, plan: RemotePlan, deps: RemoteDeps, start: restart.StartDecision) -> None:
        self.plan = plan
        self.deps = deps
        self.backend = deps.backend
        self.tuning = plan.tuning
        self.start = start
        previous = start.previous if start.kind == "pick_up" else None
        self.label = previous.job_label if previous is not None else plan.job_label
        # The job being followed. An inherited job is ours from the very start, so a signal that
        # comes while it is being picked up stops it rather than leaving it running unreported.
        self.number: int | None = previous.job_number if previous is not None else None
        self.stream = output.StreamState(resumed=previous.printed_lines if previous is not None else 0)
        self.record = restart.RunnerState(
            attempt=start.attempt,
            job_label=self.label,
            job_number=previous.job_number if previous is not None else None,
            printed_lines=self.stream.emitted,
        )
        self.saved_at: float | None = None
        # Set while a job of ours may exist whose number is not known (a submit with an unknown
        # outcome, a job inherited by its label only): the numbers of this label's jobs that are
        # not it. A signal or a give-up then looks the job up by its label to stop it.
        self.pending_known: frozenset[int] | None = (
            frozenset() if previous is not None and previous.job_number is None else None
        )
        # The final output has been printed: a late signal must not print it again.
        self.output_done = False
        # Consecutive failures while following (reset by every successful status poll).
        self.failures = 0
        # Whether the job may still be running when the runner exits (then it is not "reported",
        # so a restarted runner picks it up rather than leaving it unwatched). A job handed down by
        # an earlier runner may run until this one has seen it finish.
        self.job_may_run = previous is not None

    # --- entry ---------------------------------------------------------------------------------

    def run(self) -> int:
        code = self._run_guarded()
        self._save(reported=not self.job_may_run, exit_code=code)
        self.deps.termination.write(
            termination.build_message(job=self.number, job_may_run=self.job_may_run, exit_code=code)
        )
        return code

    def _run_guarded(self) -> int:
        try:
            with self.deps.cancel.interruptible():
                return self._run()
        except CancelRequested as cancel:
            return self._on_cancel(cancel.signum)
        except GiveUp as give_up:
            return self._give_up(give_up.decision, give_up.error)
        except JarviceError as exc:
            # Before a job exists (or while resolving a submit): the same table decides.
            decision = recovery.decide_recovery(_failure_of(exc), job_known=self._job_known(), failures=0)
            return self._give_up(decision, exc)
        except Exception:
            # The runner's boundary: a bug must not leave a job running that nobody follows.
            log.exception("runner failed unexpectedly", extra={"job": self.number})
            decision = recovery.decide_recovery("internal", job_known=self._job_known(), failures=0)
            self._stop_before_exit(decision)
            return decision.exit_code

    def _job_known(self) -> bool:
        return self.number is not None or self.pending_known is not None

    def _give_up(self, decision: recovery.Recovery, exc: JarviceError) -> int:
        failure = _failure_of(exc)
        extra = {"error": str(exc), "job": self.number, "reason": decision.reason}
        if failure == "credentials":
            log.error("JARVICE rejected the credentials", extra=extra)
        elif failure == "app_not_found":
            log.error(
                "JARVICE does not know the application (check APP_NAME)", extra={**extra, "app": self.plan.app_name}
            )
        elif failure == "unavailable":
            log.error("JARVICE is unavailable; giving up", extra=extra)
        else:
            log.error("unexpected answer from JARVICE", extra=extra)
        self._stop_before_exit(decision)
        return decision.exit_code

    def _stop_before_exit(self, decision: recovery.Recovery) -> None:
        if not decision.terminate:
            return
        if self.number is None and self.pending_known is not None:
            # A submit whose outcome is unknown may have created a job: find it to stop it.
            try:
                new = self._new_jobs(self.pending_known, deadline=self.deps.clock() + TERMINATE_SECONDS)
            except JarviceError:
                new = []
            if not new:
                self.job_may_run = True  # cannot tell: a restarted runner looks it up by label
            for job in new:
                self._best_effort_terminate(job.number)
            return
        if self.number is not None:
            self._best_effort_terminate(self.number)

    def _run(self) -> int:
        plan = self.plan
        log.info(
            "remote run starting",
            extra={
                "job_label": self.label,
                "app": plan.app_name,
                "app_command": plan.app_command,
                "attempt": self.start.attempt,
                "start": self.start.kind,
                "reason": self.start.reason,
            },
        )
        picked = self._pick_up() if self.start.kind == "pick_up" else None
        number = self._attach_or_submit() if picked is None else picked
        if isinstance(number, Refused):
            return number.exit_code
        return self._observe(number)

    def _attach_or_submit(self) -> int | Refused:
        live = self._find_live_job()
        if live is not None:
            log.info(
                "re-attaching to the live job carrying this pod's label",
                extra={"job": live.number, "job_name": live.name, "state": live.state, "job_label": self.label},
            )
            self._adopt(live.number)
            return live.number
        machines = self.backend.fetch_machines()
        choice = select_machine(self.plan, machines)
        if isinstance(choice, NoMachineFits):
            log.error("no machine fits the request", extra={"reason": choice.reason})
            return Refused(exitcodes.EXIT_NO_MACHINE)
        log.info("machine selected", extra={"machine": choice.machine, "reason": choice.reason})
        if choice.warning:
            log.warning("machine smaller than requested", extra={"machine": choice.machine, "reason": choice.warning})
        if self.plan.counted_gpus is None:
            log.info("no counted GPUs set: the machine is not checked against a GPU budget")
        over = budget.check_gpu_budget(
            machines[choice.machine], nodes=self.plan.nodes, counted_gpus=self.plan.counted_gpus
        )
        if over is not None:
            log.error(
                "the machine holds more GPUs than the budget counted; nothing submitted",
                extra={
                    "machine": choice.machine,
                    "gpus": machines[choice.machine].gpus,
                    "nodes": self.plan.nodes,
                    "counted_gpus": self.plan.counted_gpus,
                    "reason": over.reason,
                },
            )
            return Refused(exitcodes.EXIT_OVER_BUDGET)
        body = build_submit_body(self.plan, machine=choice.machine)
        body["job_label"] = self.label
        # Saved before the submit: a runner killed between submit and the next save is resolved
        # through the label by its successor.
        self._save(job_number=None)
        number = self._submit(body)
        self._adopt(number)
        return number

    def _adopt(self, number: int) -> None:
        self.number = number
        self.pending_known = None
        self.job_may_run = True
        self._save(job_number=number)

    # --- restart state -------------------------------------------------------------------------

    def _save(self, **changes: object) -> None:
        self.record = dataclasses.replace(self.record, **changes)  # type: ignore[arg-type]
        try:
            self.deps.journal.save(self.record)
        except OSError as exc:
            log.error("cannot save the restart state", extra={"error": str(exc), "job": self.number})
        self.saved_at = self.deps.clock()

    def _emit(self, lines: Sequence[str], state: output.StreamState, *, force_save: bool = True) -> None:
        """Print lines, then record that they were printed."""
        if lines:
            self.deps.out.write(lines)
        self.stream = state
        if state.emitted == self.record.printed_lines:
            return
        now = self.deps.clock()
        if force_save or self.saved_at is None or now - self.saved_at >= PROGRESS_SAVE_SECONDS:
            self._save(printed_lines=state.emitted)

    def _pick_up(self) -> int | None:
        """The job an earlier runner of this container started and did not report, if it exists."""
        previous = self.start.previous
        assert previous is not None
        number = previous.job_number
        if number is not None:
            try:
                status = self.backend.fetch_status(number)
            except JobNotFound:
                log.warning("the job in the restart state is unknown to JARVICE", extra={"job": number})
                number = self.number = None
                self.pending_known = frozenset()
            else:
                log.info(
                    "picking up the job of the previous runner",
                    extra={"job": number, "state": status.state, "printed_lines": previous.printed_lines},
                )
        if number is None:
            kept = self._keep_one(self._new_jobs(frozenset()))
            if kept is None:
                log.info("no job carries this attempt's label yet; submitting", extra={"job_label": self.label})
                self.pending_known = None
                self.job_may_run = False
                return None
            number = kept.number
            log.info(
                "picking up the job of the previous runner by its label",
                extra={"job": number, "state": kept.state, "job_label": self.label},
            )
        self._adopt(number)
        return number

    # --- submit once ---------------------------------------------------------------------------

    def _mine(self, jobs: Mapping[int, JobEntry]) -> list[JobEntry]:
        return sorted((j for j in jobs.values() if j.label == self.label), key=lambda j: j.number)

    def _find_live_job(self) -> JobEntry | None:
        live = [j for j in self._mine(self.backend.fetch_jobs(completed=False)) if not is_terminal(j.state)]
        return self._keep_one(live)

    def _keep_one(self, jobs: Sequence[JobEntry], *, deadline: float | None = None) -> JobEntry | None:
        """The job of this label to follow (`duplicates`' rule); every other live one is terminated now."""
        decision = duplicates.decide_kept_job(jobs)
        if decision.extra:
            log.warning(
                "several live jobs carry this label; keeping the lowest-numbered",
                extra={"job": decision.kept.number if decision.kept else None, "jobs": [j.number for j in jobs]},
            )
        for extra in decision.extra:
            self._terminate_extra(
                extra.number, deadline=self.deps.clock() + TERMINATE_SECONDS if deadline is None else deadline
            )
        return decision.kept

    def _submit(self, body: SubmitBody) -> int:
        known = frozenset(j.number for j in self._mine(self.backend.fetch_jobs(completed=True)))
        first_failure: float | None = None
        attempt = 0
        while True:
            self.pending_known = known
            try:
                with self.deps.cancel.deferred():
                    result = self.backend.submit(body)
                    self.number = result.number  # known before a deferred signal is raised
                    self.job_may_run = True
            except SubmitRefused as exc:
                self.pending_known = None  # refused: nothing was created, nothing to look for
                log.warning("JARVICE refused the submit; no job was created", extra={"error": str(exc)})
                failure: JarviceError = exc
            except SubmitOutcomeUnknown as exc:
                log.warning(
                    "submit outcome unknown; looking for the job by its label",
                    extra={"error": str(exc), "job_label": self.label, "answered": exc.answered},
                )
                found = self._resolve_submit(known)
                if found is not None:
                    return found
                log.warning("no job carries this label after the resolve window", extra={"job_label": self.label})
                failure = exc
            else:
                self.pending_known = None
                log.info("job submitted", extra={"job": result.number, "job_name": result.name})
                return result.number
            now = self.deps.clock()
            first_failure = now if first_failure is None else first_failure
            if now - first_failure >= self.tuning.outage_seconds:
                raise failure
            delay = min(
                self.tuning.retry_cap_seconds,
                self.tuning.retry_base_seconds * 2 ** min(attempt, 30),
            ) * self.deps.rng.uniform(0.5, 1.0)
            log.warning("submitting again", extra={"retry_in": round(delay, 3)})
            self.deps.sleep(delay)
            attempt += 1

    def _new_jobs(self, known: frozenset[int], *, deadline: float | None = None) -> list[JobEntry]:
        found = {j.number: j for j in self._mine(self.backend.fetch_jobs(completed=False, deadline=deadline))}
        found.update({j.number: j for j in self._mine(self.backend.fetch_jobs(completed=True, deadline=deadline))})
        return [found[n] for n in sorted(found) if n not in known]

    def _resolve_submit(self, known: frozenset[int]) -> int | None:
        """The job a submit with an unknown outcome created, if any: looked for by its label through
        the whole resolve window (a gateway's 502/504 may come before JARVICE created the job)."""
        deadline = self.deps.clock() + self.tuning.submit_resolve_seconds
        while True:
            job = self._keep_one(self._new_jobs(known))
            if job is not None:
                log.info(
                    "found the job created by the submit with an unknown outcome",
                    extra={"job": job.number, "job_name": job.name, "state": job.state},
                )
                return job.number
            if self.deps.clock() >= deadline:
                return None
            self.deps.sleep(min(RESOLVE_PAUSE_SECONDS, self.tuning.poll_seconds))

    # --- observe: follow and finish, surviving transient failures ------------------------------

    def _observe(self, number: int) -> int:
        """Follow the job to its end and return its exit status; failures go through the table."""
        while True:
            try:
                return self._finish(self._follow(number))
            except (ProtocolError, RequestRejected, JobNotFound, CredentialsRejected, StreamBroken) as exc:
                decision = recovery.decide_recovery(_failure_of(exc), job_known=True, failures=self.failures)
                if decision.action == "give_up":
                    raise GiveUp(decision, exc) from exc
                delay = recovery.retry_delay(
                    self.failures,
                    base_seconds=self.tuning.retry_base_seconds,
                    cap_seconds=self.tuning.retry_cap_seconds,
                ) * (1 + self.deps.rng.uniform(0, POLL_JITTER))
                self.failures += 1
                log.warning(
                    "JARVICE failed while following the job; trying again",
                    extra={
                        "job": number,
                        "error": str(exc),
                        "action": decision.action,
                        "attempt": self.failures,
                        "retry_in": round(delay, 3),
                    },
                )
                self.deps.sleep(delay)
                if decision.action == "reattach":
                    number = self._reattach(number)

    def _reattach(self, number: int) -> int:
        """Look the job up again by its label: the lowest-numbered live one is followed, the others stopped."""
        kept = self._keep_one([j for j in self._new_jobs(frozenset()) if not is_terminal(j.state)])
        if kept is not None and kept.number != number:
            log.warning("the job carrying this label has another number now", extra={"job": kept.number})
            self._adopt(kept.number)
            return kept.number
        return number

    def _follow(self, number: int) -> JobStatus:
        last_state: str | None = None
        while True:
            status = self.backend.fetch_status(number)
            self.failures = 0
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
            if status.terminal:
                return status
            if status.state == STATUS_RUNNING:
                self._stream_tail(number)
            self.deps.sleep(self.tuning.poll_seconds * (1 + self.deps.rng.uniform(0, POLL_JITTER)))

    def _stream_tail(self, number: int) -> None:
        lines = self.tuning.tail_lines
        try:
            if lines > 0:
                step = output.advance(self.stream, self.backend.fetch_tail(number, lines=lines), requested=lines)
                if step.anomaly:
                    log.warning("remote output looks inconsistent", extra={"job": number, "reason": step.anomaly})
                if not step.need_full:
                    self._emit(step.emit, step.state)
                    return
                log.debug("tail window cannot be placed; replaying the whole output", extra={"job": number})
            self._replay(number, endpoint="tail", final=False)
        except (JobNotFound, RequestRejected) as exc:
            # tail answers only while the job runs; it may have just finished.
            log.debug("tail not available", extra={"job": number, "error": str(exc)})

    def _replay(
        self, number: int, *, endpoint: Literal["tail", "output"], final: bool, deadline: float | None = None
    ) -> None:
        """Stream the whole output, printing only what was not printed yet, in bounded memory."""
        replay = output.Replay(self.stream, memory=self.tuning.tail_lines, final=final)
        batch: list[str] = []
        size = 0
        with self.backend.open_output(number, endpoint=endpoint, deadline=deadline) as lines:
            for line in lines:
                emit = replay.feed(line)
                if emit:
                    batch.extend(emit)
                    size += sum(len(e) for e in emit)
                    if size >= WRITE_BATCH_BYTES:
                        self._emit(batch, replay.state, force_save=False)
                        batch, size = [], 0
            batch.extend(replay.close())
        if replay.anomaly:
            log.warning("remote output looks inconsistent", extra={"job": number, "reason": replay.anomaly})
        self._emit(batch, replay.state)

    # --- finish --------------------------------------------------------------------------------

    def _print_final_output(self, number: int) -> bool:
        for attempt in range(FINAL_FETCH_ATTEMPTS):
            try:
                self._replay(number, endpoint="output", final=True)
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

    def _finish(self, status: JobStatus) -> int:
        number = status.number
        self.job_may_run = False
        if not self.output_done:
            if self._print_final_output(number):
                self.output_done = True
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
        return decision.code

    # --- cancel --------------------------------------------------------------------------------

    def _on_cancel(self, signum: int) -> int:
        log.warning(
            "signal received; stopping the remote job",
            extra={"signal": _signal_name(signum), "job": self.number},
        )
        deadline = self.deps.clock() + self.tuning.cancel_grace_seconds
        number = self.number
        try:
            if number is None and self.pending_known is not None:
                # A job of ours may run under this label (a submit with an unknown outcome, a job
                # inherited by its label): look it up, stop every live one.
                live = [j for j in self._new_jobs(self.pending_known, deadline=deadline) if not is_terminal(j.state)]
                kept = self._keep_one(live, deadline=deadline)
                number = kept.number if kept is not None else None
            if number is None:
                log.info("no remote job to stop")
            else:
                self._cancel_job(number, deadline)
            self.job_may_run = False
        except JarviceError as exc:
            log.error("could not stop the remote job", extra={"job": number, "error": str(exc)})
            self._warn_left_running(number)
        return exitcodes.EXIT_TERMINATED

    def _cancel_job(self, number: int, deadline: float) -> None:
        clock, backend = self.deps.clock, self.backend
        try:
            status: JobStatus | None = backend.fetch_status(number, deadline=deadline)
        except JarviceError as exc:
            log.warning("status unavailable while stopping", extra={"job": number, "error": str(exc)})
            status = None
        if status is not None and status.terminal:
            log.info("job already finished", extra={"job": number, "state": status.state})
            self._drain_output(number, deadline)
            return
        if status is not None and status.state == STATUS_RUNNING:
            try:
                backend.shutdown(number, deadline=deadline)
            except JarviceError as exc:
                log.warning("shutdown refused; terminating", extra={"job": number, "error": str(exc)})
            else:
                log.info("shutdown requested", extra={"job": number, "grace_seconds": self.tuning.cancel_grace_seconds})
                interval = min(CANCEL_POLL_SECONDS, self.tuning.poll_seconds)
                while clock() + interval < deadline:
                    self.deps.sleep(interval)
                    try:
                        status = backend.fetch_status(number, deadline=deadline)
                    except JarviceError:
                        continue
                    if status.terminal:
                        log.info("job stopped", extra={"job": number, "state": status.state})
                        self._drain_output(number, deadline)
                        return
                log.warning("job still running after the grace period; terminating", extra={"job": number})
        try:
            backend.terminate(number, deadline=clock() + TERMINATE_SECONDS)
        except JobNotFound as exc:
            # "Running job is not found": it is not running (any more), nothing is left to stop.
            log.info("job already ended; nothing to terminate", extra={"job": number, "error": str(exc)})
            return
        log.info("terminate requested", extra={"job": number})

    def _terminate_extra(self, number: int, *, deadline: float) -> None:
        """Stop a job of this label other than the one followed (at most one of a label may run)."""
        log.warning("terminating another live job carrying this label", extra={"job": number, "job_label": self.label})
        try:
            self.backend.terminate(number, deadline=deadline)
        except JobNotFound:
            log.info("job already ended; nothing to terminate", extra={"job": number})
        except JarviceError as exc:
            # The run goes on with the kept job; the controller's reaper stops this one by the same rule.
            log.error(
                "could not terminate another live job carrying this label", extra={"job": number, "error": str(exc)}
            )

    def _drain_output(self, number: int, deadline: float) -> None:
        """After a stop, print what the job wrote last (e.g. its SIGTERM handler), if time allows."""
        if self.output_done or self.deps.clock() >= deadline:
            return
        try:
            self._replay(number, endpoint="output", final=True, deadline=deadline)
        except JarviceError as exc:
            log.debug("output unavailable after stop", extra={"job": number, "error": str(exc)})
            return
        self.output_done = True

    def _best_effort_terminate(self, number: int) -> None:
        try:
            self.backend.terminate(number, deadline=self.deps.clock() + TERMINATE_SECONDS)
        except JobNotFound as exc:
            # "Running job is not found": it already ended, nothing is left running.
            log.info("job already ended; nothing to terminate", extra={"job": number, "error": str(exc)})
            self.job_may_run = False
        except JarviceError as exc:
            log.error("best-effort terminate failed", extra={"job": number, "error": str(exc)})
            self._warn_left_running(number)
        else:
            # On stderr like every runner message: the job was stopped, not left running unobserved.
            log.warning("giving up: terminate requested for the job", extra={"job": number})
            self.job_may_run = False

    def _warn_left_running(self, number: int | None) -> None:
        self.job_may_run = True
        log.error(
            "the remote job may still be running; a restarted runner will pick it up",
            extra={"job": number, "job_label": self.label},
        )


def run_remote(plan: RemotePlan, deps: RemoteDeps, *, start: restart.StartDecision = FIRST_START) -> int:
    """Run the plan on JARVICE and return the exit status the pod should have.

    `start` says whether this runner picks up the job of an earlier runner of its container (see
    `entrypoint.restart`); the restart state goes to `deps.journal`.
    """
    return _RemoteRun(plan, deps, start).run()
