"""The burst controller through the real kube-apiserver, kube-scheduler and Job controller.

Two `python -m controller` processes elect a leader through a Lease; the webhook decides; fake
nodes (no kubelet) host the pods and the JARVICE emulator runs the jobs. A pod is held at
admission by a scheduling gate, so the test can take its node's GPUs away between the webhook's
"local" and the scheduler's first try: exactly the window in which a pod gets stranded.

The last test reads both replicas' metrics for the actions of the tests before it (pytest runs a
module's tests in file order): only the leader may have counted any.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes.client.exceptions import ApiException

from controller.kube import Kube, PodChanged
from controller.model import parse_pod
from devplatform.cluster import addons, nodes
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.processes import ManagedProcess, free_port, start_process, stop_process
from devplatform.emulator.harness import EmulatorControl
from jarvice import contract
from tests.support.gpus import GPU, GPU_TAINT, GPU_TOLERATION

HOLD = "nimbix-burst.io/e2e-hold"
STRANDED_SECONDS = 5
ORPHAN_GRACE_SECONDS = 3
ORPHAN_INTERVAL_SECONDS = 2
PAUSE = "registry.k8s.io/pause:3.10"
MEASURED: dict[str, list[float]] = {
    "stranded_to_deleted_s": [],
    "stranded_to_replaced_s": [],
    "orphan_to_terminated_s": [],
}


@dataclass
class Controller:
    name: str
    process: ManagedProcess
    port: int

    def metrics(self) -> dict[str, float]:
        text = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("nimbix_burst_controller_"):
                key, _, value = line.rpartition(" ")
                values[key] = float(value)
        return values

    def log_lines(self, message: str) -> list[dict[str, Any]]:
        found = []
        for line in self.process.log_path.read_text().splitlines():
            if line.startswith("{") and f'"message": "{message}"' in line:
                found.append(json.loads(line))
        return found


def _wait(what: str, check: Callable[[], Any], *, timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def webhook(control_plane: ControlPlane) -> Iterator[addons.WebhookProcess]:
    run_dir = control_plane.run_dir / "controller-webhook"
    with addons.registered_webhook(
        control_plane, run_dir, name_suffix="-controller-e2e", args=["--strip-toleration-keys", GPU]
    ) as hook:
        yield hook


@pytest.fixture(scope="module")
def emulator(control_plane: ControlPlane) -> Iterator[addons.EmulatorProcess]:
    started = addons.start_jarvice_emulator(
        control_plane.run_dir / "controller-emulator", args=["--queue-seconds", "1"]
    )
    try:
        yield started
    finally:
        addons.stop_jarvice_emulator(started)


@pytest.fixture(scope="module")
def controllers(control_plane: ControlPlane, core: Any, emulator: addons.EmulatorProcess) -> Iterator[list[Controller]]:
    """Two replicas, as the Deployment runs them: same Lease, own identities and ports."""
    lease_namespace = f"nimbix-burst-ctl-{uuid.uuid4().hex[:6]}"
    nodes.create_namespace(core, lease_namespace, labels={"nimbix-burst-test": "1"})
    creds = emulator.runner_env()
    env = {
        **os.environ,
        "JARVICE_API_URL": creds["JARVICE_API_URL"],
        "JARVICE_USERNAME": creds["JARVICE_USERNAME"],
        "JARVICE_APIKEY": creds["JARVICE_APIKEY"],
        "POD_NAMESPACE": lease_namespace,
    }
    started: list[Controller] = []
    for name in ("controller-a", "controller-b"):
        port = free_port()
        argv = [
            sys.executable, "-m", "controller",
            "--host", "127.0.0.1", "--port", str(port),
            "--kubeconfig", str(control_plane.kubeconfig_path),
            "--pod-name", name,
            "--stranded-seconds", str(STRANDED_SECONDS),
            "--scan-seconds", "0.5",
            "--orphan-interval-seconds", str(ORPHAN_INTERVAL_SECONDS),
            "--orphan-grace-seconds", str(ORPHAN_GRACE_SECONDS),
            "--lease-duration-seconds", "4",
            "--lease-renew-deadline-seconds", "3",
            "--lease-retry-seconds", "0.5",
        ]  # fmt: skip
        log_path = control_plane.run_dir / "controller" / f"{name}.log"
        process = start_process(name, argv, log_path=log_path, env=env)
        started.append(Controller(name=name, process=process, port=port))
    try:
        for replica in started:
            _wait(f"{replica.name} ready", lambda r=replica: _ready(r), timeout=60)
        _wait("a leader", lambda: _leader(started), timeout=30)
        yield started
    finally:
        for replica in started:
            stop_process(replica.process)
        core.delete_namespace(lease_namespace)


def _ready(replica: Controller) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{replica.port}/readyz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _leader(replicas: list[Controller]) -> Controller | None:
    leaders = [r for r in replicas if r.metrics().get("nimbix_burst_controller_leader") == 1]
    assert len(leaders) <= 1, [r.name for r in leaders]
    return leaders[0] if leaders else None


def _assert_only_the_leader_counted(replicas: list[Controller], metric: str) -> None:
    """The action just taken is in the Lease holder's counter, and none of it in the other replica's."""
    leader = _leader(replicas)
    assert leader is not None
    (follower,) = [r for r in replicas if r is not leader]
    assert leader.metrics().get(metric, 0.0) >= 1, (leader.name, metric)
    assert follower.metrics().get(metric, 0.0) == 0, (follower.name, metric)


def _total(replicas: list[Controller], metric: str) -> float:
    return sum(r.metrics().get(metric, 0.0) for r in replicas)


class Group:
    """One test's nodes and pods, pinned together by a label (as in test_webhook.py)."""

    def __init__(self, core: Any, namespace: str, make_gpu_node: Callable[..., str]) -> None:
        self.core = core
        self.namespace = namespace
        self.label = {"nb-group": namespace}
        self._make_node = make_gpu_node

    def gpu_node(self, gpus: int) -> str:
        return self._make_node(gpus=gpus, labels=self.label, taints=[GPU_TAINT])

    def cpu_node(self) -> str:
        return self._make_node(gpus=0, cpu="4", memory="8Gi", labels=self.label)

    def pod_spec(self, gpus: int) -> dict[str, Any]:
        return {
            "containers": [{"name": "app", "image": PAUSE, "resources": {"limits": {GPU: str(gpus)}}}],
            "nodeSelector": dict(self.label),
            "tolerations": [GPU_TOLERATION],
            "schedulingGates": [{"name": HOLD}],
            "restartPolicy": "Never",
        }

    def take_gpus_away(self, node: str) -> None:
        """The node's GPUs vanish (a device plugin reports them unhealthy): allocatable drops to 0."""
        zero = {GPU: "0"}  # a merge patch keeps keys it does not name: say 0 explicitly
        self.core.patch_node_status(node, {"status": {"capacity": zero, "allocatable": zero}})
        # The scheduler learns it by its own watch: until an unlabelled 1-GPU probe (no webhook looks at
        # it) is Unschedulable, a released pod could still bind to the GPUs as they were.
        _wait("the scheduler to see the GPUs gone", self._probe_unschedulable, timeout=30, interval=0.2)

    def _probe_unschedulable(self) -> bool:
        name = f"gpus-gone-probe-{uuid.uuid4().hex[:6]}"
        spec = {**self.pod_spec(1), "schedulingGates": []}
        self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": name}, "spec": spec})
        try:
            verdict = _wait(
                "the probe scheduled or refused",
                lambda: self._scheduling_verdict(name),
                timeout=30,
                interval=0.1,
            )
        finally:  # a fake node runs nothing: a probe bound to it goes only with a zero grace period
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        return bool(verdict == "refused")

    def _scheduling_verdict(self, name: str) -> str | None:
        pod = self.read(name)
        if pod.spec.node_name:
            return "bound"
        refused = any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or ())
        return "refused" if refused else None

    def release(self, name: str) -> None:
        """Remove the scheduling gate: the scheduler now tries the pod."""
        self.core.patch_namespaced_pod(name, self.namespace, [{"op": "remove", "path": "/spec/schedulingGates"}])

    def read(self, name: str) -> Any:
        return self.core.read_namespaced_pod(name, self.namespace)


