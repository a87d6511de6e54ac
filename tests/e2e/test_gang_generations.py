"""A gang's generations and its budget, on the real node with the installed add-on (webhook, controller
with its reaper) and the JARVICE emulator, driven through kubectl as a user would.

- An Indexed Job of two pods whose first attempt fails: the Job controller replaces both pods, the
  webhook makes them the gang's second generation (an identity, hence a JARVICE job label, of its own),
  and the reaper leaves that generation's job alone although the first generation's Failed pods remain:
  it runs to COMPLETED, not TERMINATED.
- A pod group of two 4-GPU pods of which only rank 0 is ever created, in a namespace whose budget is 8:
  rank 0 submits a job of 2 nodes (8 GPUs), and past the webhook's reservation TTL the budget still
  counts those 8, so three 1-GPU pods created at once are all kept local.

Each test records its row in the session's `fault_matrix` (tests/support/fault_matrix.py), which holds it
to the goal and prints the table (docs/money-safety.md) at the session's end. A row's "submitted" counts the
jobs of one generation (each generation's identity is a job label of its own): a retry is not a job run twice.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install
from jarvice import contract
from tests.support.fault_matrix import FaultMatrix, Row
from tests.support.indexed_jobs import INDEX_ANNOTATION, JOB_NAME_LABEL, PODS, real_node_indexed_job, submissions
from tests.support.installed_controller import (
    BUDGET,
    annotations_of,
    app_container,
    find_pod,
    pod_body,
    wait_admitted_as,
)
from tests.support.webhook_replicas import create_at_once

# One pod fits the real node's 4 GPUs, two do not: the gang bursts as one job of 2 nodes x 4 GPUs.
RANK_GPUS = 4
WAIT_SECONDS = 300.0
LIVE = "PROCESSING STARTING"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"


@pytest.fixture
def marker() -> Iterator[Path]:
    """A directory the first attempt's rank 0 creates (the emulator runs jobs as processes on this host)."""
    path = Path("/tmp") / f"nimbix-burst-first-attempt-{uuid.uuid4().hex[:8]}"
    try:
        yield path
    finally:
        if path.exists():
            path.rmdir()


def _reservation_ttl(control_plane: controlplane.ControlPlane) -> float:
    """The installed webhook's WEBHOOK_RESERVATION_TTL_SECONDS (deploy/webhook.env, as the overlay sets it)."""

    def read(kind: str, name: str) -> dict[str, Any]:
        return control_plane.read(kind, name, namespace=install.NAMESPACE)

    (container,) = read("deployment", install.DEPLOYMENT)["spec"]["template"]["spec"]["containers"]
    # The settings' ConfigMap carries a content hash in its name (kustomize's configMapGenerator).
    (settings,) = [ref["configMapRef"]["name"] for ref in container["envFrom"] if "configMapRef" in ref]
    return float(read("configmap", settings)["data"]["WEBHOOK_RESERVATION_TTL_SECONDS"])


def _jobs(emulator: addons.EmulatorProcess, gang: str) -> list[dict[str, Any]]:
    return demo.fetch_emulator_jobs(emulator.url, pod_uid=gang)


def _live_others(emulator: addons.EmulatorProcess) -> set[int]:
    """The numbers of the jobs that run before a test starts (the others it must never stop)."""
    return {int(j["number"]) for j in demo.fetch_emulator(emulator.url, "/_emulator/jobs") if j["status"] == LIVE}


def _stopped(emulator: addons.EmulatorProcess, numbers: set[int]) -> int:
    return sum(
        1
        for j in demo.fetch_emulator(emulator.url, "/_emulator/jobs")
        if int(j["number"]) in numbers and j["status"] == "TERMINATED"
    )


