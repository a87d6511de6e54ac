"""``python -m devplatform.testshards --shards N -- PYTEST_ARGS``: the e2e tier as N pytest sessions side by side.

The real node is machine-wide (kubelet paths under /var, /run/containerd and /run/netns, kube-proxy's
iptables chains, the kubepods cgroups, the node claim in /run), so one machine runs one at a time. A
shard runs its session in namespaces of its own, as a container runtime would run a node:
- a network namespace (its own loopback, bridge and iptables; nothing it binds is seen outside);
- a cgroup namespace rooted at a cgroup made for it in each hierarchy, the hierarchies mounted again
  inside, so its kubelet's kubepods lands under that cgroup;
- a private mount namespace with empty tmpfs at /run, /var/log, /var/lib/kubelet and /var/lib/cni, and
  the node's cache directory of its own (``<cache>/node-shard-<n>``, kept for the next run's images)
  where a node keeps its containerd root (``<cache>/node``: containerd locks the root). The parent is
  bound, not the root itself: a node's stop unmounts everything at and under its root.
Each session is the suite's own (control plane, real node, add-on; tests/e2e/conftest.py), on the modules
plan.plan_shards gives it by their measured seconds (tests/e2e/durations.json). The shards' output goes
to ``.test-runs/e2e-shard-<n>.log``, each printed as its shard ends. What the shards made outside their
namespaces (the cgroups, the mount points it had to create) is removed by path at the end.

``--alone``: each module a session of its own, N at a time (each module passes alone: `make test-order`).

``--update-durations REPORT...``: rewrites the durations file from `pytest --durations=0` outputs (the shards'
logs of `make test E2E_ARGS=--durations=0`: measured side by side, as the shards will run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from devplatform.cluster import node
from devplatform.testshards import plan

REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = REPO_ROOT / "tests" / "e2e"
DURATIONS_FILE = E2E_DIR / "durations.json"
LOG_DIR = REPO_ROOT / ".test-runs"
CGROUP_PREFIX = "nimbix-burst-shard"
# Private and empty in each shard (tmpfs): what the node and its kubelet keep outside their run dir.
PRIVATE_DIRS = ("/run", "/var/log", "/var/lib/kubelet", "/var/lib/cni")
# How often the launcher looks at its shards, and how long a stray process gets after SIGKILL.
POLL_SECONDS = 1.0
KILL_WAIT_SECONDS = 5.0


@dataclass
class _Running:
    index: int  # the slot: its cgroups and node cache are used by one session at a time
    label: str
    shard: plan.Shard
    process: subprocess.Popen[bytes]
    log_path: Path
    cgroups: list[Path]
    started: float


def _read_durations(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not all(isinstance(value, int | float) for value in data.values()):
        raise SystemExit(f"{path}: expected a JSON object of module path -> seconds; remake it with --update-durations")
    return {str(key): float(value) for key, value in data.items()}


def _modules(only: Sequence[str]) -> list[str]:
    found = [str(path.relative_to(REPO_ROOT)) for path in sorted(E2E_DIR.glob("test_*.py"))]
    chosen = [module for module in found if not only or any(part in module for part in only)]
    if not chosen:
        raise SystemExit(f"no e2e module matches {' or '.join(only)}")
    return chosen


def _make_cgroups(name: str, mounts: Sequence[plan.CgroupMount]) -> list[Path]:
    """A cgroup `name` in every hierarchy; cpuset's needs its parent's CPUs and memory nodes to take a process."""
    made: list[Path] = []
    for mount in mounts:
        directory = Path(mount.mount_point) / name
        directory.mkdir()
        made.append(directory)
        if "cpuset" in mount.options.split(","):
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (directory / knob).write_text((Path(mount.mount_point) / knob).read_text())
    return made


def _join_cgroups(cgroups: Sequence[Path]) -> None:
    """In the child before exec: move it into its shard's cgroups (so its cgroup namespace is rooted there)."""
    for directory in cgroups:
        (directory / "cgroup.procs").write_text("0")