@pytest.fixture
def group(core: Any, namespace: str, make_gpu_node: Callable[..., str], webhook: addons.WebhookProcess) -> Group:
    return Group(core, namespace, make_gpu_node)


def _decision(pod: Any) -> str:
    return str((pod.metadata.annotations or {}).get("nimbix-burst.io/decision", ""))


def _unschedulable_since(pod: Any) -> float | None:
    assert not pod.spec.node_name, f"bound to {pod.spec.node_name}: the GPUs were not gone in time"
    for condition in pod.status.conditions or ():
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return float(condition.last_transition_time.timestamp())
    return None


def _events(core: Any, namespace: str, name: str, reason: str) -> list[Any]:
    listed = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name},reason={reason}")
    return list(listed.items)


def test_a_stranded_job_pod_is_replaced_once_and_the_replacement_bursts(
    group: Group, batch: Any, controllers: list[Controller], control_plane: ControlPlane
) -> None:
    gpu = group.gpu_node(1)
    cpu = group.cpu_node()
    before = _total(controllers, "nimbix_burst_controller_rebursts_total")
    job_name = f"train-{uuid.uuid4().hex[:6]}"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name},
        "spec": {
            "backoffLimit": 6,
            "template": {"metadata": {"labels": {"task-type": "Nimbix"}}, "spec": group.pod_spec(1)},
        },
    }
    batch.create_namespaced_job(group.namespace, job)
    selector = f"job-name={job_name}"

    def job_pods() -> list[Any]:
        return list(group.core.list_namespaced_pod(group.namespace, label_selector=selector).items)

    (first,) = _wait("the Job's first pod", job_pods, timeout=30)
    assert _decision(first) == "local", first.metadata.annotations
    group.take_gpus_away(gpu)
    group.release(first.metadata.name)
    stuck = _wait(
        "the first pod Unschedulable", lambda: _unschedulable_since(group.read(first.metadata.name)), timeout=30
    )

    def first_deleted() -> bool:
        try:
            pod = group.read(first.metadata.name)
        except ApiException as error:
            return error.status == 404
        return pod.metadata.deletion_timestamp is not None

    _wait("the stranded pod deleted", first_deleted, timeout=STRANDED_SECONDS + 30, interval=0.1)
    deleted_after = time.time() - stuck
    MEASURED["stranded_to_deleted_s"].append(round(deleted_after, 1))
    assert deleted_after >= STRANDED_SECONDS - 1  # lastTransitionTime has whole seconds

    def replacement() -> Any:
        others = [p for p in job_pods() if p.metadata.uid != first.metadata.uid]
        return others[0] if others else None

    second = _wait("the replacement pod", replacement, timeout=STRANDED_SECONDS + 60, interval=0.1)
    replaced_after = time.time() - stuck
    MEASURED["stranded_to_replaced_s"].append(round(replaced_after, 1))
    assert _decision(second) == "remote", second.metadata.annotations
    group.release(second.metadata.name)
    assert nodes.wait_for_pod_bound(group.core, group.namespace, second.metadata.name, timeout=30) == cpu

    # Exactly once: well past another threshold, still two pods ever and one re-burst counted.
    time.sleep(STRANDED_SECONDS + 3)
    uids = {p.metadata.uid for p in job_pods()}
    assert uids <= {first.metadata.uid, second.metadata.uid} and second.metadata.uid in uids
    assert _total(controllers, "nimbix_burst_controller_rebursts_total") - before == 1
    (event,) = _events(group.core, group.namespace, job_name, "NimbixReBurst")
    assert "re-burst 1 of 3" in event.message and first.metadata.name in event.message
    described = control_plane.kubectl("describe", "job", job_name, "-n", group.namespace).stdout
    assert "NimbixReBurst" in described
    _assert_only_the_leader_counted(controllers, "nimbix_burst_controller_rebursts_total")
    print(
        f"\nstranded -> deleted: {deleted_after:.1f}s, -> replaced: {replaced_after:.1f}s "
        f"(threshold {STRANDED_SECONDS}s; the Job controller's failure backoff is the rest)"
    )


