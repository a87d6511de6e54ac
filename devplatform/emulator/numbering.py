"""Job numbers that never repeat within one job directory, across emulator lifetimes.

JARVICE never reuses a job number. The emulator keeps each job's files (its ``output.log`` above all)
in ``<workdir>/<number>/``; were a restarted emulator to count from ``first_job_number`` again over
the same directory (``make dev-down``, then ``make dev-up``), a new job would append to an old job's
output and stream it as its own. So the next number is recorded in ``<workdir>/next-job-number`` at
every submit, the existing job directories count too (a lost or stale record cannot go backwards),
and a job's directory is created exclusively: a number whose directory exists is skipped.

Pure: the directory itself is read and written by ``state.JobNumbers``.
"""

from collections.abc import Iterable
from typing import Final

NEXT_NUMBER_FILE: Final = "next-job-number"


def parse_recorded_number(text: str) -> int | None:
    """The number in a ``next-job-number`` file; None when it holds anything else (ignored then)."""
    stripped = text.strip()
    return int(stripped) if stripped.isdigit() else None


def first_unused_number(first: int, *, recorded: int | None, existing: Iterable[str]) -> int:
    """The next job number: at least ``first``, at least the recorded next number, and above every
    job directory already there (entries whose names are not numbers are not jobs)."""
    taken = [int(name) + 1 for name in existing if name.isdigit()]
    return max([first, recorded or first, *taken])
