"""Waiting before bursting (`nimbix-burst.io/burst-after`) and coming home while still queued, on the
real node with the installed add-on (webhook and controller as `kubectl apply -k` installs them),
driven through kubectl and the JARVICE emulator's controls only.

The local GPUs that are "full" are the real node's: its capacity and allocatable `nvidia.com/gpu` are
lowered to 0 (as a device plugin reporting them unhealthy does) and raised again to free them. A job
"held SUBMITTED" is the emulator's queue made long (`POST /_emulator/config {"queue_seconds": 600}`,
its documented control): JARVICE keeps a job queued, as when its machines are busy.

Besides its assertions, the homecoming test records a row in the money-safety form of
docs/money-safety.md (submitted, completed, billed late, run twice) and holds it to the goal.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install, node
from jarvice import contract
from tests.support.fault_matrix import FaultMatrix, Row
from tests.support.gpus import GPU
from tests.support.indexed_jobs import real_node_indexed_job, submissions
from tests.support.installed_controller import (
    annotations_of,
    app_container,
    pod_body,
    turn_homecoming_on,
    wait_admitted_as,
)
from tests.support.real_node_pods import gpu_holder
from tests.support.webhook_group import env

BURST_AFTER_SECONDS = 30
GANG_BURST_AFTER_SECONDS = 30
GANG_GPUS = 4  # per pod: the emulator's ng4 runs the gang as one job of 2 nodes
HOMECOMING_SECONDS = 2
WAIT_SECONDS = 180.0
HELD_QUEUE_SECONDS = 600.0
NODE_QUEUE_SECONDS = 0.5  # demo.EMULATOR_ARGS: what the module's emulator runs with otherwise
MEASURED: dict[str, float] = {}


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def homecoming(
    controller: None, installed_addon: install.Installed, control_plane: controlplane.ControlPlane
) -> Iterator[None]:
    """The installed controller with homecoming on, looked at every 2 s."""
    turn_homecoming_on(control_plane, every_seconds=HOMECOMING_SECONDS, replicas=len(installed_addon.pods))
    yield


@pytest.fixture
def node_gpus(control_plane: controlplane.ControlPlane, real_node: node.RealNode) -> Iterator[Callable[[int], None]]:
    """Sets the real node's GPUs (0: full); they are back to what the node has after the test."""

    def set_gpus(count: int) -> None:
        value = {GPU: str(count)}
        patch = {"status": {"capacity": value, "allocatable": value}}
        control_plane.kubectl("patch", "node", real_node.name, "--subresource=status", "-p", json.dumps(patch))

    try:
        yield set_gpus
    finally:
        set_gpus(real_node.settings.gpus)


@pytest.fixture
def held_queue(node_emulator: addons.EmulatorProcess) -> Iterator[None]:
    """JARVICE keeps the jobs submitted from now on queued (SUBMITTED) for ten minutes."""
    _post(node_emulator.url + "/_emulator/config", {"queue_seconds": HELD_QUEUE_SECONDS})
    try:
        yield
    finally:
        _post(node_emulator.url + "/_emulator/config", {"queue_seconds": NODE_QUEUE_SECONDS})


# --- helpers -------------------------------------------------------------------------------------


def _post(url: str, body: Any) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def _create_job(
    plane: controlplane.ControlPlane,
    namespace: str,
    node_emulator: addons.EmulatorProcess,
    *,
    command: str,
    annotations: dict[str, str] | None = None,
    backoff_limit: int = 6,
    parallelism: int = 1,
) -> str:
    name = f"train-{uuid.uuid4().hex[:6]}"
    template = pod_body("", app_container(node_emulator, command, gpus=1), gated=False)
    del template["metadata"]["name"]
    template["metadata"]["annotations"] = dict(annotations or {})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }
    plane.kubectl("-n", namespace, "create", "-f", "-", input=json.dumps(job))
    return name


def _job_pods(plane: controlplane.ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.read("pods", namespace=namespace, labels=f"job-name={job}")["items"]
    return sorted(items, key=lambda pod: pod["metadata"]["creationTimestamp"])


def _jobs_of(node_emulator: addons.EmulatorProcess, pod_uids: set[str]) -> list[dict[str, Any]]:
    return [job for uid in sorted(pod_uids) for job in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=uid)]


