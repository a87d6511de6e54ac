"""The remote run's money rules as a state machine: a state and an event in, the next state and the
actions out. Pure.

The runner keeps two promises, and this module is where a reviewer checks them:
- never two jobs: one job per label is followed (the lowest-numbered live one, `jarvice.duplicates`);
  every other live job of the label is terminated at once; a submit whose outcome is unknown is
  resolved by looking for its job by the label before anything is submitted again;
- never an abandoned job: a job that may be ours is followed to its end, stopped, or left reported as
  "may run" (`RunState.job_may_run`), so that a restarted runner picks it up and the webhook's budget
  keeps counting it.

The imperative shell (`entrypoint.remote` and the modules it drives) performs one action at a time
and turns what JARVICE answered into the next event. `advance(state, event)` is the whole table:

| phase       | event                  | next phase  | actions                                                   |
|-------------|------------------------|-------------|-----------------------------------------------------------|
| (start)     | first / retry          | attaching   | list the label's live jobs                                |
| (start)     | pick up, number known  | picking_up  | inspect the inherited job (it is ours: a signal stops it) |
| (start)     | pick up, label only    | picking_up  | list the label's jobs                                     |
| picking_up  | inherited job answered | following   | adopt it, follow                                          |
| picking_up  | inherited job unknown  | picking_up  | list the label's jobs                                     |
| picking_up  | label listed           | following   | terminate extras, adopt the kept job, follow              |
| picking_up  | label listed, none     | attaching   | list the label's live jobs                                |
| attaching   | label listed           | following   | terminate extras, adopt the lowest live job, follow       |
| attaching   | label listed, none     | submitting  | prepare the submit (machine, GPU budget, the label's jobs)|
| submitting  | nothing submitted      | done        | exit (no machine fits, over the GPU budget)               |
| submitting  | submit prepared        | submitting  | submit                                                    |
| submitting  | submit posting         | submitting  | (a job may exist from now on: the label's new jobs)       |
| submitting  | submit accepted        | following   | adopt the job, follow                                     |
| submitting  | submit declined        | submitting  | submit again (nothing was created: no look)               |
| submitting  | submit unanswered      | resolving   | list the label's new jobs                                 |
| resolving   | label listed           | following   | terminate extras, adopt the kept job, follow              |
| resolving   | label listed, none     | resolving   | wait (the resolve window), list again                     |
| resolving   | resolve window closed  | submitting  | submit again (still looking for the same new jobs)        |
| following   | status seen            | following   | (the failure streak ends)                                 |
| following   | job ended              | finishing   | final output (once), exit status                          |
| following   | label listed           | following   | terminate extras, adopt the lowest live job, follow       |
| following   | queued too long        | moving      | terminate the queued job, poll it until it has ended      |
| moving      | moved away, never ran  | submitting  | prepare the submit on the next candidate machine          |
| moving      | moved away, it ran     | finishing   | final output (once), exit status (it ended meanwhile)     |
| moving      | a call failed          | moving      | what the recovery table retries: wait, move again         |
| finishing   | result known           | done        | exit with the job's status                                |
| any working | signal                 | stopping    | stop the job (or look it up by the label, then stop it)   |
| stopping    | label listed           | stopping    | terminate extras, stop the lowest live job                |
| stopping    | stopped                | done        | exit 143, the job no longer runs                          |
| stopping    | a call failed          | done        | say the job may run, exit 143                             |
| any working | a call failed          | (recovery)  | `entrypoint.recovery`: retry, re-attach or give up        |
| giving_up   | label listed           | giving_up   | terminate every new job of the label                      |
| giving_up   | terminate answered     | done        | exit; the job may run unless every terminate was answered |
| giving_up   | a call failed          | done        | exit; the job may run (its number cannot be told)         |

A move (`entrypoint.candidates`) keeps "never two jobs": the next job is submitted only after the
queued one was seen ended. A failure while moving gives up like any other (the job is terminated).

Submit declined and resolve window closed give up ("unavailable") once the outage budget is spent.

A gang's following rank (ranks 1.., `entrypoint.gang`) never submits: rank 0 does. Its own rows
(it follows without printing the job's output; rank 0's pod carries that):

| phase       | event                  | next phase  | actions                                                   |
|-------------|------------------------|-------------|-----------------------------------------------------------|
| (start)     | first / retry          | awaiting    | list the label's jobs (a signal now stops the live one)   |
| picking_up  | label listed, none     | awaiting    | list the label's jobs                                     |
| awaiting    | label listed           | following   | terminate extras, adopt the lowest live job (or the newest|
|             |                        |             | that ended after this rank started), follow               |
| awaiting    | label listed, none     | awaiting    | wait (the gang wait), list again                          |
| awaiting    | gang wait closed       | done        | exit 71; the job may still come (its GPUs stay counted)   |
| awaiting    | a call failed          | awaiting    | one the recovery table retries: wait, list again          |
| awaiting    | a call failed for good | done        | exit; terminate nothing (rank 0 owns the submission)      |
"""

