"""A running burst job moves home from its checkpoint (docs/controller.md, "Move a running burst job home"),
on the real node with the installed add-on, driven as a user would: kubectl and the JARVICE emulator only.

The move itself (the Job of docs/checkpoints.md, the GPU holder, the timings) is tests/support/move_home.py,
which bench/move_home.py times in rounds; here: a step a second, a checkpoint every 10 steps and on SIGUSR1,
the holder deleted 40 s after the Job's JARVICE job started running, and what the move promises checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install, node
from tests.support import move_home
from tests.support.installed_controller import annotations_of, turn_homecoming_on
from tests.support.real_node_pods import gpu_holder

# 70 steps: about 42 remote, the rest local; every step counted once across the two runs.
TRAINER = move_home.TrainerSettings(steps=70, seconds_per_step=1.0, checkpoint_every=10, run_remotely_seconds=40.0)
COMPLETED_WITHIN_SECONDS = 60.0  # the promise: freed GPUs -> the JARVICE job ended COMPLETED
HOMECOMING_SECONDS = 2
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
def moves_home(
    controller: None, installed_addon: install.Installed, control_plane: controlplane.ControlPlane
) -> Iterator[None]:
    """The installed controller with homecoming on, looked at every 2 s."""
    turn_homecoming_on(control_plane, every_seconds=HOMECOMING_SECONDS, replicas=len(installed_addon.pods))
    yield


@pytest.fixture
def workspace(control_plane: controlplane.ControlPlane, namespace: str) -> Iterator[Path]:
    with move_home.workspace(control_plane, namespace) as host_dir:
        yield host_dir


def test_a_running_burst_job_moves_home_from_its_checkpoint_with_every_step_done_once(
    moves_home: None,
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    namespace: str,
    workspace: Path,
) -> None:
    ns = namespace
    moved = move_home.move_home_once(control_plane, real_node, node_emulator, ns, TRAINER)
    assert moved.remote_status == "COMPLETED", f"the job ended {moved.remote_status}: stopped, not checkpointed"
    assert moved.completed_after_s <= COMPLETED_WITHIN_SECONDS, f"ended {moved.completed_after_s:.0f} s after"
    assert moved.local_pod["spec"]["nodeName"] == real_node.name
    assert demo.read_exit_code(moved.remote_pod) == 81, moved.remote_pod["status"]  # the move's exit
    status_of_job = move_home.job_status(control_plane, ns, moved.job)
    assert not status_of_job.get("failed"), f"the move was counted as a failure: {status_of_job}"

    # Every step done exactly once across the two runs, but for at most one interval repeated.
    remote_steps = move_home.parse_steps(moved.remote_log)
    local_steps = move_home.parse_steps(moved.local_log)
    resumed_at = move_home.parse_resumed(moved.local_log)
    assert resumed_at is not None, moved.local_log
    print(
        f"\nmove home: remote steps 1-{max(remote_steps)}, resumed locally from step {resumed_at}; after the GPUs"
        f" freed: job COMPLETED in {moved.completed_after_s:.1f} s,"
        f" first local step in {moved.first_local_step_after_s:.1f} s"
    )
    assert remote_steps == list(range(1, max(remote_steps) + 1)), moved.remote_log
    assert local_steps == list(range(resumed_at + 1, TRAINER.steps + 1)), moved.local_log
    assert max(remote_steps) - TRAINER.checkpoint_every <= resumed_at <= max(remote_steps), (resumed_at, remote_steps)
    assert "training done" in moved.local_log

    # Never a job billing after its pod came home, never the work run twice on one checkpoint: the pod's one
    # job ended COMPLETED, and the replacement (which ran here) has none.
    first_uid, second_uid = moved.remote_pod["metadata"]["uid"], moved.local_pod["metadata"]["uid"]
    assert [j["status"] for j in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=first_uid)] == ["COMPLETED"]
    assert demo.fetch_emulator_jobs(node_emulator.url, pod_uid=second_uid) == []
    assert annotations_of(moved.local_pod).get("nimbix-burst.io/decision") == "local"
    reasons = demo.wait_for(
        lambda: (found := move_home.job_event_reasons(control_plane, ns, moved.job)) >= set(MOVE_EVENTS) and found,
        what="every step of the move an Event on the Job",
        timeout=60,
    )
    assert "NimbixMoveGivenUp" not in reasons, reasons


# 40 steps: about 12 here, the rest on Nimbix after the preemption; every step counted once.
LEAVING = move_home.TrainerSettings(steps=40, seconds_per_step=1.0, checkpoint_every=10, run_remotely_seconds=0.0)
PREEMPTOR_PRIORITY = "nimbix-burst-e2e-preemptor"


@pytest.fixture
def preemptor_priority(control_plane: controlplane.ControlPlane) -> Iterator[str]:
    """A PriorityClass above the default 0: a pod of it takes the real node's GPUs from the trainer."""
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PREEMPTOR_PRIORITY},
        "value": 1000000,
        "description": "e2e: a pod that preempts a local training pod",
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(body))
    yield PREEMPTOR_PRIORITY
    control_plane.kubectl("delete", "priorityclass", PREEMPTOR_PRIORITY, "--ignore-not-found", "--wait=false")


