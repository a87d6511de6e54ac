"""``python -m devplatform.testshards --shards N -- PYTEST_ARGS``: the e2e tier as N pytest sessions side by side.

The real node is machine-wide (kubelet paths under /var, /run/containerd and /run/netns, kube-proxy's
iptables chains, the kubepods cgroups, the node claim in /run), so one machine runs one at a time. A
shard runs its session in namespaces of its own, as a container runtime would run a node:
- a network namespace (its own loopback, bridge and iptables; nothing it binds is seen outside);
- a cgroup namespace rooted at a cgroup made for it under the launcher's own cgroup in each hierarchy
  (so a CI's limits and kills reach it), the hierarchies mounted again inside, so its kubelet's
  kubepods lands under that cgroup;
- a private mount namespace with empty tmpfs at /run, /var/log, /var/lib/kubelet and /var/lib/cni, and
  the node's cache directory of its own (``<cache>/node-<checkout>-shard-<n>``, kept for the next
  run's images) where a node keeps its containerd root (``<cache>/node``: containerd locks the root).
  The parent is bound, not the root itself: a node's stop unmounts everything at and under its root.
Each session is the suite's own (control plane, real node, add-on; tests/e2e/conftest.py), on the modules
plan.plan_shards gives it by their measured seconds (tests/e2e/durations.json). The shards' output goes
to ``.test-runs/e2e-shard-<n>.log``, each printed as its shard ends.

The machine as it was found, however the launcher ends: what it makes is recorded first (machine.py),
and undone as it ends: on SIGINT, SIGTERM or SIGHUP each shard is asked to stop (its session tears its
node down), then every process left in the shards' cgroups is killed; a second signal hurries that,
never skips it. The host sysctls the kubelets change are saved before the first node and put back after
the last. A guardian process outlives a launcher killed with SIGKILL and undoes the run by its record;
the next launcher, ``make dev-down`` and ``make clean`` (``--clean-stale``) undo any run both missed.

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
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import NoReturn

from devplatform.cluster import nodeconfig
from devplatform.testshards import machine, plan, runrecord

REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = REPO_ROOT / "tests" / "e2e"
DURATIONS_FILE = E2E_DIR / "durations.json"
LOG_DIR = REPO_ROOT / ".test-runs"
CGROUP_PREFIX = "nimbix-burst-shard"
# Private and empty in each shard (tmpfs): what the node and its kubelet keep outside their run dir.
PRIVATE_DIRS = ("/run", "/var/log", "/var/lib/kubelet", "/var/lib/cni")
# How often the launcher looks at its shards, and how long stopped shards get to tear their nodes down
# before what is left of them is killed.
POLL_SECONDS = 1.0
GRACEFUL_STOP_SECONDS = 90.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class Options:
    """Where the launcher finds its modules and keeps its records (the defaults, or a test's own)."""

    e2e_dir: Path = E2E_DIR
    registry: Path = machine.DEFAULT_REGISTRY
    proc_sys: Path = machine.PROC_SYS
    private_dirs: tuple[str, ...] = PRIVATE_DIRS
    log_dir: Path = LOG_DIR

    @property
    def key(self) -> str:
        """The checkout's name in the records and node caches (a test's own e2e directory is its own)."""
        return runrecord.checkout_key(str(REPO_ROOT if self.e2e_dir == E2E_DIR else self.e2e_dir))

    def flags(self) -> list[str]:
        flags = ["--e2e-dir", str(self.e2e_dir), "--registry", str(self.registry), "--proc-sys", str(self.proc_sys)]
        flags += ["--log-dir", str(self.log_dir)]
        return flags + [flag for directory in self.private_dirs for flag in ("--private-dir", directory)]


@dataclass
class _Running:
    index: int  # the slot: its cgroups and node cache are used by one session at a time
    label: str
    shard: plan.Shard
    process: subprocess.Popen[bytes]
    log_path: Path
    cgroups: list[Path]
    started: float


class StopRequestedError(Exception):
    """SIGTERM or SIGHUP: the run ends as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


def _say(text: str) -> None:
    """Printed if it can be: after SIGHUP the terminal may be gone, and the cleanup must go on."""
    with contextlib.suppress(OSError):
        print(text, flush=True)


def _read_durations(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not all(isinstance(value, int | float) for value in data.values()):
        raise SystemExit(f"{path}: expected a JSON object of module path -> seconds; remake it with --update-durations")
    return {str(key): float(value) for key, value in data.items()}


def python_files() -> tuple[str, ...]:
    """pytest's `python_files` as pyproject.toml sets it (pytest's default when it does not)."""
    settings = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    configured = settings.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("python_files")
    if configured is None:
        return plan.PYTEST_PYTHON_FILES
    return tuple(configured.split() if isinstance(configured, str) else configured)


def module_name(path: Path) -> str:
    """A module as the durations file names it: relative to the checkout when it is in it."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def discover_modules(e2e_dir: Path) -> list[str]:
    """The e2e modules pytest would collect in `e2e_dir` (by pyproject's `python_files`)."""
    patterns = python_files()
    return [module_name(path) for path in sorted(e2e_dir.glob("*.py")) if plan.is_test_module(path.name, patterns)]


