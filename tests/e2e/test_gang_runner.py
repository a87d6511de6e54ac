"""A gang's runners in real containers on the real node, without the webhook: an Indexed Job of two
pods whose containers carry what the webhook would set on a burst gang (REMOTE=1 and the gang's
variables, the rank from the pod's completion index), against the JARVICE emulator on the node's
gateway. What a user sees: one JARVICE job on two nodes, both pods Succeeded, index 0's logs with
every rank's output (each with its NODE_RANK), index 1's logs with the job it follows; deleting the
Job ends the JARVICE job TERMINATED."""

from __future__ import annotations

import json
import uuid
from typing import Any

from devplatform import demo
from devplatform.cluster import addons, controlplane
from tests.support.indexed_jobs import INDEX_ANNOTATION, real_node_indexed_job, submissions, wait_pods_by_index

WAIT_SECONDS = 180.0
RANK_LINE = 'echo "rank=$NODE_RANK of $NNODES index=$JOB_COMPLETION_INDEX master=$MASTER_ADDR:$MASTER_PORT"'


def gang_job(name: str, command: str, *, gang: str, app_name: str) -> dict[str, Any]:
    """An Indexed Job of 2 whose runners burst as one gang (set by hand: no webhook, no task-type label)."""
    container = demo.build_app_container(
        command=command,
        gpus=0,
        app_name=app_name,
        env={
            "REMOTE": "1",
            "LOG_LEVEL": "INFO",
            "NIMBIX_BURST_GANG_UID": gang,
            "NIMBIX_BURST_GANG_SIZE": "2",
        },
    )
    index = f"metadata.annotations['{INDEX_ANNOTATION}']"
    container["env"] += [
        {"name": "NIMBIX_BURST_GANG_RANK", "valueFrom": {"fieldRef": {"fieldPath": index}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]
    return real_node_indexed_job(name, container)


def jobs_of(emulator: addons.EmulatorProcess, gang: str) -> list[dict[str, Any]]:
    return [j for j in demo.fetch_emulator(emulator.url, "/_emulator/jobs") if j.get("job_label") == f"k8s-{gang}-1"]


def test_a_gang_of_two_pods_is_one_job_on_two_nodes(
    control_plane: controlplane.ControlPlane, ns: str, node_emulator: addons.EmulatorProcess
) -> None:
    gang = str(uuid.uuid4())
    app = node_emulator.runner_env()["APP_NAME"]
    manifest = gang_job("gang", f"{RANK_LINE}; sleep 1", gang=gang, app_name=app)
    control_plane.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(manifest))
    pods = wait_pods_by_index(control_plane, ns, "gang", {"Succeeded", "Failed"}, timeout=WAIT_SECONDS)
    logs = {i: control_plane.kubectl("logs", "-n", ns, p["metadata"]["name"]).stdout for i, p in pods.items()}
    assert all(p["status"]["phase"] == "Succeeded" for p in pods.values()), logs
    (submission,) = submissions(node_emulator, f"k8s-{gang}-1")
    assert submission["body"]["machine"]["nodes"] == 2
    (job,) = jobs_of(node_emulator, gang)
    assert job["status"] == "COMPLETED" and len(job["nodes"]) == 2
    master = job["nodes"][0]
    assert f"rank=0 of 2 index=0 master={master}:29500" in logs[0]
    assert f"rank=1 of 2 index=1 master={master}:29500" in logs[0]
    assert "rank=" not in logs[1]
    assert f"rank 1 of 2 follows JARVICE job {job['number']}" in logs[1]
    assert f"JARVICE job {job['number']} ended COMPLETED; exiting 0" in logs[1]


def test_deleting_the_gangs_job_terminates_its_one_jarvice_job(
    control_plane: controlplane.ControlPlane, ns: str, node_emulator: addons.EmulatorProcess
) -> None:
    gang = str(uuid.uuid4())
    app = node_emulator.runner_env()["APP_NAME"]
    manifest = gang_job("gang-stop", 'echo "started $NODE_RANK"; exec sleep 300', gang=gang, app_name=app)
    control_plane.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(manifest))
    demo.wait_for(
        lambda: (jobs := jobs_of(node_emulator, gang)) and jobs[0]["status"] == "PROCESSING STARTING",
        what="the gang's job running",
        timeout=WAIT_SECONDS,
    )
    wait_pods_by_index(control_plane, ns, "gang-stop", {"Running"}, timeout=WAIT_SECONDS)
    control_plane.kubectl("delete", "-n", ns, "job", "gang-stop", "--cascade=foreground", "--wait=false")
    demo.wait_for(
        lambda: jobs_of(node_emulator, gang)[0]["status"] == "TERMINATED",
        what="the gang's job TERMINATED",
        timeout=WAIT_SECONDS,
    )
    assert len(submissions(node_emulator, f"k8s-{gang}-1")) == 1
