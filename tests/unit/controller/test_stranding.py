"""stranding.assess and check_owner: the rules of docs/controller.md, as tables."""

from __future__ import annotations

from typing import Any

import pytest

from controller import stranding
from controller.model import parse_job, parse_pod
from tests.unit.controller.builders import IGNORE_DISRUPTIONS, T0, T0_TEXT, job, job_owner, pod

POLICY = stranding.Policy(threshold=120, cap=3)
# A user's own rule: fail the Job on any non-zero exit (the evicted runner exits 143).
EXIT_FAILS_JOB = {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}
LATER = T0 + 121  # past the threshold


@pytest.mark.parametrize(
    ("body", "now", "rebursts", "verdict"),
    [
        pytest.param(pod(), LATER, 0, "reburst", id="job-pod-stranded-past-threshold"),
        pytest.param(pod(), T0 + 119, 0, "wait", id="job-pod-not-yet"),
        pytest.param(pod(), T0 + 120, 0, "reburst", id="exactly-at-threshold"),
        pytest.param(pod(), LATER, 2, "reburst", id="third-reburst-allowed"),
        pytest.param(pod(), LATER, 3, "cap-hit", id="cap-reached"),
        pytest.param(pod(owners=[]), LATER, 0, "note", id="bare-pod"),
        pytest.param(pod(owners=[]), LATER, 99, "note", id="bare-pod-never-cap"),
        pytest.param(pod(owners=[job_owner(kind="ReplicaSet", api="apps/v1")]), LATER, 0, "note", id="replicaset"),
        pytest.param(pod(owners=[job_owner(kind="StatefulSet", api="apps/v1")]), LATER, 0, "note", id="statefulset"),
        pytest.param(pod(owners=[{**job_owner(), "controller": False}]), LATER, 0, "note", id="job-not-controller"),
        pytest.param(pod(owners=[job_owner(api="batch/v2")]), LATER, 0, "note", id="unknown-job-version"),
        pytest.param(pod(decision="remote"), LATER, 0, "ignore", id="decided-remote"),
        pytest.param(pod(decision=None), LATER, 0, "ignore", id="never-decided"),
        pytest.param(pod(labeled=False), LATER, 0, "ignore", id="unlabeled"),
        pytest.param(pod(node_name="gpu-1"), LATER, 0, "ignore", id="bound"),
        pytest.param(pod(phase="Running"), LATER, 0, "ignore", id="running"),
        pytest.param(pod(deleting=True), LATER, 0, "ignore", id="being-deleted"),
        pytest.param(pod(scheduled=("True", "")), LATER, 0, "ignore", id="scheduled"),
        pytest.param(pod(scheduled=("False", "SchedulingGated")), LATER, 0, "ignore", id="gated"),
        pytest.param(pod(scheduled=None), LATER, 0, "ignore", id="no-condition-yet"),
        pytest.param(pod(since=""), LATER, 0, "ignore", id="no-transition-time"),
        pytest.param(pod(stranded_since="2023-11-14T22:13:20Z"), LATER, 0, "ignore", id="already-reported"),
        pytest.param(pod(owners=[], stranded_since="x"), LATER, 0, "ignore", id="bare-already-reported"),
        # Kept local by its namespace's burst budget: a Job's pod is looked at again (the webhook is asked
        # whether it would burst it now: the spend record fresh again, the spend down), anyone else's reported.
        pytest.param(pod(budget="over budget: 4 of 4 GPUs in use"), LATER, 0, "recheck", id="held-by-budget"),
        pytest.param(pod(budget="x", stranded_since=T0_TEXT), LATER, 3, "recheck", id="held-by-budget-reported-capped"),
        pytest.param(pod(budget="x", owners=[]), LATER, 0, "note", id="held-by-budget-bare"),
        pytest.param(pod(budget="x"), T0 + 10, 0, "wait", id="held-by-budget-not-yet"),
        # Kept local because no JARVICE machine offers its GPU model: its replacement would be too.
        pytest.param(pod(gpu_model="no JARVICE machine offers x=H100"), LATER, 0, "note", id="held-by-gpu-model"),
        pytest.param(pod(gpu_model="x"), T0 + 10, 0, "wait", id="held-by-gpu-model-not-yet"),
    ],
)
def test_assess(body: dict[str, Any], now: float, rebursts: int, verdict: str) -> None:
    assert stranding.assess(parse_pod(body), now=now, policy=POLICY, rebursts=rebursts).verdict == verdict


