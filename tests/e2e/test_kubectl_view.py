"""A burst pod's JARVICE job as a user sees it with kubectl: its Events and annotations (written by
the installed controller, leader only), the decision label (`kubectl get pods -l`), and the
`kubectl nimbix` plugin (the installed console script, against the test control plane's kubeconfig).

The pod runs on the real node; its runner submits to the JARVICE emulator, whose job list is what
the controller reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane
from tests.support.installed_controller import (
    BUDGET,
    annotations_of,
    app_container,
    controller_leader,
    controller_pods,
    create_pod,
    find_pod,
    pod_body,
)
from tests.support.real_node_pods import wait_log

# About replicas: job Events are counted by the controller's leader only, not its follower.
pytestmark = pytest.mark.addon_replicas(2)

WAIT_SECONDS = 120.0
JOB_SECONDS = 15  # what the burst pod's command sleeps
PLUGIN = Path(sys.executable).parent / "kubectl-nimbix"
STAGE = "nimbix-burst.io/stage"


def _events(plane: controlplane.ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    document = json.loads(
        plane.kubectl(
            "-n", namespace, "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
        ).stdout
    )
    return [e for e in document["items"] if str(e.get("reason", "")).startswith("Nimbix")]


def _job_events_counted(pod: dict[str, Any]) -> float:
    """nimbix_burst_controller_job_events_total of one replica (all reasons), from its /metrics."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{pod['status']['podIP']}:8080/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("nimbix_burst_controller_job_events_total")
    )


def _jarvice(emulator: addons.EmulatorProcess, endpoint: str, **params: str) -> Any:
    """A JARVICE API call as the controller makes it, with the runners' credentials."""
    env = emulator.runner_env()
    query = urllib.parse.urlencode({"username": env["JARVICE_USERNAME"], "apikey": env["JARVICE_APIKEY"], **params})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{env['JARVICE_API_URL'].rstrip('/')}/jarvice/{endpoint}?{query}", timeout=10) as response:
        return json.loads(response.read())


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


def test_a_burst_pods_events_name_its_jarvice_job_and_kubectl_nimbix_shows_it(
    controller: None, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    control_plane.kubectl("annotate", "namespace", ns, f"{BUDGET}=16")
    # More GPUs than the node has: remote. Long enough to be seen running, then it succeeds.
    app = app_container(node_emulator, f'echo "viewed started"; sleep {JOB_SECONDS}; echo "viewed done"', gpus=8)
    began = time.time()
    create_pod(control_plane, ns, pod_body("viewed", app, gated=False))
    wait_log(control_plane, ns, "viewed", "viewed started")

    selected = control_plane.kubectl("-n", ns, "get", "pods", "-l", "nimbix-burst.io/decision=remote", "-o", "name")
    assert selected.stdout.split() == ["pod/viewed"]
    pod = find_pod(control_plane, ns, "viewed")
    assert pod is not None
    (job,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"])
    number = int(job["number"])

    stages: list[str] = []  # the pod's stage annotation (controller.stages) as it changes

    def running_seen() -> bool:
        stage = annotations_of(find_pod(control_plane, ns, "viewed") or {"metadata": {}}).get(STAGE, "")
        if stage and stage not in stages[-1:]:
            stages.append(stage)
        return "NimbixRunning" in {e["reason"] for e in _events(control_plane, ns, "viewed")} and "running" in stages

    demo.wait_for(running_seen, what="a NimbixRunning Event and the running stage on the pod", timeout=WAIT_SECONDS)
    (row,) = [r for r in json.loads(_plugin(control_plane, "budget", "-o", "json")) if r["namespace"] == ns]
    assert {key: row[key] for key in ("budget", "in_use", "free", "burst_pods")} == {
        "budget": "16",
        "in_use": 8,
        "free": "8",
        "burst_pods": 1,
    }

    demo.wait_for(
        lambda: "NimbixSucceeded" in {e["reason"] for e in _events(control_plane, ns, "viewed")},
        what="a NimbixSucceeded Event on the pod",
        timeout=WAIT_SECONDS,
    )
    ended = time.time()
    events = {e["reason"]: e for e in _events(control_plane, ns, "viewed")}
    assert sorted(events) == ["NimbixRunning", "NimbixSubmitted", "NimbixSucceeded"]
    assert all(e.get("count", 1) == 1 for e in events.values())
    assert f"JARVICE job {number} submitted" in events["NimbixSubmitted"]["message"]
    assert f"JARVICE job {number} COMPLETED, exit code 0" in events["NimbixSucceeded"]["message"]
    described = control_plane.kubectl("-n", ns, "describe", "pod", "viewed").stdout
    assert f"JARVICE job {number}" in described

    annotations = annotations_of(find_pod(control_plane, ns, "viewed") or {"metadata": {}})
    assert annotations["nimbix-burst.io/job-number"] == str(number)
    assert annotations["nimbix-burst.io/jobs"] == f"{number}=succeeded"
    # The job's GPU-hours and cost: its machine's GPUs and price (JARVICE's machine list) times the hours
    # JARVICE says it ran, which the command's sleep and this test's own clock bound (whole seconds).
    status = _jarvice(node_emulator, "status", number=str(number))[str(number)]
    ran = status["job_end_time"] - status["job_start_time"]
    assert JOB_SECONDS - 1 <= ran <= ended - began + 1, (status, ended - began)
    machine = _jarvice(node_emulator, "machines", name=job["machine"])[job["machine"]]
    hours = ran / 3600
    money = {
        "nimbix-burst.io/gpu-hours": f"{machine['mc_gpus'] * hours:.2f}",
        "nimbix-burst.io/cost": f"{machine['mc_price'] * hours:.2f}",
    }
    assert all(float(figure) > 0 for figure in money.values()), (money, machine)
    demo.wait_for(
        lambda: all(
            annotations_of(find_pod(control_plane, ns, "viewed") or {"metadata": {}}).get(key) == figure
            for key, figure in money.items()
        ),
        what=f"the pod's GPU-hours and cost {money}",
        timeout=30,
    )
    annotations = annotations_of(find_pod(control_plane, ns, "viewed") or {"metadata": {}})

    (row,) = json.loads(_plugin(control_plane, "status", "-n", ns, "-o", "json"))
    assert (row["name"], row["decision"], row["job"], row["state"]) == ("viewed", "remote", str(number), "succeeded")
    assert row["machine"] == f"{job['machine']} x1" and row["cost"] == annotations["nimbix-burst.io/cost"]
    table = _plugin(control_plane, "status", "-A")
    assert any(line.split()[:5] == [ns, "viewed", "remote", str(number), "succeeded"] for line in table.splitlines())
    explained = _plugin(control_plane, "explain", "viewed", "-n", ns)
    assert "Decision:" in explained and "remote" in explained and str(number) in explained
    wait_log(control_plane, ns, "viewed", "viewed done")
    demo.wait_for(
        lambda: annotations_of(find_pod(control_plane, ns, "viewed") or {"metadata": {}}).get(STAGE) == "ended",
        what="the ended stage on the finished pod",
        timeout=30,
    )
    # A pod that stages no data: no data stage, so no Event beyond its job's.
    assert not {"staging-in", "copying-back"} & set(stages), stages

    # Only the Lease holder recorded (the follower's counter has not moved).
    leader = controller_leader(control_plane)
    counted = {pod["metadata"]["name"]: _job_events_counted(pod) for pod in controller_pods(control_plane)}
    assert counted[leader] >= 3 and sum(counted.values()) == counted[leader], counted