from dataclasses import dataclass, replace
from typing import Final, Literal

from entrypoint import gang, recovery, restart
from entrypoint.runsteps import (
    Action,
    Adopt,
    AdoptHow,
    AwaitGangJob,
    AwaitJob,
    Event,
    Exit,
    Failed,
    Finish,
    Follow,
    GangWaitClosed,
    GiveUp,
    InheritedJobAnswered,
    InheritedJobUnknown,
    InspectInheritedJob,
    JobEnded,
    LabelListed,
    LeaveRunning,
    ListLabelJobs,
    MovedAway,
    MoveJob,
    NothingSubmitted,
    OutputPrinted,
    PrepareSubmit,
    QueuedTooLong,
    ResolveWindowClosed,
    ResultKnown,
    Retry,
    Say,
    Signalled,
    StatusSeen,
    StopJob,
    Stopped,
    Submit,
    SubmitAccepted,
    SubmitDeclined,
    SubmitPosting,
    SubmitPrepared,
    SubmitUnanswered,
    Terminate,
    TerminateAnswered,
    TerminateExtras,
)
from jarvice import duplicates, exitcodes
from jarvice.model import JobEntry, ended_without_running, is_terminal

Phase = Literal[
    "picking_up",  # a job an earlier runner of this container started is being looked at
    "attaching",  # looking for a live job carrying the label before submitting
    "submitting",  # the submit POST, and its retries within the outage budget
    "resolving",  # a submit with an unknown outcome: its job is looked for by the label
    "awaiting",  # a gang's following rank looks for the job rank 0 submits
    "following",  # the job is known: polling, streaming, retrying, re-attaching
    "moving",  # the job stayed queued too long: it is terminated, and seen ended, before the next submit
    "finishing",  # the job ended: its final output and exit status
    "stopping",  # a signal came: the job is being stopped
    "giving_up",  # a failure the runner cannot get past: the job is stopped before the exit
    "done",
]
# Where a signal stops the run at once; while stopping or giving up it is only recorded.
WORKING_PHASES: Final[frozenset[Phase]] = frozenset(
    {"picking_up", "attaching", "submitting", "resolving", "awaiting", "following", "moving", "finishing"}
)


@dataclass(frozen=True, slots=True)
class RunState:
    phase: Phase
    job: int | None = None  # the job followed: ours, stopped by a signal or a give-up
    # Set while a job of ours may exist whose number is not known (a submit with an unknown
    # outcome, a job inherited by its label only): the label's jobs that are not it.
    unseen: frozenset[int] | None = None
    # The job may still run when the runner exits: then the exit is not "reported", and a
    # restarted runner picks the job up. A job handed down by an earlier runner is ours from the start.
    job_may_run: bool = False
    output_done: bool = False  # the final output was printed: never print it twice
    failures: int = 0  # consecutive failures while following (a seen status ends the streak)
    label_before: frozenset[int] = frozenset()  # the label's jobs before the submit: not ours
    exit_code: int | None = None  # decided when stopping or giving up
    # A gang's following rank: it never submits, never prints the job's output, and takes a
    # finished job of the label only if it ended at or after `started_at` (Unix seconds).
    follower: bool = False
    started_at: int = 0
    move: MoveJob | None = None  # while moving: the move, done again after a failure the recovery table retries


@dataclass(frozen=True, slots=True)
class Step:
    state: RunState
    actions: tuple[Action, ...] = ()


class UnexpectedEvent(ValueError):
    """An event the phase does not expect: a bug in the shell."""


# --- the table --------------------------------------------------------------------------------


