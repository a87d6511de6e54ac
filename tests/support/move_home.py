"""One move of a running burst job home (docs/controller.md, "Move a running burst job home"), on the real node
with the installed add-on, driven as a user would: kubectl and the JARVICE emulator only. The e2e module
(tests/e2e/test_move_home.py) checks what a move promises; the benchmark (bench/move_home.py) times rounds of it.

The Job is the one docs/checkpoints.md shows: `backoffLimit: 0`, the example trainer, its checkpoint directory
staged both ways through the gateway, `come-home: running`. The real node's GPUs are held by a plain pod (no
task-type label), so the Job's pod bursts; a while after its JARVICE job started running, the holder is deleted.

The trainer comes from the Job's own volume (`/workspace/app/train.py`, the example image's file): the emulator
runs the job's command on this machine, where the image's working directory does not exist, and a staged path
is found at the same place there.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devplatform import demo, demo_data
from devplatform.cluster import addons, controlplane, node
from jarvice import contract
from tests.support.installed_controller import annotations_of
from tests.support.real_node_pods import gpu_holder

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINER = REPO_ROOT / "images" / "example-app" / "train.py"
STEP_LINE = re.compile(r"^step (\d+)/\d+ loss=", re.MULTILINE)
RESUMED_LINE = re.compile(r"resumed from step (\d+)")
HOLDER = "holder"
WAIT_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class TrainerSettings:
    steps: int
    seconds_per_step: float
    checkpoint_every: int  # steps
    run_remotely_seconds: float  # how long the job runs on Nimbix before the local GPUs free

    @property
    def checkpoint_interval_seconds(self) -> int:
        """The `checkpoint-interval` annotation: whole seconds, at least one."""
        return max(1, round(self.checkpoint_every * self.seconds_per_step))


@dataclass(frozen=True, slots=True)
class MoveRound:
    """What one move did: times are seconds after the holder's delete was asked for (the GPUs freeing)."""

    job: str
    remote_pod: dict[str, Any]  # the first pod, as it ended
    local_pod: dict[str, Any]  # its replacement, as it ended
    remote_status: str  # how the first pod's JARVICE job ended
    completed_after_s: float  # ... that end seen
    first_local_step_after_s: float  # the replacement's first step seen in its log
    remote_log: str
    local_log: str


def parse_steps(log: str) -> list[int]:
    """The step numbers the example trainer printed (`step N/M loss=L`), in order."""
    return [int(match) for match in STEP_LINE.findall(log)]


def parse_resumed(log: str) -> int | None:
    """The step the trainer resumed from (`resumed from step N`), or None if it started afresh."""
    found = RESUMED_LINE.search(log)
    return int(found.group(1)) if found else None


def steps_repeated(remote_log: str, local_log: str) -> int | None:
    """Steps run remotely and again locally: the last remote step less the step resumed from (0 when the move's
    own checkpoint was the newest); None when the logs do not say."""
    remote, resumed = parse_steps(remote_log), parse_resumed(local_log)
    if not remote or resumed is None:
        return None
    return max(0, max(remote) - resumed)


@contextmanager
def workspace(plane: controlplane.ControlPlane, namespace: str) -> Iterator[Path]:
    """The Job's volume (a hostPath PersistentVolume and its claim `training-data`): the trainer in `app/`, an
    empty checkpoint directory `ckpt/`; the namespace's Jobs, pods and the volume removed afterwards."""
    host_dir = plane.run_dir / "pv" / namespace
    (host_dir / "app").mkdir(parents=True)
    (host_dir / "ckpt").mkdir()
    (host_dir / "app" / "train.py").write_text(TRAINER.read_text())
    for path in (host_dir, host_dir / "app", host_dir / "ckpt"):
        path.chmod(0o777)  # the runner runs as uid 10001
    pv, pvc = demo_data.build_host_volume(namespace, host_dir)
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pv, pvc]}))
    # Bound before a pod uses it: until then the scheduler finds no node for the pod, and the controller (its
    # stranded threshold a few seconds in the e2e tier) would re-burst a pod decided local.
    demo.wait_for(
        lambda: plane.read("pvc", "training-data", namespace=namespace)["status"].get("phase") == "Bound",
        what="the claim training-data bound",
        timeout=60,
    )
    try:
        yield host_dir
    finally:
        plane.kubectl("-n", namespace, "delete", "jobs,pods", "--all", "--wait=false", check=False)
        plane.kubectl("-n", namespace, "delete", "pvc", "training-data", "--ignore-not-found", "--wait=false")
        plane.kubectl("delete", "pv", pv["metadata"]["name"], "--ignore-not-found", "--wait=false")


