"""The money-safety promise, proven by a fault matrix on the real node with the installed add-on.

The promise: every JARVICE job this cluster started is either followed by its pod or stopped; none runs
twice; no job this cluster did not start is ever touched; a namespace's jobs never hold more GPUs than
its budget counted; no job bills without a time limit.

One test per fault, driven through kubectl, the emulator's controls and signals to the processes the
real node runs (the runner, the kubelet, a webhook or controller replica). Each row records:
- submitted: JARVICE jobs that carry the pod's UID;
- completed: of those, the ones that ran to completion;
- billing late: jobs still running after their pod was gone (or could no longer follow them) for
  longer than grace + interval (+ the Lease takeover where the controller leader was killed);
- others stopped: jobs of another cluster or submitted by hand that anything stopped;
- promised twice: local decisions past the GPUs free;
- over budget: GPUs a namespace's jobs held past what its budget counted.

Each test records its row in the session's `fault_matrix` (tests/support/fault_matrix.py), which holds the row
to the goal at once (0 billed late, none run twice, 0 of others stopped, 0 promised twice, 0 over budget), so
every row passes or fails alone; the session's terminal summary prints the table of the rows that ran (it goes
into docs/money-safety.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install, node
from jarvice import contract, exitcodes
from tests.support import cgroups
from tests.support.fault_matrix import FaultMatrix, Row
from tests.support.gpus import GPU
from tests.support.installed_controller import (
    BUDGET,
    CONTROLLER,
    CONTROLLER_LEASE,
    CONTROLLER_SELECTOR,
    ORPHAN_GRACE_SECONDS,
    ORPHAN_INTERVAL_SECONDS,
    annotations_of,
    app_container,
    controller_leader,
    create_pod,
    find_pod,
    pod_body,
    wait_admitted_as,
)
from tests.support.real_node_pods import python_module_pids, runner_pid, wait_log
from tests.support.webhook_replicas import create_at_once

# About replicas: a killed webhook or controller leader is replaced by the other replica.
pytestmark = pytest.mark.addon_replicas(2)

# How late a job may stop after its pod could no longer follow it: the reaper's grace and interval, plus
# what the pod's status and the JARVICE list take to show it (a kubelet status update, a round's list).
SLACK_SECONDS = 10
REAP_BOUND = ORPHAN_GRACE_SECONDS + ORPHAN_INTERVAL_SECONDS + SLACK_SECONDS
# A killed controller leader is replaced after its Lease expires (deploy/controller.yaml: 15 s) and the
# new leader starts the grace period afresh.
CONTROLLER_LEASE_SECONDS = 15
WAIT_SECONDS = 120.0
LIVE = "PROCESSING STARTING"


@pytest.fixture(scope="module")
def reaper(controller: None, control_plane: controlplane.ControlPlane) -> None:
    """The installed controller restarted on this module's Secret: each module's emulator listens on a port
    of its own, and the controller reads its JARVICE credentials and URL at start (as docs/controller.md says)."""
    deployment = f"deployment/{CONTROLLER}"
    control_plane.kubectl("-n", install.NAMESPACE, "rollout", "restart", deployment)
    control_plane.kubectl("-n", install.NAMESPACE, "rollout", "status", deployment, "--timeout=180s")
    demo.wait_for(
        lambda: len(install.read_serving_pods(control_plane, CONTROLLER_SELECTOR)) == 2,
        what="two controller pods Ready",
        timeout=60,
    )
    demo.wait_for(lambda: controller_leader(control_plane), what="a controller leader", timeout=60)


# --- helpers -------------------------------------------------------------------------------------


def _jobs(emulator: addons.EmulatorProcess, pod_uid: str) -> list[dict[str, Any]]:
    return demo.fetch_emulator_jobs(emulator.url, pod_uid=pod_uid)


def _states(emulator: addons.EmulatorProcess, pod_uid: str) -> list[str]:
    return [str(job["status"]) for job in _jobs(emulator, pod_uid)]


def _post(url: str, body: Any) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def _faults(emulator: addons.EmulatorProcess, **faults: Any) -> None:
    _post(emulator.url + "/_emulator/faults", faults)


def _pid_of(module: str, *, env: str) -> int | None:
    """The PID (on this host) of `python -m <module>` whose environment holds `env` (e.g. POD_NAME=x)."""
    return next(python_module_pids(module, env=env), None)


def _wait_job_states(
    emulator: addons.EmulatorProcess, pod_uid: str, wanted: list[str], *, timeout: float, what: str
) -> float:
    """Waits until the pod's jobs are in `wanted`; returns how long that took."""
    began = time.monotonic()
    demo.wait_for(lambda: _states(emulator, pod_uid) == wanted, what=what, timeout=timeout)
    return time.monotonic() - began