def begin(start: restart.StartDecision, *, follower_since: int | None = None) -> Step:
    """The first step: pick the earlier runner's job up, or look for a live job of the label.

    `follower_since` (Unix seconds, when this runner started) makes the run a gang's following
    rank: it looks for the job rank 0 submits instead of submitting one.
    """
    initial = RunState("attaching")
    if follower_since is not None:
        initial = replace(initial, follower=True, started_at=follower_since)
    previous = start.previous if start.kind == "pick_up" else None
    if previous is None:
        if initial.follower:
            return _await(initial)
        return Step(initial, (ListLabelJobs(frozenset(), finished_too=False),))
    if previous.job_number is not None:
        number = previous.job_number
        picking = replace(initial, phase="picking_up", job=number, job_may_run=True)
        return Step(picking, (InspectInheritedJob(number),))
    return Step(
        replace(initial, phase="picking_up", unseen=frozenset(), job_may_run=True),
        (ListLabelJobs(frozenset(), finished_too=True),),
    )


def _await(state: RunState, *first: Action) -> Step:
    """A following rank looks (again) for the gang's job; until it has one, a signal looks the
    label up and stops the live job (`unseen`), and an exit leaves it "may run" for the controller."""
    awaiting = replace(state, phase="awaiting", job=None, unseen=frozenset(), job_may_run=True)
    return Step(awaiting, (*first, ListLabelJobs(frozenset(), finished_too=True)))


def is_interruptible(state: RunState) -> bool:
    """Whether a signal interrupts what the shell is doing (while stopping or giving up it waits)."""
    return state.phase in WORKING_PHASES


def is_reported(state: RunState) -> bool:
    """The exit is reported (a restart is a deliberate retry) only when the job no longer runs."""
    return not state.job_may_run


def advance(state: RunState, event: Event) -> Step:
    """The next state and actions after `event` (see the table in the module's docstring)."""
    if isinstance(event, Signalled):
        return _on_signal(state)
    if isinstance(event, Failed):
        return _on_failure(state, event)
    if isinstance(event, LabelListed):
        return _on_label_listed(state, event.jobs)
    if isinstance(event, OutputPrinted):
        return Step(replace(state, output_done=True))
    phase = state.phase
    if phase == "picking_up":
        return _picking_up(state, event)
    if phase == "submitting":
        return _submitting(state, event)
    if phase == "awaiting" and isinstance(event, GangWaitClosed):
        return _exit(state, exitcodes.EXIT_NO_GANG_JOB)
    if phase == "resolving" and isinstance(event, ResolveWindowClosed):
        return _submit_again(state, budget_spent=event.budget_spent, error=event.error)
    if phase == "following":
        return _following(state, event)
    if phase == "moving" and isinstance(event, MovedAway):
        return _moved(state, event)
    if phase == "finishing" and isinstance(event, ResultKnown):
        return _exit(state, event.exit_code)
    if phase == "stopping" and isinstance(event, Stopped):
        return _exit(replace(state, job_may_run=False), exitcodes.EXIT_TERMINATED)
    if phase == "giving_up" and isinstance(event, TerminateAnswered):
        code = _decided_code(state)
        return _exit(replace(state, job_may_run=not all(event.ended)), code)
    raise UnexpectedEvent(f"{type(event).__name__} while {phase}")


def _picking_up(state: RunState, event: Event) -> Step:
    if isinstance(event, InheritedJobAnswered) and state.job is not None:
        return _adopt(state, state.job, "inherited")
    if isinstance(event, InheritedJobUnknown):
        # The number in the restart state is unknown to JARVICE: the job may still exist under the label.
        return Step(replace(state, job=None, unseen=frozenset()), (ListLabelJobs(frozenset(), finished_too=True),))
    raise UnexpectedEvent(f"{type(event).__name__} while picking_up")


def _submitting(state: RunState, event: Event) -> Step:
    if isinstance(event, NothingSubmitted):
        return _exit(state, event.exit_code)
    if isinstance(event, SubmitPrepared):
        return Step(replace(state, label_before=event.label_before), (Submit(again=False),))
    if isinstance(event, SubmitPosting):
        # From here on a job of ours may exist: a signal or a give-up looks for it by the label.
        return Step(replace(state, unseen=state.label_before))
    if isinstance(event, SubmitAccepted):
        return _adopt(state, event.number, "submitted")
    if isinstance(event, SubmitDeclined):
        # Refused (429): nothing was created, so there is nothing to look for.
        return _submit_again(replace(state, unseen=None), budget_spent=event.budget_spent, error=event.error)
    if isinstance(event, SubmitUnanswered):
        # One look is not enough: a gateway's 5xx may come before JARVICE creates the job.
        return Step(replace(state, phase="resolving"), (ListLabelJobs(state.label_before, finished_too=True),))
    raise UnexpectedEvent(f"{type(event).__name__} while submitting")


