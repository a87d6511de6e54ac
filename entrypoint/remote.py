"""The remote run: re-attach or submit once, follow, stream output, exit like a local process.

Imperative shell around the pure modules. Everything it touches comes in through `RemoteDeps`
(the JARVICE backend, the output sink, sleep, clock, randomness and the cancel token), so tests
drive it with a fake backend and a fake clock.
"""

import logging
import random
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, Protocol

from entrypoint import exitcodes, output
from entrypoint.jarvice import (
    ApplicationNotFound,
    CredentialsRejected,
    JarviceError,
    JobNotFound,
    ProtocolError,
    RequestRejected,
    SubmitOutcomeUnknown,
    Unavailable,
)
from entrypoint.model import STATUS_RUNNING, JobEntry, JobStatus, Machine, SubmitBody, SubmitResult, is_terminal
from entrypoint.plan import NoMachineFits, RemotePlan, build_submit_body, select_machine

log = logging.getLogger(__name__)

# Poll interval jitter: up to +20 %, so many pods started together drift apart.
POLL_JITTER: Final = 0.2
# While cancelling, poll at least this often to notice the job stopping.
CANCEL_POLL_SECONDS: Final = 1.0
# After the grace period, what is left for the terminate call itself (the pod's own grace period
# is 30 s by default; the cancel grace defaults to 20 s).
TERMINATE_SECONDS: Final = 5.0
# Right after a terminal status, output and exit code may lag; try a few times before giving up.
FINAL_FETCH_ATTEMPTS: Final = 5
FINAL_FETCH_PAUSE_SECONDS: Final = 1.0
# Between looks for a job created by an unanswered submit.
RESOLVE_PAUSE_SECONDS: Final = 1.0


class JobBackend(Protocol):
    """What the runner needs from JARVICE (`entrypoint.jarvice.JarviceClient` implements it)."""

    def fetch_machines(self) -> Mapping[str, Machine]: ...

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> Mapping[int, JobEntry]: ...

    def submit(self, body: SubmitBody) -> SubmitResult: ...

    def fetch_status(self, number: int, *, deadline: float | None = None) -> JobStatus: ...

    def fetch_tail(self, number: int, *, lines: int) -> str: ...

    def fetch_output(self, number: int, *, lines: int, deadline: float | None = None) -> str: ...

    def shutdown(self, number: int, *, deadline: float | None = None) -> None: ...

    def terminate(self, number: int, *, deadline: float | None = None) -> None: ...