def _job_pods(plane: controlplane.ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.read("pods", namespace=namespace, labels=f"{JOB_NAME_LABEL}={job}")["items"]
    return items


def _job_condition(plane: controlplane.ControlPlane, namespace: str, job: str) -> str:
    body = plane.read("jobs", job, namespace=namespace)
    done = [c["type"] for c in body.get("status", {}).get("conditions") or () if c.get("status") == "True"]
    return next((kind for kind in ("Complete", "Failed") if kind in done), "")


def test_an_indexed_job_whose_first_attempt_fails_completes_on_its_second(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    marker: Path,
    fault_matrix: FaultMatrix,
) -> None:
    # Rank 0 of the first attempt fails (it is the one that creates the marker); every later rank runs
    # long enough for the reaper (grace 5 s, every 3 s) to have stopped it, had it mistaken its pods.
    command = (
        f'if [ "$NODE_RANK" = 0 ] && mkdir {marker} 2>/dev/null; then echo "first attempt fails"; exit 3; fi;'
        ' echo "rank=$NODE_RANK of $NNODES"; sleep 30'
    )
    others = _live_others(node_emulator)
    app = node_emulator.runner_env()["APP_NAME"]
    container = demo.build_app_container(command=command, gpus=RANK_GPUS, app_name=app, env={"LOG_LEVEL": "INFO"})
    body = real_node_indexed_job("retried", container, labels={"task-type": "Nimbix"})
    body["spec"]["backoffLimit"] = 4
    created = control_plane.kubectl("create", "-n", ns, "-o", "json", "-f", "-", input=json.dumps(body)).stdout
    job_uid = str(json.loads(created)["metadata"]["uid"])
    demo.wait_for(
        lambda: _job_condition(control_plane, ns, "retried"), what="the Job Complete or Failed", timeout=WAIT_SECONDS
    )
    pods = _job_pods(control_plane, ns, "retried")
    by_generation: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_generation.setdefault(annotations_of(pod).get(contract.ANNOTATION_GANG_GENERATION, "?"), []).append(pod)
    summary = {
        generation: sorted(
            (
                p["metadata"]["annotations"][INDEX_ANNOTATION],
                p["status"].get("phase"),
                annotations_of(p)[contract.ANNOTATION_GANG],
            )
            for p in members
        )
        for generation, members in by_generation.items()
    }
    assert _job_condition(control_plane, ns, "retried") == "Complete", summary
    assert sorted(by_generation) == ["1", "2"], summary
    first, second = by_generation["1"], by_generation["2"]
    assert {annotations_of(p)[contract.ANNOTATION_GANG] for p in first} == {job_uid}, summary
    (next_gang,) = {annotations_of(p)[contract.ANNOTATION_GANG] for p in second}
    assert next_gang != job_uid
    assert sorted(p["status"]["phase"] for p in first) == ["Failed"] * PODS, summary
    assert sorted(p["status"]["phase"] for p in second) == ["Succeeded"] * PODS, summary
    first_jobs, second_jobs = _jobs(node_emulator, job_uid), _jobs(node_emulator, next_gang)
    first_states, second_states = [str(j["status"]) for j in first_jobs], [str(j["status"]) for j in second_jobs]
    states = first_states + second_states
    row = fault_matrix.record(
        Row(
            "an Indexed Job whose first generation fails (the next generation's job runs to completion)",
            submitted=max(len(first_states), len(second_states)),
            completed=states.count("COMPLETED"),
            billing_late=states.count(LIVE),  # every pod of both generations has finished by now
            others_stopped=_stopped(node_emulator, others),
            note=f"one job per generation: generation 1's {', '.join(first_states)}; generation 2's"
            f" {', '.join(second_states)}, the Job Complete",
        )
    )
    assert [str(j["status"]) for j in first_jobs] == ["COMPLETED WITH ERROR"], first_jobs
    assert [str(j["status"]) for j in second_jobs] == ["COMPLETED"], second_jobs
    assert [len(submissions(node_emulator, str(j["job_label"]))) for j in first_jobs + second_jobs] == [1, 1]
    assert row.billing_late == 0 and row.others_stopped == 0, row


def group_pod(name: str, container: dict[str, Any], *, group: str, total: int) -> dict[str, Any]:
    body = pod_body(name, container, gated=False)
    body["metadata"]["labels"][KUEUE_GROUP] = group
    body["metadata"]["annotations"] = {KUEUE_TOTAL: str(total)}
    return body


def test_a_gang_with_ranks_missing_holds_its_budget(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
    fault_matrix: FaultMatrix,
) -> None:
    others = _live_others(node_emulator)
    control_plane.kubectl("annotate", "namespace", ns, f"{BUDGET}=8", "--overwrite")
    gpus_gone()
    # The webhook reads no API on a review: wait until its watch has seen the node and the annotation.
    probe = pod_body("seen-probe", app_container(node_emulator, "echo probe", gpus=1), gated=False)
    wait_admitted_as(control_plane, ns, probe, decision="remote", what="the real node without GPUs")
    over = pod_body("seen-probe", app_container(node_emulator, "echo probe", gpus=9), gated=False)
    wait_admitted_as(
        control_plane,
        ns,
        over,
        decision="local",
        warning="kept local by the burst budget",
        what="the namespace's budget of 8 GPUs",
    )
    container = app_container(node_emulator, 'echo "rank 0 started"; sleep 600', gpus=RANK_GPUS)
    control_plane.kubectl(
        "create", "-n", ns, "-f", "-", input=json.dumps(group_pod("lonely", container, group="lonely", total=2))
    )
    admitted_at = time.monotonic()
    pod = find_pod(control_plane, ns, "lonely")
    assert pod is not None
    notes = annotations_of(pod)
    assert (notes[contract.ANNOTATION_DECISION], notes[contract.ANNOTATION_GANG_RANK]) == ("remote", "0"), notes
    assert notes["nimbix-burst.io/remote-gpus"] == str(PODS * RANK_GPUS), notes
    gang = notes[contract.ANNOTATION_GANG]
    demo.wait_for(
        lambda: [str(j["status"]) for j in _jobs(node_emulator, gang)] == [LIVE],
        what="the gang's job running",
        timeout=WAIT_SECONDS,
    )
    (submitted,) = submissions(node_emulator, str(_jobs(node_emulator, gang)[0]["job_label"]))
    assert submitted["body"]["machine"]["nodes"] == PODS  # the whole gang's GPUs, rank 1 or not
    # Past the reservation TTL: rank 1's reservation (were it counted) would have lapsed by now.
    time.sleep(max(0.0, admitted_at + _reservation_ttl(control_plane) + 5 - time.monotonic()))
    bodies = [pod_body(f"solo-{i}", app_container(node_emulator, "sleep 60", gpus=1), gated=False) for i in range(3)]
    for body in bodies:
        body["metadata"]["namespace"] = ns
    created, refused = create_at_once(control_plane, bodies)
    assert refused == []
    decisions = {p["metadata"]["name"]: annotations_of(p).get(contract.ANNOTATION_DECISION) for p in created}
    burst = [name for name, decision in decisions.items() if decision == "remote"]
    live_gpus = PODS * RANK_GPUS * len([j for j in _jobs(node_emulator, gang) if j["status"] == LIVE]) + len(burst)
    states = [str(j["status"]) for j in _jobs(node_emulator, gang)]
    row = fault_matrix.record(
        Row(
            "a gang with ranks missing (rank 0 of 2 created; budget 8; three 1-GPU pods past the reservation TTL)",
            submitted=len(states),
            completed=states.count("COMPLETED"),
            billing_late=0,  # the gang's job runs on, followed by rank 0's pod
            others_stopped=_stopped(node_emulator, others),
            over_budget=max(0, live_gpus - 8),
            note=f"rank 0 counted {notes['nimbix-burst.io/remote-gpus']} GPUs; {len(burst)} of 3 later pods burst",
        )
    )
    assert burst == [], decisions
    assert all(annotations_of(p).get("nimbix-burst.io/budget") for p in created), [annotations_of(p) for p in created]
    assert row.over_budget == 0 and row.others_stopped == 0, row
