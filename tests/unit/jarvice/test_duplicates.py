"""At most one job of a label may run: the lowest-numbered live job is kept (the rule the
controller's reaper follows too); the other live ones are to be terminated."""

import pytest

from jarvice import duplicates
from jarvice.model import JobEntry


def job(number: int, state: str) -> JobEntry:
    return JobEntry(number=number, name=f"job-{number}", state=state, label="k8s-x-1", exitcode=None)


RUN, QUEUED, DONE, FAILED = "PROCESSING STARTING", "SUBMITTED", "COMPLETED", "COMPLETED WITH ERROR"


@pytest.mark.parametrize(
    ("jobs", "kept", "extra"),
    [
        ([], None, []),
        ([job(5, RUN)], 5, []),
        ([job(7, RUN), job(5, QUEUED)], 5, [7]),
        ([job(9, QUEUED), job(8, RUN), job(12, RUN)], 8, [9, 12]),
        ([job(3, DONE), job(8, RUN)], 8, []),  # a finished job is never kept over a live one
        ([job(3, DONE), job(4, FAILED)], 4, []),  # none live: the newest finished one (its result)
        ([job(4, "completed"), job(6, "terminated")], 6, []),  # states compared case-insensitively
        ([job(6, "SEQUENTIALLY QUEUED"), job(2, "CANCELED"), job(11, QUEUED)], 6, [11]),
    ],
    ids=["none", "one", "lowest-live", "three-live", "finished-and-live", "all-finished", "lower-case", "mixed"],
)
def test_decide_kept_job(jobs: list[JobEntry], kept: int | None, extra: list[int]) -> None:
    decision = duplicates.decide_kept_job(jobs)
    assert (decision.kept.number if decision.kept else None) == kept
    assert [j.number for j in decision.extra] == extra
