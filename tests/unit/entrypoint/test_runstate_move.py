"""The move of a job JARVICE keeps queued, as rows of the runner's state machine: the next job is
submitted only after the queued one was seen ended (never two jobs), and a job that may still run is
never left behind (a signal stops it, a failure moves again or gives up and terminates it)."""

from dataclasses import replace

import pytest

from entrypoint import runstate, runsteps
from entrypoint.runstate import RunState, Step, UnexpectedEvent
from entrypoint.runsteps import (
    Exit,
    Failed,
    Finish,
    GiveUp,
    MovedAway,
    MoveJob,
    PrepareSubmit,
    QueuedTooLong,
    Retry,
    Signalled,
    StopJob,
    Terminate,
)
from jarvice import exitcodes
from jarvice.model import JobStatus
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

FOLLOWING = RunState("following", job=7, job_may_run=True)
MOVE = MoveJob(7, "ng4v", "queued too long")
MOVING = RunState("moving", job=7, job_may_run=True, move=MOVE)


def ended(state: str, *, started: int = 0) -> JobStatus:
    return JobStatus(7, "job-7", state, start_time=started)


ROWS = [
    (
        "queued too long: terminate it and wait for its end, nothing submitted yet",
        FOLLOWING,
        QueuedTooLong(7, "ng4v", "queued too long"),
        Step(MOVING, (MOVE,)),
    ),
    (
        "seen ended without ever running: submit on the next machine",
        MOVING,
        MovedAway(ended("TERMINATED")),
        Step(RunState("submitting"), (PrepareSubmit(),)),
    ),
    (
        "seen CANCELED without ever running (JARVICE's other end of a queued terminate): submit on the next machine",
        MOVING,
        MovedAway(ended("CANCELED")),
        Step(RunState("submitting"), (PrepareSubmit(),)),
    ),
    (
        "it started and was terminated meanwhile: that is the result, nothing resubmitted",
        MOVING,
        MovedAway(ended("TERMINATED", started=1700000000)),
        Step(
            replace(MOVING, phase="finishing", job_may_run=False, move=None),
            (Finish(ended("TERMINATED", started=1700000000), print_output=True),),
        ),
    ),
    (
        "it ran to completion before the terminate: its result stands",
        MOVING,
        MovedAway(ended("COMPLETED", started=1700000000)),
        Step(
            replace(MOVING, phase="finishing", job_may_run=False, move=None),
            (Finish(ended("COMPLETED", started=1700000000), print_output=True),),
        ),
    ),
    (
        "a signal while moving: stop the job as when following",
        MOVING,
        Signalled(15),
        Step(replace(MOVING, phase="stopping", exit_code=143), (StopJob(7, drain_output=True),)),
    ),
    (
        "a failure worth another try while moving: move again after a pause",
        MOVING,
        Failed("protocol", "html"),
        Step(replace(MOVING, failures=1), (Retry(7, "retry", 1, "html"), MOVE)),
    ),
    (
        "failures past the retries: give up, terminating the job",
        replace(MOVING, failures=6),
        Failed("protocol", "html"),
        Step(
            replace(MOVING, phase="giving_up", failures=6, exit_code=exitcodes.EXIT_PROTOCOL),
            (GiveUp("protocol", "protocol after 6 retries: stopping the job before exiting", "html"), Terminate((7,))),
        ),
    ),
    (
        "JARVICE unavailable past the outage budget: give up, terminating the job",
        MOVING,
        Failed("unavailable", "503"),
        Step(
            replace(MOVING, phase="giving_up", exit_code=exitcodes.EXIT_REMOTE_UNAVAILABLE),
            (GiveUp("unavailable", "unavailable: stopping the job before exiting", "503"), Terminate((7,))),
        ),
    ),
]


@pytest.mark.parametrize(("state", "event", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_the_move(state: RunState, event: runsteps.Event, expected: Step) -> None:
    assert runstate.advance(state, event) == expected


def test_while_moving_the_job_may_run_so_the_exit_is_not_reported() -> None:
    assert not runstate.is_reported(MOVING)
    assert runstate.is_interruptible(MOVING)


def test_a_move_for_another_job_is_a_bug() -> None:
    with pytest.raises(UnexpectedEvent):
        runstate.advance(FOLLOWING, QueuedTooLong(8, "ng4v", "queued too long"))


def test_the_next_job_comes_only_through_a_new_submit() -> None:
    # From the move to the next submit: no action of the steps submits (PrepareSubmit leads to it).
    step = runstate.advance(FOLLOWING, QueuedTooLong(7, "ng4v", "r"))
    assert all(not isinstance(action, runsteps.Submit) for action in step.actions)
    assert runstate.advance(step.state, MovedAway(ended("TERMINATED"))).state.job is None


def test_exit_when_nothing_fits_the_next_machine() -> None:
    submitting = runstate.advance(MOVING, MovedAway(ended("TERMINATED"))).state
    step = runstate.advance(submitting, runsteps.NothingSubmitted(exitcodes.EXIT_NO_MACHINE))
    assert step.actions == (Exit(exitcodes.EXIT_NO_MACHINE),)
