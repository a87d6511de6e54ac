"""A delay line for the staging benchmark: a TCP relay on 127.0.0.1 that holds every byte for a
fixed time each way before passing it on, so the clients see a chosen round trip to the same sshd
(as a vault across a WAN), without a limit on the rate.

The kernel's netem would do this on a network namespace's loopback; where the kernel has no
sch_netem (as on the dev machine), this relay does the same for the benchmark's connections. It is
`bench/godelayline` (Go, standard library), built and cached as `bench/goloadgen` is, in a process of
its own: the asyncio relay it replaced ran in a thread of the benchmark and carried at most about a
hundred MiB/s, sharing the benchmark's interpreter lock (measured in docs/performance.md, 6b). What is
in flight is held in memory (rate x delay: 50 MiB at 1 GB/s and 50 ms).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from typing import Final

from bench.minimal import ensure_go_binary

STOP_TIMEOUT_SECONDS: Final = 10.0


@contextlib.contextmanager
def delay_line(target_port: int, *, rtt_ms: float) -> Iterator[int]:
    """A relay to 127.0.0.1:`target_port` adding `rtt_ms` to every round trip; yields its port."""
    argv = [str(ensure_go_binary("godelayline")), "-target", f"127.0.0.1:{target_port}", "-one-way", f"{rtt_ms / 2}ms"]
    # Its standard input is ours to close: it stops when it reads the end (also if we die first).
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # its port, printed once it listens (nothing: it failed)
        if not line.strip().isdigit():
            raise SystemExit(f"the delay line did not start (exit {process.wait(STOP_TIMEOUT_SECONDS)})")
        yield int(line)
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
