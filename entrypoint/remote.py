"""The remote run: re-attach or submit once, follow, stream output, exit like a local process.

A thin driver around `entrypoint.runstate`, the runner's money rules: it performs the machine's
actions one at a time (`submitting` finds or makes the job, `following` follows it, `stopping`
stops jobs), turns what happened into the next event (a signal, a failed call, an answer) and
feeds it back. Everything it touches comes in through `ports.RemoteDeps`, so tests drive it with
a fake backend and a fake clock.
"""

import logging
from typing import Final

from entrypoint import gang as gangs
from entrypoint import homeward, restart, runstate, runsteps, termination
from entrypoint.awaiting import GangWaiter
from entrypoint.following import Follower
from entrypoint.plan import RemotePlan
from entrypoint.ports import RemoteDeps
from entrypoint.progress import Progress
from entrypoint.recovery import Failure
from entrypoint.signals import CancelRequested, signal_name
from entrypoint.stopping import TERMINATE_SECONDS, Stopper
from entrypoint.submitting import Submitter
from jarvice.client import (
    ApplicationNotFound,
    CredentialsRejected,
    JarviceError,
    JobNotFound,
    RequestRejected,
    StreamBroken,
    SubmitOutcomeUnknown,
    SubmitRefused,
    Unavailable,
)

log = logging.getLogger(__name__)

FIRST_START: Final = restart.decide_start(None)

_GIVE_UP_MESSAGES: Final[dict[Failure, str]] = {
    "credentials": "JARVICE rejected the credentials",
    "app_not_found": "JARVICE does not know the application (check APP_NAME)",
    "unavailable": "JARVICE is unavailable; giving up",
}
_ADOPT_MESSAGES: Final[dict[runsteps.AdoptHow, str]] = {
    "picked_up_by_label": "picking up the job of the previous runner by its label",
    "attached": "re-attaching to the live job carrying this pod's label",
    "resolved": "found the job created by the submit with an unknown outcome",
    "gang_job_found": "following the gang's job that rank 0 submitted",
}


def failure_of(exc: JarviceError) -> Failure:
    """The recovery table's name for a JARVICE error."""
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


