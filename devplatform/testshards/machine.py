"""The launchers' records on this machine, and the undoing of what they made (I/O; the records are
runrecord.py's values).

One directory (``/run/nimbix-burst/testshards``: in /run, because a reboot ends every process, mount
and sysctl a run made) holds, under one lock:
- ``<checkout key>.json``: a live or killed run's record (its launcher, its guardian, its cgroups);
- ``<checkout key>.lock``: held by the checkout's launcher for its whole run (a second one waits);
- ``host.json``: the sysctls and mount points as the first live run found them.

A run whose launcher is gone is stale: every process in its cgroups is killed, the cgroups removed,
the record deleted; when no run is left, the host's sysctls are put back and the mount points a run
made removed. A launcher does that itself as it ends; its guardian when the launcher was killed; the
next launcher, ``make dev-down`` and ``make clean`` for any run both missed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from devplatform.cluster import processes
from devplatform.testshards import runrecord
from devplatform.testshards.runrecord import HostRecord, Process, RunRecord

DEFAULT_REGISTRY = Path("/run/nimbix-burst/testshards")
PROC_SYS = Path("/proc/sys")
HOST_RECORD = "host.json"
# Killing a cgroup's processes: how often it is looked at again (a process may fork as it is killed),
# and when to give up on one that does not die (stuck in the kernel) and say so.
KILL_POLL_SECONDS = 0.05
KILL_DEADLINE_SECONDS = 30.0


class Registry:
    """The records in ``directory``; the first run's sysctls are read under ``proc_sys`` (and put back there)."""

    def __init__(self, directory: Path = DEFAULT_REGISTRY, *, proc_sys: Path = PROC_SYS) -> None:
        self.directory = directory
        self.proc_sys = proc_sys

    def record_path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    @contextlib.contextmanager
    def checkout_lock(self, key: str, say: Callable[[str], None]) -> Iterator[None]:
        """One launcher per checkout at a time (its node caches are the checkout's): a second waits, and says so."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / f"{key}.lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"another e2e launcher of this checkout runs ({self.record_path(key)}): waiting for it to end")
                fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "registry.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def enter(
        self, key: str, checkout: str, launcher: Process, *, sysctls: Sequence[str], mount_points: Sequence[Path]
    ) -> list[str]:
        """Records a run (after removing stale ones); the first live run saves the host's sysctls and
        makes the mount points that are missing (recorded before they are made)."""
        with self._locked():
            notes = self._clean_stale()
            host_path = self.directory / HOST_RECORD
            if not host_path.exists():
                saved = {key: value for key in sysctls if (value := _read_sysctl(self.proc_sys, key)) is not None}
                missing = [directory for directory in mount_points if not directory.exists()]
                _write(host_path, HostRecord(saved, tuple(map(str, missing)), str(self.proc_sys)).to_json())
                for directory in missing:
                    directory.mkdir(parents=True, exist_ok=True)
            _write(self.record_path(key), RunRecord(checkout, launcher).to_json())
        return notes

    def update(self, key: str, change: Callable[[RunRecord], RunRecord]) -> None:
        """Changes a run's record (before what it names is made)."""
        with self._locked():
            path = self.record_path(key)
            _write(path, change(RunRecord.from_json(path.read_text())).to_json())

    def leave(self, key: str) -> list[str]:
        """Undoes a run: its processes killed, its cgroups removed, its record deleted; the host put
        back when it was the last run."""
        with self._locked():
            notes = self._remove_run(self.record_path(key), stop_guardian=False)  # it ends as the launcher does
            return notes + self._restore_host_when_alone()

    def wait_for_launcher(self, key: str) -> None:
        """Until the run's launcher is gone: its pipe closes as it exits, a moment before /proc shows it dead."""
        try:
            launcher = RunRecord.from_json(self.record_path(key).read_text()).launcher
        except FileNotFoundError:
            return
        deadline = time.monotonic() + KILL_DEADLINE_SECONDS
        while _is_running(launcher) and time.monotonic() < deadline:
            time.sleep(KILL_POLL_SECONDS)

    def clean_stale(self) -> list[str]:
        """Undoes every run whose launcher is gone (what is left of a killed run)."""
        if not self.directory.is_dir():
            return []
        with self._locked():
            return self._clean_stale()

    def _clean_stale(self) -> list[str]:
        notes: list[str] = []
        for path in self._run_records():
            try:
                record = RunRecord.from_json(path.read_text())
            except runrecord.RecordError as error:
                notes.append(f"{path}: {error}; left for a person to look at")
                continue
            if not _is_running(record.launcher):
                notes.append(f"a stopped run's leftovers ({path.name}, launcher pid {record.launcher.pid}):")
                notes += self._remove_run(path)
        return notes + self._restore_host_when_alone()

    def _run_records(self) -> list[Path]:
        return sorted(path for path in self.directory.glob("*.json") if path.name != HOST_RECORD)

    def _remove_run(self, path: Path, *, stop_guardian: bool = True) -> list[str]:
        try:
            record = RunRecord.from_json(path.read_text())
        except FileNotFoundError:
            return []
        notes = kill_and_remove_cgroups([Path(directory) for directory in record.cgroups])
        guardian = record.guardian
        if stop_guardian and guardian is not None and guardian.pid != os.getpid() and _is_running(guardian):
            with contextlib.suppress(ProcessLookupError):
                os.kill(guardian.pid, signal.SIGKILL)
                notes.append(f"stopped its guardian (pid {guardian.pid})")
        path.unlink(missing_ok=True)
        return notes

    def _restore_host_when_alone(self) -> list[str]:
        host_path = self.directory / HOST_RECORD
        if self._run_records() or not host_path.exists():
            return []
        host = HostRecord.from_json(host_path.read_text())
        notes = []
        for key, value in host.sysctls.items():
            if _read_sysctl(Path(host.proc_sys), key) != value:
                (Path(host.proc_sys) / key).write_text(value)
                notes.append(f"sysctl {key.replace('/', '.')} restored to {value}")
        for directory in reversed(host.made_dirs):
            with contextlib.suppress(FileNotFoundError):
                try:
                    Path(directory).rmdir()
                    notes.append(f"removed {directory}")
                except OSError as error:  # not empty: something else put files there since; left
                    notes.append(f"left {directory}: {error.strerror}")
        host_path.unlink()
        return notes


