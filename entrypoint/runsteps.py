"""The words of the remote run's state machine (`entrypoint.runstate`): the events the shell
reports and the actions the machine asks of it. Pure, plain frozen data.
"""

from dataclasses import dataclass
from typing import Literal

from entrypoint import recovery
from jarvice.model import JobEntry, JobStatus

# --- events: what the shell saw ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Signalled:
    signum: int


@dataclass(frozen=True, slots=True)
class Failed:
    """A JARVICE call failed (its kind, `entrypoint.recovery.Failure`), or the runner itself ("internal")."""

    failure: recovery.Failure
    error: str


@dataclass(frozen=True, slots=True)
class InheritedJobAnswered:
    state: str


@dataclass(frozen=True, slots=True)
class InheritedJobUnknown:
    pass


@dataclass(frozen=True, slots=True)
class LabelListed:
    jobs: tuple[JobEntry, ...]  # the label's jobs that were asked for (live, or live and finished)


@dataclass(frozen=True, slots=True)
class NothingSubmitted:
    exit_code: int  # no machine fits, or it holds more GPUs than the budget counted


@dataclass(frozen=True, slots=True)
class SubmitPrepared:
    label_before: frozenset[int]


@dataclass(frozen=True, slots=True)
class SubmitPosting:
    pass


@dataclass(frozen=True, slots=True)
class SubmitAccepted:
    number: int


@dataclass(frozen=True, slots=True)
class SubmitDeclined:
    budget_spent: bool  # the outage budget is spent: no more submits
    error: str


@dataclass(frozen=True, slots=True)
class SubmitUnanswered:
    pass


@dataclass(frozen=True, slots=True)
class ResolveWindowClosed:
    budget_spent: bool
    error: str  # the submit's


@dataclass(frozen=True, slots=True)
class GangWaitClosed:
    """A following rank waited its whole window and no job of the gang's label appeared."""

    waited_seconds: float
    earlier_jobs: tuple[int, ...]  # the label's finished jobs from before this rank started


@dataclass(frozen=True, slots=True)
class StatusSeen:
    pass


@dataclass(frozen=True, slots=True)
class JobEnded:
    status: JobStatus


@dataclass(frozen=True, slots=True)
class QueuedTooLong:
    """The job this runner submitted is still queued past NIMBIX_BURST_MAX_REMOTE_QUEUE and a next
    candidate machine is left (`entrypoint.candidates.decide_move`)."""

    number: int
    to: str  # the next candidate
    reason: str


@dataclass(frozen=True, slots=True)
class MovedAway:
    """The queued job was terminated and is confirmed ended (a terminal status was seen)."""

    status: JobStatus


@dataclass(frozen=True, slots=True)
class OutputPrinted:
    pass


@dataclass(frozen=True, slots=True)
class ResultKnown:
    exit_code: int


@dataclass(frozen=True, slots=True)
class Stopped:
    pass


@dataclass(frozen=True, slots=True)
class TerminateAnswered:
    ended: tuple[bool, ...]  # per job: terminated, or found already ended


Event = (
    Signalled
    | Failed
    | InheritedJobAnswered
    | InheritedJobUnknown
    | LabelListed
    | NothingSubmitted
    | SubmitPrepared
    | SubmitPosting
    | SubmitAccepted
    | SubmitDeclined
    | SubmitUnanswered
    | ResolveWindowClosed
    | GangWaitClosed
    | StatusSeen
    | JobEnded
    | QueuedTooLong
    | MovedAway
    | OutputPrinted
    | ResultKnown
    | Stopped
    | TerminateAnswered
)

# --- actions: what the shell does next --------------------------------------------------------

AdoptHow = Literal[
    "inherited", "picked_up_by_label", "attached", "submitted", "resolved", "reattached", "gang_job_found"
]
Saying = Literal["no_job_for_label"]


@dataclass(frozen=True, slots=True)
class InspectInheritedJob:
    number: int


@dataclass(frozen=True, slots=True)
class ListLabelJobs:
    exclude: frozenset[int]  # jobs known not to be ours
    finished_too: bool  # False: the live listing only


@dataclass(frozen=True, slots=True)
class TerminateExtras:
    kept: int | None
    extras: tuple[int, ...]
    among: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Adopt:
    number: int
    how: AdoptHow
    entry: JobEntry | None = None


@dataclass(frozen=True, slots=True)
class PrepareSubmit:
    pass


@dataclass(frozen=True, slots=True)
class Submit:
    again: bool  # after a failure: back off first


@dataclass(frozen=True, slots=True)
class AwaitJob:
    """Pause before looking again, or close the resolve window."""


@dataclass(frozen=True, slots=True)
class AwaitGangJob:
    """A following rank: pause before looking for the gang's job again, or close the wait."""

    earlier_jobs: tuple[int, ...]  # the label's finished jobs from before this rank started (not ours)


@dataclass(frozen=True, slots=True)
class Follow:
    number: int


@dataclass(frozen=True, slots=True)
class MoveJob:
    """Terminate the queued job and poll it until it has ended; only then is the next one submitted."""

    number: int
    to: str
    reason: str


@dataclass(frozen=True, slots=True)
class Retry:
    number: int
    how: recovery.Action
    attempt: int  # the failures so far, this one included
    error: str


@dataclass(frozen=True, slots=True)
class Finish:
    status: JobStatus
    print_output: bool


@dataclass(frozen=True, slots=True)
class StopJob:
    number: int | None  # None: nothing to stop
    drain_output: bool


@dataclass(frozen=True, slots=True)
class GiveUp:
    failure: recovery.Failure
    reason: str
    error: str


@dataclass(frozen=True, slots=True)
class Terminate:
    numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LeaveRunning:
    job: int | None
    error: str


@dataclass(frozen=True, slots=True)
class Say:
    what: Saying


@dataclass(frozen=True, slots=True)
class Exit:
    code: int


Action = (
    InspectInheritedJob
    | ListLabelJobs
    | TerminateExtras
    | Adopt
    | PrepareSubmit
    | Submit
    | AwaitJob
    | AwaitGangJob
    | Follow
    | MoveJob
    | Retry
    | Finish
    | StopJob
    | GiveUp
    | Terminate
    | LeaveRunning
    | Say
    | Exit
)
