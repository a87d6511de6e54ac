"""Walltime parsing and how a walltime stop is told from another terminate."""

import pytest

from entrypoint import walltime


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("24:00:00", 86400),
        ("0:00:05", 5),
        ("100:30:15", 361815),
        (" 01:02:03 ", 3723),
        ("1:60:00", None),
        ("1h", None),
        ("", None),
        ("123456:00:00", None),
    ],
)
def test_parse_walltime_seconds(text: str, seconds: int | None) -> None:
    assert walltime.parse_walltime_seconds(text) == seconds


@pytest.mark.parametrize(
    ("state", "text", "start", "end", "limit", "expected"),
    [
        ("TERMINATED", "Walltime exceeded", 0, 0, None, True),
        ("TERMINATED", "", 1000, 1060, 60, True),
        ("TERMINATED", "", 1000, 1058, 60, True),  # within the slack
        ("TERMINATED", "", 1000, 1030, 60, False),  # stopped by someone else, early
        ("TERMINATED", "", 0, 1060, 60, False),  # never started: no run time to compare
        ("TERMINATED", "", 1000, 1060, None, False),
        ("COMPLETED", "walltime exceeded", 1000, 1060, 60, False),
        ("completed with error", "", 1000, 1060, 60, False),
        ("terminated", "JOB WALLTIME LIMIT", 1000, 1001, 60, True),
    ],
    ids=["text", "ran-full", "slack", "early", "not-started", "no-limit", "completed", "error", "case"],
)
def test_decide_walltime_stop(state: str, text: str, start: int, end: int, limit: int | None, expected: bool) -> None:
    assert (
        walltime.decide_walltime_stop(
            state, substatus_text=text, start_time=start, end_time=end, walltime_seconds=limit
        )
        is expected
    )
