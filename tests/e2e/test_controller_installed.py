"""The burst controller as a user runs it: installed with `kubectl apply -k devplatform/overlay` (two
replicas in the cluster, beside the webhook's two, on the real node), acting on pods the kubelet runs
and on the JARVICE emulator's jobs (the emulator listens on the node's gateway, where pods reach it).

The module configures the installed controller as docs/controller.md says a user does: the Secret
`nimbix-burst-controller-jarvice` (the reaper's account), and shorter thresholds with `kubectl set env`
(a rollout of the Deployment). The GPUs that "vanish" are the real node's: its capacity and
allocatable `nvidia.com/gpu` are lowered to 0, as when a device plugin reports them unhealthy.

A pod decided local would be bound by kube-scheduler at once; a scheduling gate holds it until its
GPUs are gone, and the test removes the gate, as a queueing controller (Kueue) would. The Job's
template carries the gate too, so the test also releases the replacement.

Every test that makes the controller act checks that only the Lease holder counted it; the last one
checks every replica's counters once more.
"""

from __future__ import annotations

import calendar
import json
import os
import signal
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install
from tests.support.gpus import GPU
from tests.support.installed_controller import (
    BUDGET,
    CONTROLLER,
    ORPHAN_GRACE_SECONDS,
    ORPHAN_INTERVAL_SECONDS,
    STRANDED_SECONDS,
    annotations_of,
    app_container,
    controller_leader,
    controller_pods,
    create_pod,
    find_pod,
    pod_body,
    wait_admitted_as,
)
from tests.support.real_node_pods import runner_pid, wait_log

# About replicas: only the controller's Lease holder acts; the follower's counters stay at zero.
pytestmark = pytest.mark.addon_replicas(2)

ACTIONS = (
    "nimbix_burst_controller_rebursts_total",
    "nimbix_burst_controller_stranded_noted_total",
    "nimbix_burst_controller_orphans_terminated_total",
)
WAIT_SECONDS = 120.0
UNSCHEDULABLE = ("PodScheduled", "False", "Unschedulable")
MEASURED: dict[str, list[float]] = {"stranded_to_deleted_s": [], "stranded_to_replaced_s": [], "orphan_s": []}


# --- fixtures ------------------------------------------------------------------------------------


# --- helpers -------------------------------------------------------------------------------------