def _succeeded(plane: controlplane.ControlPlane, namespace: str, job: str) -> bool:
    return (plane.read("job", job, namespace=namespace)["status"].get("succeeded") or 0) >= 1


def _events(plane: controlplane.ControlPlane, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},reason={reason}"
    items: list[dict[str, Any]] = plane.read("events", namespace=namespace, fields=selector)["items"]
    return items


# --- waiting before bursting ---------------------------------------------------------------------


def test_a_job_pod_on_a_full_cluster_waits_then_bursts_at_its_deadline(
    homecoming: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    node_gpus: Callable[[int], None],
) -> None:
    """burst-after 30s, no local GPU: no JARVICE job for the first 25 s, burst by 90 s, completed remotely."""
    node_gpus(0)
    began = time.monotonic()
    job = _create_job(
        control_plane,
        ns,
        node_emulator,
        command='echo "trained remotely"',
        annotations={contract.ANNOTATION_BURST_AFTER: f"{BURST_AFTER_SECONDS}s"},
    )
    (first,) = demo.wait_for(lambda: _job_pods(control_plane, ns, job), what="the Job's first pod", timeout=30)
    notes = annotations_of(first)
    assert notes[contract.ANNOTATION_DECISION] == "local", notes
    assert notes.get(contract.ANNOTATION_BURST_DEADLINE), notes
    assert "waits for a local node until" in notes[contract.ANNOTATION_REASON], notes
    seen: set[str] = {first["metadata"]["uid"]}
    while time.monotonic() - began < BURST_AFTER_SECONDS - 5:  # the whole wait: a pod, no job on JARVICE
        seen |= {pod["metadata"]["uid"] for pod in _job_pods(control_plane, ns, job)}
        assert _jobs_of(node_emulator, seen) == [], "a JARVICE job before the deadline"
        time.sleep(1)
    assert seen == {first["metadata"]["uid"]}, "the waiting pod was replaced before its deadline"

    def burst_pod() -> dict[str, Any] | None:
        pods = _job_pods(control_plane, ns, job)
        decided = [p for p in pods if annotations_of(p).get(contract.ANNOTATION_DECISION) == "remote"]
        return decided[0] if decided else None

    remaining = BURST_AFTER_SECONDS + 60 - (time.monotonic() - began)
    second = demo.wait_for(burst_pod, what="the replacement decided remote", timeout=remaining)
    MEASURED["created_to_burst_s"] = round(time.monotonic() - began, 1)
    assert "its Job waited until" in annotations_of(second)[contract.ANNOTATION_BURST_AFTER_IGNORED]
    demo.wait_for(lambda: _succeeded(control_plane, ns, job), what="the Job complete", timeout=WAIT_SECONDS)
    assert "trained remotely" in control_plane.kubectl("-n", ns, "logs", second["metadata"]["name"]).stdout
    uids = {pod["metadata"]["uid"] for pod in _job_pods(control_plane, ns, job)} | seen
    assert [j["status"] for j in _jobs_of(node_emulator, uids)] == ["COMPLETED"]  # one job, the replacement's
    (event,) = _events(control_plane, ns, job, "NimbixBurstAfterWait")
    assert first["metadata"]["name"] in event["message"]
    print(f"\nburst-after {BURST_AFTER_SECONDS}s: created -> burst {MEASURED['created_to_burst_s']}s")


