"""orphans.plan_round and plan_records: which JARVICE jobs nobody wants, which are due, which burst
pods get their job's end recorded; round after round, as tables over jobs + pods + clock."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from controller.model import ReapView
from controller.orphans import Job, Round, next_round_in, plan_records, plan_round

POD = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
GONE = "00000000-1111-2222-3333-444444444444"
HERE = "0123456789ab"  # this cluster's identity
THERE = "prod-ba9876543210"  # another cluster on the same JARVICE account
WALL = 1_700_000_000.0  # the wall clock of the round (epoch seconds)


def label(uid: str = POD, container: str | None = "trainer", attempt: int = 1, cluster: str | None = HERE) -> str:
    head = f"k8s-{cluster}.{uid}" if cluster else f"k8s-{uid}"
    return f"{head}-{container}-{attempt}" if container else f"{head}-{attempt}"


def view(
    uid: str = POD,
    *,
    terminal: bool = False,
    deadline: float | None = None,
    following: tuple[str, ...] = ("trainer",),
    burst: bool = True,
    ended: bool = False,
    name: str = "train-0",
) -> ReapView:
    return ReapView(uid, "team", name, terminal, deadline, following, burst, ended)


def pods(*views: ReapView) -> dict[str, ReapView]:
    return {v.uid: v for v in views}


def plan(
    jobs: list[Job],
    pod_views: dict[str, ReapView],
    *,
    now: float = 0,
    grace: float = 0,
    first_seen: dict[int, float] | None = None,
) -> Round:
    return plan_round(
        jobs, pods=pod_views, cluster=HERE, first_seen=first_seen or {}, now=now, wall_now=WALL, grace=grace
    )


LONG = "a-container-name-too-long-for-a-legacy-label"
LONG_HASH = hashlib.sha256(LONG.encode()).hexdigest()


@pytest.mark.parametrize(
    ("job_label", "pod_views", "reason"),
    [
        (label(), pods(view()), None),
        (label(GONE), pods(view()), "pod-gone"),
        (label(), pods(view(terminal=True)), "pod-finished"),
        (label(), pods(view(following=("sidecar",))), "container-exited"),
        (label(), pods(view(following=())), "container-exited"),
        (label(container=None), pods(view(following=("sidecar",))), None),  # no container part: any container
        (label(container=None), pods(view(following=())), "container-exited"),
        (f"k8s-{HERE}.{POD}-~{LONG_HASH[:6]}-1", pods(view(following=(LONG,))), None),
        (f"k8s-{HERE}.{POD}-~{LONG_HASH[:6]}-1", pods(view(following=(LONG + "x",))), "container-exited"),
        (label(), pods(view(deadline=WALL + 30)), None),  # terminating: the runner may still be stopping it
        (label(), pods(view(deadline=WALL - 5)), None),  # ... a few seconds of clock skew allowed
        (label(), pods(view(deadline=WALL - 6)), "deletion-overdue"),
        (label(), pods(view(deadline=WALL - 2)), None),
        (label(), pods(view(terminal=True, deadline=WALL - 60)), "pod-finished"),
        (label(), pods(view(burst=False)), None),  # the decision annotation does not matter here
    ],
    ids=[
        "followed",
        "pod-gone",
        "pod-finished",
        "container-exited",
        "nothing-follows",
        "no-container-part-followed",
        "no-container-part-nothing-follows",
        "hashed-part-followed",
        "hashed-part-other-container",
        "terminating",
        "terminating-skew",
        "deletion-overdue",
        "just-past-the-deadline",
        "finished-wins",
        "not-annotated",
    ],
)
def test_which_jobs_are_unwanted(job_label: str, pod_views: dict[str, ReapView], reason: str | None) -> None:
    planned = plan([Job(7, job_label, "PROCESSING STARTING")], pod_views)
    assert [(o.number, o.reason) for o in planned.orphans] == ([] if reason is None else [(7, reason)])
    assert planned.due == planned.orphans  # grace 0


def test_only_this_clusters_live_jobs_are_ever_unwanted() -> None:
    jobs = [
        Job(1, "", "PROCESSING STARTING"),  # no label: not ours
        Job(2, "someone-elses-job", "PROCESSING STARTING"),
        Job(3, "k8s-team/pod-trainer-1", "PROCESSING STARTING"),  # fallback label: no UID to check
        Job(4, label(GONE, cluster=None), "PROCESSING STARTING"),  # legacy label: never touched
        Job(5, label(GONE, cluster=THERE), "PROCESSING STARTING"),  # another cluster's: never touched
        Job(6, label(GONE), "COMPLETED"),
        Job(7, label(GONE), "TERMINATED"),
        Job(8, label(GONE), "canceled"),
        Job(9, label(GONE), "SUBMITTED"),
        Job(10, label(GONE, container=None, attempt=2), "PROCESSING STARTING"),
        Job(11, label(GONE, cluster=None), "COMPLETED"),  # ended: not counted either
    ]
    planned = plan(jobs, {})
    assert [o.number for o in planned.due] == [9, 10]
    assert [(n.number, n.kind, n.cluster) for n in planned.not_ours] == [
        (4, "legacy-label", None),
        (5, "other-cluster", THERE),
    ]


def test_of_two_live_jobs_of_one_label_the_lowest_numbered_is_kept() -> None:
    jobs = [
        Job(12, label(), "PROCESSING STARTING"),
        Job(10, label(), "SUBMITTED"),
        Job(11, label(), "PROCESSING STARTING"),
        Job(9, label(), "COMPLETED"),  # ended: not a live job, the pod follows 10
        Job(13, label(attempt=2), "SUBMITTED"),  # another label
    ]
    planned = plan(jobs, pods(view()))
    assert [(o.number, o.reason, o.kept) for o in planned.due] == [(11, "duplicate", 10), (12, "duplicate", 10)]


def test_duplicates_of_an_unwanted_pod_are_unwanted_for_the_pods_reason() -> None:
    planned = plan([Job(10, label(), "SUBMITTED"), Job(11, label(), "SUBMITTED")], pods(view(terminal=True)))
    assert [(o.number, o.reason, o.kept) for o in planned.due] == [
        (10, "pod-finished", None),
        (11, "pod-finished", None),
    ]


def test_an_orphan_is_due_only_after_the_grace_period() -> None:
    jobs = [Job(7, label(GONE), "PROCESSING STARTING")]
    first = plan(jobs, pods(view()), now=100, grace=120)
    assert [o.number for o in first.orphans] == [7] and [o.number for o in first.newly_seen] == [7]
    assert first.due == [] and first.first_seen == {7: 100}
    second = plan(jobs, pods(view()), now=219.9, grace=120, first_seen=first.first_seen)
    assert second.due == [] and second.newly_seen == []
    third = plan(jobs, pods(view()), now=220, grace=120, first_seen=second.first_seen)
    assert [(o.number, o.pod_uid, o.first_seen) for o in third.due] == [(7, GONE, 100)]


def test_a_pod_that_wants_it_again_resets_the_clock() -> None:
    jobs = [Job(7, label(), "SUBMITTED")]
    first = plan(jobs, {}, now=0, grace=10)
    seen = plan(jobs, pods(view()), now=5, grace=10, first_seen=first.first_seen)
    assert seen.first_seen == {}
    again = plan(jobs, {}, now=11, grace=10, first_seen=seen.first_seen)
    assert again.due == [] and again.first_seen == {7: 11}


def test_a_changing_reason_keeps_the_clock() -> None:
    jobs = [Job(7, label(), "SUBMITTED")]
    first = plan(jobs, pods(view(following=())), now=0, grace=10)
    later = plan(jobs, pods(view(terminal=True)), now=10, grace=10, first_seen=first.first_seen)
    assert [(o.number, o.reason, o.first_seen) for o in later.due] == [(7, "pod-finished", 0)]


def test_jobs_that_left_the_list_are_forgotten() -> None:
    assert plan([], {}, now=50, grace=10, first_seen={9: 0.0}).first_seen == {}


def test_carried_uids_are_those_of_every_live_job_with_our_label_format() -> None:
    jobs = [
        Job(1, label(POD), "PROCESSING STARTING"),
        Job(2, label(GONE, cluster=None), "SUBMITTED"),  # a legacy label still carries its pod's UID
        Job(3, label("11111111-2222-3333-4444-555555555555"), "COMPLETED"),
        Job(4, "k8s-team/pod-trainer-1", "SUBMITTED"),
    ]
    assert plan(jobs, {}).carried_uids == frozenset({POD, GONE})


def test_next_round_in() -> None:
    jobs = [Job(1, label(GONE), "SUBMITTED")]
    first = plan(jobs, {}, now=0, grace=10)
    assert next_round_in(first, now=0, grace=10, interval=60) == 10
    assert next_round_in(first, now=0, grace=100, interval=60) == 60
    later = plan(jobs, {}, now=9.9, grace=10, first_seen=first.first_seen)
    assert next_round_in(later, now=9.9, grace=10, interval=60) == 0.5  # never a busy loop
    due = plan(jobs, {}, now=10, grace=10, first_seen=first.first_seen)
    assert next_round_in(due, now=10, grace=10, interval=60) == 60


# --- recording that a burst pod's job is gone ------------------------------------------------------

A, B, C = (f"aaaaaaaa-0000-0000-0000-00000000000{i}" for i in range(3))


@pytest.mark.parametrize(
    ("pod", "carried", "recorded"),
    [
        (view(A, terminal=True), set(), True),
        (view(A, following=()), set(), True),  # exited for good, the pod not terminal (yet)
        (view(A, deadline=WALL - 11), set(), True),
        (view(A, terminal=True), {A}, False),  # a live job carries its UID
        (view(A), set(), False),  # still following
        (view(A, deadline=WALL - 5), set(), False),  # still terminating
        (view(A, terminal=True, burst=False), set(), False),  # not a burst pod
        (view(A, terminal=True, ended=True), set(), False),  # already recorded
    ],
    ids=["terminal", "exited", "overdue", "job-live", "following", "terminating", "not-burst", "recorded"],
)
def test_which_pods_get_their_job_end_recorded(pod: ReapView, carried: set[str], recorded: bool) -> None:
    before = pods(pod)
    chosen = plan_records(before, pods_now=before, carried_uids=frozenset(carried), wall_now=WALL, limit=10)
    assert chosen == ([pod] if recorded else [])


def test_recording_needs_the_pod_done_before_the_job_list_and_still_unrecorded_after() -> None:
    before = pods(view(A, terminal=True), view(B, terminal=True), view(C))
    after = pods(view(A, terminal=True, ended=True), view(C, terminal=True))  # B deleted: nothing to patch
    assert plan_records(before, pods_now=after, carried_uids=frozenset(), wall_now=WALL, limit=10) == []


def test_recording_is_bounded_and_in_a_stable_order() -> None:
    views = [view(f"bbbbbbbb-0000-0000-0000-0000000000{i:02d}", terminal=True, name=f"p{i:02d}") for i in range(30)]
    before = pods(*reversed(views))
    chosen = plan_records(before, pods_now=before, carried_uids=frozenset(), wall_now=WALL, limit=25)
    assert [v.name for v in chosen] == [f"p{i:02d}" for i in range(25)]


def test_a_recorded_view_is_what_the_patch_is_guarded_by() -> None:
    pod = view(A, terminal=True)
    newer = replace(pod, following=())
    chosen = plan_records(pods(pod), pods_now=pods(newer), carried_uids=frozenset(), wall_now=WALL, limit=1)
    assert chosen == [newer]


def test_a_job_of_a_pod_the_product_did_not_decide_is_wanted_by_nobody() -> None:
    """A copy of a burst pod created without the label (it carries the UID in its own env only if it
    is that pod; here its job is the copy's), or a pod decided local: nothing counted its job."""
    undecided = replace(view(), decided=False)
    (orphan,) = plan([Job(1, label(), "PROCESSING STARTING")], pods(undecided)).orphans
    assert orphan.reason == "not-decided"
