"""The cheapest machine first, then the next when JARVICE keeps the job queued: on the real node with the
installed add-on (its webhook has the local install's GPU model mapping, devplatform/overlay/gpu-models.yaml)
and the JARVICE emulator's full machines (`machine_capacity`), driven through kubectl and the emulator's
controls only.

A 4-GPU pod that selects a V100 may run on ng4 (8.40 per hour) or ng4v (10.20): its first job goes to ng4,
which is full; past its `nimbix-burst.io/max-remote-queue` (30 s) the runner terminates it while it is
still SUBMITTED, sees it ended, and only then submits on ng4v, where the pod completes. At no moment do
two of its jobs live. The controller records the move as an Event on the pod.

The money-safety row for a move (docs/money-safety.md) is its own test: the same move while JARVICE
answers a share of the calls with 503.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane
from jarvice import contract
from tests.support.installed_controller import annotations_of, app_container, create_pod, find_pod, pod_body

LABEL = "nvidia.com/gpu.product"
V100 = "Tesla-V100-SXM2-16GB"  # devplatform/overlay/gpu-models.yaml: ng2, ng4, ng4v
MAX_REMOTE_QUEUE_SECONDS = 30
# The move comes within a runner's poll (5 s by default) of the limit; then the terminate, its end, the
# next submit, and the job's own run.
WAIT_SECONDS = 180.0
LIVE = ("SUBMITTED", "SEQUENTIALLY QUEUED", "PROCESSING STARTING")
SAMPLE_SECONDS = 0.2


def _post(url: str, body: Any) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


@pytest.fixture
def ng4_full(node_emulator: addons.EmulatorProcess) -> Iterator[None]:
    """ng4 has no room: a job submitted to it stays SUBMITTED (the emulator's full machine)."""
    _post(node_emulator.url + "/_emulator/config", {"machine_capacity": {"ng4": 0}})
    try:
        yield
    finally:
        _post(node_emulator.url + "/_emulator/config", {"machine_capacity": {}})
        _post(node_emulator.url + "/_emulator/faults", {})


class LiveJobs:
    """Samples the pod's jobs in the emulator while it runs: the most that were live at one look."""

    def __init__(self, emulator: addons.EmulatorProcess, uid: str) -> None:
        self.emulator, self.uid = emulator, uid
        self.most_live = 0
        self.looks = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stop.is_set():
            jobs = demo.fetch_emulator_jobs(self.emulator.url, pod_uid=self.uid)
            self.most_live = max(self.most_live, sum(job["status"] in LIVE for job in jobs))
            self.looks += 1
            time.sleep(SAMPLE_SECONDS)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


@dataclass
class MoveRun:
    pod: dict[str, Any]
    jobs: list[dict[str, Any]]  # the emulator's view: machine, status, stop_reason
    history: dict[int, dict[str, Any]]  # JARVICE's /jarvice/jobs?completed=true entries by number
    most_live: int
    looks: int
    moved_after: float  # seconds from the pod's creation to the first job's end
    logs: str


def _v100_pod(emulator: addons.EmulatorProcess, name: str, command: str) -> dict[str, Any]:
    body = pod_body(name, app_container(emulator, command, gpus=4), gated=False)
    body["metadata"]["annotations"] = {contract.ANNOTATION_MAX_REMOTE_QUEUE: f"{MAX_REMOTE_QUEUE_SECONDS}s"}
    body["spec"]["nodeSelector"] = {**body["spec"]["nodeSelector"], LABEL: V100}
    return body


def _history(emulator: addons.EmulatorProcess) -> dict[int, dict[str, Any]]:
    env = emulator.runner_env()
    query = f"username={env['JARVICE_USERNAME']}&apikey={env['JARVICE_APIKEY']}&completed=true"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{emulator.url}/jarvice/jobs?{query}", timeout=10) as response:
        return {int(number): entry for number, entry in json.loads(response.read()).items()}


def _run_move(plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str, name: str) -> MoveRun:
    began = time.monotonic()
    create_pod(plane, ns, _v100_pod(emulator, name, f'echo "{name} done on the next machine"'))
    pod = demo.wait_for(lambda: find_pod(plane, ns, name), what=f"pod {name}", timeout=30)
    uid = str(pod["metadata"]["uid"])
    watch = LiveJobs(emulator, uid)
    moved_after = 0.0
    try:
        first_ended = demo.wait_for(
            lambda: any(job["status"] == "TERMINATED" for job in demo.fetch_emulator_jobs(emulator.url, pod_uid=uid)),
            what="the first job ended",
            timeout=WAIT_SECONDS,
        )
        assert first_ended
        moved_after = time.monotonic() - began
        pod = demo.wait_for(
            lambda: (
                (p := find_pod(plane, ns, name)) is not None
                and p["status"].get("phase") in ("Succeeded", "Failed")
                and p
            ),
            what=f"pod {name} ended",
            timeout=WAIT_SECONDS,
        )
    finally:
        watch.close()
    logs = plane.kubectl("logs", "-n", ns, name, check=False).stdout
    jobs = sorted(demo.fetch_emulator_jobs(emulator.url, pod_uid=uid), key=lambda job: int(job["number"]))
    return MoveRun(pod, jobs, _history(emulator), watch.most_live, watch.looks, moved_after, logs)


def _assert_moved(run: MoveRun, name: str) -> None:
    assert run.pod["status"]["phase"] == "Succeeded", run.logs
    assert demo.read_exit_code(run.pod) == 0
    assert f"{name} done on the next machine" in run.logs
    assert annotations_of(run.pod)[contract.ANNOTATION_DECISION] == "remote"
    assert [(job["machine"], job["status"]) for job in run.jobs] == [("ng4", "TERMINATED"), ("ng4v", "COMPLETED")]
    first, second = (run.history[int(job["number"])] for job in run.jobs)
    assert first["job_start_time"] == 0  # terminated while SUBMITTED: it never ran, it cost nothing
    # Never two live jobs: the second was submitted no earlier than the first ended (JARVICE's own times),
    # and no look at the emulator saw two live.
    assert second["job_submit_time"] >= first["job_end_time"] > 0
    assert run.most_live == 1 and run.looks > 10
    # Not before the limit: the first job stayed queued at least the pod's max-remote-queue.
    assert first["job_end_time"] - first["job_submit_time"] >= MAX_REMOTE_QUEUE_SECONDS


def _events(plane: controlplane.ControlPlane, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},reason={reason}"
    return list(plane.read("events", namespace=ns, fields=selector)["items"])


def test_a_v100_pod_queued_on_a_full_ng4_moves_to_ng4v_and_completes(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    ng4_full: None,
) -> None:
    run = _run_move(control_plane, node_emulator, ns, "fallback")
    _assert_moved(run, "fallback")
    # The runner said why, on the pod's log (JSON lines on stderr).
    assert "job queued too long; terminating it before submitting on the next machine" in run.logs
    # The controller records the move as an Event on the pod.
    (moved,) = demo.wait_for(
        lambda: _events(control_plane, ns, "fallback", "NimbixMoved"), what="the NimbixMoved Event", timeout=60
    )
    first, second = (job["number"] for job in run.jobs)
    assert moved["message"] == (
        f"JARVICE job {first} on machine ng4 x1 was terminated while queued (it never started, no cost);"
        f" moved to job {second} on machine ng4v x1"
    )
    limit = MAX_REMOTE_QUEUE_SECONDS
    print(f"\nmove: the first job ended {run.moved_after:.1f} s after the pod was created (limit {limit} s)")


def test_money_safety_row_a_move_while_jarvice_answers_503(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    ng4_full: None,
) -> None:
    """The fault matrix's row for a move (docs/money-safety.md): a fifth of the runner's status, terminate
    and submit calls answered 503 throughout; the runner retries them and the promise holds."""
    faults = {"status503": 1000, "rate": 0.2, "endpoints": ["status", "terminate", "submit"]}
    _post(node_emulator.url + "/_emulator/faults", faults)
    run = _run_move(control_plane, node_emulator, ns, "fallback-503")
    injected = demo.fetch_emulator(node_emulator.url, "/_emulator/stats")["injected"]
    _assert_moved(run, "fallback-503")
    billing_late = sum(job["status"] in LIVE for job in run.jobs)
    row = {
        "fault": "a move: ng4 full, job queued past max-remote-queue 30s, 20 % of calls answered 503",
        "submitted": len(run.jobs),
        "completed": sum(job["status"] == "COMPLETED" for job in run.jobs),
        "billing late": billing_late,
        "most live at once": run.most_live,
        "503s injected": injected.get("status503", 0),
        "first job ended after (s)": round(run.moved_after, 1),
    }
    print("\nmoney-safety row: " + json.dumps(row))
    assert (row["submitted"], row["completed"], billing_late) == (2, 1, 0)
    assert row["503s injected"] > 0