def _modules(e2e_dir: Path, only: Sequence[str]) -> list[str]:
    chosen = [module for module in discover_modules(e2e_dir) if not only or any(part in module for part in only)]
    if not chosen:
        raise SystemExit(f"no e2e module matches {' or '.join(only)}")
    return chosen


def _make_cgroups(directories: Sequence[Path], mounts: Sequence[plan.CgroupMount]) -> None:
    """A shard's cgroup in every hierarchy; cpuset's needs its parent's CPUs and memory nodes to take a process."""
    for directory, mount in zip(directories, mounts, strict=True):
        directory.mkdir(exist_ok=True)  # the slot's last session's, if a process in it would not die
        if "cpuset" in mount.options.split(","):
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (directory / knob).write_text((directory.parent / knob).read_text())


def _join_cgroups(cgroups: Sequence[Path]) -> None:
    """In the child before exec: move it into its shard's cgroups (so its cgroup namespace is rooted there)."""
    for directory in cgroups:
        (directory / "cgroup.procs").write_text("0")


def _node_caches(key: str, index: int) -> tuple[Path, Path]:
    """The node's cache directory (its containerd root is in it), and the shard's own that stands in
    its place inside the shard: the checkout's, so two checkouts never share a containerd root."""
    shared = default_cache_dir() / "node"
    return shared, shared.with_name(f"node-{key}-shard-{index}")


