"""The last check before money is spent: a namespace's budget and caps against what the gateway has
submitted and JARVICE still runs. Expected values by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway import ledger
from gateway.ledger import Entry, Limits
from gateway.submission import AdmittedSubmit

NS = "team"


def _submit(label: str = "L-new", gpus: int = 1, cost: float | None = 3.2, worst: float | None = 6.4) -> AdmittedSubmit:
    return AdmittedSubmit(
        body={}, label=label, machine="ng1", nodes=1, gpus=gpus, cost_per_hour=cost, worst_case=worst, changes=()
    )


def _entry(
    namespace: str = NS, gpus: int = 1, cost: float | None = 3.2, worst: float | None = 6.4, at: float = 0.0
) -> Entry:
    return Entry(namespace=namespace, pod_uid="u", gpus=gpus, cost_per_hour=cost, worst_case=worst, at=at)


HELD = {"L1": _entry(gpus=2, cost=6.4, worst=12.8), "L2": _entry(namespace="other", gpus=8, cost=99.0, worst=999.0)}


@pytest.mark.parametrize(
    ("limits", "month", "says"),
    [
        pytest.param(Limits(), 0.0, None, id="no-limits"),
        pytest.param(Limits(max_gpus=3), 0.0, None, id="budget-exactly"),
        pytest.param(
            Limits(max_gpus=2), 0.0, "burst budget is 2 GPU(s); its jobs hold 2, this one needs 1", id="budget"
        ),
        pytest.param(Limits(max_cost_per_hour=9.6), 0.0, None, id="hour-exactly"),
        pytest.param(
            Limits(max_cost_per_hour=9.5), 0.0, "cap is 9.5 per hour; its jobs cost 6.4, this one 3.2", id="hour"
        ),
        pytest.param(Limits(max_cost_per_month=100.0), 80.0, None, id="month-within"),
        pytest.param(
            Limits(max_cost_per_month=100.0), 81.0, "this month holds 93.8, this job may cost 6.4", id="month"
        ),
        pytest.param(Limits(max_gpus=0), 0.0, "budget is 0 GPU(s)", id="an-unreadable-budget-is-0"),
    ],
)
def test_a_namespaces_budget_and_caps_count_only_its_own_entries(
    limits: Limits, month: float, says: str | None
) -> None:
    why = ledger.refusal(HELD, namespace=NS, limits=limits, submit=_submit(), month_recorded=month)
    assert why == says if says is None else says in (why or "")


def test_a_machine_without_a_price_is_refused_in_a_capped_namespace_only() -> None:
    unpriced = _submit(cost=None, worst=None)
    assert ledger.refusal({}, namespace=NS, limits=Limits(), submit=unpriced, month_recorded=0) is None
    why = ledger.refusal({}, namespace=NS, limits=Limits(max_cost_per_hour=100), submit=unpriced, month_recorded=0)
    assert why is not None and "gives no price" in why


@pytest.mark.parametrize(
    ("entry", "now", "blocked"),
    [
        pytest.param(_entry(at=995), 1000, True, id="sent-5-s-ago-no-answer-yet"),
        pytest.param(_entry(at=985), 1000, False, id="sent-15-s-ago-the-runner-resolved-it"),
        pytest.param(replace(_entry(at=999), number=7), 1000, False, id="answered"),
    ],
)
def test_one_submit_of_an_attempt_at_a_time(entry: Entry, now: float, blocked: bool) -> None:
    assert ledger.in_flight({"L-new": entry}, "L-new", now=now) is blocked
    assert not ledger.in_flight({"L-other": entry}, "L-new", now=now)


def test_the_entry_a_submit_replaces_is_not_counted_twice() -> None:
    """A runner moving its queued job terminates it, then submits the same attempt on another machine."""
    held = {"L-new": _entry(gpus=1)}
    assert ledger.refusal(held, namespace=NS, limits=Limits(max_gpus=1), submit=_submit(), month_recorded=0) is None


@pytest.mark.parametrize(
    ("entry", "live", "kept"),
    [
        pytest.param(_entry(at=0), True, True, id="listed"),
        pytest.param(_entry(at=950), False, True, id="unanswered-and-young"),
        pytest.param(_entry(at=0), False, False, id="unanswered-and-old"),
        pytest.param(replace(_entry(at=998), number=7), False, True, id="answered-moments-ago"),
        pytest.param(replace(_entry(at=990), number=7), False, False, id="answered-and-no-longer-listed"),
    ],
)
def test_an_entry_counts_while_its_job_is_listed_or_its_answer_is_not_known(
    entry: Entry, live: bool, kept: bool
) -> None:
    pruned = ledger.prune({"L": entry}, live_labels={"L"} if live else set(), now=1000, pending_seconds=180)
    assert ("L" in pruned) is kept


@pytest.mark.parametrize(
    ("annotations", "limits"),
    [
        ({}, Limits()),
        (
            {
                "nimbix-burst.io/max-remote-gpus": "4",
                "nimbix-burst.io/max-cost-per-hour": "12.5",
                "nimbix-burst.io/max-cost-per-month": "1000",
            },
            Limits(max_gpus=4, max_cost_per_hour=12.5, max_cost_per_month=1000.0),
        ),
        ({"nimbix-burst.io/max-remote-gpus": "four", "nimbix-burst.io/max-cost-per-hour": "-1"}, Limits(0, 0.0)),
    ],
)
def test_limits_are_the_namespaces_annotations_and_a_typo_caps_at_0(
    annotations: dict[str, str], limits: Limits
) -> None:
    assert ledger.limits_from_annotations(annotations) == limits


def test_the_ledger_round_trips_and_a_broken_one_is_said() -> None:
    held = ledger.with_number(ledger.with_submit({}, _submit(), namespace=NS, pod_uid="u", now=5.0), "L-new", 42)
    assert ledger.parse_ledger(ledger.encode_ledger(held)) == held
    assert ledger.without(held, "L-new") == {}
    with pytest.raises(ledger.LedgerError, match="unreadable"):
        ledger.parse_ledger('{"version": 1}')
    with pytest.raises(ledger.LedgerError, match="version 9"):
        ledger.parse_ledger('{"version": 9, "entries": {}}')
