"""The cost caps' annotation values and the spend record as readers parse them."""

from __future__ import annotations

import json

import pytest

from kubeplumbing.spendrecord import CostCap, SpendRecordError, parse_cost_cap, parse_spend_record


@pytest.mark.parametrize(
    ("text", "cap"),
    [
        ("5", CostCap(5.0)),
        (" 12.50 ", CostCap(12.5)),
        ("0", CostCap(0.0)),
        ("1.", CostCap(1.0)),
        ("-1", CostCap(0.0, "-1")),
        ("1e3", CostCap(0.0, "1e3")),
        ("1.2.3", CostCap(0.0, "1.2.3")),
        ("", CostCap(0.0, "")),
        ("five", CostCap(0.0, "five")),
        ("nan", CostCap(0.0, "nan")),
        ("9" * 21, CostCap(0.0, "9" * 21)),
    ],
)
def test_a_cost_cap_is_a_decimal_number_else_zero(text: str, cap: CostCap) -> None:
    assert parse_cost_cap(text) == cap


GOOD = {
    "version": 1,
    "observed_at": 100,
    "month": "2026-11",
    "machines": {},
    "namespaces": {
        "team": {"pods": {"u": {"gpus": 2}}, "cost_per_hour": 1, "month_recorded": 0, "month_worst_case": 3}
    },
    "unattributed": {"jobs": 1, "cost_per_hour": 2.5},
}


def test_a_record_reads_back() -> None:
    record = parse_spend_record(json.dumps(GOOD))
    assert record.namespaces["team"].gpus == 2 and record.namespaces["team"].month_worst_case == 3.0
    assert (record.observed_at, record.unattributed_jobs, record.unattributed_cost_per_hour) == (100, 1, 2.5)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"version": 2}, "version 2"),
        ({"month": "November"}, "YYYY-MM"),
        ({"observed_at": "soon"}, "observed_at"),
        ({"namespaces": {"team": {"cost_per_hour": -1}}}, "namespaces.team.cost_per_hour"),
        ({"namespaces": []}, "namespaces is not an object"),
    ],
)
def test_a_bad_record_says_what_is_wrong(change: dict[str, object], says: str) -> None:
    with pytest.raises(SpendRecordError, match=says):
        parse_spend_record(json.dumps({**GOOD, **change}))


def test_a_record_that_is_not_json() -> None:
    with pytest.raises(SpendRecordError, match="not JSON"):
        parse_spend_record("{")
