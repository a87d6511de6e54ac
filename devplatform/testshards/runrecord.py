"""What an e2e launcher run made on the machine, as plain values: pure, no I/O.

A launcher records what it makes before it makes it (machine.py writes these records), so whatever
ends it (a signal, a crash, SIGKILL) the next launcher, `make dev-down` or `make clean` finds the run's
processes (by its cgroups) and removes them, by the record and never by a process name.

Two kinds of record:
- a run's own (``RunRecord``, one per checkout: a checkout runs one launcher at a time): the
  launcher and its guardian, and the cgroups its shards run in (every process of a shard is in them,
  whatever session or namespace it made for itself);
- the machine's (``HostRecord``), kept while any run is live: the host sysctls as they were before
  the first run's first node started, and the mount points a run had to create. Both are machine-wide,
  so they are saved when the first run starts and put back when the last run ends.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from devplatform.testshards.plan import CgroupMount

RECORD_FORMAT = 1


class RecordError(ValueError):
    """A record file that is not what a launcher writes."""


@dataclass(frozen=True, slots=True)
class Process:
    """A process by PID and its kernel start time (clock ticks since boot), so a reused PID is not it."""

    pid: int
    started_at_ticks: int


@dataclass(frozen=True, slots=True)
class RunRecord:
    checkout: str
    launcher: Process
    guardian: Process | None = None
    cgroups: tuple[str, ...] = ()

    def with_cgroups(self, cgroups: Sequence[str]) -> RunRecord:
        """The record with these cgroups too (a slot's cgroups, made again for its next session, once)."""
        added = tuple(path for path in dict.fromkeys(cgroups) if path not in self.cgroups)
        return RunRecord(self.checkout, self.launcher, self.guardian, (*self.cgroups, *added))

    def with_guardian(self, guardian: Process) -> RunRecord:
        return RunRecord(self.checkout, self.launcher, guardian, self.cgroups)

    def to_json(self) -> str:
        document = {
            "format": RECORD_FORMAT,
            "checkout": self.checkout,
            "launcher": _process_json(self.launcher),
            "guardian": None if self.guardian is None else _process_json(self.guardian),
            "cgroups": list(self.cgroups),
        }
        return json.dumps(document, indent=1) + "\n"

    @staticmethod
    def from_json(text: str) -> RunRecord:
        document = _load(text)
        try:
            guardian = document["guardian"]
            return RunRecord(
                checkout=str(document["checkout"]),
                launcher=_process_from(document["launcher"]),
                guardian=None if guardian is None else _process_from(guardian),
                cgroups=_strings(document["cgroups"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise RecordError(f"not a run record: {error!r}") from error


@dataclass(frozen=True, slots=True)
class HostRecord:
    """The machine as the first live run found it: sysctl values by key ("kernel/panic") under
    `proc_sys` (where they were read, so they are put back there), and the mount points that did not
    exist (made by a run, removed when the last run ends)."""

    sysctls: Mapping[str, str] = field(default_factory=dict)
    made_dirs: tuple[str, ...] = ()
    proc_sys: str = "/proc/sys"

    def to_json(self) -> str:
        document = {
            "format": RECORD_FORMAT,
            "sysctls": dict(self.sysctls),
            "made_dirs": list(self.made_dirs),
            "proc_sys": self.proc_sys,
        }
        return json.dumps(document, indent=1) + "\n"

    @staticmethod
    def from_json(text: str) -> HostRecord:
        document = _load(text)
        try:
            sysctls = document["sysctls"]
            if not isinstance(sysctls, dict):
                raise TypeError(f"sysctls must be an object, got {sysctls!r}")
            values = {str(key): str(value) for key, value in sysctls.items()}
            return HostRecord(values, _strings(document["made_dirs"]), str(document["proc_sys"]))
        except (KeyError, TypeError) as error:
            raise RecordError(f"not a host record: {error!r}") from error


def _process_json(process: Process) -> dict[str, int]:
    return {"pid": process.pid, "started_at_ticks": process.started_at_ticks}


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {value!r}")
    return tuple(str(item) for item in value)


def _process_from(document: object) -> Process:
    if not isinstance(document, dict):
        raise TypeError(f"a process must be an object, got {document!r}")
    pid, ticks = document["pid"], document["started_at_ticks"]
    if not isinstance(pid, int) or not isinstance(ticks, int):
        raise TypeError(f"pid and started_at_ticks must be integers, got {pid!r} and {ticks!r}")
    return Process(pid, ticks)


def _load(text: str) -> dict[str, object]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise RecordError(f"not JSON: {error}") from error
    if not isinstance(document, dict) or document.get("format") != RECORD_FORMAT:
        raise RecordError(f"expected a JSON object with format {RECORD_FORMAT}")
    return document


def checkout_key(checkout: str) -> str:
    """A name for a checkout that is safe in a path and differs between checkouts: its directory's
    name (to be read by a person) and a digest of its whole path (to tell two of one name apart)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", PurePath(checkout).name)[:40] or "root"
    return f"{name}-{hashlib.sha256(checkout.encode()).hexdigest()[:12]}"


def caller_cgroup_dirs(mounts: Sequence[CgroupMount], self_cgroup: str) -> list[str]:
    """Where the caller's cgroup is in each hierarchy (its directory), from /proc/self/cgroup's text:
    the shards' cgroups go under it, so what limits or kills the caller's cgroup reaches them."""
    v1: dict[frozenset[str], str] = {}
    v2: str | None = None
    for line in self_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, listed = rest.partition(":")
        if not number or not listed.startswith("/"):
            continue
        if number == "0" and not controllers:
            v2 = listed
        else:
            v1[frozenset(controllers.split(","))] = listed
    found: list[str] = []
    for mount in mounts:
        path: str | None
        if mount.fstype == "cgroup2":
            path = v2
        else:
            names = set(mount.options.split(","))
            path = next((p for ctrls, p in v1.items() if ctrls and ctrls <= names), None)
        if path is None:
            raise RecordError(f"/proc/self/cgroup names no cgroup in the hierarchy at {mount.mount_point}")
        found.append(str(PurePath(mount.mount_point, path.lstrip("/"))))
    return found


def unsupported_cgroups(mounts: Sequence[CgroupMount]) -> str | None:
    """Why the shards cannot run in cgroups of their own here (None: they can). A shard's cgroup
    namespace is rooted in a cgroup the launcher makes under its own in each cgroup v1 hierarchy;
    under cgroup v2 alone the caller's cgroup holds processes, so controllers cannot be given to a
    child of it (cgroup v2's rule: no process in a cgroup that hands controllers down)."""
    if not mounts:
        return "no cgroup hierarchy is mounted (/proc/self/mounts): the shards' nodes need cgroups"
    if all(mount.fstype == "cgroup2" for mount in mounts):
        return (
            "this host has cgroup v2 only: the e2e shards need cgroup v1 hierarchies to run their nodes in "
            "cgroups under the caller's; run the e2e tier as one session on the host instead (make e2e)"
        )
    return None
