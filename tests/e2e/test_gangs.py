"""Gangs through the real API server, Job controller and scheduler: the pods of one distributed job
are all here or all there, never split.

The webhook runs as a host process (as in test_webhook.py); Indexed Jobs are created with kubectl and
their pods made by the real Job controller; fake GPU nodes (pinned by a group label) give the room.
Two replicas behind one address (as in test_replicas.py) must still give a gang's pods one decision.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons
from devplatform.cluster.controlplane import ControlPlane
from tests.support.gpus import GPU, GPU_TOLERATION
from tests.support.indexed_jobs import real_node_indexed_job, submissions, wait_pods_by_index
from tests.support.webhook_group import Group, annotations_of, env
from tests.support.webhook_replicas import serving_replicas

DECISION = "nimbix-burst.io/decision"
GANG = "nimbix-burst.io/gang"
RANK = "nimbix-burst.io/gang-rank"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
PAUSE = "registry.k8s.io/pause:3.10"


@pytest.fixture
def webhook(control_plane: ControlPlane) -> Iterator[addons.WebhookProcess]:
    """One webhook per test: the two-replica test must not have it decide before its replicas."""
    run_dir = control_plane.run_dir / f"webhook-gangs-{uuid.uuid4().hex[:6]}"
    run_dir.mkdir(exist_ok=True)
    with addons.registered_webhook(
        control_plane, run_dir, name_suffix="-gangs", args=["--strip-toleration-keys", GPU]
    ) as hook:
        yield hook


@pytest.fixture
def group(control_plane: ControlPlane, core: Any, namespace: str, make_gpu_node: Callable[..., str]) -> Group:
    return Group(control_plane, core, namespace, make_gpu_node)


def indexed_job(group: Group, *, size: int, gpus: int) -> dict[str, Any]:
    """An Indexed Job of `size` pods asking `gpus` each, pinned to the group's nodes."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"train-{uuid.uuid4().hex[:6]}", "namespace": group.namespace},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": size,
            "completions": size,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"task-type": "Nimbix"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": PAUSE, "resources": {"limits": {GPU: str(gpus)}}}],
                    "nodeSelector": dict(group.label),
                    "tolerations": [GPU_TOLERATION],
                },
            },
        },
    }


def create_job(group: Group, body: dict[str, Any]) -> str:
    created = json.loads(group.cp.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body)).stdout)
    return str(created["metadata"]["uid"])


def job_pods(group: Group, job_name: str, count: int) -> list[dict[str, Any]]:
    """The Job's pods once the Job controller has made `count` of them, by completion index."""

    def listed() -> list[dict[str, Any]]:
        result = group.cp.kubectl(
            "get", "pods", "-n", group.namespace, "-l", f"batch.kubernetes.io/job-name={job_name}", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(result.stdout)["items"]
        return items

    demo.wait_for(lambda: len(listed()) >= count, what=f"{count} pods of Job {job_name}", timeout=60)
    pods = listed()
    assert len(pods) == count, [p["metadata"]["name"] for p in pods]
    return sorted(pods, key=lambda p: int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]))


def test_three_two_gpu_ranks_on_two_nodes_with_two_free_gpus_each_all_burst(
    webhook: addons.WebhookProcess, group: Group
) -> None:
    group.gpu_node(2)
    group.gpu_node(2)
    group.cpu_node()  # where the runners of burst pods may run
    body = indexed_job(group, size=3, gpus=2)
    uid = create_job(group, body)
    pods = job_pods(group, body["metadata"]["name"], 3)
    assert [annotations_of(p)[DECISION] for p in pods] == ["remote"] * 3
    assert [annotations_of(p)[GANG] for p in pods] == [uid] * 3
    assert [env(p)["NIMBIX_BURST_GANG_RANK"] for p in pods] == ["0", "1", "2"]
    assert {env(p)["NIMBIX_BURST_GANG_SIZE"] for p in pods} == {"3"}
    assert {env(p)["NIMBIX_BURST_COUNTED_GPUS"] for p in pods} == {"6"}


def test_two_two_gpu_ranks_on_the_same_room_all_stay_local_on_both_nodes(
    webhook: addons.WebhookProcess, group: Group
) -> None:
    first, second = group.gpu_node(2), group.gpu_node(2)
    body = indexed_job(group, size=2, gpus=2)
    create_job(group, body)
    pods = job_pods(group, body["metadata"]["name"], 2)
    assert [annotations_of(p)[DECISION] for p in pods] == ["local"] * 2
    bound = {group.bound_node(p["metadata"]["name"]) for p in pods}
    assert bound == {first, second}  # each rank got the place reserved for it


def kueue_pod(group: Group, name: str, *, total: int, gpus: int = 1) -> dict[str, Any]:
    body = group.pod(gpus)
    body["metadata"]["labels"][KUEUE_GROUP] = name
    body["metadata"]["annotations"] = {KUEUE_TOTAL: str(total)}
    return body


def test_a_kueue_pod_group_is_never_split(webhook: addons.WebhookProcess, group: Group) -> None:
    group.gpu_node(2)
    group.cpu_node()
    # Three one-GPU pods, created at once, where two would fit: all three burst, as ranks 0, 1 and 2.
    created = [pod for pod, _ in group.create_all([kueue_pod(group, "ddp", total=3) for _ in range(3)])]
    assert [annotations_of(p)[DECISION] for p in created] == ["remote"] * 3
    assert len({annotations_of(p)[GANG] for p in created}) == 1
    assert sorted(annotations_of(p)[RANK] for p in created) == ["0", "1", "2"]
    # A group of two that fits stays here, whole.
    pair = [pod for pod, _ in group.create_all([kueue_pod(group, "pair", total=2) for _ in range(2)])]
    assert [annotations_of(p)[DECISION] for p in pair] == ["local"] * 2


