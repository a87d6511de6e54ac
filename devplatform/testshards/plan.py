"""Which e2e modules run in which shard, and how a shard's namespaces are set up: pure, no I/O.

A shard is a whole pytest session (its own control plane, real node and installed add-on) in private
namespaces of its own (__main__.py), so shards run side by side on one machine. Modules go to shards
by their measured seconds (the longest first, each to the shard with the least so far), so the
shards end close together.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# pytest's own default for `python_files` (what it collects when pyproject.toml does not say).
PYTEST_PYTHON_FILES = ("test_*.py", "*_test.py")
# `pytest --durations=0` lines: "12.34s call     tests/e2e/test_x.py::test_y".
_DURATION_LINE = re.compile(r"^\s*(?P<seconds>\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(?P<path>[^:\s]+)::")


@dataclass(frozen=True, slots=True)
class Shard:
    modules: tuple[str, ...]
    estimate_seconds: float


def plan_shards(
    modules: Sequence[str],
    seconds: Mapping[str, float],
    count: int,
) -> list[Shard]:
    """`modules` split into at most `count` shards of near-equal estimated time (no empty shard).
    Each shard keeps the modules in their given order (the order a single session would run them)."""
    if count < 1:
        raise ValueError(f"the number of shards must be at least 1, got {count}")
    if not modules:
        return []
    buckets: list[list[str]] = [[] for _ in range(min(count, len(modules)))]
    totals = [0.0] * len(buckets)
    # Longest first, each to the least loaded (ties: the lower shard).
    for module, cost in _longest_first(modules, seconds):
        least = min(range(len(buckets)), key=lambda index: (totals[index], index))
        buckets[least].append(module)
        totals[least] += cost
    position = {module: index for index, module in enumerate(modules)}
    return [
        Shard(tuple(sorted(bucket, key=position.__getitem__)), total)
        for bucket, total in zip(buckets, totals, strict=True)
    ]


def plan_alone(modules: Sequence[str], seconds: Mapping[str, float]) -> list[Shard]:
    """Each module a session of its own (to show it passes alone), the longest first: run a few at a
    time, the long ones do not end up waiting at the end."""
    return [Shard((module,), cost) for module, cost in _longest_first(modules, seconds)]


class UnmeasuredModulesError(ValueError):
    """Modules the durations file has no figure for: a plan would guess where they go."""

    def __init__(self, modules: Sequence[str]) -> None:
        super().__init__(
            f"no measured seconds for {', '.join(modules)} in the durations file (tests/e2e/durations.json): "
            "measure them (make test E2E_ARGS=--durations=0, then python -m devplatform.testshards "
            "--update-durations .test-runs/e2e-shard-*.log) or add each one's seconds to the file by hand"
        )
        self.modules = tuple(modules)


def _longest_first(modules: Sequence[str], seconds: Mapping[str, float]) -> list[tuple[str, float]]:
    """Each module with its measured seconds, the longest first; a name breaks equal times, so a plan
    does not depend on the order modules were found in. Every module must have a figure: one without
    would be planned blind (a long new module could make its shard end last by many minutes)."""
    missing = [module for module in modules if module not in seconds]
    if missing:
        raise UnmeasuredModulesError(missing)
    cost = {module: seconds[module] for module in modules}
    return sorted(cost.items(), key=lambda item: (-item[1], item[0]))


def is_test_module(file_name: str, python_files: Sequence[str]) -> bool:
    """Whether pytest collects a file of this name, by its `python_files` patterns (glob, as pytest
    matches them against the file's name)."""
    return any(fnmatch.fnmatch(file_name, pattern) for pattern in python_files)


def module_seconds(durations_report: Iterable[str]) -> dict[str, float]:
    """Seconds per test module (setup, call and teardown summed) from `pytest --durations=0` output."""
    totals: dict[str, float] = {}
    for line in durations_report:
        match = _DURATION_LINE.match(line)
        if match:
            path = match["path"]
            totals[path] = totals.get(path, 0.0) + float(match["seconds"])
    return {path: round(total, 1) for path, total in sorted(totals.items())}


@dataclass(frozen=True, slots=True)
class CgroupMount:
    """One cgroup hierarchy as /proc/self/mounts lists it."""

    fstype: str  # "cgroup" (v1) or "cgroup2"
    mount_point: str
    options: str  # the hierarchy's own options: controllers, or none,name=...


_V1_HIERARCHY_OPTIONS = re.compile(r"^(?:[a-z_]+|none|name=[\w.-]+)$")
# Mount options that say how, not which hierarchy: left out when it is mounted again.
_GENERIC_OPTIONS = frozenset({"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "seclabel"})


def cgroup_mounts(mounts_text: str) -> list[CgroupMount]:
    """The cgroup hierarchies in /proc/self/mounts (the text), in its order."""
    found: list[CgroupMount] = []
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] not in ("cgroup", "cgroup2"):
            continue
        own = [option for option in fields[3].split(",") if option not in _GENERIC_OPTIONS]
        if fields[2] == "cgroup":
            own = [option for option in own if _V1_HIERARCHY_OPTIONS.match(option)]
            if own and all(option.startswith("name=") for option in own):
                own.insert(0, "none")  # a named hierarchy without controllers (without it: all of them)
        found.append(CgroupMount(fields[2], fields[1], ",".join(own)))
    return found


def remount_commands(mounts: Iterable[CgroupMount]) -> list[list[str]]:
    """What mounts each hierarchy again inside a new cgroup namespace, so it shows the namespace's root
    (a hierarchy cannot be mounted twice at one place: it is unmounted first, in the private mount
    namespace only)."""
    commands: list[list[str]] = []
    for mount in mounts:
        options = ["-o", mount.options] if mount.options else []
        commands.append(["umount", mount.mount_point])
        commands.append(["mount", "-t", mount.fstype, *options, mount.fstype, mount.mount_point])
    return commands


def setup_commands(
    mounts: Iterable[CgroupMount], private_dirs: Iterable[str], node_cache: str, own_node_cache: str
) -> list[list[str]]:
    """What a shard runs in its new namespaces before its pytest: loopback up, the cgroup hierarchies
    mounted again (rooted at the shard's cgroup), an empty tmpfs on each private directory, and the
    shard's node cache bound where a node keeps its own (containerd locks its root)."""
    commands = [["ip", "link", "set", "lo", "up"], *remount_commands(mounts)]
    commands += [["mount", "-t", "tmpfs", "-o", "mode=0755", "nimbix-shard", directory] for directory in private_dirs]
    commands.append(["mount", "--bind", own_node_cache, node_cache])
    return commands
