"""What the benchmark reads about another process's CPU time."""

from __future__ import annotations

import os
import time
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Linux's CPU-time clock of a whole process, addressed by pid (CPUCLOCK_SCHED of the thread group,
# as in glibc's clock_getcpuclockid): the scheduler's exact on-CPU time of all its threads, those
# that have ended included.
_CPUCLOCK_SCHED = 2


def process_clock_id(pid: int) -> int:
    return ((~pid) << 3) | _CPUCLOCK_SCHED


def cpu_seconds(pid: int) -> float:
    """Time on a CPU of all the process's threads, from the scheduler's own accounting. utime and
    stime in /proc/<pid>/stat are sampled at the timer tick on kernels built with
    TICK_CPU_ACCOUNTING (this VM's): a thread that wakes briefly and often is charged whole ticks
    or nothing, so sparse work (a watched event, one pod create) needs this. Summing the threads'
    /proc/<pid>/task/*/schedstat instead would lose the time of threads that have ended. Falls back
    to utime + stime where the clock cannot be read."""
    try:
        return time.clock_gettime(process_clock_id(pid))
    except OSError:
        return _ticked_cpu_seconds(pid)


def _ticked_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
