"""The emulator's fault plan (devplatform.emulator.faults): parsing the control body, which requests
it applies to, and how faults and latency are drawn and used up."""

from __future__ import annotations

import random
from typing import Any

import pytest

from devplatform.emulator.faults import Faults


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        pytest.param({"drops": 1}, "unknown fault keys: ['drops']", id="unknown-key"),
        pytest.param({"rate": 1.5}, "rate must be within [0, 1]", id="rate-above-one"),
        pytest.param({"rate": -0.1}, "rate must be within [0, 1]", id="rate-below-zero"),
        pytest.param({"status503": -1, "html": -2}, "fault counts must be >= 0: ['html', 'status503']", id="negative"),
        pytest.param(
            {"drop_after_submit": -1}, "fault counts must be >= 0: ['drop_after_submit']", id="negative-after"
        ),
        pytest.param({"drop": "two"}, "drop must be a whole number, got 'two'", id="not-a-count"),
        pytest.param({"latency_ms": [1]}, "latency_ms must be a number, got [1]", id="not-a-latency"),
        pytest.param({"rate": None}, "rate must be a number, got None", id="not-a-rate"),
    ],
)
def test_a_bad_plan_is_refused_with_what_to_fix(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        Faults.from_json(raw)
    assert str(raised.value) == problem


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param({}, Faults(), id="empty-is-no-fault"),
        pytest.param({"drop_after_submit": True}, Faults(drop_after_submit=1), id="after-submit-as-flag"),
        pytest.param({"drop_after_submit": False}, Faults(), id="after-submit-flag-off"),
        pytest.param(
            {"status429": "2", "endpoints": ["submit", "jobs"], "latency_ms": 5},
            Faults(status429=2, endpoints=frozenset({"submit", "jobs"}), latency_ms=5.0),
            id="strings-and-lists",
        ),
    ],
)
def test_a_plan_reads_as_given(raw: dict[str, Any], expected: Faults) -> None:
    assert Faults.from_json(raw) == expected


def test_a_plan_round_trips_through_its_json() -> None:
    plan = Faults(drop=1, status404=2, endpoints=frozenset({"tail", "status"}), latency_requests=3)
    assert Faults.from_json(plan.to_json()) == plan
    assert plan.to_json()["endpoints"] == ["status", "tail"]


@pytest.mark.parametrize(
    ("endpoints", "endpoint", "applies"),
    [
        pytest.param(None, "submit", True, id="any-api-call"),
        pytest.param(None, "live", False, id="probes-spared"),
        pytest.param(None, "ready", False, id="readiness-spared"),
        pytest.param(frozenset({"live"}), "live", True, id="probe-named"),
        pytest.param(frozenset({"submit"}), "status", False, id="not-named"),
    ],
)
def test_which_requests_a_plan_applies_to(endpoints: frozenset[str] | None, endpoint: str, applies: bool) -> None:
    assert Faults(endpoints=endpoints).applies(endpoint) is applies


def test_latency_for_the_next_requests_only() -> None:
    plan = Faults(latency_ms=250, latency_requests=2)
    assert [plan.take_latency() for _ in range(3)] == [0.25, 0.25, 0.0]
    always = Faults(latency_ms=10)
    assert [always.take_latency() for _ in range(3)] == [0.01, 0.01, 0.01]


def test_faults_are_drawn_until_every_counter_is_used_up() -> None:
    plan = Faults(drop=2, status503=1)
    drawn = [plan.take(random.Random(7)) for _ in range(4)]
    assert sorted(kind for kind in drawn if kind is not None) == ["drop", "drop", "status503"]
    assert drawn[3] is None and (plan.drop, plan.status503) == (0, 0)


def test_rate_zero_draws_nothing_and_keeps_the_counters() -> None:
    plan = Faults(status500=3, rate=0.0)
    assert {plan.take(random.Random(seed)) for seed in range(20)} == {None}
    assert plan.status500 == 3