def _following(state: RunState, event: Event) -> Step:
    if isinstance(event, StatusSeen):
        return Step(replace(state, failures=0))
    if isinstance(event, JobEnded):
        finishing = replace(state, phase="finishing", job_may_run=False, failures=0)
        return Step(finishing, (Finish(event.status, print_output=_prints_output(state)),))
    if isinstance(event, QueuedTooLong) and event.number == state.job:
        move = MoveJob(event.number, event.to, event.reason)
        return Step(replace(state, phase="moving", failures=0, move=move), (move,))
    raise UnexpectedEvent(f"{type(event).__name__} while following")


def _moved(state: RunState, event: MovedAway) -> Step:
    """The queued job has ended: submit on the next machine, unless it ran meanwhile (then it is the result)."""
    status = event.status
    if ended_without_running(status.state, status.start_time):  # TERMINATED or CANCELED, never started
        submitting = replace(state, phase="submitting", job=None, unseen=None, job_may_run=False, failures=0, move=None)
        return Step(submitting, (PrepareSubmit(),))
    finishing = replace(state, phase="finishing", job_may_run=False, failures=0, move=None)
    return Step(finishing, (Finish(status, print_output=_prints_output(state)),))


def _submit_again(state: RunState, *, budget_spent: bool, error: str) -> Step:
    if budget_spent:
        return _give_up(state, Failed("unavailable", error), failures=0)
    return Step(replace(state, phase="submitting"), (Submit(again=True),))


def _on_label_listed(state: RunState, jobs: tuple[JobEntry, ...]) -> Step:
    phase = state.phase
    if phase == "giving_up":
        # Every job of the label that was not there before may be ours: stop them all.
        if not jobs:
            return _exit(replace(state, job_may_run=True), _decided_code(state))  # cannot tell: the next runner looks
        return Step(state, (Terminate(tuple(job.number for job in jobs)),))
    live_only = phase in ("attaching", "following", "stopping")
    candidates = [job for job in jobs if not is_terminal(job.state)] if live_only else list(jobs)
    earlier: tuple[int, ...] = ()
    if phase == "awaiting":
        candidates = list(gang.select_gang_jobs(jobs, started_at=state.started_at))
        earlier = tuple(job.number for job in jobs if job not in candidates)
    decision = duplicates.decide_kept_job(candidates)
    kept = decision.kept
    extras: tuple[Action, ...] = ()
    if decision.extra:
        extras = (
            TerminateExtras(
                kept.number if kept else None,
                tuple(job.number for job in decision.extra),
                tuple(job.number for job in candidates),
            ),
        )
    if phase == "stopping":
        target = kept.number if kept is not None else None
        return Step(state, (*extras, StopJob(target, drain_output=_prints_output(state))))
    if kept is not None:
        how = _ADOPT_HOW.get(phase)
        if how is None:
            raise UnexpectedEvent(f"LabelListed while {phase}")
        if phase == "following" and kept.number == state.job:
            return Step(state, (*extras, Follow(kept.number)))
        step = _adopt(state, kept.number, how, kept)
        return Step(step.state, (*extras, *step.actions))
    if phase == "awaiting":
        step = _await(replace(state, failures=0), AwaitGangJob(earlier))
        return Step(step.state, (*extras, *step.actions))
    if phase == "picking_up" and state.follower:
        step = _await(state)
        return Step(step.state, (*extras, *step.actions))
    if phase == "picking_up":
        nothing = replace(state, phase="attaching", unseen=None, job_may_run=False)
        return Step(nothing, (*extras, Say("no_job_for_label"), ListLabelJobs(frozenset(), finished_too=False)))
    if phase == "attaching":
        return Step(replace(state, phase="submitting"), (*extras, PrepareSubmit()))
    if phase == "resolving":
        return Step(state, (*extras, AwaitJob(), ListLabelJobs(state.label_before, finished_too=True)))
    if phase == "following" and state.job is not None:
        return Step(state, (*extras, Follow(state.job)))
    raise UnexpectedEvent(f"LabelListed while {phase}")


_ADOPT_HOW: Final[dict[Phase, AdoptHow]] = {
    "picking_up": "picked_up_by_label",
    "attaching": "attached",
    "resolving": "resolved",
    "following": "reattached",
    "awaiting": "gang_job_found",
}


def _adopt(state: RunState, number: int, how: AdoptHow, entry: JobEntry | None = None) -> Step:
    """The job is ours: follow it; it may run until it is seen finished."""
    following = replace(state, phase="following", job=number, unseen=None, job_may_run=True)
    return Step(following, (Adopt(number, how, entry), Follow(number)))