def test_a_backoff_limit_0_job_that_waited_in_vain_completes_on_its_burst_and_counts_no_failure(
    homecoming: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    held_gpus: list[str],
) -> None:
    """The examples' backoffLimit 0 with burst-after 20s, every local GPU held by a plain pod: the webhook
    gave the Job the rule ignoring evictions, the controller evicted the waiting pod at its deadline, and the
    Job completes on its burst with no failure counted (a delete used to fail it: nothing ran anywhere)."""
    job = _create_job(
        control_plane,
        ns,
        node_emulator,
        command='echo "trained remotely"',
        annotations={contract.ANNOTATION_BURST_AFTER: "20s"},
        backoff_limit=0,
    )
    rules = control_plane.read("job", job, namespace=ns)["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    (first,) = demo.wait_for(lambda: _job_pods(control_plane, ns, job), what="the Job's first pod", timeout=30)
    assert annotations_of(first).get(contract.ANNOTATION_BURST_DEADLINE), annotations_of(first)
    demo.wait_for(lambda: _succeeded(control_plane, ns, job), what="the Job complete", timeout=WAIT_SECONDS)
    status = control_plane.read("job", job, namespace=ns)["status"]
    assert not status.get("failed"), status
    pods = _job_pods(control_plane, ns, job)
    (burst,) = [p for p in pods if annotations_of(p).get(contract.ANNOTATION_DECISION) == "remote"]
    assert "trained remotely" in control_plane.kubectl("-n", ns, "logs", burst["metadata"]["name"]).stdout
    (event,) = _events(control_plane, ns, job, "NimbixBurstAfterWait")
    assert "costs the Job no retry" in event["message"]


def test_every_pod_of_a_parallel_job_that_waited_in_vain_runs(
    homecoming: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    held_gpus: list[str],
) -> None:
    """4 pods, burst-after 20s, every local GPU held by a plain pod: all four wait until the one deadline, are
    evicted (no re-burst cap holds the fourth back) and complete on their bursts; backoffLimit 0, no failure
    counted."""
    began = time.monotonic()
    job = _create_job(
        control_plane,
        ns,
        node_emulator,
        command='echo "one of four"',
        annotations={contract.ANNOTATION_BURST_AFTER: "20s"},
        backoff_limit=0,
        parallelism=4,
    )
    demo.wait_for(
        lambda: (control_plane.read("job", job, namespace=ns)["status"].get("succeeded") or 0) == 4,
        what="every pod of the Job complete",
        timeout=WAIT_SECONDS + 120,
    )
    print(f"\n4-pod parallel Job, burst-after 20s: created -> every pod complete {time.monotonic() - began:.1f}s")
    status = control_plane.read("job", job, namespace=ns)["status"]
    assert not status.get("failed"), status
    assert len(_events(control_plane, ns, job, "NimbixBurstAfterWait")) == 4
    assert _events(control_plane, ns, job, "NimbixReBurstCapReached") == []


def test_gpus_freed_within_the_wait_run_the_pod_locally_with_no_jarvice_job(
    homecoming: None,
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    node_gpus: Callable[[int], None],
) -> None:
    """burst-after 30s, the local GPUs freed after 10 s: it runs here, and nothing is ever submitted."""
    node_gpus(0)
    job = _create_job(
        control_plane,
        ns,
        node_emulator,
        command='echo "trained locally"',
        annotations={contract.ANNOTATION_BURST_AFTER: f"{BURST_AFTER_SECONDS}s"},
    )
    (first,) = demo.wait_for(lambda: _job_pods(control_plane, ns, job), what="the Job's first pod", timeout=30)
    assert annotations_of(first).get(contract.ANNOTATION_BURST_DEADLINE), annotations_of(first)
    time.sleep(10)
    node_gpus(1)
    demo.wait_for(lambda: _succeeded(control_plane, ns, job), what="the Job complete", timeout=WAIT_SECONDS)
    pods = _job_pods(control_plane, ns, job)
    assert [p["metadata"]["uid"] for p in pods] == [first["metadata"]["uid"]]  # never replaced
    assert pods[0]["spec"]["nodeName"] == real_node.name
    assert "trained locally" in control_plane.kubectl("-n", ns, "logs", pods[0]["metadata"]["name"]).stdout
    assert _jobs_of(node_emulator, {first["metadata"]["uid"]}) == []
    assert _events(control_plane, ns, job, "NimbixBurstAfterWait") == []


def test_an_indexed_job_gang_on_a_full_cluster_waits_as_one_then_bursts_as_one_multi_node_job(
    homecoming: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    node_gpus: Callable[[int], None],
    fault_matrix: FaultMatrix,
) -> None:
    """burst-after 30s on a 2-pod Indexed Job, no local GPU: both pods wait with one deadline, no JARVICE
    job for the first 25 s, then the gang is replaced whole and bursts as one job of 2 nodes by 90 s."""
    node_gpus(0)
    probe = pod_body(f"probe-{uuid.uuid4().hex[:6]}", app_container(node_emulator, "true", gpus=1), gated=False)
    wait_admitted_as(control_plane, ns, probe, decision="remote", what="the real node's GPUs taken away")
    name = f"ddp-{uuid.uuid4().hex[:6]}"
    body = real_node_indexed_job(
        name, app_container(node_emulator, 'echo "gang ran remotely"', gpus=GANG_GPUS), labels={"task-type": "Nimbix"}
    )
    body["spec"]["backoffLimit"] = 6  # each replaced pod counts as one of the Job's failures
    body["spec"]["template"]["metadata"]["annotations"] = {
        contract.ANNOTATION_BURST_AFTER: f"{GANG_BURST_AFTER_SECONDS}s"
    }
    began = time.monotonic()
    created = control_plane.kubectl("-n", ns, "create", "-o", "json", "-f", "-", input=json.dumps(body)).stdout
    gang = str(json.loads(created)["metadata"]["uid"])  # the gang's identity: its Job's UID
    waiting = demo.wait_for(
        lambda: pods if len(pods := _job_pods(control_plane, ns, name)) == 2 else None,
        what="the gang's two pods",
        timeout=30,
    )
    deadlines = set()
    for pod in waiting:
        notes = annotations_of(pod)
        assert (notes[contract.ANNOTATION_DECISION], notes[contract.ANNOTATION_GANG]) == ("local", gang), notes
        assert "its gang waits for local nodes until" in notes[contract.ANNOTATION_REASON], notes
        deadlines.add(notes[contract.ANNOTATION_BURST_DEADLINE])
    assert len(deadlines) == 1, deadlines  # one deadline for the whole gang
    seen = {pod["metadata"]["uid"] for pod in waiting}
    while time.monotonic() - began < GANG_BURST_AFTER_SECONDS - 5:  # the wait: its pods, no job on JARVICE
        seen |= {pod["metadata"]["uid"] for pod in _job_pods(control_plane, ns, name)}
        assert demo.fetch_emulator_jobs(node_emulator.url, pod_uid=gang) == [], "a gang's job before the deadline"
        assert _jobs_of(node_emulator, seen) == [], "a JARVICE job before the deadline"
        time.sleep(1)
    assert seen == {pod["metadata"]["uid"] for pod in waiting}, "a waiting pod was replaced before the deadline"

    def burst_pods() -> list[dict[str, Any]] | None:
        pods = _job_pods(control_plane, ns, name)
        burst = [p for p in pods if annotations_of(p).get(contract.ANNOTATION_DECISION) == "remote"]
        return burst if len(burst) == 2 else None

    replacements = demo.wait_for(
        burst_pods, what="the gang's replacements decided remote", timeout=90 - (time.monotonic() - began)
    )
    MEASURED["gang_created_to_burst_s"] = round(time.monotonic() - began, 1)
    assert not seen & {pod["metadata"]["uid"] for pod in replacements}, "a waiting pod burst in place"
    ranks = sorted(annotations_of(pod)[contract.ANNOTATION_GANG_RANK] for pod in replacements)
    assert ranks == ["0", "1"] and {annotations_of(pod)[contract.ANNOTATION_GANG] for pod in replacements} == {gang}
    demo.wait_for(
        lambda: (control_plane.read("job", name, namespace=ns)["status"].get("succeeded") or 0) == 2,
        what="the gang's Job complete",
        timeout=WAIT_SECONDS,
    )
    jobs = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=gang) + _jobs_of(node_emulator, seen)
    fault_matrix.record(  # held to the goal there: one job for the whole gang, never two, none billing late
        Row(
            fault=f"a 2-pod gang that waited in vain (burst-after {GANG_BURST_AFTER_SECONDS}s): replaced, burst as one",
            submitted=len(jobs),
            completed=sum(j["status"] == "COMPLETED" for j in jobs),
            billing_late=sum(j["status"] not in ("COMPLETED", "TERMINATED") for j in jobs),
            note=f"burst as one 2-node job {MEASURED['gang_created_to_burst_s']}s after the Job was created",
        )
    )
    assert [job["status"] for job in jobs] == ["COMPLETED"]  # the pods that waited submitted nothing
    (submission,) = submissions(node_emulator, f"k8s-{env(replacements[0])['NIMBIX_BURST_CLUSTER']}.{gang}-1")
    assert submission["body"]["machine"]["nodes"] == 2
    (event,) = _events(control_plane, ns, name, "NimbixBurstAfterWait")
    assert "of a gang of 2 pods waited for local nodes" in event["message"]
    print(f"\ngang burst-after {GANG_BURST_AFTER_SECONDS}s: created -> burst {MEASURED['gang_created_to_burst_s']}s")


