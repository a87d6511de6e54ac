"""`python -m entrypoint.rankguard COMMAND`: one rank of a multi-node job, on a node the fan-out
reached by ssh (`entrypoint.fanout.build_ssh_argv` puts it in the remote command).

It runs COMMAND as the master's rank runs (`bash -l -c`, input from /dev/null), in a process group
of its own, and watches its own input, which the fan-out holds open (through ssh) while the rank
should run. When that input ends (the fan-out stops the ranks, or is gone, or the connection broke),
the rank's process group gets SIGTERM, and SIGKILL after the grace period. Without it a stopped
job's remote ranks would run on: without a terminal, sshd does not signal a command whose client
went away. Its status is the rank's, 128+N when signal N ended it (a command killed by a signal
would otherwise reach the fan-out as ssh's 255).
"""

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Final, NoReturn

from entrypoint import fanning, fanout
from jarvice import exitcodes

log = logging.getLogger("entrypoint.rankguard")

INPUT_FD: Final = 0
READ_BYTES: Final = 4096


class Guard:
    """The rank's process and whether, and since when, it is being stopped."""

    def __init__(self) -> None:
        self.stop_requested = False
        self.deadline: float | None = None

    def on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self.stop_requested = True

    def watch(self, rank: subprocess.Popen[bytes], *, input_fd: int) -> int:
        watching = True
        while rank.poll() is None:
            if watching:
                readable, _, _ = select.select([input_fd], [], [], fanning.WAIT_SECONDS)
                if readable and not os.read(input_fd, READ_BYTES):
                    watching = False
                    self.stop_requested = True
                    log.info("the fan-out's input ended; stopping the rank")
            else:
                time.sleep(fanning.WAIT_SECONDS)
            if self.stop_requested and self.deadline is None:
                _signal_group(rank, signal.SIGTERM)
                self.deadline = time.monotonic() + fanning.STOP_GRACE_SECONDS
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                log.warning("rank still running after the grace period; killing it")
                _signal_group(rank, signal.SIGKILL)
                self.deadline = float("inf")
        return exitcodes.from_returncode(rank.returncode)


def _signal_group(rank: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The rank may have ended (and its group with it) since it was last looked at.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(rank.pid, sig)


def run(argv: list[str], *, input_fd: int = INPUT_FD) -> int:
    if len(argv) != 1:
        log.error("usage: python -m entrypoint.rankguard COMMAND (one shell string)")
        return exitcodes.EXIT_CONFIG
    guard = Guard()
    for sig in fanning.STOP_SIGNALS:
        signal.signal(sig, guard.on_signal)
    rank = subprocess.Popen(fanout.build_local_argv(argv[0]), stdin=subprocess.DEVNULL, start_new_session=True)
    return guard.watch(rank, input_fd=input_fd)


def main() -> NoReturn:
    fanning.configure_logging()
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
