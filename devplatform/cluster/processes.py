"""A tiny manager for background processes that are tracked by saved PID.

Each process runs in its own session (so it is also the leader of its own process group), with
stdin from /dev/null and stdout+stderr appended to a log file. It is stopped by signalling that
process group: never by name, and only after checking that the PID still belongs to the process
we started (its kernel start time is recorded next to the PID, which guards against PID reuse).

Stopping works whether or not we are the parent: liveness comes from /proc, and a child of ours is
reaped when we find it exited. Linux only (/proc).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Literal

# Loopback traffic between the components must never go through a proxy from the environment.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
NO_PROXY = "127.0.0.1,localhost"
# How often stop_process looks at /proc while waiting; exits are usually noticed within one tick.
POLL_INTERVAL_SECONDS = 0.05
# After SIGKILL the kernel needs only a moment; this bound keeps a stuck (D-state) process from
# hanging the caller forever.
KILL_WAIT_SECONDS = 5.0
STATE_FORMAT_VERSION = 1

StopOutcome = Literal["not-running", "terminated", "killed", "still-running"]


@dataclass(frozen=True, slots=True)
class ManagedProcess:
    """A background process we started. ``started_at_ticks`` is its start time from
    /proc/<pid>/stat (clock ticks since boot); 0 means unknown, which disables the PID-reuse check."""

    name: str
    pid: int
    log_path: Path
    started_at_ticks: int = 0


@dataclass(frozen=True, slots=True)
class SavedState:
    processes: tuple[ManagedProcess, ...]
    extra: dict[str, str]


class _HandedOffPopen(subprocess.Popen[bytes]):
    """A Popen whose ownership passes to the saved PID as soon as it is created.

    The object is dropped right after the spawn; the process is then tracked by ``ManagedProcess``
    and reaped by ``stop_process``. Popen's own finaliser would warn that the child is "still
    running" and queue it for reaping, which is exactly the hand-off we mean to do, so skip it.
    """

    def __del__(self) -> None:
        pass


def build_child_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment for a child: ``env`` (or ours) minus proxy settings, with NO_PROXY set."""
    base = dict(os.environ if env is None else env)
    for variable in PROXY_VARIABLES:
        base.pop(variable, None)
    base["NO_PROXY"] = NO_PROXY
    base["no_proxy"] = NO_PROXY
    return base


def start_process(
    name: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ManagedProcess:
    """Starts ``argv`` in a new session, appending its output to ``log_path``.

    The process outlives this Python process unless stopped with ``stop_process``.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        child = _HandedOffPopen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=build_child_environment(env),
            cwd=cwd,
            start_new_session=True,
        )
    return ManagedProcess(
        name=name, pid=child.pid, log_path=log_path, started_at_ticks=_read_start_ticks(child.pid) or 0
    )


def stop_process(proc: ManagedProcess, *, grace_seconds: float = 10.0) -> StopOutcome:
    """Stops ``proc`` and its process group: SIGTERM, then SIGKILL after ``grace_seconds``.

    Safe to call on a process that has already exited, or whose PID now belongs to someone else
    (then nothing is signalled).
    """
    if not _is_ours(proc):
        _reap_if_child(proc.pid)
        return "not-running"
    _signal_group(proc.pid, signal.SIGTERM)
    if _wait_for_exit(proc.pid, timeout=grace_seconds):
        outcome: StopOutcome = "terminated"
    else:
        _signal_group(proc.pid, signal.SIGKILL)
        outcome = "killed" if _wait_for_exit(proc.pid, timeout=KILL_WAIT_SECONDS) else "still-running"
    return outcome


def wait_until_gone(procs: Sequence[ManagedProcess], *, timeout: float) -> list[ManagedProcess]:
    """Waits until each stopped process has also been reaped (gone from /proc); returns the ones
    still there after ``timeout``.

    Purely for a clean process table: a process we are not the parent of stays a zombie until its
    parent (often PID 1, which may reap only every few seconds) collects it. A zombie holds no
    memory or ports.
    """
    deadline = time.monotonic() + timeout
    while True:
        for proc in procs:
            _reap_if_child(proc.pid)
        remaining = [proc for proc in procs if _still_listed(proc)]
        if not remaining or time.monotonic() >= deadline:
            return remaining
        time.sleep(POLL_INTERVAL_SECONDS)


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and has not finished exiting (a zombie counts as dead)."""
    state = _read_proc_state(pid)
    if state is None:
        return False
    if state not in ("Z", "X", "x"):
        return True
    # A multi-threaded process (every Go binary) can show its main thread as a zombie while its
    # other threads are still exiting and still hold its ports and memory; it is dead only once
    # the main thread is the last task left.
    return _count_tasks(pid) > 1


def is_running(proc: ManagedProcess) -> bool:
    """True while ``proc`` is alive and its PID has not been reused by another process."""
    return _is_ours(proc)


def current_process(name: str) -> ManagedProcess:
    """This process as a ManagedProcess (with its start time, so a reused PID is not mistaken for it)."""
    pid = os.getpid()
    return ManagedProcess(name=name, pid=pid, log_path=Path(os.devnull), started_at_ticks=_read_start_ticks(pid) or 0)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1.

    All sockets are held open until every port is chosen, so one call never returns a duplicate.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def save_state(path: Path, procs: Sequence[ManagedProcess], extra: Mapping[str, str]) -> None:
    """Writes the PIDs and log paths (plus ``extra`` strings) to ``path`` atomically, as JSON."""
    document = {
        "version": STATE_FORMAT_VERSION,
        "processes": [
            {
                "name": proc.name,
                "pid": proc.pid,
                "log_path": str(proc.log_path),
                "started_at_ticks": proc.started_at_ticks,
            }
            for proc in procs
        ],
        "extra": dict(extra),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=2) + "\n")
    partial.replace(path)


