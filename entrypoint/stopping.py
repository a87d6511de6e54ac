"""Stopping jobs: a signal's graceful stop (shutdown, the grace period, then terminate), the
terminate of a label's extra live jobs, and a give-up's best-effort terminate. The remote run's
shell for the "stopping" and "giving_up" phases (`entrypoint.runstate` says which job to stop)."""

import logging
from typing import Any, Final

from entrypoint import runsteps, termination
from entrypoint.following import Follower
from entrypoint.progress import ShellPart
from jarvice.client import JarviceError, JobNotFound
from jarvice.model import STATUS_RUNNING, JobStatus

log = logging.getLogger(__name__)

# While cancelling, poll at least this often to notice the job stopping.
CANCEL_POLL_SECONDS: Final = 1.0
# After the grace period, what is left for the terminate call itself (see entrypoint.termination).
TERMINATE_SECONDS: Final = termination.TERMINATE_SECONDS


class Stopper(ShellPart):
    def __init__(self, *args: Any, follower: Follower, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.follower = follower  # prints what a stopped job wrote last

    def stop(self, action: runsteps.StopJob, *, deadline: float) -> runsteps.Stopped:
        """Stop the job a signal found: raises JarviceError when it could not be stopped."""
        if action.number is None:
            log.info("no remote job to stop")
        else:
            self._cancel_job(action.number, deadline=deadline, drain=action.drain_output)
        return runsteps.Stopped()

    def _cancel_job(self, number: int, *, deadline: float, drain: bool) -> None:
        clock, backend = self.deps.clock, self.backend
        try:
            status: JobStatus | None = backend.fetch_status(number, deadline=deadline)
        except JarviceError as exc:
            log.warning("status unavailable while stopping", extra={"job": number, "error": str(exc)})
            status = None
        if status is not None and status.terminal:
            log.info("job already finished", extra={"job": number, "state": status.state})
            self._drain_output(number, deadline=deadline, drain=drain)
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
                        self._drain_output(number, deadline=deadline, drain=drain)
                        return
                log.warning("job still running after the grace period; terminating", extra={"job": number})
        try:
            backend.terminate(number, deadline=clock() + TERMINATE_SECONDS)
        except JobNotFound as exc:
            # "Running job is not found": it is not running (any more), nothing is left to stop.
            log.info("job already ended; nothing to terminate", extra={"job": number, "error": str(exc)})
            return
        log.info("terminate requested", extra={"job": number})

    def _drain_output(self, number: int, *, deadline: float, drain: bool) -> None:
        """After a stop, print what the job wrote last (e.g. its SIGTERM handler), if time allows."""
        if not drain or self.deps.clock() >= deadline:
            return
        try:
            self.follower.replay(number, endpoint="output", final=True, deadline=deadline)
        except JarviceError as exc:
            log.debug("output unavailable after stop", extra={"job": number, "error": str(exc)})
            return
        self.note(runsteps.OutputPrinted())

    def terminate_extras(self, action: runsteps.TerminateExtras, *, deadline: float | None) -> None:
        """Stop a label's live jobs other than the one followed (at most one of a label may run)."""
        log.warning(
            "several live jobs carry this label; keeping the lowest-numbered",
            extra={"job": action.kept, "jobs": list(action.among)},
        )
        for number in action.extras:
            log.warning(
                "terminating another live job carrying this label", extra={"job": number, "job_label": self.label}
            )
            try:
                self.backend.terminate(
                    number, deadline=self.deps.clock() + TERMINATE_SECONDS if deadline is None else deadline
                )
            except JobNotFound:
                log.info("job already ended; nothing to terminate", extra={"job": number})
            except JarviceError as exc:
                # The run goes on with the kept job; the controller's reaper stops this one by the same rule.
                log.error(
                    "could not terminate another live job carrying this label", extra={"job": number, "error": str(exc)}
                )

    def move(self, action: runsteps.MoveJob) -> runsteps.MovedAway:
        """Terminate the job JARVICE kept queued and poll it until it has ended: only then may the next
        job be submitted (never two jobs). A failed call raises JarviceError; the machine moves again."""
        number = action.number
        log.warning(
            "job queued too long; terminating it before submitting on the next machine",
            extra={"job": number, "machine": action.to, "reason": action.reason},
        )
        try:
            self.backend.terminate(number, deadline=self.deps.clock() + TERMINATE_SECONDS)
        except JobNotFound as exc:
            log.info("job already ended; nothing to terminate", extra={"job": number, "error": str(exc)})
        interval = min(CANCEL_POLL_SECONDS, self.tuning.poll_seconds)
        while True:
            status = self.backend.fetch_status(number)
            if status.terminal:
                log.info(
                    "queued job ended", extra={"job": number, "state": status.state, "start_time": status.start_time}
                )
                return runsteps.MovedAway(status)
            self.deps.sleep(interval)

    def terminate(self, action: runsteps.Terminate) -> runsteps.TerminateAnswered:
        """A give-up's best-effort terminate of each job; says which ones no longer run."""
        return runsteps.TerminateAnswered(tuple(self._best_effort_terminate(number) for number in action.numbers))

    def _best_effort_terminate(self, number: int) -> bool:
        try:
            self.backend.terminate(number, deadline=self.deps.clock() + TERMINATE_SECONDS)
        except JobNotFound as exc:
            # "Running job is not found": it already ended, nothing is left running.
            log.info("job already ended; nothing to terminate", extra={"job": number, "error": str(exc)})
            return True
        except JarviceError as exc:
            log.error("best-effort terminate failed", extra={"job": number, "error": str(exc)})
            self.warn_left_running(number)
            return False
        # On stderr like every runner message: the job was stopped, not left running unobserved.
        log.warning("giving up: terminate requested for the job", extra={"job": number})
        return True

    def leave_running(self, action: runsteps.LeaveRunning) -> None:
        log.error("could not stop the remote job", extra={"job": action.job, "error": action.error})
        self.warn_left_running(action.job)

    def warn_left_running(self, number: int | None) -> None:
        log.error(
            "the remote job may still be running; a restarted runner will pick it up",
            extra={"job": number, "job_label": self.label},
        )
