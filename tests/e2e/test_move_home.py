"""A running burst job moves home from its checkpoint (docs/controller.md, "Move a running burst job home"),
on the real node with the installed add-on, driven as a user would: kubectl and the JARVICE emulator only.

The Job is the one docs/checkpoints.md shows: `backoffLimit: 0`, the example trainer (a step a second, a
checkpoint every 10 steps and on SIGUSR1), its checkpoint directory staged both ways through the gateway,
`come-home: running`. The real node's GPUs are held by a plain pod (no task-type label), so the Job's pod
bursts; 40 s after its JARVICE job started running, the holder is deleted.

The trainer comes from the Job's own volume (`/workspace/app/train.py`, the example image's file): the
emulator runs the job's command on this machine, where the image's working directory does not exist, and a
staged path is found at the same place there.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devplatform import demo, demo_data
from devplatform.cluster import addons, controlplane, node
from jarvice import contract
from tests.support.installed_controller import annotations_of, turn_homecoming_on
from tests.support.real_node_pods import gpu_holder

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINER = REPO_ROOT / "images" / "example-app" / "train.py"
STEPS = 70  # about 42 remote, the rest local: every step counted once across the two runs
CHECKPOINT_EVERY = 10
RUN_REMOTELY_SECONDS = 40.0  # how long the job runs on Nimbix before the local GPUs free
COMPLETED_WITHIN_SECONDS = 60.0  # the promise: freed GPUs -> the JARVICE job ended COMPLETED
HOMECOMING_SECONDS = 2
WAIT_SECONDS = 300.0
STEP_LINE = re.compile(r"^step (\d+)/\d+ loss=", re.MULTILINE)
RESUMED_LINE = re.compile(r"resumed from step (\d+)")
MOVE_EVENTS = (
    "NimbixMoveCheckpointAsked",
    "NimbixMoveCheckpointWritten",
    "NimbixMoveJobStopped",
    "NimbixMoveCopiedBack",
    "NimbixMoveResumed",
)


@pytest.fixture(scope="module")
def node_emulator(
    control_plane: controlplane.ControlPlane, real_node: node.RealNode
) -> Iterator[addons.EmulatorProcess]:
    """This module's emulator serves its vault (the checkpoint is staged through the gateway), as `make
    dev-up`'s does, and runs the base image's JARVICE_SIGNAL_OVERRIDE script for /jarvice/signal."""
    emulator = demo.start_emulator_for_node(control_plane.run_dir / "test_move_home-emulator", real_node, vaults=True)
    try:
        yield emulator
    finally:
        addons.stop_jarvice_emulator(emulator)


@pytest.fixture(scope="module")
def moves_home(controller: None, control_plane: controlplane.ControlPlane) -> Iterator[None]:
    """The installed controller with homecoming on, looked at every 2 s."""
    turn_homecoming_on(control_plane, every_seconds=HOMECOMING_SECONDS)
    yield


@pytest.fixture
def workspace(control_plane: controlplane.ControlPlane, namespace: str) -> Iterator[Path]:
    """The Job's volume (a hostPath PersistentVolume and its claim `training-data`): the trainer in `app/`,
    an empty checkpoint directory `ckpt/`; removed after the test."""
    host_dir = control_plane.run_dir / "pv" / namespace
    (host_dir / "app").mkdir(parents=True)
    (host_dir / "ckpt").mkdir()
    (host_dir / "app" / "train.py").write_text(TRAINER.read_text())
    for path in (host_dir, host_dir / "app", host_dir / "ckpt"):
        path.chmod(0o777)  # the runner runs as uid 10001
    pv, pvc = demo_data.build_host_volume(namespace, host_dir)
    control_plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pv, pvc]})
    )
    try:
        yield host_dir
    finally:
        control_plane.kubectl("-n", namespace, "delete", "jobs,pods", "--all", "--wait=false", check=False)
        control_plane.kubectl("-n", namespace, "delete", "pvc", "training-data", "--ignore-not-found", "--wait=false")
        control_plane.kubectl("delete", "pv", pv["metadata"]["name"], "--ignore-not-found", "--wait=false")


def _checkpointing_job(node_emulator: addons.EmulatorProcess) -> dict[str, Any]:
    """docs/checkpoints.md's Job, in a namespace the gateway pays for (no credentials of its own)."""
    command = (
        f"python3 /workspace/app/train.py --steps {STEPS} --seconds-per-step 1"
        f" --checkpoint-every {CHECKPOINT_EVERY} --checkpoint-dir /workspace/ckpt"
    )
    container = demo.build_app_container(command=command, gpus=1, app_name=node_emulator.runner_env()["APP_NAME"])
    container["env"] = [variable for variable in container["env"] if "valueFrom" not in variable]
    container["volumeMounts"] = [{"name": "data", "mountPath": "/workspace"}]
    annotations = {
        contract.ANNOTATION_STAGE_IN: "/workspace/app,/workspace/ckpt",
        contract.ANNOTATION_STAGE_OUT: "/workspace/ckpt",
        "nimbix-burst.io/checkpoint-dir": "/workspace/ckpt",
        "nimbix-burst.io/checkpoint-interval": f"{CHECKPOINT_EVERY}s",
        "nimbix-burst.io/come-home": "running",
    }
    spec = demo.build_real_node_placement(
        {
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "training-data"}}],
        }
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"train-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"task-type": "Nimbix"}, "annotations": annotations}, "spec": spec},
        },
    }


def _get(plane: controlplane.ControlPlane, *args: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(plane.kubectl(*args, "-o", "json").stdout)
    return document


def _job_pods(plane: controlplane.ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _get(plane, "-n", namespace, "get", "pods", "-l", f"job-name={job}")["items"]
    return sorted(items, key=lambda pod: pod["metadata"]["creationTimestamp"])


def _job_status(plane: controlplane.ControlPlane, namespace: str, job: str) -> dict[str, Any]:
    status: dict[str, Any] = _get(plane, "-n", namespace, "get", "job", job).get("status") or {}
    return status


def _reasons(plane: controlplane.ControlPlane, namespace: str, job: str) -> set[str]:
    selector = f"involvedObject.kind=Job,involvedObject.name={job}"
    items = _get(plane, "-n", namespace, "get", "events", "--field-selector", selector)["items"]
    return {str(event.get("reason")) for event in items}


def _steps(log: str) -> list[int]:
    return [int(match) for match in STEP_LINE.findall(log)]


def test_a_running_burst_job_moves_home_from_its_checkpoint_with_every_step_done_once(
    moves_home: None,
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    namespace: str,
    workspace: Path,
) -> None:
    ns = namespace
    control_plane.kubectl(
        "-n", ns, "create", "-f", "-", input=json.dumps(gpu_holder("holder", gpus=real_node.settings.gpus))
    )
    demo.wait_for(
        lambda: demo.read_pod(control_plane, ns, "holder")["status"].get("phase") == "Running",
        what="the holder pod running on the real node",
        timeout=60,
    )
    body = _checkpointing_job(node_emulator)
    job = body["metadata"]["name"]
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(body))
    (first,) = demo.wait_for(lambda: _job_pods(control_plane, ns, job), what="the Job's first pod", timeout=30)
    first_name, first_uid = first["metadata"]["name"], first["metadata"]["uid"]
    assert annotations_of(first)[contract.ANNOTATION_DECISION] == "remote", annotations_of(first)

    def remote_job() -> dict[str, Any] | None:
        jobs = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=first_uid)
        if len(jobs) == 1 and jobs[0]["status"] == "PROCESSING STARTING":
            return jobs[0]
        pod = demo.read_pod(control_plane, ns, first_name)
        if demo.read_exit_code(pod) is not None:  # ended before it ran: say why, not only that it timed out
            log = control_plane.kubectl("-n", ns, "logs", first_name, check=False).stdout
            raise AssertionError(f"the burst pod ended (exit {demo.read_exit_code(pod)}), jobs {jobs}:\n{log}")
        return None

    try:
        demo.wait_for(remote_job, what="its JARVICE job running", timeout=120)
    except TimeoutError as exc:
        pod = demo.read_pod(control_plane, ns, first_name)
        log = control_plane.kubectl("-n", ns, "logs", first_name, check=False).stdout
        raise AssertionError(f"{exc}: pod status {json.dumps(pod['status'])}\nlog:\n{log}") from None
    started = time.monotonic()
    demo.wait_for(
        lambda: (
            time.monotonic() - started >= RUN_REMOTELY_SECONDS
            and _steps(control_plane.kubectl("-n", ns, "logs", first_name).stdout)
        ),
        what=f"{RUN_REMOTELY_SECONDS:g} s of remote steps in the pod's log",
        timeout=RUN_REMOTELY_SECONDS + 60,
    )
    freed = time.monotonic()
    control_plane.kubectl("-n", ns, "delete", "pod", "holder", "--wait=true", "--timeout=60s")

    def ended() -> str:
        (remote,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=first_uid)
        return str(remote["status"]) if remote["status"] not in ("SUBMITTED", "PROCESSING STARTING") else ""

    status = demo.wait_for(
        ended, what="the JARVICE job ended", timeout=COMPLETED_WITHIN_SECONDS + (time.monotonic() - freed)
    )
    completed_after = time.monotonic() - freed
    assert status == "COMPLETED", f"the job ended {status}: it was stopped, not checkpointed and finished"
    assert completed_after <= COMPLETED_WITHIN_SECONDS, f"the job ended {completed_after:.0f} s after the GPUs freed"

    def replacement() -> dict[str, Any] | None:
        pods = [p for p in _job_pods(control_plane, ns, job) if p["metadata"]["uid"] != first_uid]
        return pods[0] if pods else None

    second = demo.wait_for(replacement, what="the moved pod's replacement", timeout=120)
    assert annotations_of(second)[contract.ANNOTATION_DECISION] == "local", annotations_of(second)

    def first_local_step() -> bool:
        log = control_plane.kubectl("-n", ns, "logs", second["metadata"]["name"], check=False).stdout
        return bool(_steps(log))

    demo.wait_for(first_local_step, what="the replacement's first step", timeout=120)
    first_step_after = time.monotonic() - freed
    demo.wait_for(
        lambda: (_job_status(control_plane, ns, job).get("succeeded") or 0) >= 1,
        what="the Job complete",
        timeout=WAIT_SECONDS,
    )
    finished = demo.read_pod(control_plane, ns, second["metadata"]["name"])
    assert finished["spec"]["nodeName"] == real_node.name
    moved = demo.read_pod(control_plane, ns, first_name)
    assert demo.read_exit_code(moved) == 81, moved["status"]  # the move's exit, which the Job's rule ignores
    status_of_job = _job_status(control_plane, ns, job)
    assert not status_of_job.get("failed"), f"the move was counted as a failure: {status_of_job}"

    # Every step done exactly once across the two runs, but for at most one interval repeated.
    remote_log = control_plane.kubectl("-n", ns, "logs", first_name).stdout
    local_log = control_plane.kubectl("-n", ns, "logs", second["metadata"]["name"]).stdout
    remote_steps, local_steps = _steps(remote_log), _steps(local_log)
    resumed = RESUMED_LINE.search(local_log)
    assert resumed is not None, local_log
    resumed_at = int(resumed.group(1))
    print(
        f"\nmove home: remote steps 1-{max(remote_steps)}, resumed locally from step {resumed_at}; after the GPUs"
        f" freed: job COMPLETED in {completed_after:.1f} s, first local step in {first_step_after:.1f} s"
    )
    assert remote_steps == list(range(1, max(remote_steps) + 1)), remote_log
    assert local_steps == list(range(resumed_at + 1, STEPS + 1)), local_log
    assert max(remote_steps) - CHECKPOINT_EVERY <= resumed_at <= max(remote_steps), (resumed_at, max(remote_steps))
    assert "training done" in local_log

    # Never a job billing after its pod came home, never the work run twice on one checkpoint: the pod's one
    # job ended COMPLETED, and the replacement (which ran here) has none.
    assert [j["status"] for j in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=first_uid)] == ["COMPLETED"]
    assert demo.fetch_emulator_jobs(node_emulator.url, pod_uid=second["metadata"]["uid"]) == []
    reasons = demo.wait_for(
        lambda: (found := _reasons(control_plane, ns, job)) >= set(MOVE_EVENTS) and found,
        what="every step of the move an Event on the Job",
        timeout=60,
    )
    assert "NimbixMoveGivenUp" not in reasons, reasons
