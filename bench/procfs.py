"""What the benchmark reads about a process from /proc."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """Time on a CPU of all the process's threads, from the scheduler's own accounting
    (/proc/<pid>/task/*/schedstat, in ns). /proc/<pid>/stat's utime and stime are sampled at the
    timer tick on kernels built with TICK_CPU_ACCOUNTING (this VM's): a thread that wakes briefly
    and often is charged whole ticks or nothing, so sparse work (a watched event, one pod create)
    needs this. Falls back to utime + stime where the kernel keeps no schedstat."""
    total_ns = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        for task in tasks:
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                total_ns += int((task / "schedstat").read_text().split()[0])
    except FileNotFoundError:
        return _ticked_cpu_seconds(pid)
    return total_ns / 1e9 if total_ns else _ticked_cpu_seconds(pid)


def _ticked_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
