"""A gang (the pods of one distributed job, one JARVICE job): the reaper wants its job only while every
pod of it can follow; the re-burst treats a stranded gang as one, never one pod of it alone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from controller import stranding
from controller.model import GangClaim, ReapView, parse_pod, parse_reap_view
from controller.orphans import Job, plan_records, plan_round
from jarvice.gangidentity import generation_uid, pod_group_uid
from tests.unit.controller.builders import T0, job_owner, pod

GANG = "99999999-8888-7777-6666-555555555555"  # the Job's UID
HERE = "0123456789ab"
WALL = 1_700_000_000.0
GANG_LABEL = f"k8s-{HERE}.{GANG}-1"  # the contract: the gang's UID in place of the pod's, no container part


# An Indexed Job's pod: its controller owner reference names the Job whose UID is the gang's.
JOB_CLAIM = GangClaim(generation=1, group="", job_uid=GANG)


def rank(index: int, **changes: Any) -> ReapView:
    base = ReapView(
        f"pod-{index}", "team", f"train-{index}", False, None, ("app",), True, False, gang=GANG, gang_claim=JOB_CLAIM
    )
    return replace(base, **changes)


@pytest.mark.parametrize(
    ("views", "reason"),
    [
        pytest.param([rank(0), rank(1)], None, id="every-rank-follows"),
        pytest.param([rank(0)], None, id="one-rank-left-following"),
        pytest.param([], "pod-gone", id="no-rank-left"),
        pytest.param([rank(0), rank(1, terminal=True)], "pod-finished", id="a-rank-finished"),
        pytest.param([rank(0), rank(1, following=())], "container-exited", id="a-rank-exited-for-good"),
        pytest.param([rank(0, deletion_deadline=WALL - 60), rank(1)], "deletion-overdue", id="a-rank-past-deletion"),
        pytest.param([rank(0, deletion_deadline=WALL + 30), rank(1)], None, id="a-rank-stopping-it"),
    ],
)
def test_a_gangs_job_is_wanted_while_every_rank_can_follow_it(views: list[ReapView], reason: str | None) -> None:
    planned = plan_round(
        [Job(7, GANG_LABEL, "PROCESSING STARTING")],
        pods={v.uid: v for v in views},
        cluster=HERE,
        first_seen={},
        now=0,
        wall_now=WALL,
        grace=0,
    )
    assert [o.reason for o in planned.orphans] == ([] if reason is None else [reason])
    assert GANG in planned.carried_uids


def _reasons(views: list[ReapView], label: str = GANG_LABEL) -> list[str]:
    planned = plan_round(
        [Job(7, label, "PROCESSING STARTING")],
        pods={v.uid: v for v in views},
        cluster=HERE,
        first_seen={},
        now=0,
        wall_now=WALL,
        grace=0,
    )
    return [o.reason for o in planned.orphans]


@pytest.mark.parametrize(
    "twin",
    [
        # Label-less pods created carrying the product's marks: the webhook never saw them.
        pytest.param(rank(9, namespace="elsewhere", terminal=True), id="finished-in-another-namespace"),
        pytest.param(rank(9, terminal=True, gang_claim=None), id="finished-without-an-owner"),
        pytest.param(rank(9, terminal=True, gang_claim=GangClaim(1, "", "another-job")), id="another-jobs-pod"),
        pytest.param(rank(9, terminal=True, burst=False), id="not-decided-remote"),
        pytest.param(replace(rank(9, terminal=True), decided=False), id="without-the-opt-in-label"),
    ],
)
def test_a_pod_that_only_carries_a_gangs_identity_never_stops_its_job(twin: ReapView) -> None:
    assert _reasons([rank(0), rank(1), twin]) == []


def test_a_pod_group_member_is_one_of_its_own_namespace() -> None:
    group = pod_group_uid(HERE, "team", "ddp")  # what the webhook names the group of "team"
    label = f"k8s-{HERE}.{group}-1"
    member = GangClaim(1, "ddp", "")
    ours = [rank(0, gang=group, gang_claim=member), rank(1, gang=group, gang_claim=member)]
    # Computed from the names, written on a finished pod of the same group name in another namespace:
    twin = rank(9, namespace="elsewhere", gang=group, gang_claim=member, terminal=True)
    assert _reasons([*ours, twin], label) == []
    assert _reasons([*ours[:1], replace(ours[1], terminal=True)], label) == ["pod-finished"]  # its own still do


def test_a_later_generation_is_claimed_with_its_generation() -> None:
    second = generation_uid(GANG, 2)
    label = f"k8s-{HERE}.{second}-1"
    claim = GangClaim(2, "", GANG)
    views = [rank(0, gang=second, gang_claim=claim), rank(1, gang=second, gang_claim=claim, terminal=True)]
    assert _reasons(views, label) == ["pod-finished"]
    wrong = GangClaim(1, "", GANG)  # says generation 1: the identity is not its own
    assert _reasons([rank(0, gang=second, gang_claim=claim), rank(1, gang=second, gang_claim=wrong, terminal=True)],
                    label) == []  # fmt: skip


def test_the_claim_is_read_from_the_pods_own_fields() -> None:
    body = pod(gang=GANG, decision="remote", owners=[job_owner(uid=GANG)])
    body["metadata"]["annotations"]["nimbix-burst.io/gang-generation"] = "1"
    assert parse_reap_view(body).gang_claim == GangClaim(1, "", GANG)
    assert parse_reap_view(pod(decision="remote")).gang_claim is None


def test_a_finished_gang_pod_is_recorded_only_once_no_live_job_carries_its_gang() -> None:
    done = {"pod-1": rank(1, terminal=True)}
    assert plan_records(done, pods_now=done, carried_uids=frozenset({GANG}), wall_now=WALL, limit=5) == []
    assert plan_records(done, pods_now=done, carried_uids=frozenset(), wall_now=WALL, limit=5) == [done["pod-1"]]


LATER = T0 + 300


def test_a_stranded_pod_of_a_gang_is_never_re_burst_alone() -> None:
    assessment = stranding.assess(parse_pod(pod(gang=GANG)), now=LATER, policy=stranding.Policy(120, 3), rebursts=0)
    assert assessment.verdict == "gang"


def members(*bodies: dict[str, Any]) -> list[Any]:
    return [parse_pod(b) for b in bodies]


@pytest.mark.parametrize(
    ("bodies", "rebursts", "verdict"),
    [
        pytest.param([pod(uid="a", gang=GANG), pod(uid="b", gang=GANG, node_name="n1")], 0, "reburst", id="one-job"),
        pytest.param([pod(uid="a", gang=GANG)], 3, "cap-hit", id="cap"),
        pytest.param(
            [pod(uid="a", gang=GANG), pod(uid="b", gang=GANG, owners=[job_owner(uid="other")])],
            0,
            "note",
            id="two-owners",
        ),
        pytest.param([pod(uid="a", gang=GANG, owners=[])], 0, "note", id="no-owner"),
        pytest.param([pod(uid="a", gang=GANG, budget="4 of 4 in use")], 0, "note", id="kept-by-budget"),
    ],
)
def test_assess_gang(bodies: list[dict[str, Any]], rebursts: int, verdict: str) -> None:
    policy = stranding.Policy(threshold=120, cap=3)
    assessment = stranding.assess_gang(members(*bodies), stranded_since=T0, policy=policy, rebursts=rebursts)
    assert assessment.verdict == verdict


# --- generations: a retry of a gang (the webhook's next generation) carries an identity of its own ---

NEXT = "47e294ce-1cf8-59b2-b781-09995e455c56"  # generation 2's identity: webhook.gangs.generation_uid(GANG, 2)
NEXT_LABEL = f"k8s-{HERE}.{NEXT}-1"


def retry(index: int, **changes: Any) -> ReapView:
    claim = GangClaim(generation=2, group="", job_uid=GANG)
    return rank(index, uid=f"retry-{index}", name=f"train-{index}-retry", gang=NEXT, gang_claim=claim, **changes)


@pytest.mark.parametrize(
    ("views", "reasons"),
    [
        pytest.param(
            [rank(0, terminal=True), rank(1, terminal=True), retry(0), retry(1)],
            {7: "pod-finished"},
            id="failed-first-generation-and-its-retry-running",
        ),
        pytest.param(
            [rank(0, terminal=True), rank(1), retry(0)],
            {7: "pod-finished"},
            id="a-rank-of-the-first-still-stopping-while-the-retry-starts",
        ),
        pytest.param([rank(0), rank(1), retry(0), retry(1)], {}, id="both-generations-followed"),
        pytest.param([retry(0), retry(1)], {7: "pod-gone"}, id="first-generation-pods-deleted"),
        pytest.param(
            [rank(0, terminal=True), rank(1, terminal=True)], {7: "pod-finished", 8: "pod-gone"}, id="retry-gone"
        ),
        pytest.param([rank(0), rank(1), retry(0, terminal=True)], {8: "pod-finished"}, id="retry-failed"),
    ],
)
def test_each_generations_job_is_wanted_by_its_own_pods_only(views: list[ReapView], reasons: dict[int, str]) -> None:
    planned = plan_round(
        [Job(7, GANG_LABEL, "PROCESSING STARTING"), Job(8, NEXT_LABEL, "PROCESSING STARTING")],
        pods={v.uid: v for v in views},
        cluster=HERE,
        first_seen={},
        now=0,
        wall_now=WALL,
        grace=0,
    )
    assert {o.number: o.reason for o in planned.orphans} == reasons


def test_a_finished_generations_pods_are_recorded_while_the_next_generations_job_runs() -> None:
    done = {v.uid: v for v in (rank(0, terminal=True), rank(1, terminal=True))}
    records = plan_records(done, pods_now=done, carried_uids=frozenset({NEXT}), wall_now=WALL, limit=5)
    assert sorted(v.uid for v in records) == ["pod-0", "pod-1"]
