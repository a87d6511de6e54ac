"""spending.build: the spend record and its ledger, round after round, as tables over JARVICE's live
and ended jobs, the machines' rates, the pods' namespaces, the previous ledger and the clock."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from controller import spending
from controller.model import GangClaim, ReapView, owner_namespaces
from controller.pricing import Rate
from controller.spending import Counted, Ledger, LiveSeen, SpendJob
from jarvice.model import JobEntry
from kubeplumbing.spendrecord import parse_spend_record

POD_A = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
POD_B = "5f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f71"
STRANGER = "00000000-1111-2222-3333-444444444444"
HERE = "0123456789ab"
MACHINES = {"n1": Rate(gpus=1, price=2.1), "n4": Rate(gpus=4, price=8.0)}
NOW = int(datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC).timestamp())
HOUR = 3600
NOV_1 = int(datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC).timestamp())
PODS = {POD_A: "team-a", POD_B: "team-b"}


def job(number: int, owner: str = POD_A, **fields: Any) -> SpendJob:
    base: dict[str, object] = {"machine": "n1", "nodes": 1, "walltime_limit": 2 * HOUR}
    base.update(fields)
    return SpendJob(number, owner, **base)  # type: ignore[arg-type]


def build(
    live: list[SpendJob],
    ended: list[SpendJob] | None = None,
    *,
    previous: Ledger | None = None,
    pods: dict[str, str] | None = None,
    now: int = NOW,
) -> spending.Outcome:
    return spending.build(
        live=live,
        ended=ended or [],
        machines=MACHINES,
        pod_namespaces=PODS if pods is None else pods,
        previous=previous,
        now=now,
    )


def test_a_live_job_counts_its_gpus_its_cost_per_hour_and_its_worst_case() -> None:
    record = build([job(1, nodes=2, start_time=NOW - HOUR // 2), job(2, POD_B)]).record
    assert record["version"] == 1 and record["observed_at"] == NOW and record["month"] == "2026-11"
    assert record["machines"]["n1"] == {"gpus": 1, "price": 2.1}
    team_a = record["namespaces"]["team-a"]
    # started half an hour ago, walltime 2 h: price x nodes x 2 h (what it cost so far + what it may still)
    assert team_a["pods"][POD_A] == {"gpus": 2, "cost_per_hour": 4.2, "worst_case": 8.4}
    assert team_a["cost_per_hour"] == 4.2 and team_a["month_recorded"] == 0.0 and team_a["month_worst_case"] == 8.4
    # not started: its whole walltime
    assert record["namespaces"]["team-b"]["month_worst_case"] == 4.2
    assert record["unattributed"] == {"jobs": 0, "cost_per_hour": 0.0}


@pytest.mark.parametrize(
    ("fields", "worst"),
    [
        ({"walltime_limit": None}, 2.1 * 24),  # no walltime echoed: the runner's default, 24 h
        ({"start_time": NOW - 3 * HOUR}, 2.1 * 3),  # ran past its walltime: the hours it ran
        ({"machine": "unknown"}, 8.0 * 2),  # a machine not in the catalogue: the dearest one
    ],
)
def test_worst_case_edges(fields: dict[str, Any], worst: float) -> None:
    pod = build([job(1, **fields)]).record["namespaces"]["team-a"]["pods"][POD_A]
    assert pod["worst_case"] == pytest.approx(worst)


def test_a_job_whose_namespace_is_unknown_is_unattributed() -> None:
    record = build([job(1, STRANGER, nodes=3)]).record
    assert record["namespaces"] == {}
    assert record["unattributed"] == {"jobs": 1, "cost_per_hour": 6.3}


def test_a_job_counts_until_jarvice_ends_it_even_after_its_pod_is_deleted() -> None:
    first = build([job(1)])
    assert first.ledger.owners == {POD_A: "team-a"}
    # the pod is gone (and the controller restarted: the ledger comes back from the ConfigMap text)
    restored = spending.parse_ledger(spending.ledger_to_text(first.ledger))
    second = build([job(1)], previous=restored, pods={}, now=NOW + 60)
    assert second.record["namespaces"]["team-a"]["cost_per_hour"] == 2.1
    assert second.record["unattributed"]["jobs"] == 0


@pytest.mark.parametrize(
    ("ended", "cost"),
    [
        ({"job_price": 3.33}, 3.33),  # JARVICE's job_price where it reports one
        ({}, 2.1 * 1.5),  # else price x nodes x hours run
        ({"job_price": None, "nodes": 2}, 2.1 * 2 * 1.5),
    ],
)
def test_an_ended_job_costs_its_job_price_else_price_times_hours(ended: dict[str, Any], cost: float) -> None:
    start = NOW - 2 * HOUR
    before = build([job(7, start_time=start, nodes=int(str(ended.get("nodes", 1))))], now=NOW - HOUR)
    facts = {"start_time": start, "end_time": start + 3 * HOUR // 2, **ended}
    after = build([], [job(7, **facts)], previous=before.ledger)
    team_a = after.record["namespaces"]["team-a"]
    assert team_a["month_recorded"] == pytest.approx(cost)
    assert team_a["month_worst_case"] == pytest.approx(cost) and team_a["pods"] == {}


def test_an_ended_job_is_counted_once_across_rounds_restarts_and_folding() -> None:
    start = NOW - 2 * HOUR
    first = build([job(7, start_time=start)], now=NOW - HOUR)
    history = [job(7, start_time=start, end_time=NOW - 30, job_price=5.0)]
    second = build([], history, previous=first.ledger)
    assert second.record["namespaces"]["team-a"]["month_recorded"] == 5.0
    # the same history again, by this leader or (from the ConfigMap) another one
    restored = spending.parse_ledger(spending.ledger_to_text(second.ledger))
    third = build([], history, previous=restored, now=NOW + 60)
    assert third.record["namespaces"]["team-a"]["month_recorded"] == 5.0
    # an hour on, it is folded into the namespace's sum, and still not counted again
    fourth = build([], history, previous=third.ledger, now=NOW + 2 * HOUR)
    assert fourth.ledger.counted == {} and fourth.ledger.folded == {"team-a": 5.0}
    assert fourth.record["namespaces"]["team-a"]["month_recorded"] == 5.0
    fifth = build([], history, previous=fourth.ledger, now=NOW + 3 * HOUR)
    assert fifth.record["namespaces"]["team-a"]["month_recorded"] == 5.0


def test_a_job_that_started_and_ended_between_two_listings_is_counted() -> None:
    first = build([], now=NOW - 60)
    quick = job(8, POD_B, start_time=NOW - 50, end_time=NOW - 10, job_price=0.5)
    assert build([], [quick], previous=first.ledger).record["namespaces"]["team-b"]["month_recorded"] == 0.5


def test_a_job_jarvice_forgot_costs_its_hours_until_the_listing_that_missed_it() -> None:
    first = build([job(9, start_time=NOW - 2 * HOUR)], now=NOW - 60)
    second = build([], [], previous=first.ledger)
    assert second.record["namespaces"]["team-a"]["month_recorded"] == pytest.approx(4.2)


def test_the_first_listing_counts_this_months_history_only() -> None:
    history = [
        job(1, start_time=NOV_1 + HOUR, end_time=NOV_1 + 2 * HOUR),  # this month: 2.10
        job(2, start_time=NOV_1 - 2 * HOUR, end_time=NOV_1 - HOUR),  # October
        job(3, STRANGER, start_time=NOV_1 + HOUR, end_time=NOV_1 + 2 * HOUR),  # nobody's we know
    ]
    record = build([], history).record
    assert record["namespaces"] == {"team-a": {**record["namespaces"]["team-a"], "month_recorded": 2.1}}


def test_the_month_figures_reset_at_the_start_of_the_utc_month() -> None:
    october = Ledger(
        month="2026-10",
        observed_at=NOV_1 - 30,
        owners={POD_A: "team-a"},
        live={5: LiveSeen("team-a", POD_A, "n1", 1, NOV_1 - HOUR)},
        counted={(4, POD_A): Counted("team-a", 9.0, NOV_1 - 100)},
        folded={"team-a": 50.0},
    )
    record = build([job(5, start_time=NOV_1 - HOUR)], previous=october, now=NOV_1 + 30).record
    team_a = record["namespaces"]["team-a"]
    assert record["month"] == "2026-11"
    assert team_a["month_recorded"] == 0.0
    assert team_a["month_worst_case"] == pytest.approx(2.1 * 2)  # the live job still counts in full


def test_a_job_that_ended_last_month_is_not_counted_in_this_one() -> None:
    october = Ledger(
        month="2026-10", observed_at=NOV_1 - 30, live={5: LiveSeen("team-a", POD_A, "n1", 1, NOV_1 - 2 * HOUR)}
    )
    ended = job(5, start_time=NOV_1 - 2 * HOUR, end_time=NOV_1 - 10, job_price=4.0)
    assert build([], [ended], previous=october, now=NOV_1 + 30).record["namespaces"] == {}


def test_the_ledger_is_bounded() -> None:
    many = [job(n, start_time=NOW - 100, end_time=NOW - 10, job_price=1.0) for n in range(spending.MAX_COUNTED + 5)]
    outcome = build([], many, previous=Ledger(month="2026-11", observed_at=NOW - 60))
    assert len(outcome.ledger.counted) == spending.MAX_COUNTED
    assert outcome.record["namespaces"]["team-a"]["month_recorded"] == spending.MAX_COUNTED + 5


@pytest.mark.parametrize("text", ["", "{}", "[1]", '{"month":"x","observed_at":1,"owners":{},"live":{"a":[]}}'])
def test_an_unreadable_ledger_says_so(text: str) -> None:
    with pytest.raises(spending.LedgerError, match="unreadable"):
        spending.parse_ledger(text)


def test_the_record_reads_back_with_the_shared_reader() -> None:
    record = build([job(1, nodes=2), job(2, STRANGER)]).record
    parsed = parse_spend_record(json.dumps(record))
    assert parsed.namespaces["team-a"].gpus == 2 and parsed.unattributed_jobs == 1 and parsed.month == "2026-11"


def test_needs_history_when_a_job_went_or_there_is_no_ledger() -> None:
    ledger = build([job(1)]).ledger
    assert spending.needs_history(None, [])
    assert not spending.needs_history(ledger, [job(1), job(2)])
    assert spending.needs_history(ledger, [job(2)])
    assert spending.needs_history(ledger, [job(1, POD_B)])  # the same number, another job


def test_worth_writing_when_changed_or_old() -> None:
    record = build([job(1)]).record
    later = {**record, "observed_at": NOW + 30}
    assert spending.worth_writing(None, record, refresh=60)
    assert not spending.worth_writing(record, later, refresh=60)
    assert spending.worth_writing(record, {**later, "observed_at": NOW + 60}, refresh=60)
    assert spending.worth_writing(record, build([job(1), job(2)], now=NOW + 1).record, refresh=60)


def test_only_this_clusters_runner_labels_are_counted() -> None:
    def entry(number: int, label: str | None) -> JobEntry:
        return JobEntry(number, "", "PROCESSING STARTING", label, None, machine="n1", nodes=2, walltime_limit=60)

    entries = [
        entry(1, f"k8s-{HERE}.{POD_A}-main-1"),
        entry(2, f"k8s-prod-ba9876543210.{POD_A}-main-1"),  # another cluster's
        entry(3, f"k8s-{POD_A}-main-1"),  # legacy: nobody can tell whose
        entry(4, None),
        entry(5, f"k8s-{HERE}.{POD_B}-1"),  # a gang's job carries the gang's UID, no container
    ]
    jobs = spending.this_clusters_jobs(entries, cluster=HERE)
    assert [(j.number, j.owner, j.nodes, j.walltime_limit) for j in jobs] == [(1, POD_A, 2, 60), (5, POD_B, 2, 60)]


def test_a_job_number_seen_before_under_another_uid_is_another_job() -> None:
    """Job numbers may come back (another JARVICE account after a changed Secret): a job is its
    number and the UID its label carries together."""
    first = build([job(1000, start_time=NOW - 600)], now=NOW - 300)
    ended_a = job(1000, start_time=NOW - 600, end_time=NOW - 200, job_price=1.0)
    second = build([], [ended_a], previous=first.ledger, now=NOW - 100)
    assert second.record["namespaces"]["team-a"]["month_recorded"] == 1.0
    third = build([job(1000, POD_B, start_time=NOW - 90)], previous=second.ledger, now=NOW - 60)
    ended_b = job(1000, POD_B, start_time=NOW - 90, end_time=NOW - 30, job_price=2.0)
    fourth = build([], [ended_a, ended_b], previous=third.ledger)
    assert fourth.record["namespaces"]["team-b"]["month_recorded"] == 2.0
    assert fourth.record["namespaces"]["team-a"]["month_recorded"] == 1.0


def test_a_pod_carrying_another_pods_or_gangs_identity_never_moves_its_spend() -> None:
    gang = "99999999-8888-7777-6666-555555555555"
    claim = GangClaim(generation=1, group="", job_uid=gang)

    def view(uid: str, namespace: str, *, gang_of: str = "", claim_of: GangClaim | None = None) -> ReapView:
        return ReapView(uid, namespace, uid, False, None, ("app",), True, False, gang=gang_of, gang_claim=claim_of)

    views = [
        view(POD_A, "team-a"),  # a burst pod on its own
        view("rank-0", "team-b", gang_of=gang, claim_of=claim),  # a gang's pod
        # Pods elsewhere naming them: the burst pod's UID, and the gang's (with an owner reference to its Job).
        view("twin-1", "elsewhere", gang_of=POD_A, claim_of=GangClaim(1, "", POD_A)),
        view("twin-2", "elsewhere", gang_of=gang, claim_of=claim),
    ]
    for order in (views, views[::-1]):
        owners = owner_namespaces(order, cluster=HERE)
        assert owners[POD_A] == "team-a"  # a pod's own UID is its namespace's, whatever another pod says
        assert gang not in owners  # claimed in two namespaces: not taken from the pods (the ledger keeps its own)
    assert owner_namespaces(views[:2], cluster=HERE)[gang] == "team-b"
