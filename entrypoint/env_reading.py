"""Reading the runner's environment, one variable at a time. Pure.

A blank variable counts as unset everywhere, and a bad value adds a problem to the list instead of
raising, so `entrypoint.settings.parse_settings` can name every problem of a pod in one message.
"""

import math
from collections.abc import Mapping


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, problem: str) -> None:
        self.items.append(problem)


def nonblank(env: Mapping[str, str], name: str) -> str | None:
    """A variable's value, or None when unset or blank (blank counts as unset everywhere)."""
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value


def parse_int(env: Mapping[str, str], name: str, problems: Problems, *, minimum: int) -> int | None:
    raw = nonblank(env, name)
    if raw is None:
        return None
    try:
        value: int | None = int(raw.strip())
    except ValueError:
        value = None
    if value is None or value < minimum:
        problems.add(f"{name} must be an integer >= {minimum}, got {raw!r}")
        return None
    return value


def parse_float(
    env: Mapping[str, str], name: str, default: float, problems: Problems, *, allow_zero: bool = False
) -> float:
    raw = nonblank(env, name)
    if raw is None:
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        problems.add(f"{name} must be a number of seconds {bound}, got {raw!r}")
        return default
    return value


def stripped(value: str | None) -> str | None:
    return None if value is None else value.strip()
