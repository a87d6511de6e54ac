"""The gang variables a burst pod's runner reads, and the gang's rules: tables, oracles from the rules."""

import pytest

from entrypoint import gang
from entrypoint.gang import Gang, carries_data
from jarvice.model import JobEntry
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

UID = "0b1f7c1e-5d2a-4c7e-9a55-3f1e2d4c6b8a"


def env(**values: str) -> dict[str, str]:
    base = {"NIMBIX_BURST_GANG_UID": UID, "NIMBIX_BURST_GANG_SIZE": "2", "NIMBIX_BURST_GANG_RANK": "1"}
    base.update(values)
    return {k: v for k, v in base.items() if v != "-"}


@pytest.mark.parametrize(
    ("variables", "nodes", "expected"),
    [
        ({}, None, Gang(UID, 2, 1)),
        ({"NIMBIX_BURST_GANG_RANK": "0"}, None, Gang(UID, 2, 0)),
        ({"NIMBIX_BURST_GANG_SIZE": " 3 ", "NIMBIX_BURST_GANG_RANK": " 2 "}, None, Gang(UID, 3, 2)),
        ({"NIMBIX_BURST_GANG_SIZE": "1", "NIMBIX_BURST_GANG_RANK": "0"}, None, Gang(UID, 1, 0)),
        ({}, 2, Gang(UID, 2, 1)),  # JARVICE_NODES that agrees is no conflict
        ({"MASTER_PORT": "23456"}, None, Gang(UID, 2, 1, master_port=23456)),
        ({"NIMBIX_BURST_GANG_SINCE": "1789999980"}, None, Gang(UID, 2, 1, since=1_789_999_980)),
        ({"NIMBIX_BURST_GANG_SINCE": " "}, None, Gang(UID, 2, 1)),
    ],
    ids=["rank-1", "rank-0", "spaces", "size-1", "agreeing-nodes", "master-port", "since", "blank-since"],
)
def test_a_gang(variables: dict[str, str], nodes: int | None, expected: Gang) -> None:
    assert gang.parse_gang(env(**variables), nodes=nodes) == (expected, [])


def test_no_gang_variables_is_no_gang() -> None:
    assert gang.parse_gang({"MASTER_PORT": "oops"}, nodes=3) == (None, [])


@pytest.mark.parametrize(
    ("variables", "nodes", "problem"),
    [
        ({"NIMBIX_BURST_GANG_RANK": "-"}, None, "missing NIMBIX_BURST_GANG_RANK"),
        ({"NIMBIX_BURST_GANG_UID": " "}, None, "missing NIMBIX_BURST_GANG_UID"),
        ({"NIMBIX_BURST_GANG_UID": "gang-1"}, None, "NIMBIX_BURST_GANG_UID must be a lowercase UUID"),
        ({"NIMBIX_BURST_GANG_UID": UID.upper()}, None, "NIMBIX_BURST_GANG_UID must be a lowercase UUID"),
        ({"NIMBIX_BURST_GANG_SIZE": "two"}, None, "NIMBIX_BURST_GANG_SIZE must be the number of pods"),
        ({"NIMBIX_BURST_GANG_SIZE": "0", "NIMBIX_BURST_GANG_RANK": "0"}, None, "NIMBIX_BURST_GANG_SIZE must be >= 1"),
        ({"NIMBIX_BURST_GANG_RANK": "2"}, None, "NIMBIX_BURST_GANG_RANK must be within 0..1"),
        ({"NIMBIX_BURST_GANG_RANK": "-1"}, None, "NIMBIX_BURST_GANG_RANK must be within 0..1"),
        ({}, 4, "JARVICE_NODES=4 conflicts with NIMBIX_BURST_GANG_SIZE=2"),
        ({"MASTER_PORT": "70000"}, None, "MASTER_PORT must be a TCP port"),
        ({"MASTER_PORT": "http"}, None, "MASTER_PORT must be a TCP port"),
        ({"NIMBIX_BURST_GANG_SINCE": "yesterday"}, None, "NIMBIX_BURST_GANG_SINCE must be Unix seconds"),
    ],
    ids=[
        "partial",
        "blank-uid",
        "not-a-uuid",
        "uppercase-uuid",
        "size-not-a-number",
        "size-zero",
        "rank-too-high",
        "rank-negative",
        "nodes-conflict",
        "port-too-high",
        "port-not-a-number",
        "since-not-a-number",
    ],
)
def test_a_gang_that_cannot_be_used_says_what_to_fix(
    variables: dict[str, str], nodes: int | None, problem: str
) -> None:
    parsed, problems = gang.parse_gang(env(**variables), nodes=nodes)
    assert parsed is None
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    ("master_port", "command", "expected"),
    [
        (None, "torchrun train.py", "torchrun train.py"),
        (23456, "torchrun train.py", "export MASTER_PORT=23456; torchrun train.py"),
    ],
    ids=["default-port", "pod-port"],
)
def test_the_gangs_command(master_port: int | None, command: str, expected: str) -> None:
    assert gang.build_gang_command(command, Gang(UID, 2, 0, master_port=master_port)) == expected