class OutputSink(Protocol):
    def write(self, lines: Sequence[str]) -> None: ...


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


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class _RemoteRun:
    def __init__(self, plan: RemotePlan, deps: RemoteDeps) -> None:
        self.plan = plan
        self.deps = deps
        self.backend = deps.backend
        self.tuning = plan.tuning
        self.number: int | None = None
        self.stream = output.StreamState()
        # Set while a submit's outcome is unresolved: job numbers with our label that existed before.
        self.pending_known: frozenset[int] | None = None
        # The final output has been printed: a late signal must not print it again.
        self.output_done = False

    # --- entry ---------------------------------------------------------------------------------

    def run(self) -> int:
        try:
            with self.deps.cancel.interruptible():
                return self._run()
        except CancelRequested as cancel:
            return self._on_cancel(cancel.signum)
        except CredentialsRejected as exc:
            log.error("JARVICE rejected the credentials", extra={"error": str(exc)})
            return exitcodes.EXIT_CREDENTIALS
        except ApplicationNotFound as exc:
            log.error(
                "JARVICE does not know the application (check APP_NAME)",
                extra={"error": str(exc), "app": self.plan.app_name},
            )
            return exitcodes.EXIT_CONFIG
        except (Unavailable, SubmitOutcomeUnknown) as exc:
            log.error("JARVICE is unavailable; giving up", extra={"error": str(exc), "job": self.number})
            self._best_effort_terminate()
            return exitcodes.EXIT_REMOTE_UNAVAILABLE
        except (ProtocolError, RequestRejected, JobNotFound) as exc:
            log.error("unexpected answer from JARVICE", extra={"error": str(exc), "job": self.number})
            return exitcodes.EXIT_PROTOCOL
        except Exception:
            # The runner's boundary: a bug must not leave a job running that nobody follows.
            log.exception("runner failed unexpectedly", extra={"job": self.number})
            self._best_effort_terminate()
            return exitcodes.EXIT_INTERNAL

    def _run(self) -> int:
        plan = self.plan
        log.info(
            "remote run starting",
            extra={"job_label": plan.job_label, "app": plan.app_name, "app_command": plan.app_command},
        )
        live = self._find_live_job()
        if live is not None:
            log.info(
                "re-attaching to the live job carrying this pod's label",
                extra={"job": live.number, "job_name": live.name, "state": live.state, "job_label": plan.job_label},
            )
            number = live.number
        else:
            machines = self.backend.fetch_machines()
            choice = select_machine(plan, machines)
            if isinstance(choice, NoMachineFits):
                log.error("no machine fits the request", extra={"reason": choice.reason})
                return exitcodes.EXIT_NO_MACHINE
            log.info("machine selected", extra={"machine": choice.machine, "reason": choice.reason})
            if choice.warning:
                log.warning(
                    "machine smaller than requested", extra={"machine": choice.machine, "reason": choice.warning}
                )
            number = self._submit(build_submit_body(plan, machine=choice.machine))
        self.number = number
        final_status = self._follow(number)
        return self._finish(final_status)

    # --- submit once ---------------------------------------------------------------------------

    def _mine(self, jobs: Mapping[int, JobEntry]) -> list[JobEntry]:
        return sorted((j for j in jobs.values() if j.label == self.plan.job_label), key=lambda j: j.number)

    def _find_live_job(self) -> JobEntry | None:
        live = [j for j in self._mine(self.backend.fetch_jobs(completed=False)) if not is_terminal(j.state)]
        if len(live) > 1:
            log.warning(
                "several live jobs carry this label; following the newest",
                extra={"jobs": [j.number for j in live], "job_label": self.plan.job_label},
            )
        return live[-1] if live else None

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
            except SubmitOutcomeUnknown as exc:
                log.warning(
                    "submit outcome unknown; looking for the job by its label",
                    extra={"error": str(exc), "job_label": self.plan.job_label},
                )
                found = self._resolve_submit(known, wait=not exc.answered)
                if found is not None:
                    self.pending_known = None
                    return found
                now = self.deps.clock()
                first_failure = now if first_failure is None else first_failure
                if now - first_failure >= self.tuning.outage_seconds:
                    raise
                delay = min(
                    self.tuning.retry_cap_seconds,
                    self.tuning.retry_base_seconds * 2 ** min(attempt, 30),
                ) * self.deps.rng.uniform(0.5, 1.0)
                log.warning("no job was created; submitting again", extra={"retry_in": round(delay, 3)})
                self.deps.sleep(delay)
                attempt += 1
                continue
            self.pending_known = None
            log.info("job submitted", extra={"job": result.number, "job_name": result.name})
            return result.number

    def _new_jobs(self, known: frozenset[int], *, deadline: float | None = None) -> list[JobEntry]:
        found = {j.number: j for j in self._mine(self.backend.fetch_jobs(completed=False, deadline=deadline))}
        found.update({j.number: j for j in self._mine(self.backend.fetch_jobs(completed=True, deadline=deadline))})
        return [found[n] for n in sorted(found) if n not in known]

    def _resolve_submit(self, known: frozenset[int], *, wait: bool) -> int | None:
        """The job an unanswered submit created, if any. Answered failures (5xx, 429) get one look;
        unanswered ones (timeout, dropped connection) are looked for during the resolve window."""
        deadline = self.deps.clock() + (self.tuning.submit_resolve_seconds if wait else 0.0)
        while True:
            new = self._new_jobs(known)
            if new:
                job = new[-1]
                log.info(
                    "found the job created by the unanswered submit",
                    extra={"job": job.number, "job_name": job.name, "state": job.state},
                )
                if len(new) > 1:
                    log.warning("several new jobs carry this label", extra={"jobs": [j.number for j in new]})
                return job.number
            if self.deps.clock() >= deadline:
                return None
            self.deps.sleep(min(RESOLVE_PAUSE_SECONDS, self.tuning.poll_seconds))

    # --- follow --------------------------------------------------------------------------------

    def _follow(self, number: int) -> JobStatus:
        last_state: str | None = None
        while True:
            status = self.backend.fetch_status(number)
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
            step = output.advance(self.stream, self.backend.fetch_tail(number, lines=lines), requested=lines)
            if step.need_full:
                log.debug("tail window cannot be placed; fetching the whole output", extra={"job": number})
                step = output.advance_full(self.stream, self.backend.fetch_tail(number, lines=0), memory=lines)
        except (JobNotFound, RequestRejected) as exc:
            # tail answers only while the job runs; it may have just finished.
            log.debug("tail not available", extra={"job": number, "error": str(exc)})
            return
        if step.anomaly:
            log.warning("remote output looks inconsistent", extra={"job": number, "reason": step.anomaly})
        self.deps.out.write(step.emit)
        self.stream = step.state

    # --- finish --------------------------------------------------------------------------------

    def _fetch_final_output(self, number: int) -> str | None:
        for attempt in range(FINAL_FETCH_ATTEMPTS):
            try:
                return self.backend.fetch_output(number, lines=0)
            except (JobNotFound, RequestRejected) as exc:
                log.debug("output not available yet", extra={"job": number, "error": str(exc), "attempt": attempt + 1})
                self.deps.sleep(min(FINAL_FETCH_PAUSE_SECONDS, self.tuning.poll_seconds))
        return None

    def _fetch_exitcode(self, number: int) -> tuple[bool, int | None]:
        for _ in range(FINAL_FETCH_ATTEMPTS):
            entry = self.backend.fetch_jobs(completed=True).get(number)
            if entry is not None:
                return True, entry.exitcode
            self.deps.sleep(min(FINAL_FETCH_PAUSE_SECONDS, self.tuning.poll_seconds))
        return False, None

    def _finish(self, status: JobStatus) -> int:
        number = status.number
        text = self._fetch_final_output(number)
        if text is None:
            log.warning("final output unavailable; some output may be missing", extra={"job": number})
        else:
            ending = output.finish(self.stream, text)
            if ending.anomaly:
                log.warning("remote output looks inconsistent", extra={"job": number, "reason": ending.anomaly})
            self.output_done = True
            self.deps.out.write(ending.emit)
        listed, exitcode = self._fetch_exitcode(number)
        if not listed:
            log.warning("job not found in /jarvice/jobs?completed=true; exit code unknown", extra={"job": number})
        decision = exitcodes.from_job(status.state, exitcode)
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
                new = self._new_jobs(self.pending_known, deadline=deadline)
                for job in new[:-1]:
                    self.backend.terminate(job.number, deadline=deadline)
                number = new[-1].number if new else None
            if number is None:
                log.info("no remote job to stop")
            else:
                self._cancel_job(number, deadline)
        except JarviceError as exc:
            log.error("could not stop the remote job", extra={"job": number, "error": str(exc)})
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
        backend.terminate(number, deadline=clock() + TERMINATE_SECONDS)
        log.info("terminate requested", extra={"job": number})

    def _drain_output(self, number: int, deadline: float) -> None:
        """After a stop, print what the job wrote last (e.g. its SIGTERM handler), if time allows."""
        if self.output_done or self.deps.clock() >= deadline:
            return
        try:
            text = self.backend.fetch_output(number, lines=0, deadline=deadline)
        except JarviceError as exc:
            log.debug("output unavailable after stop", extra={"job": number, "error": str(exc)})
            return
        ending = output.finish(self.stream, text)
        self.output_done = True
        self.deps.out.write(ending.emit)

    def _best_effort_terminate(self) -> None:
        if self.number is None:
            return
        try:
            self.backend.terminate(self.number, deadline=self.deps.clock() + TERMINATE_SECONDS)
            log.info("terminate requested", extra={"job": self.number})
        except JarviceError as exc:
            log.warning("best-effort terminate failed", extra={"job": self.number, "error": str(exc)})


def run_remote(plan: RemotePlan, deps: RemoteDeps) -> int:
    """Run the plan on JARVICE and return the exit status the pod should have."""
    return _RemoteRun(plan, deps).run()
