"""A remote rank's guard (`python -m entrypoint.rankguard`) as real processes, its input a pipe held
the way the fan-out holds ssh's: the rank's status comes back as it is (128+N for a signal), and the
end of the input, or a signal to the guard, stops the rank's whole process group."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

# Says it started, then waits on a child in its group; the TERM trap shows the rank was asked, not
# killed, and leaves the child alone: only a signal to the whole group ends it.
WAITING_RANK = "trap 'echo \"stopped $NODE_RANK\"; exit 143' TERM; sleep 300 & echo started; wait"


@contextmanager
def guard(command: str) -> Iterator[subprocess.Popen[str]]:
    # A HOME of its own, removed afterwards: the rank runs `bash -l`, and a host login profile killed
    # mid-way (pyenv rehash) can leave a lock that stalls every later login shell.
    with tempfile.TemporaryDirectory(prefix="rankguard-home-") as home:
        process = subprocess.Popen(
            [sys.executable, "-m", "entrypoint.rankguard", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "HOME": home, "NODE_RANK": "1"},
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("command", "expected"),
    [("exit 0", 0), ("echo out; exit 5", 5), ("kill -KILL $$", 137), ("kill -TERM $$", 143)],
    ids=["success", "failure", "killed", "terminated"],
)
def test_the_guard_exits_with_the_ranks_status(command: str, expected: int) -> None:
    with guard(command) as process:
        assert process.wait() == expected
        assert process.stderr is not None and process.stderr.read() == ""


def test_the_rank_runs_as_a_login_shell_with_no_input() -> None:
    with guard('shopt -q login_shell && echo login; cat; echo "rank $NODE_RANK"') as process:
        assert process.stdout is not None and process.stderr is not None
        stdout = process.stdout.read()  # the guard's input stays open: only the rank's own ends at once
        assert (process.wait(), stdout, process.stderr.read()) == (0, "login\nrank 1\n", "")


def test_the_end_of_its_input_stops_the_ranks_process_group() -> None:
    with guard(WAITING_RANK) as process:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline() == "started\n"
        (rank,) = children_of(process.pid)
        (sleeper,) = children_of(rank)
        assert os.getpgid(sleeper) == rank  # the rank leads a group of its own
        process.stdin.close()
        assert process.wait() == 143
        assert process.stdout.read() == "stopped 1\n"
        while running(sleeper):  # SIGTERMed with its group; it ends as soon as it is scheduled
            time.sleep(0.01)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_a_signal_to_the_guard_stops_the_rank(sig: signal.Signals) -> None:
    with guard(WAITING_RANK) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == "started\n"
        process.send_signal(sig)
        assert process.wait() == 143
        assert process.stdout.read() == "stopped 1\n"