# --- coming home while still queued --------------------------------------------------------------


def test_a_burst_job_pod_held_submitted_comes_home_when_local_gpus_free(
    homecoming: None,
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    node_gpus: Callable[[int], None],
    held_queue: None,
) -> None:
    """Its job ends TERMINATED without ever running, and the replacement completes on the local node."""
    node_gpus(0)
    job = _create_job(control_plane, ns, node_emulator, command='echo "came home"')
    (first,) = demo.wait_for(lambda: _job_pods(control_plane, ns, job), what="the Job's first pod", timeout=30)
    first_uid = first["metadata"]["uid"]
    assert annotations_of(first)[contract.ANNOTATION_DECISION] == "remote", annotations_of(first)
    demo.wait_for(
        lambda: [j["status"] for j in _jobs_of(node_emulator, {first_uid})] == ["SUBMITTED"],
        what="its JARVICE job held SUBMITTED",
        timeout=60,
    )
    freed = time.monotonic()
    node_gpus(1)

    def replacement() -> dict[str, Any] | None:
        pods = [p for p in _job_pods(control_plane, ns, job) if p["metadata"]["uid"] != first_uid]
        return pods[0] if pods else None

    second = demo.wait_for(replacement, what="the pod's replacement", timeout=60)
    MEASURED["freed_to_replaced_s"] = round(time.monotonic() - freed, 1)
    assert annotations_of(second)[contract.ANNOTATION_DECISION] == "local", annotations_of(second)
    demo.wait_for(lambda: _succeeded(control_plane, ns, job), what="the Job complete", timeout=WAIT_SECONDS)
    assert demo.read_pod(control_plane, ns, second["metadata"]["name"])["spec"]["nodeName"] == real_node.name
    assert "came home" in control_plane.kubectl("-n", ns, "logs", second["metadata"]["name"]).stdout
    demo.wait_for(
        lambda: [j["status"] for j in _jobs_of(node_emulator, {first_uid})] == ["TERMINATED"],
        what="the held job terminated",
        timeout=30,
    )
    (held,) = _jobs_of(node_emulator, {first_uid})
    assert held["pid"] is None, "the held job ran"  # the emulator starts a process only when a job runs
    assert _jobs_of(node_emulator, {second["metadata"]["uid"]}) == []
    (event,) = _events(control_plane, ns, job, "NimbixCameHome")
    assert first["metadata"]["name"] in event["message"]

    # Exactly once: one homecoming, one job ever, and it never ran. The Job is complete (waited for above), so
    # no pod of it is left to come home: nothing to wait for (a fixed sleep of three controller rounds stood here).
    uids = {pod["metadata"]["uid"] for pod in _job_pods(control_plane, ns, job)} | {first_uid}
    submitted = _jobs_of(node_emulator, uids)
    row = {
        "fault": "burst job held SUBMITTED, local GPUs freed (homecoming)",
        "submitted": len(submitted),
        "completed": sum(j["status"] == "COMPLETED" for j in submitted),
        "billing late": sum(j["status"] not in ("TERMINATED", "COMPLETED") for j in submitted),
        "ran": sum(j["pid"] is not None for j in submitted),
    }
    print(
        f"\nmoney-safety row | {row['fault']} | submitted {row['submitted']} | completed {row['completed']} |"
        f" billing late {row['billing late']} | ran {row['ran']} | freed -> replaced {MEASURED['freed_to_replaced_s']}s"
    )
    assert (row["submitted"], row["completed"], row["billing late"], row["ran"]) == (1, 0, 0, 0)


