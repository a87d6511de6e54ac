"""Burst pods run by the kubelet: the webhook (a host process registered with the API server)
rewrites a labeled GPU pod, the real node runs the runner in a real container (the example app's
image), and the runner drives the JARVICE emulator listening on the node's gateway. What a user sees:
``kubectl logs``, exit codes in the pod status, ``kubectl delete``, container restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, node, nodeconfig
from tests.support.real_node_pods import (
    WAIT_SECONDS,
    burst_pod,
    create,
    get_pod,
    gpu_pod,
    runner_pid,
    wait_finished,
    wait_log,
)

# Characters a shell or a JSON hop could mangle, and a last line without a newline.
TRICKY_COMMAND = (
    "printf '%s\\n' \"double \\\"quotes\\\" and 'single' ones\"; "
    "echo 'dollars stay: $HOME ${PATH} $(echo not run) `echo nor this`'; "
    'echo "unicode: ünïcödé 日本語 🚀"; '
    "printf 'tab:\\there, backslash: \\\\ done\\n'; "
    "printf '   leading spaces and trailing   \\n'; "
    "printf 'the last line has no newline'"
)


# Every test's pods go through this module's webhook; `ns` (tests/e2e/conftest.py) holds the Secret.
pytestmark = pytest.mark.usefixtures("webhook")


@pytest.fixture(scope="module")
def webhook(control_plane: controlplane.ControlPlane, real_node: node.RealNode) -> Iterator[addons.WebhookProcess]:
    """The webhook as a host process with its defaults (a burst runner gets 100m CPU, 128Mi)."""
    with addons.registered_webhook(
        control_plane, control_plane.run_dir / "burst-webhook", name_suffix="-burst-real-node"
    ) as hook:
        yield hook


def stdout_of(real_node: node.RealNode, pod: dict[str, Any]) -> bytes:
    """The container's stdout as the kubelet recorded it (CRI log files under the node's pod-logs
    directory, stream ``stdout`` only; ``P`` lines are continued, ``F`` lines end with a newline)."""
    logs = nodeconfig.NodeLayout(run_dir=real_node.run_dir, containerd_root=Path("/")).pod_logs_dir
    meta = pod["metadata"]
    directory = logs / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / pod["spec"]["containers"][0]["name"]
    out = bytearray()
    for path in sorted(directory.glob("*.log"), key=lambda p: int(p.name.split(".")[0])):
        for line in path.read_bytes().split(b"\n"):
            if not line:
                continue
            _time, stream, tag, content = line.split(b" ", 3)
            if stream == b"stdout":
                out += content + (b"" if tag == b"P" else b"\n")
    return bytes(out)


def expected_stdout(command: str) -> bytes:
    """The command's output as bash gives it on this machine (the emulator runs it the same way)."""
    return subprocess.run(["bash", "-c", command], capture_output=True, check=True, timeout=30).stdout