def _running_remote(
    plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, namespace: str, name: str, **kwargs: Any
) -> str:
    """A burst pod running `sleep` on JARVICE; returns its UID once its job runs."""
    restart = kwargs.pop("restart", "Never")
    gpus = kwargs.pop("gpus", 8)  # more than the real node has: remote whatever else runs
    container = app_container(emulator, f'echo "{name} started"; sleep 600', gpus=gpus)
    container.setdefault("env", []).extend({"name": k, "value": v} for k, v in kwargs.pop("env", {}).items())
    body = pod_body(name, container, gated=False)
    body["spec"]["restartPolicy"] = restart
    create_pod(plane, namespace, body)
    wait_log(plane, namespace, name, f"{name} started")
    pod = find_pod(plane, namespace, name)
    assert pod is not None and annotations_of(pod)[contract.ANNOTATION_DECISION] == "remote", pod
    uid = str(pod["metadata"]["uid"])
    assert _states(emulator, uid) == [LIVE]
    return uid


def _phase(plane: controlplane.ControlPlane, namespace: str, name: str) -> str:
    pod = find_pod(plane, namespace, name)
    return "" if pod is None else str(pod["status"].get("phase") or "")


def _kill_runner(uid: str) -> None:
    pid = demo.wait_for(lambda: runner_pid(uid), what="the runner's PID", timeout=10)
    os.kill(pid, signal.SIGKILL)


_HOG = """
import sys, time
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()  # moved into the runner's cgroup meanwhile
chunks = []
while True:
    chunks.append(bytearray(16 << 20))  # touched on allocation: counted against the cgroup at once
    time.sleep(0.05)
"""


