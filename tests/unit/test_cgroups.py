"""tests.support.cgroups: where a process's memory peak and limit are read, on cgroup v1, on a hybrid
host (v1 memory controller beside the unified hierarchy) and on cgroup v2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import cgroups

ROOT = Path("/cg")
V1 = "4:memory:/kubepods/pod1/c1\n1:cpu,cpuacct:/kubepods/pod1/c1\n"
HYBRID = "9:name=systemd:/\n4:memory:/kubepods/pod1/c1\n0::/kubepods/pod1/c1\n"
V2 = "0::/kubepods.slice/pod1/c1\n"


@pytest.mark.parametrize(
    ("text", "peak", "limit"),
    [
        pytest.param(
            V1,
            "/cg/memory/kubepods/pod1/c1/memory.max_usage_in_bytes",
            "/cg/memory/kubepods/pod1/c1/memory.limit_in_bytes",
            id="v1",
        ),
        pytest.param(
            HYBRID,
            "/cg/memory/kubepods/pod1/c1/memory.max_usage_in_bytes",
            "/cg/memory/kubepods/pod1/c1/memory.limit_in_bytes",
            id="hybrid-uses-the-v1-memory-controller",
        ),
        pytest.param(V2, "/cg/kubepods.slice/pod1/c1/memory.peak", "/cg/kubepods.slice/pod1/c1/memory.max", id="v2"),
    ],
)
def test_memory_files(text: str, peak: str, limit: str) -> None:
    assert cgroups.find_memory_files(text, root=ROOT) == cgroups.MemoryFiles(peak=Path(peak), limit=Path(limit))


def test_no_memory_cgroup() -> None:
    assert cgroups.find_memory_files("1:cpu:/\n", root=ROOT) is None


@pytest.mark.parametrize(("text", "value"), [("134217728\n", 134217728), ("max\n", cgroups.UNLIMITED)])
def test_parse_bytes(text: str, value: int) -> None:
    assert cgroups.parse_bytes(text) == value
