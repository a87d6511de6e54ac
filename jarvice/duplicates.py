"""Which of a label's JARVICE jobs is the one: at most one job of a label may run. Pure.

A job label names one container's attempt, so two live jobs with one label are a duplicate: a
submit whose answer was lost and that was sent again, a gateway that retried a POST upstream.
The rule, shared by the runner and the controller's reaper so both keep the same job: the
lowest-numbered live (non-terminal) job of a label is kept; every other live job of that label
is terminated at once.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from jarvice.model import is_terminal


class NumberedJob(Protocol):
    """What the rule reads of a job: the runner's `JobEntry` and the reaper's `Job` both have it."""

    @property
    def number(self) -> int: ...

    @property
    def state(self) -> str: ...


J = TypeVar("J", bound=NumberedJob)


@dataclass(frozen=True, slots=True)
class KeptJob(Generic[J]):
    kept: J | None  # the job to follow; None when the label has no job at all
    extra: tuple[J, ...]  # the label's other live jobs, lowest number first: terminate them


def decide_kept_job(jobs: Iterable[J]) -> KeptJob[J]:
    """The job of one label to follow, and the live ones to terminate.

    `jobs` are all of one label (live and finished, in any order). The lowest-numbered live job is
    kept; without a live one, the newest finished job is (its output and exit code are the result).
    """
    ordered = sorted(jobs, key=lambda job: job.number)
    live = [job for job in ordered if not is_terminal(job.state)]
    if live:
        return KeptJob(kept=live[0], extra=tuple(live[1:]))
    return KeptJob(kept=ordered[-1] if ordered else None, extra=())