def _remove_cgroups(cgroups: Sequence[Path]) -> list[str]:
    """Kill what is left in a shard's cgroups (its processes only: nothing else is in them), then remove them."""
    notes: list[str] = []
    pids: set[int] = set()
    for top in cgroups:
        for directory in _deepest_first(top):
            with contextlib.suppress(OSError):
                pids.update(int(line) for line in (directory / "cgroup.procs").read_text().split())
    for pid in sorted(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            notes.append(f"killed stray process {pid}")
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    for top in cgroups:
        for directory in _deepest_first(top):
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:
                    if time.monotonic() > deadline:
                        notes.append(f"could not remove cgroup {directory}: {error.strerror}")
                        break
                    time.sleep(0.05)
    return notes


def _deepest_first(top: Path) -> list[Path]:
    found = [Path(root) for root, _dirs, _files in os.walk(top)]
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


@contextlib.contextmanager
def _mount_points() -> Iterator[None]:
    """The private directories need a place to be mounted on: those missing here are made, and removed after."""
    made = []
    for directory in map(Path, PRIVATE_DIRS):
        if not directory.exists():
            directory.mkdir(parents=True)
            made.append(directory)
    try:
        yield
    finally:
        for directory in reversed(made):
            with contextlib.suppress(OSError):  # not empty: something else uses it now; left
                directory.rmdir()


def _node_caches(index: int) -> tuple[Path, Path]:
    """The node's cache directory (its containerd root is in it), and the shard's own that stands in
    its place inside the shard."""
    shared = node.default_cache_dir() / "node"
    return shared, shared.with_name(f"node-shard-{index}")


def _start(
    index: int, label: str, shard: plan.Shard, pytest_args: Sequence[str], mounts: Sequence[plan.CgroupMount]
) -> _Running:
    cgroups = _make_cgroups(f"{CGROUP_PREFIX}-{os.getpid()}-{index}", mounts)
    log_path = LOG_DIR / f"e2e-{label.replace(' ', '-')}.log"
    for directory in _node_caches(index):
        directory.mkdir(parents=True, exist_ok=True)
    inside = [sys.executable, "-m", "devplatform.testshards", "--inside", str(index), "--", *pytest_args]
    argv = ["unshare", "--cgroup", "--net", "--mount", "--propagation", "private", "--", *inside, *shard.modules]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(  # our own command line
            argv,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: _join_cgroups(cgroups),  # noqa: PLW1509  # no threads yet in this process
        )
    return _Running(index, label, shard, process, log_path, cgroups, time.monotonic())


def _inside(index: int, pytest_args: Sequence[str]) -> NoReturn:
    """In the shard's new namespaces: loopback up, the cgroup hierarchies and the private directories
    mounted, then pytest in this process."""
    shared, own = _node_caches(index)
    mounts = plan.cgroup_mounts(Path("/proc/self/mounts").read_text())
    commands = plan.setup_commands(mounts, PRIVATE_DIRS, str(shared), str(own))
    for command in commands:
        subprocess.run(command, check=True)  # fixed commands
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *pytest_args])


def _sessions(count: int, only: Sequence[str], alone: bool) -> list[tuple[str, plan.Shard]]:
    """What runs, each with the label of its log and lines: N shards, or each module alone."""
    modules, durations = _modules(only), _read_durations(DURATIONS_FILE)
    if alone:
        return [(f"{Path(s.modules[0]).stem} alone", s) for s in plan.plan_alone(modules, durations)]
    return [(f"shard {index}", s) for index, s in enumerate(plan.plan_shards(modules, durations, count), start=1)]


def _run(count: int, only: Sequence[str], pytest_args: Sequence[str], *, alone: bool = False) -> int:
    """The sessions, at most `count` at a time (each in a slot of its own), each printed as it ends."""
    pending = _sessions(count, only, alone)
    total = len(pending)
    mounts = plan.cgroup_mounts(Path("/proc/self/mounts").read_text())
    LOG_DIR.mkdir(exist_ok=True)
    failed: list[str] = []
    free_slots = list(range(1, count + 1))
    running: list[_Running] = []
    with _mount_points():
        try:
            while pending or running:
                while pending and free_slots:
                    label, shard = pending.pop(0)
                    run = _start(free_slots.pop(0), label, shard, pytest_args, mounts)
                    running.append(run)
                    print(
                        f"e2e {label}: {len(shard.modules)} module(s), ~{shard.estimate_seconds / 60:.0f} min"
                        f" measured, output in {run.log_path.relative_to(REPO_ROOT)}",
                        flush=True,
                    )
                for run in [run for run in running if run.process.poll() is not None]:
                    running.remove(run)
                    seconds = time.monotonic() - run.started
                    names = " ".join(Path(module).name for module in run.shard.modules)
                    print(f"== e2e {run.label} (exit {run.process.returncode}, {seconds:.0f} s): {names}")
                    print(run.log_path.read_text(errors="replace"), end="", flush=True)
                    for note in _remove_cgroups(run.cgroups):
                        print(f"e2e {run.label}: {note}")
                    free_slots.append(run.index)
                    if run.process.returncode != 0:
                        failed.append(run.label)
                time.sleep(POLL_SECONDS)
        finally:
            for run in running:  # interrupted: stop the rest, then what they left
                run.process.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.process.wait(timeout=120)
                _remove_cgroups(run.cgroups)
    if failed:
        print(f"e2e: failed: {', '.join(failed)}")
        return 1
    print(f"e2e: all {total} sessions passed")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devplatform.testshards", description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=2, help="how many sessions run side by side")
    parser.add_argument("--alone", action="store_true", help="each module a session of its own, --shards at a time")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT", help="modules whose path has TEXT")
    parser.add_argument(
        "--update-durations", nargs="+", metavar="REPORT", type=Path, help="pytest --durations=0 outputs (the shards')"
    )
    parser.add_argument("--inside", type=int, metavar="SHARD", help=argparse.SUPPRESS)
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to each shard's pytest")
    args = parser.parse_args(argv)
    if args.shards < 1:
        parser.error(f"--shards must be at least 1, got {args.shards}")
    if args.update_durations is not None:
        lines = [line for report in args.update_durations for line in report.read_text().splitlines()]
        seconds = plan.module_seconds(lines)
        DURATIONS_FILE.write_text(json.dumps(seconds, indent=1) + "\n")
        print(f"{DURATIONS_FILE.relative_to(REPO_ROOT)}: {len(seconds)} modules, {sum(seconds.values()):.0f} s in all")
        return 0
    if os.geteuid() != 0:
        raise SystemExit("the e2e shards make namespaces and cgroups: run as root")
    if args.inside is not None:
        _inside(args.inside, args.pytest_args)
    return _run(args.shards, args.only, args.pytest_args, alone=args.alone)


if __name__ == "__main__":
    sys.exit(main())
