"""The emulator's job numbers never repeat within one job directory, across emulator lifetimes
(JARVICE never reuses a number): the next number is recorded, and existing job directories count."""

from pathlib import Path

import pytest

from devplatform.emulator.numbering import NEXT_NUMBER_FILE, first_unused_number, parse_recorded_number
from devplatform.emulator.state import JobNumbers
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)


@pytest.mark.parametrize(
    ("recorded", "existing", "expected"),
    [
        (None, [], 1000),
        (1003, [], 1003),
        (None, ["1000", "1001"], 1002),
        (1001, ["1000", "1004"], 1005),  # a stale record never goes back below a job directory
        (1010, ["1000"], 1010),
        (None, ["jarvice", "logs", "12x", "-3"], 1000),  # entries that are not numbers are not jobs
        (None, ["7"], 1000),  # never below the first number
        (0, [], 1000),
    ],
    ids=["fresh", "recorded", "dirs-only", "stale-record", "record-ahead", "not-jobs", "below-first", "zero"],
)
def test_the_first_unused_number(recorded: int | None, existing: list[str], expected: int) -> None:
    assert first_unused_number(1000, recorded=recorded, existing=existing) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1004\n", 1004), ("  77 ", 77), ("", None), ("abc", None), ("-5", None), ("1.5", None)],
)
def test_the_recorded_number(text: str, expected: int | None) -> None:
    assert parse_recorded_number(text) == expected


def test_a_second_lifetime_over_the_directory_continues_the_numbers(tmp_path: Path) -> None:
    first = JobNumbers(tmp_path, first=1000)
    handed = [first.allocate() for _ in range(3)]
    assert [number for number, _ in handed] == [1000, 1001, 1002]
    assert all(directory.is_dir() and not any(directory.iterdir()) for _, directory in handed)

    second = JobNumbers(tmp_path, first=1000)
    number, directory = second.allocate()
    assert number == 1003 and directory == tmp_path / "1003"
    assert (tmp_path / NEXT_NUMBER_FILE).read_text() == "1004\n"


def test_job_directories_count_when_the_record_is_lost(tmp_path: Path) -> None:
    JobNumbers(tmp_path, first=1000).allocate()
    (tmp_path / NEXT_NUMBER_FILE).unlink()
    assert JobNumbers(tmp_path, first=1000).allocate()[0] == 1001


def test_a_number_whose_directory_appeared_meanwhile_is_skipped(tmp_path: Path) -> None:
    numbers = JobNumbers(tmp_path, first=1000)
    (tmp_path / "1000").mkdir()  # made after the numbers were read: never shared with a new job
    (tmp_path / "1000" / "output.log").write_text("an older job's line\n")
    number, directory = numbers.allocate()
    assert number == 1001 and not any(directory.iterdir())