def _actions(pod: dict[str, Any]) -> dict[str, float]:
    """The action counters (summed over their labels) of one replica, read from its /metrics at the
    pod IP (the host reaches pods through the node's bridge)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{pod['status']['podIP']}:8080/metrics", timeout=5) as response:
        text = response.read().decode()
    counts = dict.fromkeys(ACTIONS, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in counts:
            counts[name] += float(line.rsplit(" ", 1)[1])
    return counts


def _assert_only_the_leader_counted(plane: controlplane.ControlPlane, metric: str) -> None:
    """The action just taken is in the Lease holder's counter, and none of any action in the other's."""
    leader = controller_leader(plane)
    counts = {pod["metadata"]["name"]: _actions(pod) for pod in controller_pods(plane)}
    assert len(counts) == 2 and leader in counts, (leader, counts)
    (follower,) = [name for name in counts if name != leader]
    assert counts[leader][metric] >= 1, counts
    assert all(value == 0 for value in counts[follower].values()), counts


def _unschedulable_since(pod: dict[str, Any]) -> float | None:
    assert not pod["spec"].get("nodeName"), f"bound to {pod['spec']['nodeName']}: the GPUs were not gone in time"
    for condition in pod["status"].get("conditions") or ():
        if (condition["type"], condition["status"], condition.get("reason")) == UNSCHEDULABLE:
            return float(calendar.timegm(time.strptime(condition["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")))
    return None


def _release(plane: controlplane.ControlPlane, namespace: str, name: str) -> None:
    """Remove the scheduling gate: kube-scheduler now tries the pod."""
    patch = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])
    plane.kubectl("-n", namespace, "patch", "pod", name, "--type=json", "-p", patch)


def _events(plane: controlplane.ControlPlane, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},reason={reason}"
    items: list[dict[str, Any]] = plane.read("events", namespace=namespace, fields=selector)["items"]
    return items


def _job_status(node_emulator: addons.EmulatorProcess, pod_uid: str) -> list[str]:
    return [str(job["status"]) for job in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod_uid)]


# --- tests ---------------------------------------------------------------------------------------


def test_gpus_vanish_under_a_local_job_pod_and_a_bare_pod(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> None:
    """The Job's pod is deleted once and its replacement bursts and completes on JARVICE; the bare pod
    is annotated and gets an Event, and stays."""
    job_name = f"train-{uuid.uuid4().hex[:6]}"
    template = pod_body("", app_container(node_emulator, 'echo "trained remotely"', gpus=1), gated=True)
    del template["metadata"]["name"]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name},
        "spec": {"backoffLimit": 6, "template": {"metadata": template["metadata"], "spec": template["spec"]}},
    }
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(job))
    create_pod(control_plane, ns, pod_body("bare", app_container(node_emulator, "echo never runs", gpus=1), gated=True))

    def job_pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = control_plane.read("pods", namespace=ns, labels=f"job-name={job_name}")["items"]
        return items

    (first,) = demo.wait_for(job_pods, what="the Job's first pod", timeout=30)
    first_name, first_uid = first["metadata"]["name"], first["metadata"]["uid"]
    bare = find_pod(control_plane, ns, "bare")
    assert bare is not None
    assert annotations_of(first)["nimbix-burst.io/decision"] == "local", annotations_of(first)
    assert annotations_of(bare)["nimbix-burst.io/decision"] == "local", annotations_of(bare)

    gpus_gone()
    _release(control_plane, ns, first_name)
    _release(control_plane, ns, "bare")
    stuck = demo.wait_for(
        lambda: (pod := find_pod(control_plane, ns, first_name)) is not None and _unschedulable_since(pod),
        what="the Job's pod Unschedulable",
        timeout=30,
    )

    def first_deleted() -> bool:
        pod = find_pod(control_plane, ns, first_name)
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    demo.wait_for(first_deleted, what="the stranded Job pod deleted", timeout=STRANDED_SECONDS + 30)
    deleted_after = time.time() - stuck
    second = demo.wait_for(
        lambda: next((p for p in job_pods() if p["metadata"]["uid"] != first_uid), None),
        what="the replacement pod",
        timeout=60,
    )
    replaced_after = time.time() - stuck
    MEASURED["stranded_to_deleted_s"].append(round(deleted_after, 1))
    MEASURED["stranded_to_replaced_s"].append(round(replaced_after, 1))
    assert deleted_after >= STRANDED_SECONDS - 1  # lastTransitionTime has whole seconds
    assert annotations_of(second)["nimbix-burst.io/decision"] == "remote", annotations_of(second)
    _release(control_plane, ns, second["metadata"]["name"])
    finished = demo.wait_for(
        lambda: (control_plane.read("job", job_name, namespace=ns)["status"].get("succeeded") or 0) >= 1,
        what="the Job complete",
        timeout=WAIT_SECONDS,
    )
    assert finished
    assert "trained remotely" in control_plane.kubectl("-n", ns, "logs", second["metadata"]["name"]).stdout

    # Exactly once: past another threshold, one re-burst, one submission, two pods ever.
    time.sleep(STRANDED_SECONDS + 3)
    assert {p["metadata"]["uid"] for p in job_pods()} == {second["metadata"]["uid"]}
    assert _job_status(node_emulator, first_uid) == []
    assert _job_status(node_emulator, second["metadata"]["uid"]) == ["COMPLETED"]
    (event,) = _events(control_plane, ns, job_name, "NimbixReBurst")
    assert "re-burst 1 of 3" in event["message"] and first_name in event["message"]
    assert "NimbixReBurst" in control_plane.kubectl("-n", ns, "describe", "job", job_name).stdout

    # The bare pod: reported once, never deleted.
    still = find_pod(control_plane, ns, "bare")
    assert still is not None and still["metadata"]["uid"] == bare["metadata"]["uid"]
    assert not still["metadata"].get("deletionTimestamp")
    assert annotations_of(still).get("nimbix-burst.io/stranded-since")
    (noted,) = _events(control_plane, ns, "bare", "NimbixStranded")
    assert "not deleted (no owner)" in noted["message"]
    _assert_only_the_leader_counted(control_plane, "nimbix_burst_controller_rebursts_total")
    _assert_only_the_leader_counted(control_plane, "nimbix_burst_controller_stranded_noted_total")
    print(
        f"\nreal node, installed controller: stranded -> deleted {deleted_after:.1f}s, -> replaced "
        f"{replaced_after:.1f}s (threshold {STRANDED_SECONDS}s; the Job controller's failure backoff is the rest)"
    )


def test_an_orphaned_job_is_terminated_within_grace_plus_interval(
    controller: None, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    """The runner killed with SIGKILL (it cannot cancel), its pod force-deleted: the reaper terminates
    the job. The job of a pod that still exists is left running."""
    for name in ("doomed", "kept"):
        app = app_container(
            node_emulator, f'echo "{name} started"; sleep 600', gpus=8
        )  # more than the node has: remote
        create_pod(control_plane, ns, pod_body(name, app, gated=False))
    uids = {}
    for name in ("doomed", "kept"):
        wait_log(control_plane, ns, name, f"{name} started")
        pod = find_pod(control_plane, ns, name)
        assert pod is not None and annotations_of(pod)["nimbix-burst.io/decision"] == "remote"
        uids[name] = pod["metadata"]["uid"]
        assert _job_status(node_emulator, uids[name]) == ["PROCESSING STARTING"]

    pid = demo.wait_for(lambda: runner_pid(uids["doomed"]), what="the doomed runner's PID", timeout=10)
    os.kill(pid, signal.SIGKILL)  # it cannot cancel; its Failed pod would be reaped too (test_money_safety.py)
    control_plane.kubectl("-n", ns, "delete", "pod", "doomed", "--force", "--grace-period=0")
    gone_at = time.monotonic()
    demo.wait_for(
        lambda: _job_status(node_emulator, uids["doomed"]) == ["TERMINATED"],
        what="the orphaned job TERMINATED",
        timeout=ORPHAN_GRACE_SECONDS + ORPHAN_INTERVAL_SECONDS + 60,
    )
    took = time.monotonic() - gone_at
    MEASURED["orphan_s"].append(round(took, 1))
    time.sleep(ORPHAN_GRACE_SECONDS + 2 * ORPHAN_INTERVAL_SECONDS)
    assert _job_status(node_emulator, uids["kept"]) == ["PROCESSING STARTING"]  # its pod exists: never touched

    leader = controller_leader(control_plane)
    logs = control_plane.kubectl("-n", install.NAMESPACE, "logs", leader).stdout
    lines = [json.loads(line) for line in logs.splitlines() if '"orphan job terminated"' in line]
    (line,) = [entry for entry in lines if entry["pod_uid"] == uids["doomed"]]
    assert uids["doomed"] in line["job_label"]
    # Terminated in the round its grace ended, by the controller's own clock: never early, and no whole
    # interval lost (how long the test saw it take, `took`, depends on the machine's load: a figure).
    assert ORPHAN_GRACE_SECONDS <= line["orphaned_s"] < ORPHAN_GRACE_SECONDS + ORPHAN_INTERVAL_SECONDS, line
    _assert_only_the_leader_counted(control_plane, "nimbix_burst_controller_orphans_terminated_total")
    assert node_emulator.runner_env()["JARVICE_APIKEY"] not in logs
    print(
        f"\nreal node, installed controller: orphan -> TERMINATED {took:.1f}s after the force delete "
        f"(grace {ORPHAN_GRACE_SECONDS}s + interval {ORPHAN_INTERVAL_SECONDS}s)"
    )


def test_a_budget_of_four_gpus_bursts_four_and_keeps_the_fifth_local(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> None:
    """With no local GPUs, every pod would burst: four 1-GPU pods do; the fifth is kept local with the
    warning kubectl prints, and the controller reports it (never deletes it) once it strands."""
    control_plane.kubectl("annotate", "namespace", ns, f"{BUDGET}=4", "--overwrite")
    gpus_gone()
    # The webhook reads no API on a review: wait until its watch has seen the node and the annotation.
    probe = app_container(node_emulator, "echo probe", gpus=1)
    wait_admitted_as(control_plane, ns, pod_body("seen-probe", probe, gated=False), decision="remote", what="no GPUs")
    over = app_container(node_emulator, "echo probe", gpus=5)
    wait_admitted_as(
        control_plane,
        ns,
        pod_body("seen-probe", over, gated=False),
        decision="local",
        warning="kept local by the burst budget",
        what="the namespace's budget of 4 GPUs",
    )
    warnings = {}
    for i in range(1, 6):
        body = pod_body(f"p{i}", app_container(node_emulator, f'echo "burst {i}"; sleep 120', gpus=1), gated=False)
        warnings[f"p{i}"] = create_pod(control_plane, ns, body)
    decisions = {}
    for name in warnings:
        pod = find_pod(control_plane, ns, name)
        assert pod is not None
        decisions[name] = annotations_of(pod)["nimbix-burst.io/decision"]
    assert decisions == {"p1": "remote", "p2": "remote", "p3": "remote", "p4": "remote", "p5": "local"}, decisions
    assert "kept local by the burst budget" in warnings["p5"], warnings["p5"]
    assert all("burst budget" not in warnings[f"p{i}"] for i in range(1, 5)), warnings
    fifth = find_pod(control_plane, ns, "p5")
    assert fifth is not None
    assert "4 of 4 remote GPUs in use" in annotations_of(fifth)["nimbix-burst.io/budget"]
    assert fifth["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"  # unchanged: it waits here
    for i in range(1, 5):  # the four really run on JARVICE
        wait_log(control_plane, ns, f"p{i}", f"burst {i}")
    (noted,) = demo.wait_for(
        lambda: _events(control_plane, ns, "p5", "NimbixStranded"),
        what="the fifth pod reported as stranded",
        timeout=STRANDED_SECONDS + 30,
    )
    assert "kept local by its namespace's burst budget" in noted["message"], noted["message"]
    still = find_pod(control_plane, ns, "p5")
    assert still is not None and not still["metadata"].get("deletionTimestamp")
    assert not still["spec"].get("nodeName")
    _assert_only_the_leader_counted(control_plane, "nimbix_burst_controller_stranded_noted_total")


def _annotate(plane: controlplane.ControlPlane, namespace: str, value: str, *, dry_run: bool = False) -> str:
    """`kubectl annotate namespace` with the budget; "" when accepted, else kubectl's error."""
    args = ["annotate", "namespace", namespace, f"{BUDGET}={value}", "--overwrite"]
    result = plane.kubectl(*args, *(["--dry-run=server"] if dry_run else []), check=False)
    return "" if result.returncode == 0 else result.stderr.strip()


