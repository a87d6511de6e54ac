"""`make replay --burst-after`: the option, the runs it plans, the inert Jobs, and the trade-off table."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from replay import accounting, objects, report
from replay.run import plan_runs
from replay.settings import DEFAULT_MAX_WALL_SECONDS, SettingsError, parse_settings


@pytest.mark.parametrize(
    ("argv", "runs"),
    [
        ([], [("no-bursting", None, None), ("on-failure", None, None), ("webhook", None, None)]),
        (
            ["--burst-after", "0,5m,30m"],
            [
                ("no-bursting", None, None),
                ("on-failure", None, None),
                ("webhook", 0.0, None),
                ("webhook", 300.0, None),
                ("webhook", 1800.0, None),
            ],
        ),
        (["--policies", "webhook", "--burst-after", "90s, 1h"], [("webhook", 90.0, None), ("webhook", 3600.0, None)]),
        (
            ["--policies", "webhook", "--max-cost-per-hour", "none,12.8"],
            [("webhook", None, None), ("webhook", None, 12.8)],
        ),
        (
            ["--policies", "no-bursting,webhook", "--burst-after", "0,5m", "--max-cost-per-hour", "none, 20"],
            [
                ("no-bursting", None, None),
                ("webhook", 0.0, None),
                ("webhook", 0.0, 20.0),
                ("webhook", 300.0, None),
                ("webhook", 300.0, 20.0),
            ],
        ),
    ],
)
def test_the_webhook_runs_once_per_setting(argv: list[str], runs: list[tuple[str, float | None, float | None]]) -> None:
    assert plan_runs(parse_settings(argv)) == runs


def test_the_wall_budget_grows_with_the_runs_unless_given() -> None:
    assert parse_settings([]).max_wall_seconds == DEFAULT_MAX_WALL_SECONDS
    assert parse_settings(["--burst-after", "0,5m,30m"]).max_wall_seconds == DEFAULT_MAX_WALL_SECONDS * 5 / 3
    assert parse_settings(["--burst-after", "0,5m", "--max-wall-seconds", "100"]).max_wall_seconds == 100
    four_webhook_runs = ["--burst-after", "0,5m", "--max-cost-per-hour", "none,10"]
    assert parse_settings(four_webhook_runs).max_wall_seconds == DEFAULT_MAX_WALL_SECONDS * 6 / 3


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--burst-after", "5 minutes"], "--burst-after: '5 minutes' is not a duration"),
        (["--burst-after", "5m", "--policies", "on-failure"], "needs the webhook policy"),
        (["--burst-after", "5m,300s"], "each value once"),
        (["--max-cost-per-hour", "ten"], "--max-cost-per-hour: 'ten' is not a number >= 0"),
        (["--max-cost-per-hour", "-5"], "--max-cost-per-hour: '-5' is not a number >= 0"),
        (["--max-cost-per-hour", "10,10.0"], "--max-cost-per-hour: each value once"),
        (["--max-cost-per-hour", "10", "--policies", "no-bursting"], "--max-cost-per-hour needs the webhook policy"),
        (["--webhook-tree", "/nonexistent"], "--webhook-tree: /nonexistent holds no webhook package"),
    ],
)
def test_a_bad_setting_says_what_to_fix(argv: list[str], says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        parse_settings(argv)


def test_the_webhook_runs_from_the_tree_asked_for() -> None:
    checkout = Path(__file__).resolve().parents[2]
    assert parse_settings([]).webhook_tree is None
    assert parse_settings(["--webhook-tree", str(checkout)]).webhook_tree == checkout


@pytest.mark.parametrize(
    ("seconds", "title", "key"),
    [
        (None, "nimbix-burst webhook", "webhook"),
        (0.0, "nimbix-burst webhook, burst-after 0", "webhook-ba0"),
        (300.0, "nimbix-burst webhook, burst-after 5 min", "webhook-ba300"),
        (5400.0, "nimbix-burst webhook, burst-after 1.5 h", "webhook-ba5400"),
        (45.5, "nimbix-burst webhook, burst-after 45.5 s", "webhook-ba45p5"),
    ],
)
def test_a_run_is_named_by_its_setting(seconds: float | None, title: str, key: str) -> None:
    assert accounting.run_title("webhook", seconds) == title
    assert accounting.run_key("webhook", seconds) == key


def test_the_inert_job_and_the_reference_its_pod_carries() -> None:
    job = objects.build_inert_job("openb-pod-7427", namespace="replay-webhook-ba300")
    assert job["kind"] == "Job" and job["metadata"]["name"] == "openb-pod-7427"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert "suspend" not in job["spec"]  # a suspended Job would not recreate its pod: no burst
    reference = objects.job_owner_reference("openb-pod-7427", "uid-1")
    assert reference == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "openb-pod-7427",
        "uid": "uid-1",
        "controller": True,
    }


def test_p95_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert accounting.distribution(values).p95 == 95.0
    assert accounting.distribution([]).p95 == 0.0


def _summary(burst_after: float, *, burst: int, hours: float, pending: list[float]) -> accounting.PolicySummary:
    empty = accounting.distribution([])
    fields: dict[str, Any] = {
        f.name: 0
        for f in dataclasses.fields(accounting.PolicySummary)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    fields |= {
        "policy": "webhook",
        "gpu_pods": 100,
        "burst": burst,
        "remote_gpu_hours": hours,
        "remote_cost": hours * 2.5,
        "pending_for_gpus": len(pending),
        "pending_trace_seconds": accounting.distribution(pending),
        "burst_delay_trace_seconds": empty,
        "admission_latency_ms": empty,
        "create_latency_ms": empty,
        "truncated": False,
    }
    waited = accounting.distribution([*pending, *[0.0] * (100 - len(pending))])
    return accounting.PolicySummary(**fields, burst_after=burst_after, waited_trace_seconds=waited)


def test_the_trade_off_table_has_a_row_per_setting() -> None:
    table = report.build_tradeoff_table(
        [
            _summary(0.0, burst=30, hours=40.0, pending=[]),
            _summary(300.0, burst=12, hours=20.0, pending=[300.0] * 19 + [3600.0]),
        ]
    ).splitlines()
    assert table[0].startswith("| burst-after | max-cost-per-hour | pods burst | gangs burst | GPU-hours to Nimbix |")
    assert table[2] == "| 0 | none | 30 (30.0 %) | - | 40.0 | 100 | - | - | 0 (0.0 %) | - | 0 min | 0 | 0 |"
    assert table[3] == (
        "| 5 min | none | 12 (12.0 %) | - | 20.0 | 50 | - | - | 20 (20.0 %) | 5 min / 5 min / 1.0 h | 5 min | 0 | 0 |"
    )