def _oom_kill_runner(uid: str) -> subprocess.Popen[str]:
    """The kernel's OOM killer, not a signal of ours: a process joins the runner's container cgroup and
    allocates past the container's memory limit; the runner is made the OOM killer's first choice
    (oom_score_adj 1000: raising it needs no privilege), so the kernel kills it. Returns the hog, for the
    caller to stop."""
    pid = demo.wait_for(lambda: runner_pid(uid), what="the runner's PID", timeout=10)
    Path(f"/proc/{pid}/oom_score_adj").write_text("1000\n")
    files = cgroups.find_memory_files(Path(f"/proc/{pid}/cgroup").read_text())
    assert files is not None, f"no memory cgroup for the runner (PID {pid})"
    cgroup = files.directory
    hog = subprocess.Popen([sys.executable, "-c", _HOG], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert hog.stdout is not None and hog.stdin is not None
    assert hog.stdout.readline().strip() == "ready"
    (cgroup / "cgroup.procs").write_text(f"{hog.pid}\n")
    hog.stdin.write("go\n")
    hog.stdin.flush()
    return hog


def _ended(plane: controlplane.ControlPlane, namespace: str, name: str, *, phases: tuple[str, ...]) -> dict[str, Any]:
    """The pod once its phase is one of `phases`."""
    pod: dict[str, Any] = demo.wait_for(
        lambda: (p := find_pod(plane, namespace, name)) is not None and p["status"].get("phase") in phases and p,
        what=f"pod {name} {' or '.join(phases)}",
        timeout=WAIT_SECONDS,
    )
    return pod


def _job_row(fault: str, emulator: addons.EmulatorProcess, pod: dict[str, Any], **extra: Any) -> Row:
    """A row for a pod that ran to its end: its jobs, how many completed, how many still run."""
    states = _states(emulator, pod["metadata"]["uid"])
    return Row(fault, len(states), states.count("COMPLETED"), states.count(LIVE), **extra)


def _wait_budget_and_no_gpus_seen(
    plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, namespace: str, *, budget: int
) -> None:
    """Until the webhook's watch has seen the real node without GPUs (a 1-GPU pod bursts) and the namespace's
    budget (a pod of budget + 1 GPUs is kept local by it)."""
    one = pod_body("seen-probe", app_container(emulator, "echo probe", gpus=1), gated=False)
    wait_admitted_as(plane, namespace, one, decision="remote", what="the real node without GPUs")
    over = pod_body("seen-probe", app_container(emulator, "echo probe", gpus=budget + 1), gated=False)
    wait_admitted_as(
        plane,
        namespace,
        over,
        decision="local",
        warning="kept local by the burst budget",
        what=f"the namespace's budget of {budget} GPUs",
    )


def _wait_terminated(
    emulator: addons.EmulatorProcess, pod_uid: str, *, bound: float = REAP_BOUND, what: str = "the job TERMINATED"
) -> float:
    """Waits (up to a minute past `bound`) until the pod's one job is TERMINATED; returns how long that took."""
    return _wait_job_states(emulator, pod_uid, ["TERMINATED"], timeout=bound + 60, what=what)


def _stopped_row(
    fault: str,
    emulator: addons.EmulatorProcess,
    pod_uid: str,
    *,
    late: float,
    bound: float = REAP_BOUND,
    over_budget: int = 0,
    note: str = "",
) -> Row:
    """A row for a pod whose job had to be stopped: its jobs, none completed, billing late when it stopped
    more than `bound` seconds after the pod could no longer follow it (`late`)."""
    submitted, billing_late = len(_jobs(emulator, pod_uid)), int(late > bound)
    return Row(fault, submitted, completed=0, billing_late=billing_late, over_budget=over_budget, note=note)


# --- the rows: the pod cannot follow its job any more ---------------------------------------------


def test_runner_sigkilled_under_restart_never_job_stopped_and_budget_held(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> None:
    """The pod stays `Failed`, its job would bill on: the reaper stops it. Meanwhile the namespace's
    budget (1 GPU) still counts it, so a second pod is kept local; once the job is gone, a third bursts."""
    control_plane.kubectl("annotate", "namespace", ns, f"{BUDGET}=1", "--overwrite")
    gpus_gone()
    _wait_budget_and_no_gpus_seen(control_plane, node_emulator, ns, budget=1)
    uid = _running_remote(control_plane, node_emulator, ns, "killed", gpus=1)
    _kill_runner(uid)
    demo.wait_for(lambda: _phase(control_plane, ns, "killed") == "Failed", what="the pod Failed", timeout=60)
    failed_at = time.monotonic()
    second = create_pod(
        control_plane, ns, pod_body("second", app_container(node_emulator, "echo second", gpus=1), gated=False)
    )
    second_pod = find_pod(control_plane, ns, "second")
    assert second_pod is not None
    held = annotations_of(second_pod)[contract.ANNOTATION_DECISION] == "local"
    took = _wait_terminated(node_emulator, uid)
    demo.wait_for(
        lambda: (
            annotations_of(find_pod(control_plane, ns, "killed") or {"metadata": {}}).get(contract.ANNOTATION_JOB_STATE)
            == contract.JOB_STATE_ENDED
        ),
        what="the pod marked job-state=ended",
        timeout=30,
    )
    wait_admitted_as(
        control_plane,
        ns,
        pod_body("seen-probe", app_container(node_emulator, "echo probe", gpus=1), gated=False),
        decision="remote",
        what="the killed pod's job ended (its GPU no longer counted against the budget)",
    )
    create_pod(control_plane, ns, pod_body("third", app_container(node_emulator, "echo third", gpus=1), gated=False))
    third = find_pod(control_plane, ns, "third")
    assert third is not None
    row = fault_matrix.record(
        _stopped_row(
            "runner SIGKILLed, restartPolicy Never (pod Failed, object kept)",
            node_emulator,
            uid,
            late=took,
            over_budget=0 if held else 1,
            note=f"stopped {time.monotonic() - failed_at:.0f}s after Failed",
        )
    )
    assert find_pod(control_plane, ns, "killed") is not None  # the object is kept: the reaper did not need it gone
    assert held, (second, annotations_of(second_pod))  # budget 1, still held by the killed pod's running job
    assert annotations_of(third)[contract.ANNOTATION_DECISION] == "remote", annotations_of(third)
    assert row.submitted == 1 and row.billing_late == 0, row


def test_runner_oom_killed_job_stopped(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    uid = _running_remote(control_plane, node_emulator, ns, "oom")
    hog = _oom_kill_runner(uid)
    try:
        demo.wait_for(lambda: _phase(control_plane, ns, "oom") == "Failed", what="the pod Failed", timeout=60)
    finally:
        hog.kill()
        hog.communicate(timeout=30)  # reaps it and closes its pipes
    pod = find_pod(control_plane, ns, "oom")
    assert pod is not None
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    took = _wait_terminated(node_emulator, uid)
    row = fault_matrix.record(
        _stopped_row(
            "runner OOM-killed (the kernel OOM killer in its container cgroup)",
            node_emulator,
            uid,
            late=took,
            note=f"container {terminated.get('reason')} exit {terminated.get('exitCode')}",
        )
    )
    assert terminated.get("exitCode") == 137, terminated
    assert row.submitted == 1 and row.billing_late == 0, row


def test_pod_force_deleted_job_stopped(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    uid = _running_remote(control_plane, node_emulator, ns, "forced")
    control_plane.kubectl("-n", ns, "delete", "pod", "forced", "--force", "--grace-period=0")
    took = _wait_terminated(node_emulator, uid)
    row = fault_matrix.record(_stopped_row("pod force-deleted", node_emulator, uid, late=took))
    assert row.submitted == 1 and row.billing_late == 0, row


def test_kubelet_stopped_pod_stuck_terminating_job_stopped(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    """The node's kubelet stops (SIGSTOP: as gone as a dead node, for the API server) while a burst pod
    runs; the pod is deleted and stays Terminating. Past its deletion deadline no runner can be trusted to
    follow the job (a kubelet that came back would SIGKILL it), so the reaper stops it."""
    uid = _running_remote(control_plane, node_emulator, ns, "stuck")
    (kubelet,) = [proc for proc in real_node.processes if proc.name == "kubelet"]
    os.kill(kubelet.pid, signal.SIGSTOP)
    try:
        control_plane.kubectl("-n", ns, "delete", "pod", "stuck", "--grace-period=1", "--wait=false")
        deadline_passed = time.monotonic() + 1
        took = _wait_terminated(node_emulator, uid)
        stuck = find_pod(control_plane, ns, "stuck")
    finally:
        os.kill(kubelet.pid, signal.SIGCONT)
    late = time.monotonic() - deadline_passed
    row = fault_matrix.record(
        _stopped_row(
            "the node's kubelet stopped (pod stuck Terminating)",
            node_emulator,
            uid,
            late=late,
            note=f"stopped {took:.0f}s after the delete",
        )
    )
    assert stuck is not None and stuck["metadata"].get("deletionTimestamp"), "the pod was not stuck Terminating"
    assert row.submitted == 1 and row.billing_late == 0, row
    demo.wait_for(
        lambda: find_pod(control_plane, ns, "stuck") is None, what="the pod gone once the kubelet is back", timeout=90
    )


# --- the rows: JARVICE misbehaves --------------------------------------------------------------------


def test_submit_answered_502_after_the_job_was_created_runs_once(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    _faults(node_emulator, status502_after_submit=1)
    try:
        body = pod_body("gateway", app_container(node_emulator, 'echo "ran once"', gpus=8), gated=False)
        create_pod(control_plane, ns, body)
        pod = _ended(control_plane, ns, "gateway", phases=("Succeeded", "Failed"))
    finally:
        _faults(node_emulator)
    row = fault_matrix.record(_job_row("submit answered 502 after the job was created", node_emulator, pod))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    assert "ran once" in control_plane.kubectl("-n", ns, "logs", "gateway").stdout
    assert row.submitted == 1 and row.completed == 1, row


def test_jarvice_unreachable_for_60s_mid_run_the_job_runs_once_to_its_end(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    command = 'echo "before"; sleep 75; echo "after"'
    create_pod(control_plane, ns, pod_body("outage", app_container(node_emulator, command, gpus=8), gated=False))
    wait_log(control_plane, ns, "outage", "before")
    _faults(node_emulator, drop=1_000_000)  # every API call's connection is dropped, unanswered
    time.sleep(60)
    _faults(node_emulator)
    pod = _ended(control_plane, ns, "outage", phases=("Succeeded", "Failed"))
    row = fault_matrix.record(_job_row("JARVICE unreachable for 60 s mid-run", node_emulator, pod))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    assert "after" in control_plane.kubectl("-n", ns, "logs", "outage").stdout
    assert row.submitted == 1 and row.completed == 1, row


def test_sigterm_while_the_runner_picks_up_an_inherited_job_stops_it(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    """The runner is killed and restarted (restartPolicy OnFailure); while the new one is still picking
    the job up (JARVICE's status endpoint failing), the pod is deleted: the inherited job is stopped."""
    # LOG_LEVEL=INFO: the runner says how it starts ("start": "pick_up"), which it logs only at INFO.
    uid = _running_remote(control_plane, node_emulator, ns, "inherit", restart="OnFailure", env={"LOG_LEVEL": "INFO"})
    _faults(node_emulator, status503=1_000_000, endpoints=["status"])
    try:
        _kill_runner(uid)

        def picking_up() -> bool:
            pod = find_pod(control_plane, ns, "inherit")
            statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
            if not statuses[0].get("restartCount") or "running" not in statuses[0].get("state", {}):
                return False
            logs = control_plane.read_log(ns, "inherit")
            return '"start": "pick_up"' in logs or '"start":"pick_up"' in logs

        demo.wait_for(picking_up, what="the restarted runner picking the job up", timeout=90)
        control_plane.kubectl("-n", ns, "delete", "pod", "inherit", "--wait=false")
        deleted_at = time.monotonic()
        demo.wait_for(lambda: _states(node_emulator, uid) == ["TERMINATED"], what="the job stopped", timeout=90)
        took = time.monotonic() - deleted_at
    finally:
        _faults(node_emulator)
    row = fault_matrix.record(
        _stopped_row(
            "SIGTERM while the runner picks up an inherited job",
            node_emulator,
            uid,
            late=took,
            bound=contract.MIN_TERMINATION_GRACE_SECONDS,
            note=f"stopped {took:.0f}s after the delete",
        )
    )
    assert row.submitted == 1 and row.billing_late == 0, row


# --- the rows: our own replicas fail ---------------------------------------------------------------------


def _webhook_leader(plane: controlplane.ControlPlane) -> str:
    return install.read_lease_holder(plane, install.LEASE)


def _webhook_ready(plane: controlplane.ControlPlane) -> int:
    return len(install.read_serving_pods(plane, install.APP_SELECTOR))


def test_webhook_leader_killed_while_24_pods_race_for_6_gpus(
    installed_addon: install.Installed,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    namespace: str,
    make_gpu_node: Callable[..., str],
) -> None:
    """24 one-GPU pods pinned to a node with 6 free GPUs, created at once; the webhook leader's process
    is SIGKILLed while they arrive. Never more than 6 decided local; the rest burst."""
    gpu_node = make_gpu_node(gpus=6)
    probe = {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU: "6"}}}
    wait_admitted_as(
        control_plane,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "seen-probe", "labels": {"task-type": "Nimbix"}},
            "spec": {"containers": [probe], "nodeSelector": {"kubernetes.io/hostname": gpu_node}},
        },
        decision="local",
        what=f"node {gpu_node} and its 6 GPUs",
    )
    leader = _webhook_leader(control_plane)
    pid = _pid_of("webhook", env=f"POD_NAME={leader}")
    assert pid is not None, f"no process for the webhook leader {leader}"
    bodies = []
    for i in range(24):
        container = {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU: "1"}}}
        bodies.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"race-{i}", "namespace": namespace, "labels": {"task-type": "Nimbix"}},
                "spec": {"containers": [container], "nodeSelector": {"kubernetes.io/hostname": gpu_node}},
            }
        )

    killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
    killer.start()
    created, errors = create_at_once(control_plane, bodies)
    killer.join()
    decisions: dict[str, int] = {}
    for pod in created:
        decision = annotations_of(pod).get(contract.ANNOTATION_DECISION, "unmutated")
        decisions[decision] = decisions.get(decision, 0) + 1
    row = fault_matrix.record(
        Row(
            "webhook leader SIGKILLed while 24 one-GPU pods race for 6 GPUs",
            submitted=0,
            completed=0,
            billing_late=0,
            promised_twice=max(0, decisions.get("local", 0) - 6),
            note=f"{decisions}; {len(errors)} create(s) refused",
        )
    )
    # An unmutated pod (failurePolicy Ignore while the killed replica's connections broke) was promised
    # nothing: kube-scheduler places it or it waits, as without the webhook.
    assert row.promised_twice == 0, (decisions, errors)
    demo.wait_for(lambda: _webhook_ready(control_plane) == install.REPLICAS, what="both replicas Ready", timeout=120)