# --- two replicas: a gang's pods sent to both still get one decision ------------------------------


@pytest.fixture
def two_replicas(control_plane: ControlPlane, core: Any) -> Iterator[str]:
    """Two webhook processes with leader election behind one address; yields their Lease's namespace.
    Per test: left registered, they are a second webhook in every later admission, one that never made
    the first one's decisions, so it clears their marks (docs/decision.md, "What a pod cannot say")."""
    with serving_replicas(control_plane, core, name="gangs-ha") as replicas:
        yield replicas.namespace


def test_two_replicas_give_each_gangs_pods_one_decision(two_replicas: str, group: Group) -> None:
    group.gpu_node(2)
    group.gpu_node(2)
    group.cpu_node()
    # Four groups of two one-GPU pods against four free GPUs, every pod created at once (the proxy
    # spreads them over both replicas): two groups fit, the others burst; none is split.
    bodies = [kueue_pod(group, f"g{i}", total=2) for i in range(4) for _ in range(2)]
    created = [pod for pod, _ in group.create_all(bodies)]
    by_group: dict[str, list[str]] = {}
    for pod in created:
        by_group.setdefault(pod["metadata"]["labels"][KUEUE_GROUP], []).append(annotations_of(pod)[DECISION])
    assert all(len(set(decisions)) == 1 for decisions in by_group.values()), by_group
    local = sorted(name for name, decisions in by_group.items() if decisions[0] == "local")
    assert len(local) == 2, by_group


# --- the whole run: webhook, runners on the real node, the JARVICE emulator ----------------------

RANK_LINE = 'echo "rank=$NODE_RANK of $NNODES index=$JOB_COMPLETION_INDEX"'
# GPUs per pod: one pod fits the real node's 4, two do not; the emulator's ng4 (4 GPUs per node,
# up to 8 nodes) runs them as one job of 8 GPUs, what the budget counted for the gang.
RANK_GPUS = 4
RUN_SECONDS = 180.0


def real_node_job(name: str, command: str, *, app_name: str) -> dict[str, Any]:
    """A 2-pod Indexed Job on the real node, opted in as any user would: the label, nothing else."""
    container = demo.build_app_container(command=command, gpus=RANK_GPUS, app_name=app_name, env={"LOG_LEVEL": "INFO"})
    return real_node_indexed_job(name, container, labels={"task-type": "Nimbix"})


def run_job(plane: ControlPlane, namespace: str, body: dict[str, Any]) -> str:
    created = plane.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(body)).stdout
    return str(json.loads(created)["metadata"]["uid"])


def gang_label(pod: dict[str, Any], gang: str) -> str:
    return f"k8s-{env(pod)['NIMBIX_BURST_CLUSTER']}.{gang}-1"


def test_a_two_pod_indexed_job_that_cannot_run_here_bursts_as_one_jarvice_job(
    webhook: addons.WebhookProcess, control_plane: ControlPlane, ns: str, node_emulator: addons.EmulatorProcess
) -> None:
    app = node_emulator.runner_env()["APP_NAME"]
    gang = run_job(control_plane, ns, real_node_job("ddp", f"{RANK_LINE}; sleep 1", app_name=app))
    pods = wait_pods_by_index(control_plane, ns, "ddp", {"Succeeded", "Failed"}, timeout=RUN_SECONDS)
    logs = {i: control_plane.kubectl("logs", "-n", ns, p["metadata"]["name"]).stdout for i, p in pods.items()}
    assert [p["status"]["phase"] for p in pods.values()] == ["Succeeded", "Succeeded"], logs
    assert [annotations_of(pods[i])[DECISION] for i in (0, 1)] == ["remote", "remote"]
    assert [annotations_of(pods[i])[GANG] for i in (0, 1)] == [gang, gang]
    (submission,) = submissions(node_emulator, gang_label(pods[0], gang))
    assert submission["body"]["machine"]["nodes"] == 2
    (job,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=gang)
    assert job["status"] == "COMPLETED"
    assert "rank=0 of 2 index=0" in logs[0] and "rank=1 of 2 index=1" in logs[0]
    assert "rank=" not in logs[1]
    assert f"follows JARVICE job {job['number']}" in logs[1]


def test_deleting_a_running_gangs_job_ends_its_jarvice_job_terminated(
    webhook: addons.WebhookProcess, control_plane: ControlPlane, ns: str, node_emulator: addons.EmulatorProcess
) -> None:
    app = node_emulator.runner_env()["APP_NAME"]
    gang = run_job(
        control_plane, ns, real_node_job("ddp-stop", 'echo "started $NODE_RANK"; exec sleep 300', app_name=app)
    )
    demo.wait_for(
        lambda: (
            [j["status"] for j in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=gang)] == ["PROCESSING STARTING"]
        ),
        what="the gang's job running",
        timeout=RUN_SECONDS,
    )
    pods = wait_pods_by_index(control_plane, ns, "ddp-stop", {"Running"}, timeout=RUN_SECONDS)
    control_plane.kubectl("delete", "-n", ns, "job", "ddp-stop", "--wait=false")
    demo.wait_for(
        lambda: [j["status"] for j in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=gang)] == ["TERMINATED"],
        what="the gang's job TERMINATED",
        timeout=RUN_SECONDS,
    )
    assert len(submissions(node_emulator, gang_label(pods[0], gang))) == 1