def default_cache_dir() -> Path:
    return Path(
        os.environ.get("NIMBIX_BURST_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nimbix-burst"
    )


class _Launcher:
    """One run: its shards started in their slots, each printed as it ends; everything undone as it ends."""

    def __init__(self, options: Options, registry: machine.Registry, pytest_args: Sequence[str]) -> None:
        self.options = options
        self.registry = registry
        self.pytest_args = pytest_args
        self.mounts = plan.cgroup_mounts(Path("/proc/self/mounts").read_text())
        self.parents = [
            Path(directory)
            for directory in runrecord.caller_cgroup_dirs(self.mounts, Path("/proc/self/cgroup").read_text())
        ]
        self.running: list[_Running] = []
        self.failed: list[str] = []
        self.hurry = False

    def start(self, index: int, label: str, shard: plan.Shard) -> _Running:
        name = f"{CGROUP_PREFIX}-{os.getpid()}-{index}"
        cgroups = [parent / name for parent in self.parents]
        self.registry.update(self.options.key, lambda record: record.with_cgroups([str(path) for path in cgroups]))
        _make_cgroups(cgroups, self.mounts)
        log_path = self.options.log_dir / f"e2e-{label.replace(' ', '-')}.log"
        for directory in _node_caches(self.options.key, index):
            directory.mkdir(parents=True, exist_ok=True)
        inside = [sys.executable, "-m", "devplatform.testshards", "--inside", str(index), *self.options.flags()]
        argv = ["unshare", "--cgroup", "--net", "--mount", "--propagation", "private", "--", *inside, "--"]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(  # our own command line
                [*argv, *self.pytest_args, *shard.modules],
                cwd=REPO_ROOT,
                env={**os.environ, nodeconfig.SYSCTLS_KEPT_ENV: "1"},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,  # a Ctrl-C or a group's SIGTERM reaches the launcher, which stops the shards
                preexec_fn=lambda: _join_cgroups(cgroups),  # noqa: PLW1509  # no threads yet in this process
            )
        run = _Running(index, label, shard, process, log_path, cgroups, time.monotonic())
        self.running.append(run)
        return run

    def finish(self, run: _Running) -> None:
        self.running.remove(run)
        seconds = time.monotonic() - run.started
        names = " ".join(Path(module).name for module in run.shard.modules)
        _say(f"== e2e {run.label} (exit {run.process.returncode}, {seconds:.0f} s): {names}")
        _say(run.log_path.read_text(errors="replace").rstrip("\n"))
        for note in machine.kill_and_remove_cgroups(run.cgroups):
            _say(f"e2e {run.label}: {note}")
        if run.process.returncode != 0:
            self.failed.append(run.label)

    def stop_all(self) -> None:
        """Each shard still running asked to stop (its session tears its node down), waited for until
        GRACEFUL_STOP_SECONDS or a second signal; what is left is killed by leave()."""
        for run in self.running:
            with contextlib.suppress(ProcessLookupError):
                run.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + GRACEFUL_STOP_SECONDS
        while not self.hurry and time.monotonic() < deadline:
            if all(run.process.poll() is not None for run in self.running):
                break
            time.sleep(POLL_SECONDS / 10)
        for run in self.running:
            _say(f"e2e {run.label}: stopped, output in {module_name(run.log_path)}")

    def on_first_signal(self, signum: int, _frame: FrameType | None) -> NoReturn:
        """Ends the run's loop; from now on a signal only hurries the cleanup (never skips it)."""
        for stop in STOP_SIGNALS:
            signal.signal(stop, self.on_second_signal)
        raise StopRequestedError(signum)

    def on_second_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.hurry:
            _say(f"e2e: {signal.Signals(signum).name} again: killing the shards now (the cleanup still runs)")
        self.hurry = True


@contextlib.contextmanager
def _signals(handler: Callable[[int, FrameType | None], object]) -> Iterator[None]:
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _sessions(e2e_dir: Path, count: int, only: Sequence[str], alone: bool) -> list[tuple[str, plan.Shard]]:
    """What runs, each with the label of its log and lines: N shards, or each module alone."""
    modules, durations = _modules(e2e_dir, only), _read_durations(e2e_dir / DURATIONS_FILE.name)
    try:
        if alone:
            return [(f"{Path(s.modules[0]).stem} alone", s) for s in plan.plan_alone(modules, durations)]
        shards = plan.plan_shards(modules, durations, count)
    except plan.UnmeasuredModulesError as error:
        raise SystemExit(f"e2e: {error}") from error
    return [(f"shard {index}", s) for index, s in enumerate(shards, start=1)]


def _start_guardian(options: Options) -> int:
    """A process of its own session that outlives the launcher: when the launcher is gone (its end of
    the pipe closes, however it ended) it undoes the run by its record. Returns the pipe's end to hold."""
    read_end, write_end = os.pipe()
    options.log_dir.mkdir(exist_ok=True)
    with open(options.log_dir / "e2e-guardian.log", "ab") as log:
        subprocess.Popen(  # our own command line; it records itself, and outlives us
            [sys.executable, "-m", "devplatform.testshards", "--guard", *options.flags()],
            cwd=REPO_ROOT,
            stdin=read_end,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    os.close(read_end)
    return write_end


def _run(options: Options, count: int, only: Sequence[str], pytest_args: Sequence[str], *, alone: bool) -> int:
    """The sessions, at most `count` at a time (each in a slot of its own), each printed as it ends."""
    pending = _sessions(options.e2e_dir, count, only, alone)
    total = len(pending)
    mounts = plan.cgroup_mounts(Path("/proc/self/mounts").read_text())
    if (reason := runrecord.unsupported_cgroups(mounts)) is not None:
        raise SystemExit(f"e2e: {reason}")
    registry = machine.Registry(options.registry, proc_sys=options.proc_sys)
    launcher = _Launcher(options, registry, pytest_args)  # reads where the cgroups go: fails before anything is made
    options.log_dir.mkdir(exist_ok=True)
    with registry.checkout_lock(options.key, _say):
        for note in registry.enter(
            options.key,
            str(REPO_ROOT),
            machine.current(),
            sysctls=nodeconfig.HOST_SYSCTLS,
            mount_points=[Path(directory) for directory in options.private_dirs],
        ):
            _say(f"e2e: {note}")
        pipe = _start_guardian(options)
        free_slots = list(range(1, count + 1))
        exit_code = 0
        with _signals(launcher.on_first_signal):  # the originals come back once the cleanup is done
            try:
                while pending or launcher.running:
                    while pending and free_slots:
                        label, shard = pending.pop(0)
                        run = launcher.start(free_slots.pop(0), label, shard)
                        _say(
                            f"e2e {label}: {len(shard.modules)} module(s), ~{shard.estimate_seconds / 60:.0f} min"
                            f" measured, output in {module_name(run.log_path)}"
                        )
                    for run in [run for run in launcher.running if run.process.poll() is not None]:
                        launcher.finish(run)
                        free_slots.append(run.index)
                    time.sleep(POLL_SECONDS)
            except StopRequestedError as stop:
                exit_code = 128 + stop.signum
                _say(f"e2e: {signal.Signals(stop.signum).name}: stopping the shards, then removing what the run made")
            finally:
                for signum in STOP_SIGNALS:  # before anything else: a signal from now on cannot skip the cleanup
                    signal.signal(signum, launcher.on_second_signal)
                launcher.stop_all()
                for note in registry.leave(options.key):
                    _say(f"e2e: {note}")
                os.close(pipe)
    if exit_code:
        return exit_code
    if launcher.failed:
        _say(f"e2e: failed: {', '.join(launcher.failed)}")
        return 1
    _say(f"e2e: all {total} sessions passed")
    return 0


def _inside(options: Options, index: int, pytest_args: Sequence[str]) -> NoReturn:
    """In the shard's new namespaces: loopback up, the cgroup hierarchies and the private directories
    mounted, then pytest in this process."""
    shared, own = _node_caches(options.key, index)
    mounts = plan.cgroup_mounts(Path("/proc/self/mounts").read_text())
    commands = plan.setup_commands(mounts, options.private_dirs, str(shared), str(own))
    for command in commands:
        subprocess.run(command, check=True)  # fixed commands
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *pytest_args])