def test_a_stranded_bare_pod_is_reported_and_left_alone(group: Group, controllers: list[Controller]) -> None:
    gpu = group.gpu_node(1)
    group.cpu_node()
    before = _total(controllers, 'nimbix_burst_controller_stranded_noted_total{reason="no-owner"}')
    name = f"bare-{uuid.uuid4().hex[:6]}"
    body = {"metadata": {"name": name, "labels": {"task-type": "Nimbix"}}, "spec": group.pod_spec(1)}
    created = group.core.create_namespaced_pod(group.namespace, body)
    assert _decision(created) == "local"
    group.take_gpus_away(gpu)
    group.release(name)
    stuck = _wait("the pod Unschedulable", lambda: _unschedulable_since(group.read(name)), timeout=30)

    def annotated() -> str:
        return str((group.read(name).metadata.annotations or {}).get("nimbix-burst.io/stranded-since", ""))

    since = _wait("the stranded-since annotation", annotated, timeout=STRANDED_SECONDS + 30)
    assert since == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stuck))
    (event,) = _wait("the Event", lambda: _events(group.core, group.namespace, name, "NimbixStranded"), timeout=10)
    assert "not deleted (no owner)" in event.message
    time.sleep(STRANDED_SECONDS)
    still = group.read(name)
    assert still.metadata.uid == created.metadata.uid and still.metadata.deletion_timestamp is None
    assert len(_events(group.core, group.namespace, name, "NimbixStranded")) == 1
    assert _total(controllers, 'nimbix_burst_controller_stranded_noted_total{reason="no-owner"}') - before == 1
    _assert_only_the_leader_counted(controllers, 'nimbix_burst_controller_stranded_noted_total{reason="no-owner"}')