@pytest.fixture
def held_gpus(control_plane: controlplane.ControlPlane, real_node: node.RealNode, ns: str) -> Iterator[list[str]]:
    """The real node's GPUs held by plain pods of one GPU each (their names); all deleted after the test."""
    names = [f"holder-{index}" for index in range(real_node.settings.gpus)]
    items = [gpu_holder(name, gpus=1) for name in names]
    control_plane.kubectl(
        "-n", ns, "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )

    def all_running() -> bool:
        pods = control_plane.read("pods", namespace=ns)["items"]
        running = {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"}
        return set(names) <= running

    demo.wait_for(all_running, what="the holders Running on the real node", timeout=120)
    try:
        yield names
    finally:
        control_plane.kubectl("-n", ns, "delete", "pod", "--ignore-not-found", "--wait", *names)


def test_one_freed_gpu_brings_home_exactly_one_of_two_queued_backoff_limit_0_jobs_and_both_complete(
    homecoming: None,
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    held_gpus: list[str],
    held_queue: None,
) -> None:
    """Every GPU held by plain pods, two 1-GPU Jobs (backoffLimit 0) burst and held SUBMITTED; one holder
    deleted: the oldest queued comes home alone (the other's pod and job are left as they are while the
    freed GPU is taken), and when it completes and gives the GPU back the other comes home: both Jobs
    complete, neither counts a failure, and neither JARVICE job ever ran."""
    probe = pod_body(f"probe-{uuid.uuid4().hex[:6]}", app_container(node_emulator, "true", gpus=1), gated=False)
    wait_admitted_as(control_plane, ns, probe, decision="remote", what="the holders' GPUs counted")
    jobs = [
        _create_job(control_plane, ns, node_emulator, command='sleep 20; echo "came home"', backoff_limit=0)
        for _ in range(2)
    ]
    firsts = [
        demo.wait_for(partial(_job_pods, control_plane, ns, job), what="a Job's pod", timeout=30)[0] for job in jobs
    ]
    uids = [pod["metadata"]["uid"] for pod in firsts]
    assert [annotations_of(p)[contract.ANNOTATION_DECISION] for p in firsts] == ["remote", "remote"]
    demo.wait_for(
        lambda: [j["status"] for j in _jobs_of(node_emulator, set(uids))] == ["SUBMITTED"] * 2,
        what="both JARVICE jobs held SUBMITTED",
        timeout=60,
    )
    numbers = {uid: _jobs_of(node_emulator, {uid})[0]["number"] for uid in uids}
    home_job, other_job = jobs if numbers[uids[0]] < numbers[uids[1]] else jobs[::-1]  # the oldest queued first
    other_uid = uids[jobs.index(other_job)]
    control_plane.kubectl("-n", ns, "delete", "pod", "--wait", held_gpus[0])

    demo.wait_for(
        lambda: _events(control_plane, ns, home_job, "NimbixCameHome"), what="the oldest queued came home", timeout=60
    )
    # While the one freed GPU runs the pod that came home (20 s), the other Job's pod is left where it is; it
    # may come home only once that pod has finished and given the GPU back. Each look reads the other Job
    # first and its Event after (no Event yet: what was read was untouched), and the pod that came home after
    # an Event (had it still run when we looked, it ran when the other came home).
    until = time.monotonic() + WAIT_SECONDS
    while not _succeeded(control_plane, ns, home_job):
        assert time.monotonic() < until, f"the Job {home_job} that came home did not complete"
        pods = [p["metadata"]["uid"] for p in _job_pods(control_plane, ns, other_job)]
        queued = [j["status"] for j in _jobs_of(node_emulator, {other_uid})]
        if _events(control_plane, ns, other_job, "NimbixCameHome"):
            local = [p for p in _job_pods(control_plane, ns, home_job) if p["metadata"]["uid"] not in uids]
            phases = [p["status"].get("phase") for p in local]
            assert phases and set(phases) <= {"Succeeded", "Failed"}, f"a second pod came home for one GPU: {phases}"
            break
        assert pods == [other_uid], "the other Job's pod was moved"
        assert queued == ["SUBMITTED"], queued
        time.sleep(1)
    for job in jobs:
        demo.wait_for(partial(_succeeded, control_plane, ns, job), what=f"Job {job} complete", timeout=WAIT_SECONDS)
        status = control_plane.read("job", job, namespace=ns)["status"]
        assert not status.get("failed"), status
        (event,) = _events(control_plane, ns, job, "NimbixCameHome")
        assert firsts[jobs.index(job)]["metadata"]["name"] in event["message"]
        local = [p for p in _job_pods(control_plane, ns, job) if p["metadata"]["uid"] not in uids]
        assert [p["spec"]["nodeName"] for p in local] == [real_node.name]
        assert "came home" in control_plane.kubectl("-n", ns, "logs", local[0]["metadata"]["name"]).stdout
    demo.wait_for(
        lambda: [j["status"] for j in _jobs_of(node_emulator, set(uids))] == ["TERMINATED"] * 2,
        what="both held jobs terminated",
        timeout=30,
    )
    assert [j["pid"] for j in _jobs_of(node_emulator, set(uids))] == [None, None], "a held job ran"
