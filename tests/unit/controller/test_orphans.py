"""orphans.plan_round: which JARVICE jobs are orphans and which are due, round after round."""

from __future__ import annotations

from controller.orphans import Job, next_round_in, plan_round

POD = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
GONE = "00000000-1111-2222-3333-444444444444"


def label(uid: str, container: str = "trainer", attempt: int = 1) -> str:
    return f"k8s-{uid}-{container}-{attempt}"


def test_a_job_whose_pod_exists_is_no_orphan() -> None:
    planned = plan_round([Job(1, label(POD), "PROCESSING STARTING")], pod_uids={POD}, first_seen={}, now=0, grace=120)
    assert planned.orphans == [] and planned.due == [] and planned.first_seen == {}


def test_an_orphan_is_due_only_after_the_grace_period() -> None:
    jobs = [Job(7, label(GONE), "PROCESSING STARTING")]
    first = plan_round(jobs, pod_uids={POD}, first_seen={}, now=100, grace=120)
    assert [o.number for o in first.orphans] == [7] and [o.number for o in first.newly_seen] == [7]
    assert first.due == [] and first.first_seen == {7: 100}
    second = plan_round(jobs, pod_uids={POD}, first_seen=first.first_seen, now=219.9, grace=120)
    assert second.due == [] and second.newly_seen == []
    third = plan_round(jobs, pod_uids={POD}, first_seen=second.first_seen, now=220, grace=120)
    assert [(o.number, o.pod_uid, o.first_seen) for o in third.due] == [(7, GONE, 100)]


def test_a_pod_that_appears_resets_the_clock() -> None:
    jobs = [Job(7, label(GONE), "SUBMITTED")]
    first = plan_round(jobs, pod_uids=set(), first_seen={}, now=0, grace=10)
    seen = plan_round(jobs, pod_uids={GONE}, first_seen=first.first_seen, now=5, grace=10)
    assert seen.first_seen == {}
    again = plan_round(jobs, pod_uids=set(), first_seen=seen.first_seen, now=11, grace=10)
    assert again.due == [] and again.first_seen == {7: 11}


def test_zero_grace_is_due_at_once() -> None:
    planned = plan_round([Job(3, label(GONE), "SUBMITTED")], pod_uids=set(), first_seen={}, now=5, grace=0)
    assert [o.number for o in planned.due] == [3]


def test_only_our_labels_and_live_jobs_count() -> None:
    jobs = [
        Job(1, "", "PROCESSING STARTING"),  # no label: not ours
        Job(2, "someone-elses-job", "PROCESSING STARTING"),
        Job(3, "k8s-team/pod-trainer-1", "PROCESSING STARTING"),  # fallback label: no UID to check
        Job(4, f"k8s-{GONE}-1", "PROCESSING STARTING"),  # no container part: still ours
        Job(5, label(GONE), "COMPLETED"),
        Job(6, label(GONE), "TERMINATED"),
        Job(7, label(GONE), "canceled"),
        Job(8, f"k8s-{GONE}-~1a2b3c-2", "SUBMITTED"),  # hashed container name
    ]
    planned = plan_round(jobs, pod_uids=set(), first_seen={}, now=0, grace=0)
    assert [o.number for o in planned.due] == [4, 8]


def test_jobs_that_left_the_list_are_forgotten() -> None:
    planned = plan_round([], pod_uids=set(), first_seen={9: 0.0}, now=50, grace=10)
    assert planned.first_seen == {}


def test_next_round_in() -> None:
    jobs = [Job(1, label(GONE), "SUBMITTED")]
    first = plan_round(jobs, pod_uids=set(), first_seen={}, now=0, grace=10)
    assert next_round_in(first, now=0, grace=10, interval=60) == 10
    assert next_round_in(first, now=0, grace=100, interval=60) == 60
    later = plan_round(jobs, pod_uids=set(), first_seen=first.first_seen, now=9.9, grace=10)
    assert next_round_in(later, now=9.9, grace=10, interval=60) == 0.5  # never a busy loop
    due = plan_round(jobs, pod_uids=set(), first_seen=first.first_seen, now=10, grace=10)
    assert next_round_in(due, now=10, grace=10, interval=60) == 60
