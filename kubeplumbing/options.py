"""Command-line options with environment defaults, as the webhook and the controller read them (pure).

Each program lists its options in a table (flag, environment variable, default, help); one parser
is built from it, and the values are checked here, every problem collected, so one restart fixes
them all: each program raises its own SettingsError with the list.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from kubeplumbing.leadership import LeaseTiming

Option = tuple[str, str, str, str]  # (flag, env var, default, help)
MAX_PORT = 65535
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


class SettingsError(ValueError):
    """Every problem with a program's settings, reported together."""

    def __init__(self, problems: Sequence[str], *, program: str) -> None:
        super().__init__(f"invalid {program} settings:\n  - " + "\n  - ".join(problems))
        self.problems = tuple(problems)


def build_parser(
    options: Sequence[Option], env: Mapping[str, str], *, prog: str, description: str
) -> argparse.ArgumentParser:
    """Flags whose defaults come from the environment (the Deployment sets either)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for flag, var, default, help_text in options:
        parser.add_argument(flag, default=env.get(var, default), help=f"{help_text} (env {var}; default {default!r})")
    return parser


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


class OptionValues:
    """The parsed options as given, read through checks that add what is wrong to `problems`."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.raw = raw
        self.problems: list[str] = []

    def number(self, key: str, *, minimum: float, integer: bool = False) -> float:
        """A number of at least `minimum` (a whole one if `integer`). Not a number: the problem, and
        `minimum`; too small: the problem, and the value as given."""
        flag = "--" + key.replace("_", "-")
        text = self.raw[key]
        try:
            value: float = int(text) if integer else float(text)
        except ValueError:
            self.problems.append(f"{flag}: {text!r} is not a {'whole ' if integer else ''}number")
            return minimum
        if value < minimum:
            self.problems.append(f"{flag}: must be at least {_shown(minimum)}, got {_shown(value)}")
        return value

    def boolean(self, key: str, *, empty: bool | None = None) -> bool:
        """true/false, 1/0, yes/no (any case); `empty`: what an empty value means (None: a problem)."""
        text = str(self.raw[key]).strip().lower()
        value = empty if text == "" else BOOLEANS.get(text)
        if value is None:
            self.problems.append(f"--{key.replace('_', '-')}: {self.raw[key]!r} is not true or false")
            return False
        return value

    def log_level(self, key: str = "log_level") -> str:
        level = str(self.raw[key]).upper()
        if level not in LOG_LEVELS:
            self.problems.append(f"--{key.replace('_', '-')}: {self.raw[key]!r} is not one of {', '.join(LOG_LEVELS)}")
        return level

    def port(self, key: str = "port") -> int:
        """A TCP port: a whole number from 1 to MAX_PORT."""
        port = int(self.number(key, minimum=1, integer=True))
        if port > MAX_PORT:
            self.problems.append(f"--{key.replace('_', '-')}: must be at most {MAX_PORT}, got {port}")
        return port

    def lease_timing(self) -> LeaseTiming | None:
        """--lease-duration-seconds, --lease-renew-deadline-seconds and --lease-retry-seconds, which
        must also fit together (LeaseTiming's rule); None, with the problem, when they do not."""
        try:
            return LeaseTiming(
                duration=self.number("lease_duration_seconds", minimum=0.1),
                renew_deadline=self.number("lease_renew_deadline_seconds", minimum=0.1),
                retry=self.number("lease_retry_seconds", minimum=0.05),
            )
        except ValueError as exc:
            self.problems.append(f"--lease-*-seconds: {exc}")
            return None
