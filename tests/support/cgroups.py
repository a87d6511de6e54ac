"""A process's memory cgroup, read the same way on cgroup v1 (and hybrid hosts, where the memory
controller is still v1) and on cgroup v2 (the unified hierarchy)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v2 writes "max" for no limit.
UNLIMITED = -1


@dataclass(frozen=True, slots=True)
class MemoryFiles:
    """Where a cgroup keeps its peak usage and its limit."""

    peak: Path
    limit: Path

    @property
    def directory(self) -> Path:
        """The cgroup itself: writing a PID to its cgroup.procs moves that process in."""
        return self.peak.parent


def find_memory_files(proc_cgroup: str, *, root: Path = CGROUP_ROOT) -> MemoryFiles | None:
    """From /proc/<pid>/cgroup's text: the v1 memory controller's files where it is mounted
    (`N:memory:/path`, under root/memory), else the unified hierarchy's (`0::/path`, v2:
    memory.peak and memory.max)."""
    unified = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            directory = root / "memory" / path.lstrip("/")
            return MemoryFiles(peak=directory / "memory.max_usage_in_bytes", limit=directory / "memory.limit_in_bytes")
        if hierarchy == "0" and controllers == "":
            unified = root / path.lstrip("/")
    if unified is None:
        return None
    return MemoryFiles(peak=unified / "memory.peak", limit=unified / "memory.max")


def parse_bytes(text: str) -> int:
    """A memory file's value: a byte count, or v2's "max" (UNLIMITED)."""
    value = text.strip()
    return UNLIMITED if value == "max" else int(value)


def read_memory(pid: int) -> tuple[int, int] | None:
    """(peak bytes, limit bytes) of the process's memory cgroup, or None if it cannot be read."""
    files = find_memory_files(Path(f"/proc/{pid}/cgroup").read_text())
    if files is None:
        return None
    return parse_bytes(files.peak.read_text()), parse_bytes(files.limit.read_text())
