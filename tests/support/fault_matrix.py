"""The money-safety fault matrix (tests/e2e/test_money_safety.py): one row per fault, each held to the goal
by the test that makes it, and the table docs/money-safety.md shows, printed at the end of a session that
recorded any row.

Each row test records its own row and checks it there, so a row passes or fails alone (under `-k`, in any
order); the session's collector only gathers the rows that ran, for the printed table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COLUMNS = (
    *("fault", "submitted", "completed", "billing past grace + interval"),
    *("others stopped", "promised twice", "over budget", "note"),
)


@dataclass(frozen=True)
class Row:
    """What one fault did:
    - submitted: JARVICE jobs that carry the pod's UID;
    - completed: of those, the ones that ran to completion;
    - billing_late: jobs still running after their pod was gone (or could no longer follow them) for
      longer than the bound the row states;
    - others_stopped: jobs of another cluster or submitted by hand that anything stopped;
    - promised_twice: local decisions past the GPUs free;
    - over_budget: GPUs a namespace's jobs held past what its budget counted."""

    fault: str
    submitted: int
    completed: int
    billing_late: int
    others_stopped: int = 0
    promised_twice: int = 0
    over_budget: int = 0
    note: str = ""


def goal_misses(row: Row) -> list[str]:
    """How the row falls short of the goal (none run twice, 0 billed late, 0 of others stopped, 0 promised
    twice, 0 over budget); empty when it meets it."""
    counts = {
        "billed late": row.billing_late,
        "of others stopped": row.others_stopped,
        "promised twice": row.promised_twice,
        "over budget": row.over_budget,
    }
    misses = [f"{count} {what}" for what, count in counts.items() if count]
    if row.submitted > 1:
        misses.append(f"{row.submitted} jobs submitted for one pod: a job ran twice")
    return misses


def table(rows: list[Row]) -> list[str]:
    """The rows as the Markdown table of docs/money-safety.md."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = (row.fault, row.submitted, row.completed, row.billing_late)
        cells += (row.others_stopped, row.promised_twice, row.over_budget, row.note)
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return lines


@dataclass
class FaultMatrix:
    """The rows recorded in one session (the e2e conftest prints them at its end)."""

    rows: list[Row] = field(default_factory=list)

    def record(self, row: Row) -> Row:
        """Keeps the row for the table, then holds it to the goal: the row's own test fails on a miss."""
        self.rows.append(row)
        misses = goal_misses(row)
        assert not misses, f"{row.fault}: {'; '.join(misses)} ({row})"
        return row
