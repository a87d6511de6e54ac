"""Caps in money on the real node with the installed add-on (two webhook replicas, the controller writing
its spend record from the emulator's JARVICE), driven through kubectl and the emulator's API only.

The emulator's 1-GPU machines cost 2.10 and 3.20 an hour: a 1-GPU burst is counted at 3.20 (the dearest
of its size, docs/decision.md "Caps in money"), so against `max-cost-per-hour: "5"` one burst fits and a
second would not.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install
from jarvice import contract
from tests.support.fault_matrix import FaultMatrix, Row
from tests.support.installed_controller import annotations_of, app_container, pod_body, wait_admitted_as
from tests.support.webhook_replicas import create_at_once

CAP = "nimbix-burst.io/max-cost-per-hour"
LIVE = ("SUBMITTED", "PROCESSING STARTING")  # JARVICE job_status values of a job not ended
WAIT_SECONDS = 120.0


def _prices(emulator: addons.EmulatorProcess) -> dict[str, float]:
    """mc_price per node-hour of every machine, as /jarvice/machines says (the account's own call)."""
    env = emulator.runner_env()
    query = urllib.parse.urlencode({"username": env["JARVICE_USERNAME"], "apikey": env["JARVICE_APIKEY"]})
    machines = demo.fetch_emulator(emulator.url, f"/jarvice/machines?{query}")
    return {str(name): float(entry["mc_price"]) for name, entry in machines.items()}


def _live_cost(emulator: addons.EmulatorProcess, uids: list[str], prices: dict[str, float]) -> float:
    total = 0.0
    for uid in uids:
        for job in demo.fetch_emulator_jobs(emulator.url, pod_uid=uid):
            if job["status"] in LIVE:
                total += prices.get(str(job.get("machine", "")), 0.0) * max(1, len(job.get("nodes") or ()))
    return total


@pytest.fixture
def capped(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> str:
    """The namespace with `max-cost-per-hour: "5"`, the real node's GPUs taken, and the webhook holding a
    fresh spend record (a 1-GPU probe would burst: the record is read and the cap leaves room)."""
    control_plane.kubectl("annotate", "namespace", ns, f"{CAP}=5", "--overwrite")
    gpus_gone()
    demo.wait_for(
        lambda: (
            control_plane.kubectl(
                "-n", install.NAMESPACE, "get", "configmap", "nimbix-burst-spend", check=False
            ).returncode
            == 0
        ),
        what="the controller's spend record",
        timeout=WAIT_SECONDS,
    )
    one = pod_body("seen-probe", app_container(node_emulator, "echo probe", gpus=1), gated=False)
    wait_admitted_as(control_plane, ns, one, decision="remote", what="the spend record and the node without GPUs")
    return ns


def _bodies(emulator: addons.EmulatorProcess, ns: str, count: int, prefix: str) -> list[dict[str, Any]]:
    bodies = []
    for i in range(count):
        body = pod_body(
            f"{prefix}-{i}", app_container(emulator, f'echo "{prefix}-{i} started"; sleep 30', gpus=1), gated=False
        )
        body["metadata"]["namespace"] = ns
        bodies.append(body)
    return bodies


def _race(
    fault: str,
    count: int,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    prices = _prices(node_emulator)
    created, errors = create_at_once(control_plane, _bodies(node_emulator, ns, count, "cap"))
    assert not errors, errors
    burst = [p for p in created if annotations_of(p).get(contract.ANNOTATION_DECISION) == "remote"]
    kept = [p for p in created if annotations_of(p).get(contract.ANNOTATION_DECISION) == "local"]
    assert burst, [annotations_of(p) for p in created]
    for pod in kept:
        reason = annotations_of(pod)["nimbix-burst.io/budget"]
        assert f"{CAP} of namespace {ns} is 5.00" in reason and "an hour" in reason, reason
    uids = [str(p["metadata"]["uid"]) for p in created]
    # The live jobs' cost, sampled until every burst pod's job ran and ended.
    peak, deadline = 0.0, time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        peak = max(peak, _live_cost(node_emulator, uids, prices))
        done = all(
            any(
                job["status"] in ("COMPLETED", "COMPLETED WITH ERROR", "TERMINATED")
                for job in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=str(p["metadata"]["uid"]))
            )
            for p in burst
        )
        if done:
            break
        time.sleep(1)
    per_pod = [len(demo.fetch_emulator_jobs(node_emulator.url, pod_uid=uid)) for uid in uids]
    row = fault_matrix.record(
        Row(
            fault,
            submitted=max(per_pod),  # jobs for one pod: 1 at most (none run twice)
            completed=0,
            billing_late=0,
            over_budget=0,
            note=(
                f"{len(burst)} burst, {len(kept)} kept local naming the cap; {sum(per_pod)} job(s) in all;"
                f" peak live cost {peak:.2f}/h of 5.00"
            ),
        )
    )
    assert peak <= 5.0 + 1e-6, row
    assert sum(per_pod) == len(burst), row


def test_three_one_gpu_pods_against_five_an_hour(
    capped: str,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
) -> None:
    _race("three 1-GPU pods at once against max-cost-per-hour 5", 3, fault_matrix, control_plane, node_emulator, capped)


def test_24_pods_race_against_a_cost_cap_with_two_replicas(
    capped: str,
    installed_addon: install.Installed,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
) -> None:
    assert len(install.read_serving_pods(control_plane, install.APP_SELECTOR)) == install.REPLICAS
    _race(
        "24 one-GPU pods race against max-cost-per-hour 5 (two replicas)",
        24,
        fault_matrix,
        control_plane,
        node_emulator,
        capped,
    )
