"""The job's time limit: every submit carries one, and a walltime stop is told apart from a
terminate the runner did not ask for. Pure.

How JARVICE ends a job past its walltime is not documented; the emulator assumes it stops the job,
which ends TERMINATED with a substatus text naming the walltime. The runner trusts either sign: that
text, or a TERMINATED job that ran at least its walltime (the job's own start and end times).
"""

from typing import Final

from jarvice import model
from jarvice.contract import DEFAULT_WALLTIME, WALLTIME_RE, parse_walltime_seconds

__all__ = [
    "DEFAULT_WALLTIME",
    "WALLTIME_RE",
    "WALLTIME_SLACK_SECONDS",
    "decide_walltime_stop",
    "parse_walltime_seconds",
]
# JARVICE's end time may be stamped a little before the full limit (seconds resolution, a kill
# that takes a moment): this much short of the walltime still counts as reaching it.
WALLTIME_SLACK_SECONDS: Final = 2


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