def _read_sysctl(proc_sys: Path, key: str) -> str | None:
    try:
        return (proc_sys / key).read_text().strip()
    except OSError:
        return None


def kill_and_remove_cgroups(cgroups: Sequence[Path]) -> list[str]:
    """Every process in these cgroups (and the cgroups under them) killed, then the cgroups removed,
    the deepest first. Whatever session or namespace a process made, it stays in its cgroup."""
    notes: list[str] = []
    killed: set[int] = set()
    deadline = time.monotonic() + KILL_DEADLINE_SECONDS
    while True:
        pids = {pid for top in cgroups for directory in _deepest_first(top) for pid in _cgroup_pids(directory)}
        for pid in sorted(pids - killed):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        left = [directory for top in cgroups for directory in _deepest_first(top) if not _removed(directory)]
        if not left:
            break
        if time.monotonic() > deadline:
            notes += [f"could not remove cgroup {directory} (processes in it do not die)" for directory in left]
            break
        time.sleep(KILL_POLL_SECONDS)
    if killed:
        notes.append(f"killed {len(killed)} process(es) left in the run's cgroups")
    return notes


def _deepest_first(top: Path) -> list[Path]:
    found = [Path(root) for root, _dirs, _files in os.walk(top)]
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def _cgroup_pids(directory: Path) -> list[int]:
    try:
        return [int(line) for line in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _removed(directory: Path) -> bool:
    try:
        directory.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _is_running(process: Process) -> bool:
    return processes.is_running(
        processes.ManagedProcess("recorded", process.pid, Path(os.devnull), process.started_at_ticks)
    )


def current() -> Process:
    me = processes.current_process("launcher")
    return Process(me.pid, me.started_at_ticks)


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a record is read by another process at any time."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)
