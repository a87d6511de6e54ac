"""The spend record as a user sees it: a burst pod's JARVICE job counted by the installed controller
(leader only) in the ConfigMap `nimbix-burst-spend`, in its metrics, and in `kubectl nimbix budget`,
while it runs (GPUs, cost per hour, worst case) and after it ended (this month's recorded cost).

The pod runs on the real node; its runner submits to the JARVICE emulator, whose job list (and
machine prices) is what the controller reads. The emulator reports no `job_price`: an ended job
costs `mc_price` x nodes x the hours it ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install
from kubeplumbing.spendrecord import (
    ANNOTATION_MAX_COST_PER_HOUR,
    ANNOTATION_MAX_COST_PER_MONTH,
    CONFIGMAP_NAME,
    RECORD_KEY,
)
from tests.support.installed_controller import (
    annotations_of,
    app_container,
    controller_leader,
    controller_pods,
    create_pod,
    find_pod,
    pod_body,
    wait_admitted_as,
)
from tests.support.real_node_pods import wait_log

# About replicas: the spend is written and counted by the controller's leader only, not its follower.
pytestmark = pytest.mark.addon_replicas(2)

WAIT_SECONDS = 120.0
PLUGIN = Path(sys.executable).parent / "kubectl-nimbix"


def _record(plane: controlplane.ControlPlane) -> dict[str, Any] | None:
    data = plane.read("configmaps", CONFIGMAP_NAME, namespace=install.NAMESPACE, missing_ok=True).get("data") or {}
    return json.loads(data[RECORD_KEY]) if RECORD_KEY in data else None


def _spend_of(plane: controlplane.ControlPlane, namespace: str) -> dict[str, Any]:
    record = _record(plane) or {}
    spend: dict[str, Any] = (record.get("namespaces") or {}).get(namespace) or {}
    return spend


def _metric(pod: dict[str, Any], name: str, namespace: str) -> float | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{pod['status']['podIP']}:8080/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    wanted = f'{name}{{namespace="{namespace}"}}'
    values = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(wanted + " ")]
    return values[0] if values else None


def _plugin(plane: controlplane.ControlPlane, *args: str) -> str:
    result = subprocess.run(
        [str(PLUGIN), *args, "--kubeconfig", str(plane.kubeconfig_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _budget_row(plane: controlplane.ControlPlane, namespace: str) -> dict[str, Any]:
    (row,) = [r for r in json.loads(_plugin(plane, "budget", "-o", "json")) if r["namespace"] == namespace]
    return dict(row)


def test_a_burst_jobs_spend_is_in_the_record_the_metrics_and_kubectl_nimbix_budget(
    controller: None, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    control_plane.kubectl(
        "annotate", "namespace", ns, f"{ANNOTATION_MAX_COST_PER_HOUR}=100", f"{ANNOTATION_MAX_COST_PER_MONTH}=1000"
    )
    # More GPUs than the node has: remote. Long enough to be counted while it runs.
    app = app_container(node_emulator, 'echo "spent started"; sleep 20; echo "spent done"', gpus=8)
    body = pod_body("spent", app, gated=False)
    # A capped namespace's pod is kept local (never refused) until the webhook holds the controller's
    # spend record, which the controller just restarted writes in its first rounds: dry runs until then.
    wait_admitted_as(control_plane, ns, body, decision="remote", what="the controller's spend record")
    create_pod(control_plane, ns, body)
    wait_log(control_plane, ns, "spent", "spent started")
    pod = find_pod(control_plane, ns, "spent")
    assert pod is not None and annotations_of(pod)["nimbix-burst.io/decision"] == "remote"
    uid = pod["metadata"]["uid"]
    (job,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=uid)

    def running() -> dict[str, Any] | None:
        spend = _spend_of(control_plane, ns)
        return spend if spend.get("cost_per_hour", 0) > 0 else None

    live = demo.wait_for(
        running,
        what="the running job's cost per hour in the spend record",
        timeout=WAIT_SECONDS,
    )
    record = _record(control_plane)
    assert record is not None
    price = record["machines"][job["machine"]]["price"]
    gpus = record["machines"][job["machine"]]["gpus"]
    assert price > 0 and gpus >= 8
    assert live["pods"][uid]["gpus"] == gpus and live["cost_per_hour"] == price
    # Worst case: price x nodes x the walltime (the webhook's default, 24 h, here).
    assert live["pods"][uid]["worst_case"] >= price and live["month_worst_case"] >= live["pods"][uid]["worst_case"]

    leader = controller_leader(control_plane)
    by_name = {p["metadata"]["name"]: p for p in controller_pods(control_plane)}
    assert _metric(by_name[leader], "nimbix_burst_namespace_cost_per_hour", ns) == price
    assert _metric(by_name[leader], "nimbix_burst_namespace_cost_cap_per_hour", ns) == 100.0
    (follower,) = [name for name in by_name if name != leader]
    assert _metric(by_name[follower], "nimbix_burst_namespace_cost_per_hour", ns) is None  # only the leader counts

    row = _budget_row(control_plane, ns)
    assert (row["jarvice_gpus"], row["cap_per_hour"], row["cap_per_month"]) == (str(gpus), "100.00", "1000.00")
    assert float(row["cost_per_hour"]) > 0 and float(row["month_cost"]) > 0
    assert row["spend_age_seconds"] is not None and row["spend_age_seconds"] < WAIT_SECONDS
    table = _plugin(control_plane, "budget")
    assert any(line.split()[:1] == [ns] for line in table.splitlines())
    assert "Spend as JARVICE listed it" in table

    wait_log(control_plane, ns, "spent", "spent done")

    def recorded() -> dict[str, Any] | None:
        spend = _spend_of(control_plane, ns)
        return spend if spend.get("month_recorded", 0) > 0 and not spend.get("pods") else None

    ended = demo.wait_for(
        recorded,
        what="the ended job's cost recorded for the month",
        timeout=WAIT_SECONDS,
    )
    assert ended["cost_per_hour"] == 0 and ended["month_worst_case"] == ended["month_recorded"]
    # Price x nodes x hours run: at least the 20 s the command slept.
    assert ended["month_recorded"] >= round(price * 20 / 3600, 4)
    row = _budget_row(control_plane, ns)
    assert float(row["month_cost"]) > 0 and row["cost_per_hour"] == "0.00"
    print(
        f"\nreal node, installed controller: job {job['number']} on {job['machine']} counted at {price}/h,"
        f" month recorded {ended['month_recorded']}"
    )
