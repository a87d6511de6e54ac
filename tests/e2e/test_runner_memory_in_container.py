"""The runner under its real limits: a burst pod's container gets the webhook's --remote-cpu and
--remote-memory (100m, 128Mi), and the runner streams a large remote output through it.

The job prints ``NIMBIX_BURST_MEMORY_TEST_MB`` MB (default 20) in lines of 200 bytes (200 MB is
1 M lines). Every line must reach the container's stdout exactly once, and the runner's peak memory,
read from the container's cgroup (``memory.max_usage_in_bytes`` on cgroup v1, ``memory.peak`` on v2)
and from the runner's ``VmHWM`` while it runs, must stay far under the limit.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, node
from tests.support.real_node_pods import RunnerMemory, burst_pod, create, wait_finished

MB = int(os.environ.get("NIMBIX_BURST_MEMORY_TEST_MB", "20"))
LINE_BYTES = 200
LINES = MB * 1_000_000 // LINE_BYTES
# "Far under" 128Mi: the runner (Python, requests) idles at ~25 MiB.
PEAK_LIMIT_BYTES = 64 * 1024 * 1024
# 200 MB through the emulator, the runner, containerd's log and the kubelet on 2 busy cores.
TIMEOUT_SECONDS = 60 + MB * 6


def build_line(index: int) -> str:
    return f"{index:09d} " + "x" * (LINE_BYTES - 11) + "\n"


COMMAND = (
    'python3 -c \'import sys\nw = sys.stdout.write\nfor i in range(int(sys.argv[1])): w(f"{i:09d} " + "x" * '
    f'{LINE_BYTES - 11} + "\\n")\' {LINES}'
)


@pytest.fixture(scope="module")
def webhook(control_plane: controlplane.ControlPlane, real_node: node.RealNode) -> Iterator[addons.WebhookProcess]:
    with addons.registered_webhook(
        control_plane, control_plane.run_dir / "memory-webhook", name_suffix="-memory"
    ) as hook:
        yield hook


def test_runner_streams_a_large_output_in_a_128mi_container(
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    webhook: addons.WebhookProcess,
    ns: str,
) -> None:
    big = burst_pod("big", COMMAND, node_emulator)
    # A training container with CPU and memory limits: the webhook cuts them to the runner's footprint.
    big["spec"]["containers"][0]["resources"]["limits"].update({"cpu": "2", "memory": "4Gi"})
    create(control_plane, ns, big)
    pod = demo.wait_for(
        lambda: (p := demo.read_pod(control_plane, ns, "big"))["status"].get("phase") == "Running" and p,
        what="pod big Running",
        timeout=120,
    )
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "100m", "memory": "128Mi"}, resources
    sampler = RunnerMemory(pod["metadata"]["uid"], interval=0.2)
    # Follow the log from the start, as a user would: the kubelet rotates container logs at 10 MiB.
    kubectl = [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig_path)]
    started = time.monotonic()
    with subprocess.Popen(
        [*kubectl, "logs", "-f", "-n", ns, "big"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as follow:
        assert follow.stdout is not None
        digest, count, other = hashlib.sha256(), 0, []
        for raw in follow.stdout:
            if raw.startswith(b"{"):  # the runner's own JSON log lines (stderr)
                other.append(raw)
                continue
            digest.update(raw)
            count += 1
        follow.wait(timeout=TIMEOUT_SECONDS)
    elapsed = time.monotonic() - started
    finished: dict[str, Any] = wait_finished(control_plane, ns, "big")
    sampler.stop()

    expected = hashlib.sha256()
    for index in range(LINES):
        expected.update(build_line(index).encode())
    print(
        f"\n{MB} MB / {LINES} lines through a burst pod in {elapsed:.1f}s: cgroup peak "
        f"{sampler.cgroup_peak / 2**20:.1f} MiB (limit {sampler.cgroup_limit / 2**20:.0f} MiB), "
        f"runner VmHWM {sampler.vm_hwm_kib / 1024:.1f} MiB, {count} lines, {len(other)} runner log lines"
    )
    assert demo.read_exit_code(finished) == 0
    assert finished["status"]["containerStatuses"][0]["restartCount"] == 0  # never OOM-killed
    assert count == LINES
    assert digest.hexdigest() == expected.hexdigest()
    assert sampler.cgroup_limit == 128 * 2**20
    assert 0 < sampler.cgroup_peak < PEAK_LIMIT_BYTES
    assert 0 < sampler.vm_hwm_kib * 1024 < PEAK_LIMIT_BYTES
