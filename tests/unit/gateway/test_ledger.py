"""The last check before money is spent: a namespace's budget and caps against what the gateway has
submitted and JARVICE still runs. Expected values by hand."""

from __future__ import annotations

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


def test_one_job_per_pod_attempt() -> None:
    why = ledger.refusal({"L-new": _entry()}, namespace=NS, limits=Limits(), submit=_submit(), month_recorded=0)
    assert why is not None and "one job per attempt" in why


def test_an_entry_counts_while_its_job_is_listed_or_while_it_is_young() -> None:
    held = {"live": _entry(at=0), "young": _entry(at=950), "gone": _entry(at=0)}
    kept = ledger.prune(held, live_labels={"live"}, now=1000, pending_seconds=180)
    assert set(kept) == {"live", "young"}


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
    held = ledger.with_submit({}, _submit(), namespace=NS, pod_uid="u", now=5.0)
    assert ledger.parse_ledger(ledger.encode_ledger(held)) == held
    assert ledger.without(held, "L-new") == {}
    with pytest.raises(ledger.LedgerError, match="unreadable"):
        ledger.parse_ledger('{"version": 1}')
    with pytest.raises(ledger.LedgerError, match="version 9"):
        ledger.parse_ledger('{"version": 9, "entries": {}}')
