"""The pure parts of the move-home benchmark (bench/move_home.py) and of the move it times
(tests/support/move_home.py): the example trainer's log read, a round's row, the spread over rounds."""

from __future__ import annotations

from typing import Any

import pytest

from bench import move_home as bench_move_home
from tests.support import move_home
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

REMOTE_LOG = """step 1/60 loss=0.9000
step 2/60 loss=0.8100
checkpoint written: /workspace/ckpt/step-00002.json
step 3/60 loss=0.7290
"""
LOCAL_LOG = """resumed from step 2
step 3/60 loss=0.7290
step 4/60 loss=0.6561
training done
"""


@pytest.mark.parametrize(
    ("log", "steps", "resumed"),
    [
        (REMOTE_LOG, [1, 2, 3], None),
        (LOCAL_LOG, [3, 4], 2),
        ("", [], None),
        # A step line is a line of its own: the runner's JSON logs quoting one do not count.
        ('{"msg": "x step 5/9 loss=1"}\nstep 6/9 loss=0.5\n', [6], None),
        ("resumed from step 40\nstep 41/60 loss=0.1\n", [41], 40),
    ],
)
def test_the_trainers_log_gives_its_steps_and_where_it_resumed(log: str, steps: list[int], resumed: int | None) -> None:
    assert move_home.parse_steps(log) == steps
    assert move_home.parse_resumed(log) == resumed


@pytest.mark.parametrize(
    ("remote", "local", "repeated"),
    [
        (REMOTE_LOG, LOCAL_LOG, 1),  # step 3 ran remotely after the checkpoint of step 2, and again here
        (REMOTE_LOG, "resumed from step 3\nstep 4/60 loss=1\n", 0),  # the move's own checkpoint: none
        (REMOTE_LOG, "resumed from step 5\n", 0),  # a checkpoint newer than the log's last step: never negative
        (REMOTE_LOG, "step 1/60 loss=1\n", None),  # started afresh: the log does not say
        ("", LOCAL_LOG, None),
    ],
)
def test_steps_repeated_are_the_last_remote_step_less_the_one_resumed_from(
    remote: str, local: str, repeated: int | None
) -> None:
    assert move_home.steps_repeated(remote, local) == repeated


@pytest.mark.parametrize(
    ("trainer", "seconds"),
    [
        (move_home.TrainerSettings(120, 1.0, 10, 40.0), 10),
        (move_home.TrainerSettings(60, 0.5, 10, 20.0), 5),
        (move_home.TrainerSettings(60, 0.1, 2, 20.0), 1),  # never 0 s: the annotation wants a duration
    ],
)
def test_the_checkpoint_interval_annotation_is_whole_seconds(trainer: move_home.TrainerSettings, seconds: int) -> None:
    assert trainer.checkpoint_interval_seconds == seconds


def test_a_rounds_row_is_read_from_what_the_move_did() -> None:
    moved = move_home.MoveRound(
        job="train-x",
        remote_pod={},
        local_pod={},
        remote_status="COMPLETED",
        completed_after_s=2.345,
        first_local_step_after_s=14.456,
        remote_log=REMOTE_LOG,
        local_log=LOCAL_LOG,
    )
    assert bench_move_home.round_row(moved) == {
        "remote_status": "COMPLETED",
        "completed_s": 2.35,
        "first_local_step_s": 14.46,
        "remote_steps": 3,
        "resumed_from": 2,
        "steps_repeated": 1,
    }


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], None),
        ([3.0], {"median": 3.0, "min": 3.0, "max": 3.0, "n": 1}),
        ([14.0, 12.5, 20.0, 13.0, 15.5], {"median": 14.0, "min": 12.5, "max": 20.0, "n": 5}),
        ([1.0, 2.0, 4.0, 9.0], {"median": 3.0, "min": 1.0, "max": 9.0, "n": 4}),  # even: the middle two's mean
    ],
)
def test_the_spread_is_the_median_and_the_range(values: list[float], expected: dict[str, float] | None) -> None:
    assert bench_move_home.spread(values) == expected


def _row(status: str, completed: float = 0.0, first: float = 0.0, repeated: int | None = 0) -> dict[str, Any]:
    return {
        "remote_status": status,
        "completed_s": completed,
        "first_local_step_s": first,
        "remote_steps": 40,
        "resumed_from": 40,
        "steps_repeated": repeated,
    }


def test_a_summary_counts_the_rounds_that_did_not_move_as_failed_and_leaves_them_out() -> None:
    rows = [
        _row("COMPLETED", 2.0, 14.0, 0),
        _row("COMPLETED", 3.0, 16.0, 2),
        {"remote_status": "failed", "error": "no the replacement's first step after 120 s"},
        _row("TERMINATED", 1.0, 9.0, 0),  # stopped, not checkpointed: not a move
        _row("COMPLETED", 2.5, 15.0, None),
    ]
    summary = bench_move_home.summarize(rows)
    assert summary["rounds"] == 5
    assert summary["failed"] == 2
    assert summary["completed_s"] == {"median": 2.5, "min": 2.0, "max": 3.0, "n": 3}
    assert summary["first_local_step_s"] == {"median": 15.0, "min": 14.0, "max": 16.0, "n": 3}
    assert summary["steps_repeated"] == {"median": 1.0, "min": 0.0, "max": 2.0, "n": 2}


def test_the_report_gives_the_medians_every_round_and_the_what_if_at_the_measured_move() -> None:
    rows = [_row("COMPLETED", 2.0, 14.0, 0), {"remote_status": "failed", "error": "a | in it"}]
    what_if = {
        "checkpointing_share": 0.5,
        "checkpoint_interval_seconds": 900.0,
        "price_per_gpu_hour": 2.5,
        "checkpointing": 163,
        "remote_gpu_hours": 410.7,
        "gpu_hours_redone_at_most": 10.5,
    }
    result = {
        "date": "2026-12-07 18:00 UTC",
        "trainer": {"steps": 60, "seconds_per_step": 0.5, "checkpoint_every": 10, "run_remotely_seconds": 20.0},
        "rounds": rows,
        "summary": bench_move_home.summarize(rows),
        "what_if": [
            {
                **what_if,
                "label": "measured median",
                "move_seconds": 14.0,
                "moves": 44,
                "gpu_hours_saved": 42.0,
                "money_saved": 105.0,
            },
            {
                **what_if,
                "label": "assumed before",
                "move_seconds": 60.0,
                "moves": 42,
                "gpu_hours_saved": 41.2,
                "money_saved": 103.0,
            },
        ],
    }
    text = bench_move_home.render(result)
    assert "2 rounds (1 failed)" in text
    assert "| the replacement's first local step | **14 s** (14..14) |" in text
    assert "| 2 | failed: 'a / in it' | | | | |" in text  # a failed round keeps the table's columns
    assert "| measured median: 14 s | 44 of 163 | 42.0 (10.2%) | 105 | 10.5 GPU-hours |" in text
    assert "50% of lone burst pods checkpointing every 15 min" in text
