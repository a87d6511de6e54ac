"""A clock the test moves by hand, for the code that takes `clock` (and `sleep`) as arguments."""

from __future__ import annotations

from collections.abc import Callable

# An arbitrary start, far from 0: code that treats 0 as "never" is not fooled.
DEFAULT_START = 1000.0


class Clock:
    """Call it for the time. `sleep` moves it on (recording the sleep) and runs every alarm that
    comes due, in order: an alarm is what a signal handler would do at that moment."""

    def __init__(self, now: float = DEFAULT_START) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self.alarms: list[tuple[float, Callable[[], object]]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds
        due = [a for a in self.alarms if a[0] <= self.now]
        self.alarms = [a for a in self.alarms if a[0] > self.now]
        for _, action in due:
            action()  # e.g. a signal handler, which may raise CancelRequested
