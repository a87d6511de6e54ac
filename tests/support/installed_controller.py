"""The burst controller as the add-on installs it, configured as docs/controller.md tells a user to (the
reaper's Secret, shorter thresholds with `kubectl set env`), and the pods the e2e tests give it."""

from __future__ import annotations

import json
from typing import Any

from devplatform import demo
from devplatform.cluster import addons, controlplane, install

HOLD = "nimbix-burst.io/e2e-hold"
CONTROLLER = "nimbix-burst-controller"
CONTROLLER_SELECTOR = "app.kubernetes.io/name=nimbix-burst-controller"
CONTROLLER_LEASE = "nimbix-burst-controller-leader"
CONTROLLER_SECRET = "nimbix-burst-controller-jarvice"
BUDGET = "nimbix-burst.io/max-remote-gpus"
STRANDED_SECONDS = 5
ORPHAN_GRACE_SECONDS = 5
ORPHAN_INTERVAL_SECONDS = 3
# What the user sets with `kubectl set env` (docs/controller.md): short enough for a test.
CONTROLLER_ENV = {
    "CONTROLLER_STRANDED_SECONDS": str(STRANDED_SECONDS),
    "CONTROLLER_SCAN_SECONDS": "1",
    "CONTROLLER_ORPHAN_INTERVAL_SECONDS": str(ORPHAN_INTERVAL_SECONDS),
    "CONTROLLER_ORPHAN_GRACE_SECONDS": str(ORPHAN_GRACE_SECONDS),
    "CONTROLLER_REAP_ORPHANS": "true",  # fail the rollout, rather than reap nothing, if the Secret is not mounted
    "CONTROLLER_JOB_EVENTS": "true",  # likewise for the Events of burst pods' jobs
    "CONTROLLER_JOB_EVENTS_INTERVAL_SECONDS": "2",
    # Off but where a module turns it on (test_burst_after.py): the other modules' burst pods whose jobs
    # queue for a moment must not come home under them when the real node's GPUs are back.
    "CONTROLLER_HOMECOMING": "false",
}


def controller_pods(plane: controlplane.ControlPlane) -> list[dict[str, Any]]:
    return install.read_serving_pods(plane, CONTROLLER_SELECTOR)


def controller_leader(plane: controlplane.ControlPlane) -> str:
    holder = install.read_lease_holder(plane, CONTROLLER_LEASE)
    return holder if holder in {p["metadata"]["name"] for p in controller_pods(plane)} else ""


def annotations_of(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def app_container(node_emulator: addons.EmulatorProcess, command: str, *, gpus: int) -> dict[str, Any]:
    return demo.build_app_container(command=command, gpus=gpus, app_name=node_emulator.runner_env()["APP_NAME"])


def pod_body(name: str, container: dict[str, Any], *, gated: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if gated:
        spec["schedulingGates"] = [{"name": HOLD}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"task-type": "Nimbix"}},
        "spec": demo.build_real_node_placement(spec),
    }


def create_pod(plane: controlplane.ControlPlane, namespace: str, body: dict[str, Any]) -> str:
    """kubectl create, as a user does; returns what kubectl printed on stderr (the admission warnings)."""
    return plane.kubectl("-n", namespace, "create", "-f", "-", input=json.dumps(body)).stderr


def find_pod(plane: controlplane.ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    result = plane.kubectl("-n", namespace, "get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None