def test_the_api_server_refuses_a_budget_that_is_not_a_whole_number(
    installed_addon: install.Installed, control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    """deploy/budget-policy.yaml: the ValidatingAdmissionPolicy installed by `apply -k`."""
    refused = {value: _annotate(control_plane, namespace, value) for value in ("four", "-1", "2.5", "1234567890", "")}
    accepted = {value: _annotate(control_plane, namespace, value) for value in ("4", " 12 ", "0")}
    assert accepted == dict.fromkeys(accepted, ""), accepted
    for value, error in refused.items():
        assert f'must be a whole number of GPUs >= 0 (0: nothing bursts), not "{value}"' in error, (value, error)
        assert "ValidatingAdmissionPolicy 'nimbix-burst-budget'" in error, error
    ns = control_plane.read("namespace", namespace)
    assert ns["metadata"]["annotations"][BUDGET] == "0"  # the last accepted value; no refused one landed

    # A bad value from before the policy does not block other updates of its namespace (only a value
    # being set or changed is checked): remove the binding, write one, put the binding back.
    binding = next(o for o in install.render_overlay(control_plane) if o["kind"] == "ValidatingAdmissionPolicyBinding")
    control_plane.kubectl("delete", "validatingadmissionpolicybinding", binding["metadata"]["name"])
    try:
        demo.wait_for(lambda: not _annotate(control_plane, namespace, "old typo"), what="the policy off", timeout=30)
    finally:
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(binding))
    demo.wait_for(
        lambda: _annotate(control_plane, namespace, "five", dry_run=True), what="the policy enforced", timeout=30
    )
    control_plane.kubectl("label", "namespace", namespace, "team=a")  # accepted: the old value is unchanged
    assert 'not "six"' in _annotate(control_plane, namespace, "six")