def checkpointing_job(node_emulator: addons.EmulatorProcess, trainer: TrainerSettings) -> dict[str, Any]:
    """docs/checkpoints.md's Job, in a namespace the gateway pays for (no credentials of its own)."""
    command = (
        f"python3 /workspace/app/train.py --steps {trainer.steps} --seconds-per-step {trainer.seconds_per_step:g}"
        f" --checkpoint-every {trainer.checkpoint_every} --checkpoint-dir /workspace/ckpt"
    )
    container = demo.build_app_container(command=command, gpus=1, app_name=node_emulator.runner_env()["APP_NAME"])
    container["env"] = [variable for variable in container["env"] if "valueFrom" not in variable]
    container["volumeMounts"] = [{"name": "data", "mountPath": "/workspace"}]
    annotations = {
        contract.ANNOTATION_STAGE_IN: "/workspace/app,/workspace/ckpt",
        contract.ANNOTATION_STAGE_OUT: "/workspace/ckpt",
        "nimbix-burst.io/checkpoint-dir": "/workspace/ckpt",
        "nimbix-burst.io/checkpoint-interval": f"{trainer.checkpoint_interval_seconds}s",
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


def job_pods(plane: controlplane.ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.read("pods", namespace=namespace, labels=f"job-name={job}")["items"]
    return sorted(items, key=lambda pod: pod["metadata"]["creationTimestamp"])


def job_status(plane: controlplane.ControlPlane, namespace: str, job: str) -> dict[str, Any]:
    status: dict[str, Any] = plane.read("job", job, namespace=namespace).get("status") or {}
    return status


def job_event_reasons(plane: controlplane.ControlPlane, namespace: str, job: str) -> set[str]:
    selector = f"involvedObject.kind=Job,involvedObject.name={job}"
    items = plane.read("events", namespace=namespace, fields=selector)["items"]
    return {str(event.get("reason")) for event in items}


@contextmanager
def kubectl_stream(plane: controlplane.ControlPlane, path: Path, *args: str) -> Iterator[Callable[[], str]]:
    """`kubectl <args>` in the background (`logs -f`, `get -w`), its output kept in `path` and read at any
    time: what a pod said and was, even once it is deleted (a preempted pod is). Stopped on leaving."""
    kubectl = [str(plane.bin_dir / "kubectl"), "--kubeconfig", str(plane.kubeconfig_path)]
    with path.open("wb") as out:
        process = subprocess.Popen([*kubectl, *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        yield lambda: path.read_bytes().decode(errors="replace")
    finally:
        process.terminate()
        process.wait(timeout=30)


def logs(plane: controlplane.ControlPlane, namespace: str, pod: str) -> str:
    return plane.kubectl("-n", namespace, "logs", pod, check=False).stdout


def move_home_once(
    plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    namespace: str,
    trainer: TrainerSettings,
) -> MoveRound:
    """Holds the real node's GPUs, starts the Job (its pod bursts), frees the GPUs once its JARVICE job has run
    `trainer.run_remotely_seconds` with steps in the log, and follows the move until the Job completes. Raises
    AssertionError where the move went otherwise than docs/controller.md says (a decision, an end)."""
    ns = namespace
    plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(gpu_holder(HOLDER, gpus=real_node.settings.gpus)))
    demo.wait_for(
        lambda: demo.read_pod(plane, ns, HOLDER)["status"].get("phase") == "Running",
        what="the holder pod running on the real node",
        timeout=60,
    )
    body = checkpointing_job(node_emulator, trainer)
    job = body["metadata"]["name"]
    plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(body))
    (first,) = demo.wait_for(lambda: job_pods(plane, ns, job), what="the Job's first pod", timeout=30)
    first_name, first_uid = first["metadata"]["name"], first["metadata"]["uid"]
    assert annotations_of(first)[contract.ANNOTATION_DECISION] == "remote", annotations_of(first)

    def remote_job() -> dict[str, Any] | None:
        jobs = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=first_uid)
        if len(jobs) == 1 and jobs[0]["status"] == "PROCESSING STARTING":
            return jobs[0]
        pod = demo.read_pod(plane, ns, first_name)
        if demo.read_exit_code(pod) is not None:  # ended before it ran: say why, not only that it timed out
            raise AssertionError(
                f"the burst pod ended (exit {demo.read_exit_code(pod)}), jobs {jobs}:\n{logs(plane, ns, first_name)}"
            )
        return None

    try:
        demo.wait_for(remote_job, what="its JARVICE job running", timeout=120)
    except TimeoutError as exc:
        pod = demo.read_pod(plane, ns, first_name)
        log = logs(plane, ns, first_name)
        raise AssertionError(f"{exc}: pod status {json.dumps(pod['status'])}\nlog:\n{log}") from None
    started = time.monotonic()
    demo.wait_for(
        lambda: time.monotonic() - started >= trainer.run_remotely_seconds and parse_steps(logs(plane, ns, first_name)),
        what=f"{trainer.run_remotely_seconds:g} s of remote steps in the pod's log",
        timeout=trainer.run_remotely_seconds + 60,
    )
    freed = time.monotonic()
    plane.kubectl("-n", ns, "delete", "pod", HOLDER, "--wait=true", "--timeout=60s")

    def ended() -> str:
        (remote,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=first_uid)
        return str(remote["status"]) if remote["status"] not in ("SUBMITTED", "PROCESSING STARTING") else ""

    remote_status = demo.wait_for(ended, what="the JARVICE job ended", timeout=WAIT_SECONDS)
    completed_after = time.monotonic() - freed

    def replacement() -> dict[str, Any] | None:
        pods = [p for p in job_pods(plane, ns, job) if p["metadata"]["uid"] != first_uid]
        if not pods and demo.read_exit_code(demo.read_pod(plane, ns, first_name)) == 0:  # say why none comes
            raise AssertionError(f"the burst pod finished its work remotely before a move (job {remote_status})")
        return pods[0] if pods else None

    second = demo.wait_for(replacement, what="the moved pod's replacement", timeout=120)
    second_name = second["metadata"]["name"]
    assert annotations_of(second)[contract.ANNOTATION_DECISION] == "local", annotations_of(second)
    demo.wait_for(lambda: parse_steps(logs(plane, ns, second_name)), what="the replacement's first step", timeout=120)
    first_step_after = time.monotonic() - freed
    demo.wait_for(
        lambda: (job_status(plane, ns, job).get("succeeded") or 0) >= 1, what="the Job complete", timeout=WAIT_SECONDS
    )
    return MoveRound(
        job=job,
        remote_pod=demo.read_pod(plane, ns, first_name),
        local_pod=demo.read_pod(plane, ns, second_name),
        remote_status=remote_status,
        completed_after_s=completed_after,
        first_local_step_after_s=first_step_after,
        remote_log=logs(plane, ns, first_name),
        local_log=logs(plane, ns, second_name),
    )