def test_wait_says_when_it_is_due() -> None:
    assessment = stranding.assess(parse_pod(pod()), now=T0 + 10, policy=POLICY, rebursts=0)
    assert assessment.due_at == T0 + 120


def test_stranded_since_is_the_conditions_transition_time() -> None:
    assessment = stranding.assess(parse_pod(pod()), now=LATER, policy=POLICY, rebursts=0)
    assert assessment.stranded_since == T0


def test_cap_zero_never_rebursts() -> None:
    policy = stranding.Policy(threshold=120, cap=0)
    assert stranding.assess(parse_pod(pod()), now=LATER, policy=policy, rebursts=0).verdict == "cap-hit"


@pytest.mark.parametrize(
    ("owner", "why"),
    [
        pytest.param(job(), "", id="live-job"),
        pytest.param(None, "owner not found", id="job-deleted"),
        pytest.param(job(uid="other"), "owner was replaced (uid differs)", id="job-recreated-same-name"),
        pytest.param(job(conditions=[{"type": "Complete", "status": "True"}]), "owner has finished", id="complete"),
        pytest.param(job(conditions=[{"type": "Failed", "status": "True"}]), "owner has finished", id="failed"),
        pytest.param(job(conditions=[{"type": "Failed", "status": "False"}]), "", id="failed-false"),
        pytest.param(job(suspend=True), "owner is suspended", id="suspended"),
        pytest.param(job(suspend=False), "", id="not-suspended"),
        # A move is an eviction: free only when the Job's failure policy ignores it before any other rule.
        pytest.param(job(rules=[]), stranding.NOT_FREE, id="no-pod-failure-policy"),
        pytest.param(job(rules=[EXIT_FAILS_JOB]), stranding.NOT_FREE, id="users-policy-alone"),
        pytest.param(job(rules=[EXIT_FAILS_JOB, IGNORE_DISRUPTIONS]), stranding.NOT_FREE, id="ignore-rule-not-first"),
        pytest.param(job(rules=[IGNORE_DISRUPTIONS, EXIT_FAILS_JOB]), "", id="ignore-rule-first"),
        pytest.param(
            job(rules=[{**IGNORE_DISRUPTIONS, "action": "Count"}]), stranding.NOT_FREE, id="disruptions-counted"
        ),
        pytest.param(
            job(rules=[{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]),
            "",
            id="status-defaults-to-true",
        ),
        pytest.param(
            job(rules=[{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}]}]),
            stranding.NOT_FREE,
            id="ignores-the-wrong-status",
        ),
    ],
)
def test_check_owner(owner: dict[str, Any] | None, why: str) -> None:
    assert stranding.check_owner(parse_pod(pod()), parse_job(owner)) == why


# ----- a pod waiting for a node before bursting (the webhook's burst-deadline) -------------------

DEADLINE_TEXT = "2023-11-14T22:23:20Z"  # T0 + 600: the pod waits ten minutes, past the 120 s threshold
DEADLINE = T0 + 600


