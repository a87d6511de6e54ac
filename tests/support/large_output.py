"""A burst pod streaming a large remote output under the runner's real limits (100m, 128Mi): every
line must reach `kubectl logs -f` exactly once, and the runner's peak memory, read from its container's
cgroup and its VmHWM while it runs, must stay far under the limit. Shared by the direct and the
gateway paths.

The job prints ``NIMBIX_BURST_MEMORY_TEST_MB`` MB (default 20) in lines of 200 bytes (200 MB is 1 M lines).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from devplatform import demo
from devplatform.cluster import controlplane
from tests.support.real_node_pods import RunnerMemory, wait_finished

MB = int(os.environ.get("NIMBIX_BURST_MEMORY_TEST_MB", "20"))
LINE_BYTES = 200
LINES = MB * 1_000_000 // LINE_BYTES
# "Far under" 128Mi: the runner (Python, requests) idles at ~25 MiB.
PEAK_LIMIT_BYTES = 64 * 1024 * 1024
# 200 MB through the emulator, the runner, containerd's log and the kubelet on 2 busy cores.
TIMEOUT_SECONDS = 60 + MB * 6
RUNNER_LIMITS = {"cpu": "100m", "memory": "128Mi"}

COMMAND = (
    'python3 -c \'import sys\nw = sys.stdout.write\nfor i in range(int(sys.argv[1])): w(f"{i:09d} " + "x" * '
    f'{LINE_BYTES - 11} + "\\n")\' {LINES}'
)


def build_line(index: int) -> str:
    return f"{index:09d} " + "x" * (LINE_BYTES - 11) + "\n"


@dataclass(frozen=True)
class Streamed:
    """What reached the user and what the runner used."""

    pod: dict[str, Any]
    seconds: float
    lines: int
    sha256: str
    runner_log_lines: int
    cgroup_peak: int
    cgroup_limit: int
    vm_hwm_bytes: int

    def summary(self) -> str:
        return (
            f"{MB} MB / {LINES} lines through a burst pod in {self.seconds:.1f}s: cgroup peak "
            f"{self.cgroup_peak / 2**20:.1f} MiB (limit {self.cgroup_limit / 2**20:.0f} MiB), "
            f"runner VmHWM {self.vm_hwm_bytes / 2**20:.1f} MiB, {self.lines} lines, "
            f"{self.runner_log_lines} runner log lines"
        )


def stream(plane: controlplane.ControlPlane, namespace: str, name: str) -> Streamed:
    """Follow the created pod `name` from its start, as a user would (the kubelet rotates container logs
    at 10 MiB), sampling its runner's memory, until it has finished."""
    pod = demo.wait_for(
        lambda: (p := demo.read_pod(plane, namespace, name))["status"].get("phase") == "Running" and p,
        what=f"pod {name} Running",
        timeout=120,
    )
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == RUNNER_LIMITS, resources
    sampler = RunnerMemory(pod["metadata"]["uid"], interval=0.2)
    kubectl = [str(plane.bin_dir / "kubectl"), "--kubeconfig", str(plane.kubeconfig_path)]
    started = time.monotonic()
    with subprocess.Popen(
        [*kubectl, "logs", "-f", "-n", namespace, name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as follow:
        assert follow.stdout is not None
        digest, count, other = hashlib.sha256(), 0, 0
        for raw in follow.stdout:
            if raw.startswith(b"{"):  # the runner's own JSON log lines (stderr)
                other += 1
                continue
            digest.update(raw)
            count += 1
        follow.wait(timeout=TIMEOUT_SECONDS)
    elapsed = time.monotonic() - started
    finished = wait_finished(plane, namespace, name)
    sampler.stop()
    return Streamed(
        finished,
        elapsed,
        count,
        digest.hexdigest(),
        other,
        sampler.cgroup_peak,
        sampler.cgroup_limit,
        sampler.vm_hwm_kib * 1024,
    )


def assert_streamed_whole_within_bounds(streamed: Streamed) -> None:
    expected = hashlib.sha256()
    for index in range(LINES):
        expected.update(build_line(index).encode())
    assert demo.read_exit_code(streamed.pod) == 0
    assert streamed.pod["status"]["containerStatuses"][0]["restartCount"] == 0  # never OOM-killed
    assert streamed.lines == LINES
    assert streamed.sha256 == expected.hexdigest()
    assert streamed.cgroup_limit == 128 * 2**20
    assert 0 < streamed.cgroup_peak < PEAK_LIMIT_BYTES
    assert 0 < streamed.vm_hwm_bytes < PEAK_LIMIT_BYTES
