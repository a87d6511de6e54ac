"""The e2e launcher (devplatform.testshards) leaves the machine as it found it, however it ends.

Each test runs the real launcher on a tiny e2e directory of its own: its shard is a real pytest session
in real namespaces and cgroups, that starts a process of its own session (as the node's processes are),
changes a "host sysctl" and runs on a mount point the launcher had to make. The sysctls are files in a
directory of the test's (the launcher reads and writes them there as it does /proc/sys), so the host's
own are never touched; the cgroups, namespaces and processes are the machine's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devplatform.cluster import processes
from devplatform.testshards import plan
from devplatform.testshards.__main__ import CGROUP_PREFIX, REPO_ROOT
from devplatform.testshards.runrecord import caller_cgroup_dirs, checkout_key

# Only says when to give up: a launcher on a loaded machine starts in seconds.
DEADLINE_SECONDS = 120.0
SYSCTLS_BEFORE = {"kernel/panic": "1", "kernel/panic_on_oops": "0", "vm/overcommit_memory": "0"}

# The shard's one test: a process of its own session, a kubelet-like sysctl change, then what the case says.
SHARD_MODULE = """\
import os, signal, subprocess, time
from pathlib import Path

HERE = Path(__file__).parent

def test_holds_the_machine():
    stray = subprocess.Popen(["sleep", "infinity"], start_new_session=True)
    (HERE / "pids").write_text(f"{{os.getpid()}} {{stray.pid}}")
    for key in ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"):
        (HERE.parent / "sys" / key).write_text("1" if key != "kernel/panic" else "10")
    assert Path({made!r}).is_dir()
    (HERE / "ready").write_text("")
{then}
"""
WAIT_TO_BE_STOPPED = "    signal.pause()"
# Deaf to Ctrl-C, as a session whose teardown hangs: only a second signal's kill ends it.
DEAF_TO_CTRL_C = "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True:\n        signal.pause()"


@dataclass
class Machine:
    """One launcher's world: its e2e directory, the sysctls, the records and a mount point it must make."""

    root: Path

    @property
    def e2e(self) -> Path:
        return self.root / "e2e"

    @property
    def sysctls(self) -> Path:
        return self.root / "sys"

    @property
    def registry(self) -> Path:
        return self.root.parent / "registry"

    @property
    def made(self) -> Path:
        return self.root.parent / "made" / "mount-point"

    @property
    def record(self) -> Path:
        return self.registry / f"{checkout_key(str(self.e2e))}.json"

    def write_module(self, then: str) -> None:
        self.e2e.mkdir(parents=True, exist_ok=True)
        module = self.e2e / "test_shard.py"
        module.write_text(SHARD_MODULE.format(made=str(self.made), then=then))
        (self.e2e / "durations.json").write_text(json.dumps({str(module): 1}))

    def launch(self) -> subprocess.Popen[bytes]:
        """The launcher in a process group of its own (as `make test` in CI), its output in a file."""
        command = [sys.executable, "-m", "devplatform.testshards", "--shards", "1", "--e2e-dir", str(self.e2e)]
        command += ["--registry", str(self.registry), "--proc-sys", str(self.sysctls), "--private-dir", str(self.made)]
        command += ["--log-dir", str(self.root / "logs")]  # not the checkout's: a make test may run beside
        with open(self.root / "launcher.out", "wb") as output:
            return subprocess.Popen(
                [*command, "--", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
                cwd=REPO_ROOT,
                env={**os.environ, "NIMBIX_BURST_CACHE": str(self.root.parent / "cache")},
                stdout=output,
                stderr=subprocess.STDOUT,
                process_group=0,
            )

    def output(self) -> str:
        return (self.root / "launcher.out").read_text(errors="replace")

    def sysctl_values(self) -> dict[str, str]:
        return {key: (self.sysctls / key).read_text().strip() for key in SYSCTLS_BEFORE}


def wait_for(condition: Callable[[], bool], what: str, machine: Machine) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {DEADLINE_SECONDS} s; launcher output:\n{machine.output()}")
        time.sleep(0.05)


@dataclass
class Run:
    """What a shard made: its processes (from its marks) and its cgroups (named by the launcher's PID)."""

    pids: list[int]
    cgroups: list[Path]


def wait_until_running(machine: Machine, launcher: subprocess.Popen[bytes]) -> Run:
    wait_for((machine.e2e / "ready").exists, "the shard is running", machine)
    wait_for(lambda: bool(guardians(machine)), "the guardian is running", machine)
    return Run(shard_pids(machine), shard_cgroups(launcher))


def shard_pids(machine: Machine) -> list[int]:
    return [int(pid) for pid in (machine.e2e / "pids").read_text().split()]


def shard_cgroups(launcher: subprocess.Popen[bytes]) -> list[Path]:
    """The launcher's shard's cgroups: under the launcher's own (it is our child: ours), named by its PID."""
    mounts = plan.cgroup_mounts(Path("/proc/self/mounts").read_text())
    parents = caller_cgroup_dirs(mounts, Path("/proc/self/cgroup").read_text())
    return [Path(parent, f"{CGROUP_PREFIX}-{launcher.pid}-1") for parent in parents]


def guardians(machine: Machine) -> list[int]:
    """The launcher's guardian, by its command line (which names this test's own registry)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--guard" in argv and str(machine.registry).encode() in argv and processes.is_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def leftovers(machine: Machine, run: Run) -> list[str]:
    """Whatever the run left on the machine (empty: the machine is as it was found)."""
    found = [f"process {pid}" for pid in run.pids if processes.is_alive(pid)]
    found += [f"cgroup {path}" for path in run.cgroups if path.exists()]
    found += [f"record {path.name}" for path in machine.registry.glob("*.json")]
    found += [f"mount point {machine.made}"] if machine.made.exists() else []
    found += [f"sysctl {key}={value}" for key, value in machine.sysctl_values().items() if SYSCTLS_BEFORE[key] != value]
    return found + [f"guardian {pid}" for pid in guardians(machine)]


def clean_stale(machine: Machine) -> subprocess.CompletedProcess[str]:
    """As make clean and make dev-down do it."""
    return subprocess.run(
        [sys.executable, "-m", "devplatform.testshards", "--clean-stale", "--registry", str(machine.registry)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    world = Machine(tmp_path / "checkout")
    for key, value in SYSCTLS_BEFORE.items():
        (world.sysctls / key).parent.mkdir(parents=True, exist_ok=True)
        (world.sysctls / key).write_text(value + "\n")
    yield world
    clean_stale(world)  # whatever a failed test left: undone by the records


@pytest.mark.parametrize(
    ("signals", "then"),
    [
        ([signal.SIGTERM], WAIT_TO_BE_STOPPED),  # a CI's timeout
        ([signal.SIGHUP], WAIT_TO_BE_STOPPED),  # a closed terminal
        ([signal.SIGINT], WAIT_TO_BE_STOPPED),  # Ctrl-C
        ([signal.SIGINT, signal.SIGINT], DEAF_TO_CTRL_C),  # Ctrl-C twice: the second must not skip the cleanup
    ],
    ids=["SIGTERM", "SIGHUP", "Ctrl-C", "Ctrl-C twice"],
)
def test_a_stopped_launcher_leaves_nothing_behind(machine: Machine, signals: list[int], then: str) -> None:
    machine.write_module(then)
    launcher = machine.launch()
    run = wait_until_running(machine, launcher)
    assert leftovers(machine, run), "the shard made nothing to clean up: the test shows nothing"
    for number, signum in enumerate(signals):
        if number:
            wait_for(lambda: "stopping the shards" in machine.output(), "the launcher is cleaning up", machine)
        launcher.send_signal(signum)
    assert launcher.wait() == 128 + signals[0], machine.output()
    wait_for(lambda: not leftovers(machine, run), "nothing is left", machine)


def test_a_killed_launcher_is_undone_by_its_guardian(machine: Machine) -> None:
    machine.write_module(WAIT_TO_BE_STOPPED)
    launcher = machine.launch()
    run = wait_until_running(machine, launcher)
    launcher.kill()
    launcher.wait()
    wait_for(lambda: not leftovers(machine, run), "nothing is left", machine)


@pytest.mark.parametrize(
    ("then", "exit_code"),
    [("    subprocess.run(['true'])", 0), ("    assert False, 'the shard fails'", 1)],
    ids=["passing", "failing"],
)
def test_a_launcher_that_ends_leaves_nothing_behind(machine: Machine, then: str, exit_code: int) -> None:
    machine.write_module(then)
    launcher = machine.launch()
    assert launcher.wait() == exit_code, machine.output()
    run = Run(shard_pids(machine), shard_cgroups(launcher))
    wait_for(lambda: not leftovers(machine, run), "nothing is left", machine)


@pytest.mark.parametrize("cleaner", ["the next launcher", "make clean"])
def test_what_a_killed_run_left_is_removed_by_its_record(machine: Machine, cleaner: str) -> None:
    machine.write_module(WAIT_TO_BE_STOPPED)
    launcher = machine.launch()
    run = wait_until_running(machine, launcher)
    for guardian in guardians(machine):  # the whole run killed, as a CI kills everything it started
        os.kill(guardian, signal.SIGKILL)
    launcher.kill()
    launcher.wait()
    wait_for(lambda: not guardians(machine), "the guardian is gone", machine)
    assert leftovers(machine, run), "the killed run left nothing: the test shows nothing"
    if cleaner == "make clean":
        assert "a stopped run's leftovers" in clean_stale(machine).stdout
    else:
        (machine.e2e / "ready").unlink()
        machine.write_module("    pass")
        assert machine.launch().wait() == 0, machine.output()
    # The next launcher's own guardian ends just after its launcher: a poll, not a snapshot.
    wait_for(lambda: not leftovers(machine, run), "nothing is left", machine)


def test_two_launchers_at_once_share_nothing_and_the_last_restores_the_host(tmp_path: Path) -> None:
    """The sysctls and the mount point are the machine's: the first run's end must not put them back
    while the second runs (its shard checks), the second's end must."""
    first, second = Machine(tmp_path / "one"), Machine(tmp_path / "two")
    for world in (first, second):
        for key, value in SYSCTLS_BEFORE.items():
            (world.sysctls / key).parent.mkdir(parents=True, exist_ok=True)
            (world.sysctls / key).write_text(value + "\n")
    # One machine: the second launcher's sysctls are the first's.
    for key in SYSCTLS_BEFORE:
        (second.sysctls / key).unlink()
        (second.sysctls / key).symlink_to(first.sysctls / key)
    first.write_module(f"    while not Path({str(second.e2e / 'ready')!r}).exists(): time.sleep(0.05)")
    ended = second.root / "first-ended"
    second.write_module(
        f"    while not Path({str(ended)!r}).exists(): time.sleep(0.05)\n"
        f"    assert Path({str(second.made)!r}).is_dir(), 'the first run removed a mount point the second uses'\n"
        f"    assert (HERE.parent / 'sys/kernel/panic').read_text() == '10', 'restored while a node runs'"
    )
    one, two = first.launch(), second.launch()
    assert one.wait() == 0, first.output()
    ended.write_text("")
    assert two.wait() == 0, second.output()
    assert checkout_key(str(first.e2e)) != checkout_key(str(second.e2e))
    for world, launcher in ((first, one), (second, two)):
        run = Run(shard_pids(world), shard_cgroups(launcher))
        wait_for(lambda: not leftovers(world, run), "nothing is left", world)  # noqa: B023  # waited here
