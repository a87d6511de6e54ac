"""Acceptance tests for the local control plane itself: the scheduler sees fake GPU nodes, the Job
controller runs, and two control planes coexist."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from devplatform.cluster import controlplane, nodes, processes
from devplatform.demo_pods import wait_for
from tests.support.gpus import GPU

# Never pulled: there is no kubelet. Any valid image reference would do.
IMAGE = "registry.k8s.io/pause:3.10"
JOB_POD_TIMEOUT_SECONDS = 30.0
ROOT = Path(__file__).resolve().parents[2]
# The replay's control plane and its 1,500 nodes (measured: about 30 s on 2 cores).
REPLAY_START_SECONDS = 240.0
# Stopping the control plane: each process is given its grace period in turn.
REPLAY_STOP_SECONDS = 90.0


def build_gpu_pod(name: str, *, gpus: int, node: str) -> dict[str, Any]:
    """A pod asking for GPUs the way users do (limits only), pinned to one test node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": IMAGE, "resources": {"limits": {GPU: str(gpus)}}}],
        },
    }


def test_scheduler_binds_a_gpu_pod_to_a_fake_node(core: Any, namespace: str, make_gpu_node: Callable[..., str]) -> None:
    node = make_gpu_node(gpus=4)
    core.create_namespaced_pod(namespace, build_gpu_pod("one-gpu", gpus=1, node=node))

    assert nodes.wait_for_pod_bound(core, namespace, "one-gpu") == node
    pod = core.read_namespaced_pod("one-gpu", namespace)
    # Defaulting copied the limit into requests, as the webhook will see it.
    assert pod.spec.containers[0].resources.requests == {GPU: "1"}


def test_pod_asking_for_more_gpus_than_the_node_has_stays_unscheduled(
    core: Any, namespace: str, make_gpu_node: Callable[..., str]
) -> None:
    node = make_gpu_node(gpus=4)
    core.create_namespaced_pod(namespace, build_gpu_pod("eight-gpus", gpus=8, node=node))

    message = nodes.wait_for_pod_unschedulable(core, namespace, "eight-gpus", saying=f"Insufficient {GPU}")

    assert f"Insufficient {GPU}" in message
    assert not core.read_namespaced_pod("eight-gpus", namespace).spec.node_name


def test_job_controller_creates_the_jobs_pod(core: Any, batch: Any, namespace: str) -> None:
    batch.create_namespaced_job(
        namespace,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "hello"},
            "spec": {
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": IMAGE}]}},
            },
        },
    )

    pods = _wait_for_pods(core, namespace, label_selector="job-name=hello")

    assert len(pods) == 1
    owner = pods[0].metadata.owner_references[0]
    assert (owner.kind, owner.name) == ("Job", "hello")


def test_two_control_planes_run_side_by_side(
    control_plane: controlplane.ControlPlane,
    make_control_plane: Callable[..., controlplane.ControlPlane],
) -> None:
    second = make_control_plane("second")

    assert second.server_url != control_plane.server_url
    for plane in (control_plane, second):
        assert plane.kubectl("get", "--raw", "/readyz").stdout == "ok"
    # Separate etcds: what one stores, the other does not see.
    second.kubectl("create", "namespace", "only-in-second")
    elsewhere = control_plane.kubectl("get", "namespace", "only-in-second", check=False)
    assert elsewhere.returncode != 0
    assert "NotFound" in elsewhere.stderr

    second_pids = [proc.pid for proc in second.processes]
    second.stop()
    assert not [pid for pid in second_pids if processes.is_alive(pid)]
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout == "ok"


def _wait_for_pods(core: Any, namespace: str, *, label_selector: str) -> list[Any]:
    deadline = time.monotonic() + JOB_POD_TIMEOUT_SECONDS
    while True:
        try:
            pods = core.list_namespaced_pod(namespace, label_selector=label_selector).items
        except ApiException:
            pods = []
        if pods or time.monotonic() >= deadline:
            return list(pods)
        time.sleep(nodes.POLL_INTERVAL_SECONDS)


def _processes_naming(path: Path) -> list[int]:
    """PIDs whose command line names `path` (a run directory: its etcd's data, its API server's PKI)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if str(path).encode() in cmdline:
            found.append(int(entry.name))
    return found


def test_a_replay_ended_by_sigterm_stops_the_control_plane_it_started(tmp_path: Path) -> None:
    """A CI's timeout or a closed terminal ends `python -m replay` (`make replay`) as Ctrl-C does: its
    control plane goes with it (Python's default for SIGTERM would leave etcd and the API server running)."""
    out = tmp_path / "replay"
    log = tmp_path / "replay.log"
    with log.open("wb") as sink:
        replay = subprocess.Popen(
            [sys.executable, "-m", "replay", "--policies", "webhook", "--count", "20", "--out", str(out)],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: "created " in log.read_text() or replay.poll() is not None,
            what="the replay's control plane up with its nodes",
            timeout=REPLAY_START_SECONDS,
        )
        assert replay.poll() is None, log.read_text()
        assert _processes_naming(out), "the control plane's processes name the run directory"
        replay.send_signal(signal.SIGTERM)
        assert replay.wait(timeout=REPLAY_STOP_SECONDS) == 1, log.read_text()
        assert "replay: SIGTERM received" in log.read_text()
        assert _processes_naming(out) == []
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.wait()
        for pid in _processes_naming(out):  # what a failed check left: this run's, by its directory
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_read_shows_what_kubectl_get_prints(
    control_plane: controlplane.ControlPlane, core: Any, namespace: str
) -> None:
    """ControlPlane.read, the waits' way to look without a kubectl process, reads the same documents; an
    admission dry run through its client stores nothing."""
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"a": "1"}})
    printed = json.loads(control_plane.kubectl("-n", namespace, "get", "configmaps", "-o", "json").stdout)
    assert control_plane.read("configmaps", namespace=namespace)["items"] == printed["items"]
    one = json.loads(control_plane.kubectl("-n", namespace, "get", "configmap", "settings", "-o", "json").stdout)
    assert control_plane.read("configmap", "settings", namespace=namespace) == one
    assert control_plane.read("configmaps", "absent", namespace=namespace, missing_ok=True) == {}
    with pytest.raises(ApiException) as missing:
        control_plane.read("configmaps", "absent", namespace=namespace)
    assert missing.value.status == 404

    pod, _warnings = control_plane.dry_run_create(namespace, build_gpu_pod("probe", gpus=1, node="nowhere"))
    assert pod["metadata"]["name"] == "probe" and pod["spec"]["containers"][0]["resources"]["requests"] == {GPU: "1"}
    assert control_plane.read("pods", "probe", namespace=namespace, missing_ok=True) == {}
