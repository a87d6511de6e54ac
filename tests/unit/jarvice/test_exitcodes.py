from collections.abc import Callable

import pytest

from jarvice import exitcodes
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)


@pytest.mark.parametrize(
    ("state", "job_exitcode", "expected"),
    [
        ("COMPLETED", 0, 0),
        ("COMPLETED", None, 0),
        ("COMPLETED", 3, 3),
        ("completed", 0, 0),  # compared case-insensitively, as jarviceclient does
        ("COMPLETED WITH ERROR", 7, 7),
        ("COMPLETED WITH ERROR", 0, 1),
        ("COMPLETED WITH ERROR", None, 1),
        ("COMPLETED WITH ERROR", -9, 137),
        ("COMPLETED WITH ERROR", -15, 143),
        ("COMPLETED WITH ERROR", 300, 1),  # cannot be a process status; never wraps to 0
        ("TERMINATED", 0, 143),
        ("TERMINATED", -15, 143),
        ("TERMINATED", None, 143),
        ("CANCELED", 5, 5),  # fast failing jobs can show CANCELED
        ("CANCELED", -9, 137),
        ("CANCELED", 0, exitcodes.EXIT_CANCELED),
        ("CANCELED", None, exitcodes.EXIT_CANCELED),
        ("EXEMPT", 0, exitcodes.EXIT_PROTOCOL),
    ],
)
def test_from_job(state: str, job_exitcode: int | None, expected: int) -> None:
    decision = exitcodes.from_job(state, job_exitcode)
    assert decision.code == expected
    assert decision.reason


def test_ambiguous_canceled_warns() -> None:
    assert exitcodes.from_job("CANCELED", 0).warning is not None
    assert exitcodes.from_job("CANCELED", 2).warning is None


@pytest.mark.parametrize(
    ("returncode", "expected"),
    [(0, 0), (3, 3), (255, 255), (-15, 143), (-9, 137), (-2, 130), (-1, 129), (256, 1)],
)
def test_from_returncode(returncode: int, expected: int) -> None:
    assert exitcodes.from_returncode(returncode) == expected


@pytest.mark.parametrize(("code", "expected"), [(-15, 143), (-9, 137), (-200, 255), (0, 0), (42, 42), (1000, 1)])
def test_normalize_job_exitcode(code: int, expected: int) -> None:
    assert exitcodes.normalize_job_exitcode(code) == expected


def test_runner_codes_are_distinct() -> None:
    codes = [
        exitcodes.EXIT_REMOTE_UNAVAILABLE,
        exitcodes.EXIT_INTERNAL,
        exitcodes.EXIT_PROTOCOL,
        exitcodes.EXIT_CREDENTIALS,
        exitcodes.EXIT_CONFIG,
        exitcodes.EXIT_NO_MACHINE,
        exitcodes.EXIT_CANCELED,
    ]
    assert len(set(codes)) == len(codes)
    assert all(64 <= c < 126 for c in codes)


@pytest.mark.parametrize(
    ("state", "job_exitcode", "walltime_exceeded", "expected"),
    [
        ("TERMINATED", -9, True, exitcodes.EXIT_WALLTIME),
        ("TERMINATED", None, False, exitcodes.EXIT_TERMINATED),
        ("COMPLETED", 0, True, 0),  # only a TERMINATED job can have been stopped for its walltime
    ],
)
def test_walltime_stop(state: str, job_exitcode: int | None, walltime_exceeded: bool, expected: int) -> None:
    assert exitcodes.from_job(state, job_exitcode, walltime_exceeded=walltime_exceeded).code == expected


def test_the_runners_own_codes_are_distinct_and_in_its_block() -> None:
    own = [
        exitcodes.EXIT_REMOTE_UNAVAILABLE,
        exitcodes.EXIT_INTERNAL,
        exitcodes.EXIT_OVER_BUDGET,
        exitcodes.EXIT_WALLTIME,
        exitcodes.EXIT_PROTOCOL,
        exitcodes.EXIT_CREDENTIALS,
        exitcodes.EXIT_CONFIG,
        exitcodes.EXIT_NO_MACHINE,
        exitcodes.EXIT_CANCELED,
    ]
    assert len(set(own)) == len(own) and all(69 <= code <= 80 for code in own)


@pytest.mark.parametrize("convert", [exitcodes.from_returncode, exitcodes.normalize_job_exitcode])
def test_a_programs_own_moved_home_code_is_a_failure_never_a_move(convert: Callable[[int], int]) -> None:
    # The Job's podFailurePolicy ignores EXIT_MOVED_HOME: a program returning it would run again forever.
    assert exitcodes.EXIT_MOVED_HOME not in (69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80)
    assert convert(exitcodes.EXIT_MOVED_HOME) == exitcodes.EXIT_FAILURE
    assert exitcodes.from_job("COMPLETED", exitcodes.EXIT_MOVED_HOME).code == exitcodes.EXIT_FAILURE