def _guard(options: Options) -> int:
    """The guardian: waits for the launcher to be gone, then undoes whatever run is left of it."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    registry = machine.Registry(options.registry, proc_sys=options.proc_sys)
    with contextlib.suppress(FileNotFoundError):  # the run ended already
        registry.update(options.key, lambda record: record.with_guardian(machine.current()))
    sys.stdin.buffer.read()  # returns when the launcher's end closes: it ended or was killed
    registry.wait_for_launcher(options.key)
    for note in registry.clean_stale():
        _say(f"guardian: {note}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devplatform.testshards", description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=2, help="how many sessions run side by side")
    parser.add_argument("--alone", action="store_true", help="each module a session of its own, --shards at a time")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT", help="modules whose path has TEXT")
    parser.add_argument(
        "--update-durations", nargs="+", metavar="REPORT", type=Path, help="pytest --durations=0 outputs (the shards')"
    )
    parser.add_argument(
        "--clean-stale", action="store_true", help="undo what runs that were killed left (by their records), then exit"
    )
    parser.add_argument("--e2e-dir", type=Path, default=E2E_DIR, help=argparse.SUPPRESS)
    parser.add_argument("--registry", type=Path, default=machine.DEFAULT_REGISTRY, help=argparse.SUPPRESS)
    parser.add_argument("--proc-sys", type=Path, default=machine.PROC_SYS, help=argparse.SUPPRESS)
    parser.add_argument("--private-dir", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--log-dir", type=Path, default=LOG_DIR, help=argparse.SUPPRESS)
    parser.add_argument("--inside", type=int, metavar="SHARD", help=argparse.SUPPRESS)
    parser.add_argument("--guard", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to each shard's pytest")
    args = parser.parse_args(argv)
    if args.shards < 1:
        parser.error(f"--shards must be at least 1, got {args.shards}")
    options = Options(
        args.e2e_dir.resolve(), args.registry, args.proc_sys, tuple(args.private_dir) or PRIVATE_DIRS, args.log_dir
    )
    if args.update_durations is not None:
        lines = [line for report in args.update_durations for line in report.read_text().splitlines()]
        seconds = plan.module_seconds(lines)
        DURATIONS_FILE.write_text(json.dumps(seconds, indent=1) + "\n")
        print(f"{DURATIONS_FILE.relative_to(REPO_ROOT)}: {len(seconds)} modules, {sum(seconds.values()):.0f} s in all")
        return 0
    if args.clean_stale:
        if not options.registry.is_dir():
            return 0
        if os.geteuid() != 0:
            print(f"e2e: not root: what killed e2e runs left ({options.registry}) is removed by this as root")
            return 0
        for note in machine.Registry(options.registry, proc_sys=options.proc_sys).clean_stale():
            print(f"e2e: {note}")
        return 0
    if os.geteuid() != 0:
        raise SystemExit("the e2e shards make namespaces and cgroups: run as root")
    if args.guard:
        return _guard(options)
    if args.inside is not None:
        _inside(options, args.inside, args.pytest_args)
    return _run(options, args.shards, args.only, args.pytest_args, alone=args.alone)


if __name__ == "__main__":
    sys.exit(main())
