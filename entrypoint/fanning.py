"""`python -m entrypoint.fanning COMMAND`: run a multi-node job's command once per node.

The base image's run command (images/base/nimbix-burst-run-command) hands a job with more than
one node here, on the master node, in the application's working directory. Every rank is started
at once (`entrypoint.fanout` plans them: the master's rank and, with the local transport, every
rank as a child process; the others through ssh, each under `entrypoint.rankguard` on its node);
the fan-out waits for all of them. When one fails, the others are stopped (SIGTERM to this process
group; for a rank through ssh, the end of ssh's input, on which its guard stops it; SIGKILL after a
grace period) and the fan-out exits with the failed rank's status; a signal to the fan-out stops
every rank too.

Its own messages are JSON lines on stderr (they land in the job's output, which rank 0's pod shows).
"""

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Final, NoReturn

from pythonjsonlogger.json import JsonFormatter

from entrypoint import fanout
from jarvice import exitcodes

log = logging.getLogger("entrypoint.fanning")

# How often the ranks are looked at; a rank's exit is seen within this.
WAIT_SECONDS: Final = 0.05
# After SIGTERM, how long the other ranks get to exit before SIGKILL (a torch process group
# tears down in seconds; JARVICE's own shutdown waits longer, and ends the job's nodes after).
STOP_GRACE_SECONDS: Final = 10.0
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")


class Ranks:
    """The ranks' processes, in this process's own process group (so one signal reaches them all,
    and whatever stops the job's process group stops every rank)."""

    def __init__(self) -> None:
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.exits: list[fanout.RankExit] = []
        self.signalled: int | None = None
        self.stopping = False

    def start(self, plan: fanout.FanoutPlan, *, command: str, env: Mapping[str, str], workdir: str) -> None:
        for launch in plan.launches:
            if self.signalled is not None:
                return  # stopped while starting: wait() stops what has started
            if launch.local:
                argv = fanout.build_local_argv(command)
                process = subprocess.Popen(argv, env={**env, **launch.env}, stdin=subprocess.DEVNULL, cwd=workdir)
            else:
                # The same image on every node: this interpreter's path is the remote one too. ssh's
                # input stays open while the rank should run (the remote guard stops it at its end),
                # and ssh has a process group of its own, so that stopping the ranks ends its input
                # instead of killing it: the fan-out then waits for the remote rank's own status.
                argv = fanout.build_ssh_argv(launch, command=command, workdir=workdir, python=sys.executable)
                process = subprocess.Popen(
                    argv, env=dict(env), stdin=subprocess.PIPE, cwd=workdir, start_new_session=True
                )
            self.processes[launch.rank] = process
            log.info("rank started", extra={"rank": launch.rank, "node": launch.node, "local": launch.local})

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stopping and self.signalled is None:
            self.signalled = signum

    def wait(self) -> int:
        """Wait for every rank; stop the rest at the first failure or signal. The fan-out's status."""
        stop_deadline: float | None = None
        while self.processes:
            for rank, process in list(self.processes.items()):
                code = process.poll()
                if code is None:
                    continue
                del self.processes[rank]
                _end_input(process)
                status = exitcodes.from_returncode(code)
                self.exits.append(fanout.RankExit(rank=rank, code=status))
                log.info("rank exited", extra={"rank": rank, "exit_code": status})
                if status != 0 and stop_deadline is None:
                    log.error("a rank failed; stopping the other ranks", extra={"rank": rank, "exit_code": status})
                    stop_deadline = self._stop()
            if self.signalled is not None and stop_deadline is None:
                log.warning("signal received; stopping every rank", extra={"signal": self.signalled})
                stop_deadline = self._stop()
            if stop_deadline is not None and time.monotonic() >= stop_deadline:
                for rank, process in self.processes.items():
                    log.warning("rank still running after the grace period; killing it", extra={"rank": rank})
                    process.kill()
                stop_deadline = float("inf")
            time.sleep(WAIT_SECONDS)
        if self.signalled is not None:
            return exitcodes.from_signal(self.signalled)
        return fanout.decide_exit(self.exits)

    def _stop(self) -> float:
        """SIGTERM to the process group (every rank and what it started), not to this process."""
        self.stopping = True
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if self.processes:
            os.killpg(os.getpgrp(), signal.SIGTERM)
        for process in self.processes.values():
            _end_input(process)
        return time.monotonic() + STOP_GRACE_SECONDS


def _end_input(process: subprocess.Popen[bytes]) -> None:
    """A rank through ssh: the end of its input tells its guard on the other node to stop it."""
    if process.stdin is not None and not process.stdin.closed:
        process.stdin.close()


def _read_plan(env: Mapping[str, str]) -> fanout.FanoutPlan:
    path = Path(env.get(fanout.ENV_NODES_DIR) or fanout.DEFAULT_NODES_DIR) / fanout.NODES_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise fanout.FanoutError(f"cannot read {path}: {exc.strerror or exc}") from None
    return fanout.build_fanout(text, env=env, source=str(path))


def run(argv: Sequence[str], env: Mapping[str, str]) -> int:
    if len(argv) != 1:
        log.error("usage: python -m entrypoint.fanning COMMAND (one shell string)")
        return exitcodes.EXIT_CONFIG
    try:
        plan = _read_plan(env)
    except fanout.FanoutError as exc:
        log.error("cannot fan the command out", extra={"error": str(exc), "variable": fanout.ENV_NODES_DIR})
        return exitcodes.EXIT_CONFIG
    if plan.transport == "ssh" and shutil.which("ssh") is None:
        log.error(
            "the image has no ssh client, which the fan-out to the job's other nodes needs",
            extra={
                "reason": "build the image FROM the nimbix-burst base image (which has OpenSSH), or install"
                " openssh-client and openssh-server in it",
                "nodes": len(plan.launches),
            },
        )
        return exitcodes.EXIT_CONFIG
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)  # a group of our own, so stopping the ranks never reaches whoever started us
    log.info(
        "fanning the command out",
        extra={
            "nodes": [launch.node for launch in plan.launches],
            "transport": plan.transport,
            "master_addr": plan.master_addr,
            "master_port": plan.master_port,
        },
    )
    ranks = Ranks()
    for sig in STOP_SIGNALS:
        signal.signal(sig, ranks.on_signal)
    ranks.start(plan, command=argv[0], env=env, workdir=os.getcwd())
    return ranks.wait()


def configure_logging() -> None:
    """JSON lines on stderr (the fan-out's and the remote ranks' guards')."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter("%(levelname)s %(name)s %(message)s", rename_fields={"levelname": "level", "name": "logger"})
    )
    logging.getLogger().handlers[:] = [handler]
    # Quiet unless something needs attention, as the runner (LOG_LEVEL=INFO shows every rank's start and exit).
    level = os.environ.get("LOG_LEVEL", "").strip().upper()
    logging.getLogger().setLevel(level if level in LOG_LEVELS else "WARNING")


def main() -> NoReturn:
    configure_logging()
    sys.exit(run(sys.argv[1:], os.environ))


if __name__ == "__main__":
    main()