def test_the_controller_may_create_pods_only_as_dry_runs(
    installed_addon: install.Installed, control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    """deploy/controller.yaml: its pods `create` right (homecoming's dry runs) is confined by a
    ValidatingAdmissionPolicy: as the controller, a dry run is admitted and a real create refused."""
    controller = f"system:serviceaccount:{install.NAMESPACE}:{CONTROLLER}"
    body = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "as-the-controller"},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
        }
    )
    create = ("-n", namespace, "create", "-f", "-", f"--as={controller}")
    dry = control_plane.kubectl(*create, "--dry-run=server", input=body, check=False)
    assert dry.returncode == 0, dry.stderr
    real = control_plane.kubectl(*create, input=body, check=False)
    assert real.returncode != 0
    assert "creates pods only as dry runs" in real.stderr, real.stderr
    assert control_plane.kubectl("-n", namespace, "get", "pod", "as-the-controller", check=False).returncode != 0


def test_only_the_controller_leader_acted(controller: None, control_plane: controlplane.ControlPlane) -> None:
    """Every action so far is in the Lease holder's counters, none in the other's. Each acting test
    above checks its own action the same way (_assert_only_the_leader_counted), so this one stands
    alone too."""
    leader = controller_leader(control_plane)
    pods = controller_pods(control_plane)
    counts = {pod["metadata"]["name"]: _actions(pod) for pod in pods}
    print(f"\ncontroller replicas' actions (leader {leader}): {counts}\nmeasured: {MEASURED}")
    assert len(counts) == 2 and leader in counts
    (follower,) = [name for name in counts if name != leader]
    assert all(value == 0 for value in counts[follower].values()), counts
