"""A job's time limit as JARVICE writes it (`application.walltime`, `HH:MM:SS`): the runner submits
it, the controller reads it back from /jarvice/jobs to price what a live job may still cost. Pure."""

import re
from typing import Final

# Without JARVICE_WALLTIME (a pod the webhook did not rewrite), no job runs longer than a day.
DEFAULT_WALLTIME: Final = "24:00:00"
WALLTIME_RE: Final = re.compile(r"^(\d{1,5}):([0-5]\d):([0-5]\d)$")


def parse_walltime_seconds(text: str) -> int | None:
    """`HH:MM:SS` (hours up to 5 digits) to seconds; None for anything else."""
    match = WALLTIME_RE.match(text.strip())
    if match is None:
        return None
    hours, minutes, seconds = (int(part) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds
