"""accounting.plan_stops: which live jobs on the add-on's accounts nothing accounts for, and when they
are stopped; as tables over jobs + what was counted + decided pods + caps + the previous round's marks.
Expected values by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.accounting import (
    Caps,
    Counted,
    GatewayAnswerError,
    LiveJob,
    Plan,
    caps_of,
    parse_gateway_jobs,
    plan_stops,
)

HERE = "0123456789ab"
THERE = "prod-ba9876543210"
POD_A = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
POD_B = "5f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f71"
POD_C = "6f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f72"
NS = "team"


def label(uid: str = POD_A, *, cluster: str | None = HERE, attempt: int = 1) -> str:
    head = f"k8s-{cluster}.{uid}" if cluster else f"k8s-{uid}"
    return f"{head}-main-{attempt}"


def counted(*, gpus: int = 1, cost: float | None = 3.2, worst: float | None = 6.4, at: float = 0.0) -> Counted:
    return Counted(namespace=NS, pod_uid=POD_A, gpus=gpus, cost_per_hour=cost, worst_case=worst, at=at)


def job(
    number: int = 1,
    *,
    uid: str = POD_A,
    cluster: str | None = HERE,
    state: str = "PROCESSING STARTING",
    gpus: int | None = 1,
    cost: float | None = 3.2,
    count: Counted | None = None,
    uncounted: bool = False,
) -> LiveJob:
    return LiveJob(
        account="shared",
        number=number,
        label=label(uid, cluster=cluster),
        state=state,
        machine="ng1",
        nodes=1,
        gpus=gpus,
        cost_per_hour=cost,
        counted=None if uncounted else (count or counted()),
    )


def plan(
    jobs: list[LiveJob],
    *,
    decided: tuple[str, ...] = (POD_A, POD_B, POD_C),
    caps: dict[str, Caps] | None = None,
    marked: tuple[tuple[str, int], ...] = (),
    own_key: tuple[str, ...] = (),
) -> Plan:
    return plan_stops(jobs, cluster=HERE, decided_uids=decided, caps=caps or {}, marked=marked, own_key_uids=own_key)


def reasons(p: Plan) -> dict[int, str]:
    return {s.job.number: s.reason for s in p.stop}


@pytest.mark.parametrize(
    ("jobs", "decided", "stopped", "marked"),
    [
        pytest.param([job()], (POD_A,), {}, set(), id="accounted-kept"),
        pytest.param([job(uncounted=True)], (POD_A,), {}, {1}, id="no-entry-marked-first"),
        pytest.param([job()], (), {}, {1}, id="no-decided-pod-marked-first"),
        pytest.param([job(gpus=8, cost=25.6)], (POD_A,), {1: "above-counted-size"}, set(), id="bigger-stopped-at-once"),
        pytest.param([job(gpus=None)], (POD_A,), {1: "above-counted-size"}, set(), id="unknown-machine-stopped"),
        pytest.param([job(gpus=0, cost=0.5)], (POD_A,), {}, set(), id="smaller-kept"),
        pytest.param([job(cluster=THERE, uncounted=True)], (), {}, set(), id="other-cluster-left-alone"),
        pytest.param([job(cluster=None, uncounted=True)], (), {}, set(), id="legacy-label-left-alone"),
        pytest.param(
            [replace(job(uncounted=True), label="resnet50-sweep-by-hand")], (), {}, set(), id="free-text-left-alone"
        ),
        pytest.param([job(state="COMPLETED", uncounted=True)], (), {}, set(), id="ended-job-ignored"),
    ],
)
def test_first_round(jobs: list[LiveJob], decided: tuple[str, ...], stopped: dict[int, str], marked: set[int]) -> None:
    p = plan(jobs, decided=decided)
    assert reasons(p) == stopped
    assert {number for _, number in p.marked} == marked


def test_a_marked_job_still_unaccounted_is_stopped_the_next_round() -> None:
    first = plan([job(uncounted=True)])
    second = plan([job(uncounted=True)], marked=tuple(first.marked))
    assert reasons(first) == {}
    assert reasons(second) == {1: "not-decided"}
    assert second.marked == frozenset()


def test_a_mark_is_dropped_when_the_next_round_accounts_for_the_job() -> None:
    """The pod the watch had not shown yet is there now: nothing is stopped, nothing stays marked."""
    first = plan([job()], decided=())
    second = plan([job()], decided=(POD_A,), marked=tuple(first.marked))
    assert reasons(second) == {}
    assert second.marked == frozenset()


def test_another_clusters_job_is_reported_not_stopped() -> None:
    p = plan([job(cluster=THERE, uncounted=True)], marked=(("shared", 1),))
    assert reasons(p) == {}
    assert [j.number for j in p.left_alone] == [1]


def test_a_job_of_an_undecided_pod_names_its_namespace_from_the_entry() -> None:
    first = plan([job()], decided=())
    (stop,) = plan([job()], decided=(), marked=tuple(first.marked)).stop
    assert (stop.reason, stop.namespace, stop.pod_uid) == ("not-decided", NS, POD_A)


def test_with_the_reaper_on_a_counted_job_whose_pod_left_is_its_orphan_not_an_unaccounted_job() -> None:
    """Its pod was decided when the gateway counted it, then ended or was deleted: the orphan reaper stops
    it after its grace (with its own Event); stopped here too it would skip that grace and page the
    unaccounted-jobs alert for an ordinary orphan. A job nobody counted is still stopped."""
    jobs = [job(), replace(job(uncounted=True), number=2)]
    first = plan_stops(jobs, cluster=HERE, decided_uids=(), caps={}, marked=(), orphans_reaped=True)
    second = plan_stops(jobs, cluster=HERE, decided_uids=(), caps={}, marked=first.marked, orphans_reaped=True)
    assert reasons(second) == {2: "not-decided"}
    assert [j.number for j in second.left_alone] == [1]


def _three() -> list[LiveJob]:
    return [
        job(1, uid=POD_A, count=counted(at=100.0)),
        job(2, uid=POD_B, count=counted(at=300.0)),
        job(3, uid=POD_C, count=counted(at=200.0)),
    ]


@pytest.mark.parametrize(
    ("caps", "stopped"),
    [
        pytest.param(Caps(), set(), id="no-limits"),
        pytest.param(Caps(max_gpus=3), set(), id="budget-exactly"),
        pytest.param(Caps(max_gpus=2), {2}, id="budget-newest-first"),
        pytest.param(Caps(max_gpus=1), {2, 3}, id="budget-until-under"),
        pytest.param(Caps(max_gpus=0), {1, 2, 3}, id="budget-zero"),
        pytest.param(Caps(max_cost_per_hour=9.6), set(), id="hour-exactly"),
        pytest.param(Caps(max_cost_per_hour=6.5), {2}, id="hour-over"),
        pytest.param(Caps(max_cost_per_month=19.2), set(), id="month-exactly"),
        pytest.param(Caps(max_cost_per_month=19.2, month_recorded=1.0), {2}, id="month-with-ended-jobs"),
    ],
)
def test_over_cap_stops_the_newest_until_under(caps: Caps, stopped: set[int]) -> None:
    first = plan(_three(), caps={NS: caps})
    assert reasons(first) == {}, "over a cap is marked first"
    second = plan(_three(), caps={NS: caps}, marked=tuple(first.marked))
    assert reasons(second) == dict.fromkeys(stopped, "over-cap")


def test_over_cap_counts_only_the_capped_namespace() -> None:
    other = replace(counted(at=500.0), namespace="other")
    jobs = [*_three(), job(4, uid=POD_A, count=other, gpus=8)]
    first = plan(jobs, caps={NS: Caps(max_gpus=3)})
    assert first.marked == frozenset()


def test_a_job_stopped_for_another_reason_does_not_count_against_its_namespace() -> None:
    """The bigger job is stopped for its size: the others fit the budget without it, none is over cap."""
    jobs = [*_three()[:2], job(3, uid=POD_C, gpus=4, count=counted(at=400.0))]
    p = plan(jobs, caps={NS: Caps(max_gpus=2)})
    assert reasons(p) == {3: "above-counted-size"}
    assert p.marked == frozenset()


def test_an_unpriced_job_counts_what_was_counted_for_it() -> None:
    jobs = [job(1, cost=None, count=counted(cost=3.2)), job(2, uid=POD_B, cost=None, count=counted(cost=3.2, at=9.0))]
    first = plan(jobs, caps={NS: Caps(max_cost_per_hour=5.0)})
    assert {n for _, n in first.marked} == {2}


def test_the_gateways_answer_reads_as_live_jobs() -> None:
    document = {
        "accounts": [
            {
                "name": "shared",
                "jobs": [
                    {
                        "number": 7,
                        "label": label(),
                        "state": "PROCESSING STARTING",
                        "machine": "ng1",
                        "nodes": 2,
                        "gpus": 2,
                        "cost_per_hour": None,
                        "counted": {
                            "namespace": NS,
                            "pod_uid": POD_A,
                            "gpus": 1,
                            "cost_per_hour": 3.2,
                            "worst_case": None,
                            "at": 5.0,
                            "machine": "ng1",
                            "nodes": 1,
                        },
                    },
                    {
                        "number": 8,
                        "label": "x",
                        "state": "SUBMITTED",
                        "machine": "",
                        "nodes": 1,
                        "gpus": None,
                        "cost_per_hour": None,
                        "counted": None,
                    },
                ],
            }
        ]
    }
    first, second = parse_gateway_jobs(document)
    assert first == LiveJob(
        "shared", 7, label(), "PROCESSING STARTING", "ng1", 2, 2, None, Counted(NS, POD_A, 1, 3.2, None, 5.0)
    )
    assert (second.number, second.counted, second.gpus) == (8, None, None)


@pytest.mark.parametrize(
    ("document", "says"),
    [
        pytest.param([], "accounts", id="not-a-map"),
        pytest.param({"accounts": [{"name": "a"}]}, "an account", id="no-jobs"),
        pytest.param({"accounts": [{"name": "a", "jobs": [{"number": "7"}]}]}, "number", id="number-text"),
        pytest.param(
            {"accounts": [{"name": "a", "jobs": [{"number": 7, "nodes": 1, "counted": 3}]}]},
            "counted",
            id="counted-not-object",
        ),
    ],
)
def test_an_unreadable_answer_says_what_is_wrong(document: object, says: str) -> None:
    with pytest.raises(GatewayAnswerError, match=says):
        parse_gateway_jobs(document)


@pytest.mark.parametrize(
    ("annotations", "caps"),
    [
        pytest.param({}, None, id="none"),
        pytest.param({"nimbix-burst.io/max-remote-gpus": "4"}, Caps(max_gpus=4, month_recorded=2.0), id="budget"),
        pytest.param({"nimbix-burst.io/max-remote-gpus": "lots"}, Caps(max_gpus=0, month_recorded=2.0), id="typo-0"),
        pytest.param(
            {"nimbix-burst.io/max-cost-per-hour": "10", "nimbix-burst.io/max-cost-per-month": "100"},
            Caps(max_cost_per_hour=10.0, max_cost_per_month=100.0, month_recorded=2.0),
            id="costs",
        ),
    ],
)
def test_caps_from_a_namespaces_annotations(annotations: dict[str, str], caps: Caps | None) -> None:
    assert caps_of(annotations, month_recorded=2.0) == caps


def test_a_job_of_a_namespace_paying_with_its_own_key_is_left_alone_unless_the_gateway_counted_it() -> None:
    """Its runner submitted with the namespace's key (which may be one of the add-on's accounts too)."""
    p = plan([job(1, uncounted=True), job(2, uid=POD_B, gpus=8)], marked=(("shared", 1),), own_key=(POD_A, POD_B))
    assert reasons(p) == {2: "above-counted-size"}
    assert [j.number for j in p.left_alone] == [1]