def test_only_rank_0_submits() -> None:
    assert [Gang(UID, 3, rank).submits for rank in range(3)] == [True, False, False]


def entry(number: int, state: str, ended: int = 0) -> JobEntry:
    return JobEntry(number, f"job-{number}", state, "label", None, end_time=ended)


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ([entry(1, "PROCESSING STARTING")], [1]),
        ([entry(1, "SUBMITTED")], [1]),
        ([entry(1, "COMPLETED", ended=100)], [1]),  # ended as this rank started: this run's
        ([entry(1, "COMPLETED", ended=160)], [1]),
        ([entry(1, "TERMINATED", ended=99)], []),  # ended before: an earlier run's
        ([entry(1, "COMPLETED", ended=0)], []),  # no end time: cannot be told to be this run's
        ([entry(1, "TERMINATED", ended=50), entry(2, "SUBMITTED")], [2]),
    ],
    ids=["running", "queued", "ended-at-start", "ended-after", "ended-before", "no-end-time", "old-and-new"],
)
def test_which_of_the_labels_jobs_a_following_rank_may_take(jobs: list[JobEntry], expected: list[int]) -> None:
    assert [job.number for job in gang.select_gang_jobs(jobs, started_at=100)] == expected


@pytest.mark.parametrize(
    ("since", "expected"),
    [
        (None, 100),  # not told: from this runner's start
        (40, 40),  # its generation began earlier (the rank came late): its job may have ended meanwhile
        (130, 100),  # a clock ahead of this one's: never later than this runner's start
    ],
    ids=["not-told", "generation-began-earlier", "later-than-the-start"],
)
def test_a_following_rank_takes_finished_jobs_from_when_its_generation_began(since: int | None, expected: int) -> None:
    assert gang.follower_since(Gang(UID, 2, 1, since=since), now=100) == expected


def test_a_rank_that_came_late_follows_its_gangs_job_that_ended_before_it_started() -> None:
    # Rank 0's pod came at 40, its job ended at 70; this rank's pod came at 90, its runner started at 100.
    completed = [entry(7, "COMPLETED", ended=70)]
    started_at = gang.follower_since(Gang(UID, 2, 1, since=40), now=100)
    assert [job.number for job in gang.select_gang_jobs(completed, started_at=started_at)] == [7]


@pytest.mark.parametrize(
    ("rank", "expected"),
    [(None, True), (0, True), (1, False), (3, False)],
    ids=["pod-on-its-own", "submitting-rank", "rank-1", "rank-3"],
)
def test_only_a_pod_on_its_own_or_the_submitting_rank_stages_data(rank: int | None, expected: bool) -> None:
    member = None if rank is None else Gang(uid="0e3c2f4a-1b2c-4d5e-8f90-123456789abc", size=4, rank=rank)
    assert carries_data(member) is expected
