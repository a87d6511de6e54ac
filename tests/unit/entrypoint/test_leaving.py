"""A local pod leaving with its checkpoint (entrypoint.leaving): who is asked, what is sent, what the runner exits."""

from __future__ import annotations

import signal

import pytest

from entrypoint import leaving

CHECKPOINTS = {"nimbix-burst.io/checkpoint-dir": "/workspace/ckpt"}
GRACE = "NIMBIX_BURST_GRACE_SECONDS"


@pytest.mark.parametrize(
    ("annotations", "env", "plan", "warned"),
    [
        ({}, {GRACE: "60"}, None, False),
        ({"nimbix-burst.io/checkpoint-dir": "  "}, {}, None, False),
        (CHECKPOINTS, {}, leaving.LeavePlan(30), False),
        (CHECKPOINTS, {GRACE: "120"}, leaving.LeavePlan(120), False),
        (CHECKPOINTS, {GRACE: " 45 "}, leaving.LeavePlan(45), False),
        # terminationGracePeriodSeconds: 0, as the webhook writes it: the kubelet still gives the 2 s it
        # gives every container, never the 30 s of a pod that sets none.
        (CHECKPOINTS, {GRACE: "0"}, leaving.LeavePlan(2), False),
        (CHECKPOINTS, {GRACE: "-5"}, leaving.LeavePlan(30), True),
        (CHECKPOINTS, {GRACE: "1m"}, leaving.LeavePlan(30), True),
        # Digits str.isdigit takes and int() does not: a warning, not a runner that dies before its program.
        (CHECKPOINTS, {GRACE: "\u00b2"}, leaving.LeavePlan(30), True),
        (CHECKPOINTS, {GRACE: "9" * 5000}, leaving.LeavePlan(30), True),
    ],
    ids=[
        *("no-contract", "blank-dir", "default-grace", "grace", "grace-spaces"),
        *("zero", "negative", "unit", "super", "huge"),
    ],
)
def test_only_a_pod_naming_a_checkpoint_directory_leaves_with_one(
    annotations: dict[str, str], env: dict[str, str], plan: leaving.LeavePlan | None, warned: bool
) -> None:
    got, warning = leaving.plan_leave(annotations, env)
    assert got == plan
    assert bool(warning) == warned
    if warned:
        assert GRACE in warning and "whole number of seconds" in warning and len(warning) < 300


@pytest.mark.parametrize(
    ("grace", "stop_after"), [(30, 25.0), (75, 70.0), (8, 4.0), (1, 0.5)], ids=["30", "75", "8", "1"]
)
def test_the_program_is_told_to_stop_with_part_of_the_grace_period_left(grace: int, stop_after: float) -> None:
    assert leaving.LeavePlan(grace).stop_after == stop_after


PLAN = leaving.LeavePlan(30)
TERM, USR1, INT = int(signal.SIGTERM), int(signal.SIGUSR1), int(signal.SIGINT)


@pytest.mark.parametrize(
    ("signum", "plan", "asked", "expected"),
    [
        (TERM, PLAN, False, leaving.Forward(USR1, True)),  # the first SIGTERM asks for a checkpoint
        (TERM, PLAN, True, leaving.Forward(TERM, True)),  # a second one: stop now
        (INT, PLAN, False, leaving.Forward(INT, False)),  # Ctrl-C is not the kubelet's stop
        (TERM, None, False, leaving.Forward(TERM, False)),  # no contract: passed on as it came
    ],
    ids=["first-term", "second-term", "int", "no-contract"],
)
def test_the_first_sigterm_of_a_checkpointing_pod_becomes_sigusr1(
    signum: int, plan: leaving.LeavePlan | None, asked: bool, expected: leaving.Forward
) -> None:
    assert leaving.forward(signum, plan=plan, asked=asked) == expected


@pytest.mark.parametrize(
    ("code", "asked", "expected"),
    [(0, True, 143), (0, False, 0), (143, True, 143), (1, True, 1), (3, False, 3), (81, False, 81)],
    ids=["checkpointed", "finished", "stopped", "failed-asked", "failed", "other"],
)
def test_a_program_that_checkpointed_on_request_ends_the_pod_as_a_stopped_one(
    code: int, asked: bool, expected: int
) -> None:
    """Exit 0 after the request would be the Job's success with its work not done; never the move's 81, which
    the Job's policy ignores whatever stopped the pod (a failed liveness probe too): the disruption condition
    the API server sets is what makes a preemption or a drain free."""
    assert leaving.final_exit(code, asked=asked) == expected
