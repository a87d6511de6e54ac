"""The money-safety fault matrix's rows (tests/support/fault_matrix.py): each row held to the goal alone."""

from __future__ import annotations

import pytest

from tests.support.fault_matrix import COLUMNS, FaultMatrix, Row, goal_misses, table

MET = Row("met", submitted=1, completed=0, billing_late=0)


@pytest.mark.parametrize(
    ("row", "misses"),
    [
        (MET, []),
        (Row("nothing submitted", submitted=0, completed=0, billing_late=0), []),
        (Row("late", submitted=1, completed=0, billing_late=1), ["1 billed late"]),
        (Row("others", submitted=0, completed=0, billing_late=0, others_stopped=2), ["2 of others stopped"]),
        (Row("promised", submitted=0, completed=0, billing_late=0, promised_twice=1), ["1 promised twice"]),
        (Row("budget", submitted=1, completed=1, billing_late=0, over_budget=7), ["7 over budget"]),
        (Row("twice", submitted=2, completed=2, billing_late=0), ["2 jobs submitted for one pod: a job ran twice"]),
        (
            Row("both", submitted=2, completed=0, billing_late=1),
            ["1 billed late", "2 jobs submitted for one pod: a job ran twice"],
        ),
    ],
)
def test_goal_misses(row: Row, misses: list[str]) -> None:
    assert goal_misses(row) == misses


def test_record_keeps_a_row_that_misses_the_goal_and_fails_its_test() -> None:
    matrix = FaultMatrix()
    late = Row("late", submitted=1, completed=0, billing_late=1, note="stopped 40s after")
    with pytest.raises(AssertionError, match="late: 1 billed late"):
        matrix.record(late)
    assert matrix.record(MET) is MET
    assert matrix.rows == [late, MET]


def test_table_has_a_line_per_row_under_the_header() -> None:
    lines = table([MET, Row("budget", submitted=0, completed=0, billing_late=0, over_budget=3, note="exit 73")])
    assert lines[0] == "| " + " | ".join(COLUMNS) + " |"
    assert lines[1] == "|---|---|---|---|---|---|---|---|"
    assert lines[2:] == ["| met | 1 | 0 | 0 | 0 | 0 | 0 |  |", "| budget | 0 | 0 | 0 | 0 | 0 | 3 | exit 73 |"]