def test_burst_pod_logs_are_the_remote_output_byte_for_byte(
    control_plane: controlplane.ControlPlane, real_node: node.RealNode, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    app = node_emulator.runner_env()["APP_NAME"]
    started = time.monotonic()
    create(
        control_plane,
        ns,
        burst_pod("remote", TRICKY_COMMAND, node_emulator),
        # The same command run here by the kubelet: what "behaves like a local pod" means.
        gpu_pod("local", TRICKY_COMMAND, gpus=1, app_name=app),
    )
    remote = wait_finished(control_plane, ns, "remote")
    local = wait_finished(control_plane, ns, "local")
    print(f"both pods finished {time.monotonic() - started:.1f}s after create")

    assert remote["metadata"]["annotations"]["nimbix-burst.io/decision"] == "remote"
    assert local["metadata"]["annotations"]["nimbix-burst.io/decision"] == "local"
    assert remote["spec"]["nodeName"] == real_node.name
    expected = expected_stdout(TRICKY_COMMAND)
    assert expected.endswith(b"no newline")
    remote_stdout, local_stdout = stdout_of(real_node, remote), stdout_of(real_node, local)
    # The CRI log records a last line without newline as a full line: kubectl logs shows it with one,
    # for a local pod exactly as for a burst pod.
    assert local_stdout in (expected, expected + b"\n")
    assert remote_stdout == local_stdout
    assert (
        json.loads(control_plane.kubectl("get", "-n", ns, "pod", "remote", "-o", "json").stdout)["status"][
            "containerStatuses"
        ][0]["state"]["terminated"]["exitCode"]
        == 0
    )


def test_kubectl_logs_of_a_burst_pod_show_only_the_remote_output(
    control_plane: controlplane.ControlPlane, real_node: node.RealNode, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    # ERROR: the emulator speaks plain http, and the runner rightly warns that the API key travels
    # unencrypted; against JARVICE (https) the default WARNING shows nothing on a good run.
    create(control_plane, ns, burst_pod("remote", TRICKY_COMMAND, node_emulator, env={"LOG_LEVEL": "ERROR"}))
    wait_finished(control_plane, ns, "remote")
    logs = control_plane.kubectl("logs", "-n", ns, "remote").stdout.encode()
    assert logs in (expected_stdout(TRICKY_COMMAND), expected_stdout(TRICKY_COMMAND) + b"\n")


def test_exit_codes_0_3_and_143_land_in_the_container_status(
    control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    commands = {
        "zero": "echo fine",
        "three": 'echo "CUDA error: out of memory" >&2; exit 3',
        # The remote command killed by SIGTERM: the emulator reports job_exitcode -15. Kubernetes
        # reduces `$$` in an env value to `$` (its escape for `$(VAR)`), so `$$$$` reaches bash as `$$`.
        "term": "echo bye; kill -TERM $$$$",
    }
    create(control_plane, ns, *(burst_pod(name, command, node_emulator) for name, command in commands.items()))
    codes = {name: demo.read_exit_code(wait_finished(control_plane, ns, name)) for name in commands}
    logs = {name: control_plane.kubectl("logs", "-n", ns, name).stdout for name in commands}
    assert codes == {"zero": 0, "three": 3, "term": 143}, logs
    assert get_pod(control_plane, ns, "zero")["status"]["phase"] == "Succeeded"
    assert get_pod(control_plane, ns, "three")["status"]["phase"] == "Failed"


def test_kubectl_delete_pod_terminates_the_remote_job_within_the_grace_period(
    control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    create(control_plane, ns, burst_pod("sweep", 'echo "sweep started"; sleep 600', node_emulator))
    wait_log(control_plane, ns, "sweep", "sweep started")
    uid = get_pod(control_plane, ns, "sweep")["metadata"]["uid"]
    assert [job["status"] for job in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=uid)] == [
        "PROCESSING STARTING"
    ]

    started = time.monotonic()
    control_plane.kubectl("delete", "-n", ns, "pod/sweep", "--wait=true", "--timeout=60s")
    elapsed = time.monotonic() - started

    jobs = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=uid)
    assert [job["status"] for job in jobs] == ["TERMINATED"], jobs
    # The default grace period is 30 s: the runner stopped the job and exited well before the kill.
    assert elapsed < 30


def test_killed_runner_restarts_and_reattaches_to_the_same_job(
    control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    command = "for i in $(seq 1 60); do echo line $i; sleep 0.5; done"
    create(control_plane, ns, burst_pod("trainer", command, node_emulator, restart="OnFailure"))
    wait_log(control_plane, ns, "trainer", "line 3\n")
    uid = get_pod(control_plane, ns, "trainer")["metadata"]["uid"]
    pid = demo.wait_for(lambda: runner_pid(uid), what="the runner's PID", timeout=10)
    os.kill(pid, signal.SIGKILL)

    # Read while the restarted container runs: a finished pod's dead containers are removed.
    restarted = demo.wait_for(
        lambda: (
            (st := get_pod(control_plane, ns, "trainer")["status"]["containerStatuses"][0])["restartCount"] >= 1
            and "running" in st["state"]
            and st
        ),
        what="trainer restarted",
        timeout=WAIT_SECONDS,
    )
    assert restarted["lastState"]["terminated"]["exitCode"] == 137, restarted
    previous = control_plane.kubectl("logs", "-n", ns, "trainer", "--previous").stdout
    pod = wait_finished(control_plane, ns, "trainer")
    status = pod["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 0, status
    submissions = demo.fetch_emulator(node_emulator.url, "/_emulator/submissions")["submissions"]
    labels = [s["job_label"] for s in submissions if uid in s["job_label"]]
    # One submit, attempt 1 (the restarted runner picked it up), labelled with the cluster identity.
    assert len(labels) == 1 and labels[0].startswith("k8s-") and labels[0].endswith(f".{uid}-train-1"), labels
    current = control_plane.kubectl("logs", "-n", ns, "trainer").stdout
    printed = [line for line in (previous + current).splitlines() if line.startswith("line ")]
    # Nothing skipped; lines printed after the dead runner's last save may repeat.
    assert set(printed) == {f"line {i}" for i in range(1, 61)}
    assert "line 60\n" in current  # the restarted runner printed the rest


def test_local_gpu_pod_runs_on_the_real_node_with_its_gpus_counted(
    control_plane: controlplane.ControlPlane, real_node: node.RealNode, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    app = node_emulator.runner_env()["APP_NAME"]
    gpus = real_node.settings.gpus
    create(control_plane, ns, gpu_pod("holder", 'echo "holding GPUs"; sleep 10', gpus=gpus, app_name=app))
    started = time.monotonic()
    demo.wait_for(
        lambda: get_pod(control_plane, ns, "holder")["status"].get("phase") == "Running",
        what="holder Running",
        timeout=WAIT_SECONDS,
    )
    print(f"local GPU pod: create -> Running {time.monotonic() - started:.1f}s")
    holder = get_pod(control_plane, ns, "holder")
    assert holder["metadata"]["annotations"]["nimbix-burst.io/decision"] == "local"
    assert holder["spec"]["nodeName"] == real_node.name
    assert holder["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
    wait_log(control_plane, ns, "holder", "holding GPUs")

    # While it holds every GPU of the node, one more GPU does not fit: the next pod bursts.
    create(control_plane, ns, gpu_pod("next", "echo next", gpus=1, app_name=app))
    annotations = get_pod(control_plane, ns, "next")["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/decision"] == "remote", annotations
    assert "in use" in annotations["nimbix-burst.io/reason"] or "0 free" in annotations["nimbix-burst.io/reason"]
    assert demo.read_exit_code(wait_finished(control_plane, ns, "next")) == 0
    # Finished, it gives its GPUs back (later tests count on them).
    assert demo.read_exit_code(wait_finished(control_plane, ns, "holder")) == 0