def test_controller_leader_killed_while_an_orphan_waits_for_its_grace(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    uid = _running_remote(control_plane, node_emulator, ns, "orphan")
    _kill_runner(uid)  # it cannot cancel: only the reaper can stop the job
    control_plane.kubectl("-n", ns, "delete", "pod", "orphan", "--force", "--grace-period=0")
    leader = controller_leader(control_plane)
    pid = _pid_of("controller", env=f"POD_NAME={leader}")
    assert pid is not None, f"no process for the controller leader {leader}"
    os.kill(pid, signal.SIGKILL)
    bound = CONTROLLER_LEASE_SECONDS + REAP_BOUND
    took = _wait_terminated(node_emulator, uid, bound=bound, what="the orphan TERMINATED")
    new_leader = install.read_lease_holder(control_plane, CONTROLLER_LEASE)
    row = fault_matrix.record(
        _stopped_row(
            "controller leader SIGKILLed while an orphan waits for its grace",
            node_emulator,
            uid,
            late=took,
            bound=bound,
            note=f"stopped {took:.0f}s after the delete (Lease {CONTROLLER_LEASE_SECONDS}s + grace + interval)",
        )
    )
    assert row.submitted == 1 and row.billing_late == 0, (row, leader, new_leader)
    demo.wait_for(
        lambda: len(install.read_serving_pods(control_plane, CONTROLLER_SELECTOR)) == 2,
        what="both controller replicas Ready",
        timeout=120,
    )


# --- the rows: other people's jobs and the budget ------------------------------------------------------------


def _submit_by_hand(emulator: addons.EmulatorProcess, label: str) -> int:
    env = emulator.runner_env()
    body = {
        "app": env["APP_NAME"],
        "staging": False,
        "checkedout": False,
        "application": {"command": env.get("APP_COMMAND", "run"), "parameters": {"command": "sleep 600"}},
        "machine": {"type": "n0", "nodes": 1},
        "job_label": label,
        "user": {"username": env["JARVICE_USERNAME"], "apikey": env["JARVICE_APIKEY"]},
    }
    answer = _post(env["JARVICE_API_URL"].rstrip("/") + "/jarvice/submit", body)
    return int(answer["number"])


def _emulator_state(emulator: addons.EmulatorProcess, number: int) -> str:
    (job,) = [j for j in demo.fetch_emulator(emulator.url, "/_emulator/jobs") if int(j["number"]) == number]
    return str(job["status"])


def _our_cluster(plane: controlplane.ControlPlane) -> str:
    """The cluster identity the installed controller's reaper acts on (its cluster_info metric)."""
    prefix = 'nimbix_burst_controller_cluster_info{cluster="'
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def read() -> str:
        for pod in install.read_serving_pods(plane, CONTROLLER_SELECTOR):
            with opener.open(f"http://{pod['status']['podIP']}:8080/metrics", timeout=5) as response:
                for line in response.read().decode().splitlines():
                    if line.startswith(prefix):
                        return line.removeprefix(prefix).split('"', 1)[0]
        return ""

    cluster: str = demo.wait_for(read, what="the controller's cluster identity", timeout=60)
    return cluster


def _reap_an_orphan_of_ours(emulator: addons.EmulatorProcess, cluster: str, *, what: str) -> None:
    """Submits a job labelled for a pod of this cluster that does not exist; waits until the reaper stops it."""
    number = _submit_by_hand(emulator, f"k8s-{cluster}.{uuid.uuid4()}-app-1")
    demo.wait_for(lambda: _emulator_state(emulator, number) == "TERMINATED", what=what, timeout=REAP_BOUND + 60)


def test_another_clusters_job_and_a_hand_submitted_job_are_never_touched(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
) -> None:
    """Same account: a job of another cluster (our label format, another cluster's identity), one with the
    label format of earlier releases (no cluster), one with a free-text label, none of whose pods exist
    here. Submitted with them (last), an orphan of this cluster (its label's pod does not exist): once the
    reaper has stopped it, every grace the others could have had has passed; a second orphan, submitted
    then, is stopped only after more rounds past that one, all of which saw the others."""
    labels = [
        f"k8s-staging-0123456789ab.{uuid.uuid4()}-app-1",
        f"k8s-{uuid.uuid4()}-app-1",
        "resnet50-sweep-by-hand",
    ]
    cluster = _our_cluster(control_plane)
    numbers = [_submit_by_hand(node_emulator, label) for label in labels]
    try:
        for orphan in ("first", "second"):
            _reap_an_orphan_of_ours(node_emulator, cluster, what=f"this cluster's {orphan} orphan TERMINATED")
        states = [_emulator_state(node_emulator, n) for n in numbers]
    finally:
        env = node_emulator.runner_env()
        for number in numbers:
            query = f"?username={env['JARVICE_USERNAME']}&apikey={env['JARVICE_APIKEY']}&number={number}"
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(env["JARVICE_API_URL"].rstrip("/") + "/jarvice/terminate" + query, timeout=10):
                pass
    row = fault_matrix.record(
        Row(
            "another cluster's job, an old-format label and a hand-submitted job (while two orphans of ours"
            " beside them were reaped, one after the other)",
            submitted=0,
            completed=0,
            billing_late=0,
            others_stopped=sum(state != LIVE for state in states),
        )
    )
    assert row.others_stopped == 0, dict(zip(labels, states, strict=True))


def test_env_asking_for_more_gpus_than_counted_is_refused_before_submit(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> None:
    """Budget 4 in the namespace; a 1-GPU pod whose env asks for 4 GPUs on 2 nodes: the webhook counts 1
    and warns, the runner refuses a machine of 8 GPUs and submits nothing."""
    control_plane.kubectl("annotate", "namespace", ns, f"{BUDGET}=4", "--overwrite")
    gpus_gone()
    _wait_budget_and_no_gpus_seen(control_plane, node_emulator, ns, budget=4)
    container = app_container(node_emulator, "echo never", gpus=1)
    container.setdefault("env", []).extend(
        [{"name": "NUM_GPUS", "value": "4"}, {"name": "JARVICE_NODES", "value": "2"}]
    )
    warnings = create_pod(control_plane, ns, pod_body("greedy", container, gated=False))
    pod = _ended(control_plane, ns, "greedy", phases=("Failed",))
    code = pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
    submitted = len(_jobs(node_emulator, pod["metadata"]["uid"]))
    row = fault_matrix.record(
        Row(
            "a pod whose env asks for more GPUs than its request (budget 4)",
            submitted=submitted,
            completed=0,
            billing_late=0,
            over_budget=8 - 1 if submitted else 0,
            note=f"exit {code}",
        )
    )
    assert annotations_of(pod)[contract.ANNOTATION_DECISION] == "remote"
    assert code == exitcodes.EXIT_OVER_BUDGET, code
    assert row.submitted == 0, row
    assert "NUM_GPUS" in warnings, warnings


def test_a_job_past_its_namespace_walltime_is_stopped_and_reported(
    reaper: None,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    """No job bills without a time limit: the namespace's default walltime (10 s) reaches the job, JARVICE
    (the emulator) stops it there, and the runner exits with its walltime status."""
    control_plane.kubectl("annotate", "namespace", ns, "nimbix-burst.io/default-walltime=00:00:10", "--overwrite")
    wait_admitted_as(
        control_plane,
        ns,
        pod_body("seen-probe", app_container(node_emulator, "echo probe", gpus=8), gated=False),
        decision="remote",
        annotation=("nimbix-burst.io/walltime", "00:00:10"),
        what="the namespace's default walltime",
    )
    body = pod_body("overtime", app_container(node_emulator, 'echo "overtime started"; sleep 300', gpus=8), gated=False)
    create_pod(control_plane, ns, body)
    wait_log(control_plane, ns, "overtime", "overtime started")
    started = time.monotonic()
    pod = _ended(control_plane, ns, "overtime", phases=("Failed",))
    took = time.monotonic() - started
    states = _states(node_emulator, pod["metadata"]["uid"])
    code = pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
    walltime_note = annotations_of(pod).get("nimbix-burst.io/walltime", "")[:60]
    note = f"exit {code}, {took:.0f}s after it started; walltime annotation: {walltime_note}"
    row = fault_matrix.record(
        _job_row("a job past its walltime (namespace default 00:00:10)", node_emulator, pod, note=note)
    )
    assert states == ["TERMINATED"], states
    assert code == exitcodes.EXIT_WALLTIME, code
    assert took < 10 + SLACK_SECONDS + 10, took
    assert row.submitted == 1 and row.billing_late == 0, row