class _RemoteRun:
    def __init__(self, plan: RemotePlan, deps: RemoteDeps, start: restart.StartDecision) -> None:
        self.plan = plan
        self.deps = deps
        self.start = start
        previous = start.previous if start.kind == "pick_up" else None
        self.label = previous.job_label if previous is not None else plan.job_label
        record = restart.RunnerState(
            attempt=start.attempt,
            job_label=self.label,
            job_number=previous.job_number if previous is not None else None,
            printed_lines=previous.printed_lines if previous is not None else 0,
        )
        self.progress = Progress(deps, record=record)
        gang = plan.gang
        now = int(deps.wall_clock())
        follower_since = None if gang is None or gang.submits else gangs.follower_since(gang, now=now)
        first = runstate.begin(start, follower_since=follower_since)
        self.state = first.state
        self.first_actions = first.actions
        self.stop_deadline = 0.0  # set by the signal
        self.follower = Follower(plan, deps, label=self.label, progress=self.progress, note=self._note)
        self.stopper = Stopper(
            plan, deps, label=self.label, progress=self.progress, follower=self.follower, note=self._note
        )
        self.submitter = Submitter(plan, deps, label=self.label, progress=self.progress, note=self._note)
        self.waiter = GangWaiter(plan, deps, label=self.label, progress=self.progress, note=self._note)
        self.follower.mover = self.submitter.queued_too_long

    def run(self) -> int:
        gang = self.plan.gang
        log.info(
            "remote run starting",
            extra={
                "gang_rank": None if gang is None else gang.rank,
                "gang_size": None if gang is None else gang.size,
                "job_label": self.label,
                "app": self.plan.app_name,
                "app_command": self.plan.app_command,
                "attempt": self.start.attempt,
                "start": self.start.kind,
                "reason": self.start.reason,
            },
        )
        data = self.deps.data
        early = data.prepare() if data is not None else None
        if early is not None:  # nothing submitted
            self.progress.save_exit(reported=early.reported, exit_code=early.code)
            self.deps.termination.write(termination.build_message(job=None, job_may_run=False, exit_code=early.code))
            return early.code
        code = self._drive(list(self.first_actions))
        if data is not None:
            since = self.stop_deadline - self.plan.tuning.cancel_grace_seconds if self.stop_deadline else None
            code = data.finish(
                job=self.state.job, job_may_run=self.state.job_may_run, exit_code=code, stopping_since=since
            )
        asked = self.state.job is not None and self.state.job in self.follower.checkpoint_asked
        moved = homeward.final_exit(code, asked=asked and not self.state.job_may_run, staged_out=data is not None)
        if moved != code:
            log.info("moving home: the checkpoint was copied back", extra={"job": self.state.job, "exit_code": moved})
            code = moved
        self.progress.save_exit(reported=runstate.is_reported(self.state), exit_code=code)
        kept = data.kept_in_vault() if data is not None else None
        self.deps.termination.write(
            termination.build_message(job=self.state.job, job_may_run=self.state.job_may_run, exit_code=code, kept=kept)
        )
        return code

    def _drive(self, actions: list[runsteps.Action]) -> int:
        """Perform the actions in order; an event replaces what is left with the machine's next ones."""
        while True:
            action = actions.pop(0)
            if isinstance(action, runsteps.Exit):
                return action.code
            event = self._perform_guarded(action)
            if event is not None:
                step = runstate.advance(self.state, event)
                self.state = step.state
                actions = list(step.actions)

    def _note(self, event: runsteps.Event) -> None:
        """A fact seen in the middle of an action: it changes the state, not the plan."""
        self.state = runstate.advance(self.state, event).state

    def _perform_guarded(self, action: runsteps.Action) -> runsteps.Event | None:
        try:
            if not runstate.is_interruptible(self.state):
                return self._perform(action)
            with self.deps.cancel.interruptible():
                return self._perform(action)
        except CancelRequested as cancel:
            log.warning(
                "signal received; stopping the remote job",
                extra={"signal": signal_name(cancel.signum), "job": self.state.job},
            )
            self.stop_deadline = self.deps.clock() + self.plan.tuning.cancel_grace_seconds
            return runsteps.Signalled(cancel.signum)
        except JarviceError as exc:
            return runsteps.Failed(failure_of(exc), str(exc))
        except Exception as exc:
            # The runner's boundary: a bug must not leave a job running that nobody follows.
            log.exception("runner failed unexpectedly", extra={"job": self.state.job})
            return runsteps.Failed("internal", repr(exc))

    def _perform(self, action: runsteps.Action) -> runsteps.Event | None:
        if isinstance(action, runsteps.InspectInheritedJob):
            return self.submitter.inspect_inherited(action.number)
        if isinstance(action, runsteps.ListLabelJobs):
            return self.submitter.list_label_jobs(action, deadline=self._deadline())
        if isinstance(action, runsteps.TerminateExtras):
            self.stopper.terminate_extras(action, deadline=self._deadline())
            return None
        if isinstance(action, runsteps.Adopt):
            self._adopt(action)
            return None
        if isinstance(action, runsteps.PrepareSubmit):
            return self.submitter.prepare()
        if isinstance(action, runsteps.Submit):
            return self.submitter.submit(action)
        if isinstance(action, runsteps.AwaitJob):
            return self.submitter.await_job()
        if isinstance(action, runsteps.AwaitGangJob):
            return self.waiter.await_job(action)
        if isinstance(action, runsteps.Follow):
            return self.follower.follow(action.number)
        if isinstance(action, runsteps.MoveJob):
            moved = self.stopper.move(action)
            self.submitter.moved(action)
            return moved
        if isinstance(action, runsteps.Retry):
            self.follower.pause_before_retry(action)
            return None
        if isinstance(action, runsteps.Finish):
            return self.follower.finish(action)
        if isinstance(action, runsteps.StopJob):
            return self.stopper.stop(action, deadline=self.stop_deadline)
        if isinstance(action, runsteps.Terminate):
            return self.stopper.terminate(action)
        if isinstance(action, runsteps.LeaveRunning):
            self.stopper.leave_running(action)
            return None
        if isinstance(action, runsteps.GiveUp):
            self._log_give_up(action)
            return None
        if isinstance(action, runsteps.Say):
            log.info("no job carries this attempt's label yet; submitting", extra={"job_label": self.label})
            return None
        raise AssertionError(f"unhandled action {action!r}")

    def _deadline(self) -> float | None:
        """How long a call may take: the signal's grace while stopping, the terminate's while giving up."""
        if self.state.phase == "stopping":
            return self.stop_deadline
        if self.state.phase == "giving_up":
            return self.deps.clock() + TERMINATE_SECONDS
        return None

    def _adopt(self, action: runsteps.Adopt) -> None:
        entry = action.entry
        message = _ADOPT_MESSAGES.get(action.how)
        if message is not None and entry is not None:
            extra: dict[str, object] = {"job": entry.number, "job_name": entry.name, "state": entry.state}
            log.info(message, extra={**extra, "job_label": self.label})
        elif action.how == "reattached":
            log.warning("the job carrying this label has another number now", extra={"job": action.number})
        if action.how in ("submitted", "resolved"):
            # A job of this runner's own submit: it may move to the next candidate (entrypoint.candidates).
            self.submitter.submitted_on[action.number] = self.submitter.current
        self.progress.save_job(action.number)

    def _log_give_up(self, action: runsteps.GiveUp) -> None:
        if action.failure == "internal":
            return  # logged with its traceback where it was caught
        extra: dict[str, object] = {"error": action.error, "job": self.state.job, "reason": action.reason}
        if action.failure == "app_not_found":
            extra["app"] = self.plan.app_name
        log.error(_GIVE_UP_MESSAGES.get(action.failure, "unexpected answer from JARVICE"), extra=extra)


def run_remote(plan: RemotePlan, deps: RemoteDeps, *, start: restart.StartDecision = FIRST_START) -> int:
    """Run the plan on JARVICE and return the exit status the pod should have.

    `start` says whether this runner picks up the job of an earlier runner of its container (see
    `entrypoint.restart`); the restart state goes to `deps.journal`.
    """
    return _RemoteRun(plan, deps, start).run()