def _start_runner(run_dir: Path, emulator: addons.EmulatorProcess, *, pod_uid: str, cluster: str) -> ManagedProcess:
    env = {
        **os.environ,
        **emulator.runner_env(),
        "REMOTE": "1",
        "POD_UID": pod_uid,
        "NIMBIX_BURST_CONTAINER": "app",
        "APP_COMMAND_ARGS": "sleep 600",
        "JARVICE_POLL_SECONDS": "1",
        "NIMBIX_BURST_CLUSTER": cluster,  # "": the legacy label, as a pod the webhook did not rewrite
    }
    return start_process(
        f"runner-{pod_uid[:8]}",
        [sys.executable, "-m", "entrypoint"],
        log_path=run_dir / f"runner-{pod_uid}.log",
        env=env,
    )


def _kill(process: ManagedProcess) -> None:
    """SIGKILL: the runner gets no chance to cancel its job (a node that died with the pod)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # our child, not reaped yet: its pid is still its own
    stop_process(process)  # reaps it


def test_an_orphaned_jarvice_job_is_terminated_and_a_live_pods_job_is_not(
    group: Group, emulator: addons.EmulatorProcess, controllers: list[Controller], control_plane: ControlPlane
) -> None:
    """The "legacy" job's pod is gone too, but its label carries no cluster: no reaper may stop it."""
    group.cpu_node()
    control = EmulatorControl(emulator.url)
    run_dir = control_plane.run_dir / "controller-runners"
    # The identity the controllers (started without --cluster-name) compute, as the webhook would.
    cluster = contract.cluster_identity(group.core.read_namespace("kube-system").metadata.uid)
    clusters = {"doomed": cluster, "kept": cluster, "legacy": ""}
    pods = {}
    for role in clusters:
        # Burst pods the webhook decided (a GPU no node has): a job of any other pod is one nothing
        # accounts for, which the reaper stops whatever its pod does (not-decided).
        body = {
            "metadata": {"name": f"{role}-{uuid.uuid4().hex[:6]}", "labels": {"task-type": "Nimbix"}},
            "spec": {
                "containers": [{"name": "app", "image": PAUSE, "resources": {"limits": {GPU: "1"}}}],
                "nodeSelector": dict(group.label),
            },
        }
        pods[role] = group.core.create_namespaced_pod(group.namespace, body)
        assert _decision(pods[role]) == "remote", pods[role].metadata.annotations
    labels = {
        role: f"k8s-{clusters[role]}.{pod.metadata.uid}-app-1" if clusters[role] else f"k8s-{pod.metadata.uid}-app-1"
        for role, pod in pods.items()
    }
    runners = {
        role: _start_runner(run_dir, emulator, pod_uid=pod.metadata.uid, cluster=clusters[role])
        for role, pod in pods.items()
    }

    def job_status(role: str) -> str:
        jobs = control.jobs(job_label=labels[role])
        return str(jobs[0]["status"]) if jobs else ""

    try:
        for role in runners:
            _wait(f"the {role} pod's job running", lambda r=role: job_status(r) == "PROCESSING STARTING", timeout=60)
        for process in runners.values():
            _kill(process)
        # The pods are force-deleted (as when their node is gone); their runners never cancelled the jobs.
        group.core.delete_namespaced_pod(pods["legacy"].metadata.name, group.namespace, grace_period_seconds=0)
        group.core.delete_namespaced_pod(pods["doomed"].metadata.name, group.namespace, grace_period_seconds=0)
        _wait("the pods gone", lambda: _gone(group, pods["doomed"].metadata.name), timeout=30, interval=0.05)
        gone_at = time.monotonic()
        _wait("the orphan TERMINATED", lambda: job_status("doomed") == "TERMINATED", timeout=60, interval=0.1)
        took = time.monotonic() - gone_at
        MEASURED["orphan_to_terminated_s"].append(round(took, 1))
        time.sleep(ORPHAN_GRACE_SECONDS + 2 * ORPHAN_INTERVAL_SECONDS)
        assert job_status("kept") == "PROCESSING STARTING"  # its pod exists: never touched
        assert job_status("legacy") == "PROCESSING STARTING"  # not this cluster's label: never touched
        leader = _leader(controllers)
        assert leader is not None
        (line,) = [e for e in leader.log_lines("orphan job terminated") if e["job_label"] == labels["doomed"]]
        assert line["pod_uid"] == pods["doomed"].metadata.uid and line["levelname"] == "INFO"
        assert line["reason"] == "pod-gone"
        # Terminated in the round its grace ended, by the controller's own clock: never early, and no
        # whole interval lost (`took`, as the test saw it, depends on the machine's load: a figure).
        assert ORPHAN_GRACE_SECONDS <= line["orphaned_s"] < ORPHAN_GRACE_SECONDS + ORPHAN_INTERVAL_SECONDS, line
        _assert_only_the_leader_counted(controllers, "nimbix_burst_controller_orphans_terminated_total")
        _assert_only_the_leader_counted(controllers, 'nimbix_burst_controller_orphans_seen_total{reason="pod-gone"}')
        left = [e for e in leader.log_lines("job left alone: not this cluster's") if e["job_label"] == labels["legacy"]]
        assert [e["kind"] for e in left] == ["legacy-label"]
        assert leader.metrics()['nimbix_burst_controller_jobs_not_ours{kind="legacy-label"}'] >= 1
        assert emulator.runner_env()["JARVICE_APIKEY"] not in leader.process.log_path.read_text()
        print(
            f"\norphan -> TERMINATED: {took:.1f}s (grace {ORPHAN_GRACE_SECONDS}s, interval {ORPHAN_INTERVAL_SECONDS}s)"
        )
    finally:
        for process in runners.values():
            stop_process(process)  # a no-op for the runners already killed
        control.close()


