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
    "CONTROLLER_SPEND_INTERVAL_SECONDS": "2",
    # Off but where a module turns it on (test_burst_after.py): the other modules' burst pods whose jobs
    # queue for a moment must not come home under them when the real node's GPUs are back.
    "CONTROLLER_HOMECOMING": "false",
}


def gateway_pays_with(plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess) -> None:
    """The gateway's accounts Secret for `emulator` (every namespace paid by it, as `make dev-up` has it), and
    the gateway restarted to read it."""
    secret = demo.build_gateway_accounts(emulator, namespace=install.NAMESPACE, name=install.GATEWAY_ACCOUNTS_SECRET)
    plane.kubectl("apply", "-f", "-", input=json.dumps(secret))
    deployment = f"deployment/{install.GATEWAY_DEPLOYMENT}"
    plane.kubectl("-n", install.NAMESPACE, "rollout", "restart", deployment)
    plane.kubectl("-n", install.NAMESPACE, "rollout", "status", deployment, "--timeout=180s")


def configure_controller(plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, *, replicas: int) -> None:
    """The installed controller given the reaper's Secret (`emulator`) and CONTROLLER_ENV's thresholds; rolled
    out with its `replicas` Ready and one of them holding the Lease."""
    secret = demo.build_secret(emulator, namespace=install.NAMESPACE)
    secret["metadata"]["name"] = CONTROLLER_SECRET
    plane.kubectl("apply", "-f", "-", input=json.dumps(secret))
    deployment = f"deployment/{CONTROLLER}"
    plane.kubectl("-n", install.NAMESPACE, "set", "env", deployment, *(f"{k}={v}" for k, v in CONTROLLER_ENV.items()))
    # The controller reads its Secret only at start, and `set env` with the values an earlier user already set
    # rolls nothing out: restart it so it talks to this emulator.
    plane.kubectl("-n", install.NAMESPACE, "rollout", "restart", deployment)
    plane.kubectl("-n", install.NAMESPACE, "rollout", "status", deployment, "--timeout=180s")
    demo.wait_for(lambda: len(controller_pods(plane)) == replicas, what="the controller pods Ready", timeout=60)
    demo.wait_for(lambda: controller_leader(plane), what="a controller leader", timeout=60)


# deploy/controller.yaml's value of the settings CONTROLLER_ENV turns on that need the reaper's Secret: on only
# when it is there.
SHIPPED_WHEN_SECRET = {"CONTROLLER_REAP_ORPHANS": "auto", "CONTROLLER_JOB_EVENTS": "auto"}


def release_controller(plane: controlplane.ControlPlane) -> None:
    """The reaper's Secret deleted (its emulator goes with the module) and the settings that need it back to
    deploy/'s `auto`, so a controller pod that starts later (the add-on scaled up for the next module) runs
    without it rather than failing its start. The rollout is not waited for: whatever uses the controller
    next waits for its Deployment."""
    plane.kubectl("-n", install.NAMESPACE, "delete", "secret", CONTROLLER_SECRET, "--ignore-not-found")
    deployment = f"deployment/{CONTROLLER}"
    plane.kubectl(
        "-n", install.NAMESPACE, "set", "env", deployment, *(f"{k}={v}" for k, v in SHIPPED_WHEN_SECRET.items())
    )


def controller_pods(plane: controlplane.ControlPlane) -> list[dict[str, Any]]:
    return install.read_serving_pods(plane, CONTROLLER_SELECTOR)


def controller_leader(plane: controlplane.ControlPlane) -> str:
    holder = install.read_lease_holder(plane, CONTROLLER_LEASE)
    return holder if holder in {p["metadata"]["name"] for p in controller_pods(plane)} else ""


def turn_homecoming_on(plane: controlplane.ControlPlane, *, every_seconds: int, replicas: int) -> None:
    """The installed controller with homecoming on, looked at every `every_seconds` (`kubectl set env`, as
    docs/controller.md says), rolled out with its `replicas` Ready; the next module's `controller` fixture
    sets its own values again."""
    deployment = f"deployment/{CONTROLLER}"
    env = {"CONTROLLER_HOMECOMING": "true", "CONTROLLER_HOMECOMING_SECONDS": str(every_seconds)}
    plane.kubectl("-n", install.NAMESPACE, "set", "env", deployment, *(f"{k}={v}" for k, v in env.items()))
    plane.kubectl("-n", install.NAMESPACE, "rollout", "status", deployment, "--timeout=180s")
    demo.wait_for(lambda: len(controller_pods(plane)) == replicas, what="the controller pods Ready", timeout=60)
    demo.wait_for(lambda: controller_leader(plane), what="a controller leader", timeout=60)


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
    return plane.read("pods", name, namespace=namespace, missing_ok=True) or None


# A probe the API server admits but never stores (`kubectl create --dry-run=server`): the webhook decides it
# as it would the real pod (sideEffects None: no reservation, nothing counted), so it shows what the
# webhook's cache has seen, e.g. a namespace's new annotation or a node's changed GPUs.
SEEN_TIMEOUT_SECONDS = 60.0


def dry_run_admission(
    plane: controlplane.ControlPlane, namespace: str, body: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """The pod as the admission left it, and kubectl's stderr (its warnings); nothing is created."""
    result = plane.kubectl(
        "-n", namespace, "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(body)
    )
    return json.loads(result.stdout), result.stderr


def wait_admitted_as(
    plane: controlplane.ControlPlane,
    namespace: str,
    body: dict[str, Any],
    *,
    decision: str,
    what: str,
    warning: str = "",
    annotation: tuple[str, str] = ("", ""),
) -> None:
    """Polls dry-run admissions of `body` until the webhook decides `decision` (with `warning` among
    kubectl's warnings and `annotation`'s value containing its text, when given): the webhook's watch has
    seen `what`."""
    key, text = annotation

    def admitted_as_wanted() -> bool:
        pod, warnings = plane.dry_run_create(namespace, body)  # a probe, not what a user types: no kubectl
        annotations = annotations_of(pod)
        return (
            annotations.get("nimbix-burst.io/decision") == decision
            and warning in warnings
            and (not key or text in annotations.get(key, ""))
        )

    demo.wait_for(admitted_as_wanted, what=f"the webhook's watch seeing {what}", timeout=SEEN_TIMEOUT_SECONDS)