@pytest.mark.parametrize(
    ("body", "now", "rebursts", "verdict"),
    [
        # unschedulable past the threshold, but its deadline is later: it waits, never re-burst early
        pytest.param(pod(burst_deadline=DEADLINE_TEXT), LATER, 0, "wait", id="waiting-past-threshold"),
        pytest.param(pod(burst_deadline=DEADLINE_TEXT), DEADLINE - 1, 0, "wait", id="waiting-just-before"),
        pytest.param(pod(burst_deadline=DEADLINE_TEXT), DEADLINE, 0, "reburst", id="deadline-reached"),
        # the scheduler has not marked it yet: the deadline still decides
        pytest.param(pod(burst_deadline=DEADLINE_TEXT, scheduled=None), DEADLINE, 0, "reburst", id="no-condition"),
        # a Job waits once (its replacements burst at once): the re-burst cap never holds a pod of it back,
        # so the fourth pod of a parallel Job is moved as the first was
        pytest.param(pod(burst_deadline=DEADLINE_TEXT), DEADLINE, 3, "reburst", id="no-cap-a-job-waits-once"),
        pytest.param(pod(burst_deadline=DEADLINE_TEXT, owners=[]), DEADLINE, 0, "note", id="bare-pod-reported"),
        pytest.param(pod(burst_deadline=DEADLINE_TEXT, gang="g-1"), DEADLINE, 0, "gang", id="gang-pod"),
        # a node took it, or it is going: nothing to do
        pytest.param(pod(burst_deadline=DEADLINE_TEXT, node_name="gpu-1"), DEADLINE, 0, "ignore", id="bound"),
        pytest.param(pod(burst_deadline=DEADLINE_TEXT, phase="Running"), DEADLINE, 0, "ignore", id="running"),
        pytest.param(pod(burst_deadline=DEADLINE_TEXT, deleting=True), DEADLINE, 0, "ignore", id="deleting"),
        pytest.param(pod(burst_deadline=DEADLINE_TEXT, decision="remote"), DEADLINE, 0, "ignore", id="burst"),
        # an unreadable deadline is no deadline: the threshold rule applies as before
        pytest.param(pod(burst_deadline="soon"), LATER, 0, "reburst", id="unreadable-deadline"),
    ],
)
def test_assess_a_waiting_pod(body: dict[str, Any], now: float, rebursts: int, verdict: str) -> None:
    assert stranding.assess(parse_pod(body), now=now, policy=POLICY, rebursts=rebursts).verdict == verdict


def test_a_waiting_pod_is_due_at_its_deadline() -> None:
    assessment = stranding.assess(parse_pod(pod(burst_deadline=DEADLINE_TEXT)), now=LATER, policy=POLICY, rebursts=0)
    assert assessment.due_at == DEADLINE


def test_a_deadline_in_milliseconds_is_kept_to_the_millisecond() -> None:
    body = pod(burst_deadline="2023-11-14T22:23:20.250Z")  # T0 + 600.25: a replay's compressed wait
    assert stranding.assess(parse_pod(body), now=DEADLINE + 0.2, policy=POLICY, rebursts=0).verdict == "wait"
    assert stranding.assess(parse_pod(body), now=DEADLINE + 0.25, policy=POLICY, rebursts=0).verdict == "reburst"


# A local pod of a Job one of whose pods came home: it came home on the webhook's word that it fits, so
# if it cannot bind (a rule the fit does not model, or the GPU taken meanwhile) it goes back to its burst
# within a round, not after the whole threshold: it never sits stranded after coming home.
@pytest.mark.parametrize(
    ("came_home", "now", "verdict"),
    [
        pytest.param(True, T0 + stranding.HOMECOMING_BIND_SECONDS, "reburst", id="came-home-bind-time-past"),
        pytest.param(True, T0 + stranding.HOMECOMING_BIND_SECONDS - 1, "wait", id="came-home-still-binding"),
        pytest.param(False, T0 + stranding.HOMECOMING_BIND_SECONDS, "wait", id="not-came-home-threshold"),
    ],
)
def test_a_pod_that_came_home_and_cannot_bind_goes_back_within_a_round(
    came_home: bool, now: float, verdict: str
) -> None:
    assessment = stranding.assess(parse_pod(pod()), now=now, policy=POLICY, rebursts=0, came_home=came_home)
    assert assessment.verdict == verdict


def test_a_pod_that_came_home_and_cannot_bind_still_counts_against_the_cap() -> None:
    """Bounded as any re-burst is: a Job whose pods keep failing to bind stops moving at the cap."""
    assessment = stranding.assess(
        parse_pod(pod()), now=T0 + stranding.HOMECOMING_BIND_SECONDS, policy=POLICY, rebursts=3, came_home=True
    )
    assert assessment.verdict == "cap-hit"
