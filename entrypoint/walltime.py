"""The job's time limit: every submit carries one, and a walltime stop is told apart from a
terminate the runner did not ask for. Pure.

How JARVICE ends a job past its walltime is not documented; the emulator assumes it stops the job,
which ends TERMINATED with a substatus text naming the walltime. The runner trusts either sign: that
text, or a TERMINATED job that ran at least its walltime (the job's own start and end times).
"""

import re
from typing import Final

from jarvice import model

# Without JARVICE_WALLTIME (a pod the webhook did not rewrite), no job runs longer than a day.
DEFAULT_WALLTIME: Final = "24:00:00"
WALLTIME_RE: Final = re.compile(r"^(\d{1,5}):([0-5]\d):([0-5]\d)$")
# JARVICE's end time may be stamped a little before the full limit (seconds resolution, a kill
# that takes a moment): this much short of the walltime still counts as reaching it.
WALLTIME_SLACK_SECONDS: Final = 2


def parse_walltime_seconds(text: str) -> int | None:
    """`HH:MM:SS` (hours up to 5 digits) to seconds; None for anything else."""
    match = WALLTIME_RE.match(text.strip())
    if match is None:
        return None
    hours, minutes, seconds = (int(part) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def decide_walltime_stop(
    state: str, *, substatus_text: str, start_time: int, end_time: int, walltime_seconds: int | None
) -> bool:
    """Whether a finished job was stopped for exceeding its walltime (only ever for TERMINATED).

    A TERMINATED job the runner did not stop is a walltime stop when JARVICE says so in its
    substatus text, or when it ran (end - start, Unix seconds) at least the walltime.
    """
    if state.strip().upper() != model.STATUS_TERMINATED:
        return False
    if "walltime" in substatus_text.lower():
        return True
    if walltime_seconds is None or start_time <= 0 or end_time < start_time:
        return False
    return end_time - start_time >= walltime_seconds - WALLTIME_SLACK_SECONDS