def load_state(path: Path) -> SavedState:
    """Reads a file written by ``save_state``."""
    document = json.loads(path.read_text())
    if document.get("version") != STATE_FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported state format {document.get('version')!r}")
    processes = tuple(
        ManagedProcess(
            name=str(entry["name"]),
            pid=int(entry["pid"]),
            log_path=Path(entry["log_path"]),
            started_at_ticks=int(entry.get("started_at_ticks", 0)),
        )
        for entry in document["processes"]
    )
    extra = {str(key): str(value) for key, value in document.get("extra", {}).items()}
    return SavedState(processes=processes, extra=extra)


def read_log_tail(path: Path, *, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ("" if it does not exist)."""
    try:
        with path.open("rb") as handle:
            # Logs can be large; the tail is all we need.
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            data = handle.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def _is_ours(proc: ManagedProcess) -> bool:
    if not is_alive(proc.pid):
        return False
    if proc.started_at_ticks == 0:
        return True
    return _read_start_ticks(proc.pid) == proc.started_at_ticks


def _still_listed(proc: ManagedProcess) -> bool:
    ticks = _read_start_ticks(proc.pid)
    if ticks is None:
        return False
    return proc.started_at_ticks in (0, ticks)


def _signal_group(pid: int, signum: signal.Signals) -> None:
    try:
        # Our processes lead their own group (start_new_session); anything else gets only the PID,
        # so a foreign group is never signalled.
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _wait_for_exit(pid: int, *, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        _reap_if_child(pid)
        if not is_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_SECONDS)


def _reap_if_child(pid: int) -> None:
    # Collects the exit status if we are the parent, so no zombie is left; a no-op otherwise.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _read_stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may contain spaces or parentheses itself;
    # everything after the last ")" is space-separated, starting at field 3 (state).
    return stat[stat.rindex(")") + 2 :].split()


def _count_tasks(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except (FileNotFoundError, ProcessLookupError):
        return 0


def _read_proc_state(pid: int) -> str | None:
    fields = _read_stat_fields(pid)
    return fields[0] if fields else None


def _read_start_ticks(pid: int) -> int | None:
    fields = _read_stat_fields(pid)
    # Field 22 (starttime) is index 19 once fields 1-2 are dropped.
    return int(fields[19]) if fields and len(fields) > 19 else None


def exit_through_cleanup_on_hangup(program: str) -> None:
    """SIGTERM and SIGHUP (a CI's timeout, a closed terminal) end `program` as Ctrl-C does, through
    its `finally` blocks: Python's default for them exits at once, leaving the control plane, the
    node and everything else the program started running."""

    def exit_now(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(f"{program}: {signal.Signals(signum).name} received")

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, exit_now)