def test_a_preempted_local_trainer_leaves_with_its_checkpoint_and_resumes_on_nimbix_with_every_step_once(
    moves_home: None,
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    namespace: str,
    workspace: Path,
    preemptor_priority: str,
    tmp_path: Path,
) -> None:
    """The Job of docs/checkpoints.md runs here; a pod of a higher priority wants the real node's GPUs. The
    scheduler preempts the trainer: its runner asks it for a checkpoint (SIGUSR1 for the kubelet's SIGTERM), the
    trainer writes it and exits 0, the pod ends as a stopped one (143) and is gone, and the Job's replacement,
    with no local GPU left, bursts and resumes on Nimbix from that checkpoint. No failure counted, every step
    done once. A preempted pod is deleted once it stops: its log and states are followed while it lives."""
    ns, plane = namespace, control_plane
    body = move_home.checkpointing_job(node_emulator, LEAVING)
    job = body["metadata"]["name"]
    plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(body))
    (first,) = demo.wait_for(lambda: move_home.job_pods(plane, ns, job), what="the Job's first pod", timeout=30)
    first_name, first_uid = first["metadata"]["name"], first["metadata"]["uid"]
    assert annotations_of(first)["nimbix-burst.io/decision"] == "local", annotations_of(first)
    demo.wait_for(
        lambda: demo.read_pod(plane, ns, first_name)["status"].get("phase") == "Running",
        what="the trainer running here",
        timeout=120,
    )
    with (
        move_home.kubectl_stream(plane, tmp_path / "log", "-n", ns, "logs", "-f", first_name) as local_log,
        move_home.kubectl_stream(
            plane, tmp_path / "states", "-n", ns, "get", "pod", first_name, "-w", "-o", "json"
        ) as seen,
    ):

        def local_steps() -> bool:
            pods = {p["metadata"]["uid"]: p for p in move_home.job_pods(plane, ns, job)}
            if first_uid not in pods or demo.read_exit_code(pods[first_uid]) is not None:  # say why, not only when
                raise AssertionError(f"the local pod ended before its 12th step:\n{local_log()}\n{_story(plane, ns)}")
            return max(move_home.parse_steps(local_log()) or [0]) >= 12

        demo.wait_for(local_steps, what="12 local steps (a checkpoint written at step 10)", timeout=120)
        preemptor = gpu_holder(move_home.HOLDER, gpus=real_node.settings.gpus)
        preemptor["spec"]["priorityClassName"] = preemptor_priority
        plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(preemptor))

        def replacement() -> dict[str, Any] | None:
            pods = [p for p in move_home.job_pods(plane, ns, job) if p["metadata"]["uid"] != first_uid]
            return pods[0] if pods else None

        second = demo.wait_for(replacement, what="the preempted pod's replacement", timeout=120)
        assert annotations_of(second)["nimbix-burst.io/decision"] == "remote", annotations_of(second)
        demo.wait_for(
            lambda: (move_home.job_status(plane, ns, job).get("succeeded") or 0) >= 1,
            what="the Job complete on Nimbix",
            timeout=move_home.WAIT_SECONDS,
        )
        left_log, left_states = local_log(), _watched(seen())
    remote_log = move_home.logs(plane, ns, second["metadata"]["name"])
    status_of_job = move_home.job_status(plane, ns, job)
    assert not status_of_job.get("failed"), f"the preemption was counted as a failure: {status_of_job}"
    # Stopped, never the Job's success: the runner's 143, and the API server's word that it was a preemption.
    assert 143 in {demo.read_exit_code(state) for state in left_states}, left_states[-1]["status"]
    reasons = {(c.get("type"), c.get("reason")) for state in left_states for c in state["status"].get("conditions", [])}
    assert ("DisruptionTarget", "PreemptionByScheduler") in reasons, reasons

    local_steps_done, remote_steps = move_home.parse_steps(left_log), move_home.parse_steps(remote_log)
    stopped, resumed_at = max(local_steps_done), move_home.parse_resumed(remote_log)
    print(f"\nleft: local steps 1-{stopped}, resumed on Nimbix from step {resumed_at}")
    assert f"SIGUSR1: stopped after step {stopped} with its checkpoint" in left_log, left_log
    assert resumed_at == stopped, remote_log  # the checkpoint it left with, none older
    assert local_steps_done + remote_steps == list(range(1, LEAVING.steps + 1)), (left_log, remote_log)
    assert "training done" in remote_log
    remote_jobs = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=second["metadata"]["uid"])
    assert [j["status"] for j in remote_jobs] == ["COMPLETED"]


def _watched(text: str) -> list[dict[str, Any]]:
    """The objects `kubectl get -w -o json` printed, one after another."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        value, at = decoder.raw_decode(text, at)
        found.append(value)
    return found


def _story(plane: controlplane.ControlPlane, namespace: str) -> str:
    """The namespace's Events and its pods' states, oldest first: what a failure message needs."""
    events = plane.read("events", namespace=namespace)["items"]
    told = [
        f"{e.get('lastTimestamp') or e.get('eventTime')} {e['involvedObject'].get('name')} {e.get('reason')}:"
        f" {e.get('message')}"
        for e in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime")))
    ]
    pods = plane.read("pods", namespace=namespace)["items"]
    states = [f"{p['metadata']['name']} {json.dumps(p.get('status', {}).get('containerStatuses'))}" for p in pods]
    return "\n".join(told + states)