def _gone(group: Group, name: str) -> bool:
    try:
        group.read(name)
    except ApiException as error:
        return error.status == 404
    return False


def test_a_bind_between_the_read_and_the_delete_makes_the_delete_fail(group: Group, api_client: Any) -> None:
    """The controller's eviction carries the uid and resourceVersion it decided on: the real API server
    refuses it once the scheduler has bound the pod (here the binding is posted by hand)."""
    cpu = group.cpu_node()
    name = f"race-{uuid.uuid4().hex[:6]}"
    body = {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": PAUSE}], "schedulerName": "nobody"},
    }
    group.core.create_namespaced_pod(group.namespace, body)
    kube = Kube(api_client, reporting_instance="e2e")
    decided_on = parse_pod(kube.read_pod(group.namespace, name))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": cpu},
    }
    group.core.create_namespaced_binding(group.namespace, binding, _preload_content=False)
    with pytest.raises(PodChanged):
        kube.evict_pod(decided_on)
    still = group.read(name)
    assert still.spec.node_name == cpu and still.metadata.deletion_timestamp is None
    kube.evict_pod(parse_pod(kube.read_pod(group.namespace, name)))  # what it read now: accepted
    assert group.read(name).metadata.deletion_timestamp is not None or _gone(group, name)


def test_only_the_leader_acts_and_a_stopped_leader_hands_over(controllers: list[Controller]) -> None:
    """None of the actions so far is in the follower's metrics (each acting test above checks that its
    own action is in the leader's, so this one stands alone); then the handover."""
    leader = _leader(controllers)
    assert leader is not None
    (follower,) = [r for r in controllers if r is not leader]
    acting = (
        "nimbix_burst_controller_rebursts_total",
        'nimbix_burst_controller_stranded_noted_total{reason="no-owner"}',
        "nimbix_burst_controller_orphans_terminated_total",
        'nimbix_burst_controller_orphans_seen_total{reason="pod-gone"}',
    )
    leader_counts = {m: leader.metrics().get(m, 0.0) for m in acting}
    follower_counts = {m: follower.metrics().get(m, 0.0) for m in acting}
    print(f"\nleader {leader.name}: {leader_counts}\nfollower {follower.name}: {follower_counts}")
    assert all(v == 0 for v in follower_counts.values()), follower_counts
    assert follower.log_lines("stranded pod re-burst") == [] and follower.log_lines("orphan job terminated") == []
    # A graceful stop releases the Lease: the follower leads within a few Lease rounds.
    stopped_at = time.monotonic()
    stop_process(leader.process)
    _wait("the follower to lead", lambda: follower.metrics().get("nimbix_burst_controller_leader") == 1, timeout=10)
    print(f"handover after a graceful stop: {time.monotonic() - stopped_at:.1f}s")
    print(f"measured: {MEASURED}")