def _on_signal(state: RunState) -> Step:
    if not is_interruptible(state):
        return Step(state)  # recorded only: stopping or giving up goes on
    stopping = replace(state, phase="stopping", exit_code=exitcodes.EXIT_TERMINATED)
    if state.job is None and state.unseen is not None:
        # A job of ours may run under the label (a submit with an unknown outcome, a job inherited
        # by its label): look it up, stop the live one.
        return Step(stopping, (ListLabelJobs(state.unseen, finished_too=True),))
    return Step(stopping, (StopJob(state.job, drain_output=_prints_output(state)),))


def _on_failure(state: RunState, event: Failed) -> Step:
    phase = state.phase
    if phase == "stopping":
        return _exit(replace(state, job_may_run=True), exitcodes.EXIT_TERMINATED, LeaveRunning(state.job, event.error))
    if phase == "giving_up":
        # The label could not be looked up: a job of ours may run, the next runner looks for it.
        return _exit(replace(state, job_may_run=True), _decided_code(state))
    if phase == "awaiting":
        return _on_failure_awaiting(state, event)
    if phase == "moving" and state.move is not None and state.job is not None:
        # The terminate or the look after it failed: do the move again (terminating an ended job is harmless).
        decision = recovery.decide_recovery(event.failure, job_known=True, failures=state.failures)
        if decision.action == "give_up":
            return _give_up(state, event, failures=state.failures)
        attempt = state.failures + 1
        return Step(replace(state, failures=attempt), (Retry(state.job, "retry", attempt, event.error), state.move))
    if phase in ("following", "finishing") and state.job is not None:
        decision = recovery.decide_recovery(event.failure, job_known=True, failures=state.failures)
        if decision.action == "give_up":
            return _give_up(state, event, failures=state.failures)
        attempt = state.failures + 1
        retry = Retry(state.job, decision.action, attempt, event.error)
        following = replace(state, phase="following", failures=attempt)
        if decision.action == "reattach":
            return Step(following, (retry, ListLabelJobs(frozenset(), finished_too=True)))
        return Step(following, (retry, Follow(state.job)))
    return _give_up(state, event, failures=0)


def _on_failure_awaiting(state: RunState, event: Failed) -> Step:
    """A following rank keeps waiting through what the recovery table would retry (the gang wait
    bounds it); past that it exits and terminates nothing: rank 0 owns the job and follows it."""
    decision = recovery.decide_recovery(event.failure, job_known=True, failures=state.failures)
    if decision.action != "give_up":
        step = _await(replace(state, failures=state.failures + 1), AwaitGangJob(()))
        return step
    # Said as what it is: a failure before this rank had a job.
    reason = recovery.decide_recovery(event.failure, job_known=False, failures=state.failures).reason
    return _exit(replace(state, phase="giving_up"), decision.exit_code, GiveUp(event.failure, reason, event.error))


def _give_up(state: RunState, event: Failed, *, failures: int) -> Step:
    """Before any job, just exit; with a job that may be ours, stop it first (best effort).

    Outside following, a failure the recovery table would retry still ends the run, without
    stopping the job: the job stays "may run" for the next runner to pick up, and so does one an
    unanswered submit may have made (`unseen` is set until the label has been looked at).
    """
    job_known = state.job is not None or state.unseen is not None
    decision = recovery.decide_recovery(event.failure, job_known=job_known, failures=failures)
    giving_up = replace(state, phase="giving_up", exit_code=decision.exit_code)
    say = GiveUp(event.failure, decision.reason, event.error)
    if decision.action == "give_up" and decision.terminate:
        if state.job is not None:
            return Step(giving_up, (say, Terminate((state.job,))))
        if state.unseen is not None:
            return Step(giving_up, (say, ListLabelJobs(state.unseen, finished_too=True)))
    may_run = giving_up.job_may_run or giving_up.unseen is not None
    return _exit(replace(giving_up, job_may_run=may_run), decision.exit_code, say)


def _prints_output(state: RunState) -> bool:
    """Whether the job's output is still to be printed: not when it was, nor by a following rank."""
    return not state.output_done and not state.follower


def _decided_code(state: RunState) -> int:
    return state.exit_code if state.exit_code is not None else exitcodes.EXIT_INTERNAL


def _exit(state: RunState, code: int, *first: Action) -> Step:
    return Step(replace(state, phase="done", exit_code=code), (*first, Exit(code)))
