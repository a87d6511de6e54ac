"""The move Event: a burst pod's new job whose predecessor JARVICE ended without ever starting it (the
runner moved it off a full machine) is recorded as a move, once."""

from __future__ import annotations

import pytest

from controller.jobrecords import REASON_MOVED, BurstPod, JobFacts, plan_pod
from controller.pricing import Rate
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
START = 1_700_000_000
RATES = {"ng4": Rate(gpus=4, price=8.40), "ng4v": Rate(gpus=4, price=10.20)}


def job(number: int, state: str, machine: str, *, start: int = 0, exitcode: int | None = None) -> JobFacts:
    return JobFacts(number, state, "", exitcode, machine, 1, start, START + 60 if state == "TERMINATED" else 0)


def events(jobs: list[JobFacts], ledger: str = "") -> list[tuple[int, str, str]]:
    pod = BurstPod(UID, "team", "train-0", False, {"nimbix-burst.io/jobs": ledger} if ledger else {})
    return [(e.job, e.reason, e.message) for e in plan_pod(pod, jobs, rates=RATES, now=START + 120).events]


MOVED_AWAY = job(1000, "TERMINATED", "ng4", exitcode=-15)


@pytest.mark.parametrize(
    ("jobs", "ledger", "moved"),
    [
        pytest.param([MOVED_AWAY, job(1001, "SUBMITTED", "ng4v")], "1000=queued", True, id="the next job appears"),
        pytest.param([MOVED_AWAY, job(1001, "SUBMITTED", "ng4v")], "1000=failed,1001=submitted", False, id="recorded"),
        pytest.param(
            [job(1000, "TERMINATED", "ng4", start=START), job(1001, "SUBMITTED", "ng4v")],
            "1000=running",
            False,
            id="the first had run: a retry, not a move",
        ),
        pytest.param(
            [job(1000, "COMPLETED", "ng4", start=START, exitcode=1), job(1001, "SUBMITTED", "ng4v")],
            "1000=running",
            False,
            id="after a completed job",
        ),
        pytest.param([MOVED_AWAY], "1000=queued", False, id="no next job yet"),
        pytest.param(
            [job(1000, "CANCELED", "ng4", exitcode=-15), job(1001, "SUBMITTED", "ng4v")],
            "1000=queued",
            True,
            id="the queued job ended CANCELED",
        ),
    ],
)
def test_the_move_event(jobs: list[JobFacts], ledger: str, moved: bool) -> None:
    found = [e for e in events(jobs, ledger) if e[1] == REASON_MOVED]
    if not moved:
        assert found == []
        return
    ((number, _, message),) = found
    assert number == 1001
    assert message == (
        "JARVICE job 1000 on machine ng4 x1 was terminated while queued (it never started, no cost);"
        " moved to job 1001 on machine ng4v x1"
    )


def test_the_move_comes_with_the_new_jobs_submitted_event_and_the_old_ones_end() -> None:
    recorded = events([MOVED_AWAY, job(1001, "SUBMITTED", "ng4v")], "1000=queued")
    assert [reason for _, reason, _ in recorded] == ["NimbixFailed", "NimbixSubmitted", REASON_MOVED]
