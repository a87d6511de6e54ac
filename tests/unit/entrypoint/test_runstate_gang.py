"""A gang's following rank in the runner's money rules: it never submits, waits a bounded time
for rank 0's job, follows it without printing its output, stops it on a signal, and never takes
an earlier run's finished job. Oracles written from the rules, not by calling the machine."""

from dataclasses import replace

import pytest

from entrypoint import restart, runstate, runsteps
from entrypoint.runstate import RunState, Step
from entrypoint.runsteps import (
    Adopt,
    AwaitGangJob,
    Exit,
    Failed,
    Finish,
    Follow,
    GangWaitClosed,
    GiveUp,
    InspectInheritedJob,
    JobEnded,
    LabelListed,
    ListLabelJobs,
    Signalled,
    StopJob,
    TerminateExtras,
)
from jarvice import exitcodes
from jarvice.model import JobEntry, JobStatus
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

LABEL = "k8s-c.gang-1"
ALL = frozenset[int]()
LIVE = "PROCESSING STARTING"
DONE = "COMPLETED"
STARTED = 1_000  # when the following rank started (Unix seconds)


def job(number: int, state: str = LIVE, *, ended: int = 0) -> JobEntry:
    return JobEntry(number, f"job-{number}", state, LABEL, None, end_time=ended)


FOLLOWER = RunState("attaching", follower=True, started_at=STARTED)
AWAITING = replace(FOLLOWER, phase="awaiting", unseen=ALL, job_may_run=True)
LOOK = ListLabelJobs(ALL, finished_too=True)


def following(number: int) -> RunState:
    return replace(FOLLOWER, phase="following", job=number, job_may_run=True)


def done(state: RunState, code: int, **changes: object) -> RunState:
    return replace(state, phase="done", exit_code=code, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        (None, Step(AWAITING, (LOOK,))),
        (
            restart.RunnerState(1, LABEL, job_number=7),
            Step(replace(FOLLOWER, phase="picking_up", job=7, job_may_run=True), (InspectInheritedJob(7),)),
        ),
        (
            restart.RunnerState(1, LABEL, job_number=None),
            Step(replace(FOLLOWER, phase="picking_up", unseen=ALL, job_may_run=True), (LOOK,)),
        ),
        (restart.RunnerState(1, LABEL, job_number=7, reported=True, exit_code=143), Step(AWAITING, (LOOK,))),
    ],
    ids=["first: look for the gang's job", "restarted: its job by number", "restarted: by label", "retry: wait anew"],
)
def test_a_following_rank_begins_by_looking_never_by_submitting(
    previous: restart.RunnerState | None, expected: Step
) -> None:
    assert runstate.begin(restart.decide_start(previous), follower_since=STARTED) == expected


ROWS = [
    (
        "a live job: follow it",
        AWAITING,
        LabelListed((job(7),)),
        Step(following(7), (Adopt(7, "gang_job_found", job(7)), Follow(7))),
    ),
    (
        "two live jobs: the lowest is followed, the other terminated",
        AWAITING,
        LabelListed((job(7), job(9))),
        Step(following(7), (TerminateExtras(7, (9,), (7, 9)), Adopt(7, "gang_job_found", job(7)), Follow(7))),
    ),
    (
        "a job that ended after this rank started: it is the gang's, its result is ours",
        AWAITING,
        LabelListed((job(7, DONE, ended=STARTED + 3),)),
        Step(following(7), (Adopt(7, "gang_job_found", job(7, DONE, ended=STARTED + 3)), Follow(7))),
    ),
    (
        "only an earlier run's finished job: wait for rank 0's new one",
        AWAITING,
        LabelListed((job(5, DONE, ended=STARTED - 60),)),
        Step(AWAITING, (AwaitGangJob((5,)), LOOK)),
    ),
    (
        "a live job beside an earlier run's: the live one",
        AWAITING,
        LabelListed((job(5, DONE, ended=STARTED - 60), job(8))),
        Step(following(8), (Adopt(8, "gang_job_found", job(8)), Follow(8))),
    ),
    ("nothing yet: wait, look again", AWAITING, LabelListed(()), Step(AWAITING, (AwaitGangJob(()), LOOK))),
    (
        "the wait is over: exit 71, the job may still come",
        AWAITING,
        GangWaitClosed(600.0, ()),
        Step(done(AWAITING, exitcodes.EXIT_NO_GANG_JOB), (Exit(exitcodes.EXIT_NO_GANG_JOB),)),
    ),
    (
        "a hiccup while waiting: keep waiting",
        replace(AWAITING, failures=0),
        Failed("protocol", "HTML page"),
        Step(replace(AWAITING, failures=1), (AwaitGangJob(()), LOOK)),
    ),
    (
        "JARVICE unavailable past the outage budget: give up, terminate nothing (rank 0 owns the job)",
        AWAITING,
        Failed("unavailable", "503"),
        Step(
            done(replace(AWAITING, phase="giving_up"), exitcodes.EXIT_REMOTE_UNAVAILABLE),
            (
                GiveUp("unavailable", "unavailable before any job was started", "503"),
                Exit(exitcodes.EXIT_REMOTE_UNAVAILABLE),
            ),
        ),
    ),
    (
        "restarted by label, nothing there: wait for it (never submit)",
        replace(FOLLOWER, phase="picking_up", unseen=ALL, job_may_run=True),
        LabelListed(()),
        Step(AWAITING, (LOOK,)),
    ),
    (
        "the job ends: its result, without printing its output (rank 0 does)",
        following(7),
        JobEnded(JobStatus(7, "job-7", DONE)),
        Step(
            replace(following(7), phase="finishing", job_may_run=False),
            (Finish(JobStatus(7, "job-7", DONE), print_output=False),),
        ),
    ),
    (
        "a signal while waiting: look the label up to stop the live job",
        AWAITING,
        Signalled(15),
        Step(replace(AWAITING, phase="stopping", exit_code=143), (ListLabelJobs(ALL, finished_too=True),)),
    ),
    (
        "a signal while following: stop the gang's job, nothing to drain",
        following(7),
        Signalled(15),
        Step(replace(following(7), phase="stopping", exit_code=143), (StopJob(7, drain_output=False),)),
    ),
]


@pytest.mark.parametrize(("state", "event", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_a_following_rank(state: RunState, event: runsteps.Event, expected: Step) -> None:
    assert runstate.advance(state, event) == expected


def test_the_failure_streak_ends_with_a_listing() -> None:
    step = runstate.advance(replace(AWAITING, failures=3), LabelListed(()))
    assert step.state.failures == 0


def test_a_following_rank_gives_up_after_the_retries_the_table_allows() -> None:
    state = replace(AWAITING, failures=99)
    step = runstate.advance(state, Failed("protocol", "HTML page"))
    assert step.state.phase == "done" and step.actions[-1] == Exit(exitcodes.EXIT_PROTOCOL)
    assert not any(isinstance(action, ListLabelJobs) for action in step.actions)  # nothing to terminate
