"""A burst job's time limit (JARVICE_WALLTIME), and where it comes from (pure).

No job runs without one: a runner that lost track of its job (killed, its node gone) must not leave
it billing for ever. The limit is the pod's activeDeadlineSeconds when it has one (Kubernetes ends
the pod then, so the job need not outlive it), else its namespace's default, else the webhook's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ANNOTATION_DEFAULT_WALLTIME: Final = "nimbix-burst.io/default-walltime"  # on a namespace: HH:MM:SS
DEFAULT_WALLTIME: Final = "24:00:00"
# The runner accepts at most 5 digits of hours (entrypoint.remote_settings): 99999:59:59.
MAX_HOURS: Final = 99999
MAX_SECONDS: Final = MAX_HOURS * 3600 + 59 * 60 + 59
_DIGITS = frozenset("0123456789")


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class Walltime:
    seconds: Final[int]
    source: Final[str]  # where it came from, for the pod's annotation

    def __init__(self, seconds: int, source: str) -> None:
        self.seconds = seconds
        self.source = source

    @property
    def text(self) -> str:
        return format_walltime(self.seconds)


def _number(text: str, *, min_len: int, max_len: int) -> int:
    """The digits' value, or -1 when `text` is not `min_len`..`max_len` ASCII digits."""
    if not min_len <= len(text) <= max_len or not set(text) <= _DIGITS:
        return -1
    return int(text)


def parse_walltime(text: str) -> int | None:
    """HH:MM:SS (hours 1 to 5 digits, minutes and seconds 2 digits below 60, surrounding spaces
    allowed) -> seconds; None for anything else, or for no time at all."""
    parts = text.strip().split(":")
    if len(parts) != 3:
        return None
    hours = _number(parts[0], min_len=1, max_len=5)
    minutes = _number(parts[1], min_len=2, max_len=2)
    seconds = _number(parts[2], min_len=2, max_len=2)
    if hours < 0 or not 0 <= minutes < 60 or not 0 <= seconds < 60:
        return None
    total = hours * 3600 + minutes * 60 + seconds
    return total or None


def format_walltime(seconds: int) -> str:
    """Seconds -> HH:MM:SS (at least two digits of hours), capped at 99999:59:59."""
    seconds = min(max(seconds, 0), MAX_SECONDS)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def decide_walltime(
    active_deadline: object, *, namespace: str, namespace_default: str | None, webhook_default: int
) -> tuple[Walltime, str]:
    """The pod's limit, and a warning ("" when none) about an unusable namespace default.

    `active_deadline`: the pod's spec.activeDeadlineSeconds as received (the API server rejects
    anything but a positive integer later; here anything else is no deadline). Rounded up to a whole
    minute. `namespace_default`: the namespace's annotation as written (None: absent)."""
    if type(active_deadline) is int and active_deadline > 0:
        minutes = -(-active_deadline // 60)
        return Walltime(min(minutes * 60, MAX_SECONDS), f"activeDeadlineSeconds {active_deadline}"), ""
    warning = ""
    if namespace_default is not None:
        seconds = parse_walltime(namespace_default)
        if seconds is not None:
            return Walltime(seconds, f"{ANNOTATION_DEFAULT_WALLTIME} of namespace {namespace}"), ""
        shown = namespace_default if len(namespace_default) <= 20 else namespace_default[:17] + "..."
        warning = (
            f"nimbix-burst: {ANNOTATION_DEFAULT_WALLTIME} {shown!r} of namespace {namespace} is not HH:MM:SS;"
            f" using {format_walltime(webhook_default)}"
        )
    return Walltime(webhook_default, "the webhook's --default-walltime"), warning
