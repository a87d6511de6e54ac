"""Pods on the real node as a user creates them with kubectl, and the runner's process seen from the
host: build, create, read, wait for a log line or the end, find the runner's PID."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devplatform import demo
from devplatform.cluster import addons, controlplane, nodeconfig

WAIT_SECONDS = 120.0


def gpu_pod(
    name: str, command: str, *, gpus: int, app_name: str, restart: str = "Never", env: dict[str, str] | None = None
) -> dict[str, Any]:
    container = demo.build_app_container(command=command, gpus=gpus, app_name=app_name, env=env)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"task-type": "Nimbix"}},
        "spec": demo.build_real_node_placement({"restartPolicy": restart, "containers": [container]}),
    }


def burst_pod(name: str, command: str, node_emulator: addons.EmulatorProcess, **kwargs: Any) -> dict[str, Any]:
    """More GPUs than the real node has (4): decided remote whatever else runs."""
    return gpu_pod(name, command, gpus=8, app_name=node_emulator.runner_env()["APP_NAME"], **kwargs)


def create(plane: controlplane.ControlPlane, namespace: str, *pods: dict[str, Any]) -> None:
    plane.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(pods)}),
    )


def get_pod(plane: controlplane.ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return demo.read_pod(plane, namespace, name)


def wait_finished(plane: controlplane.ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = demo.wait_for(
        lambda: (pod := get_pod(plane, namespace, name))["status"].get("phase") in ("Succeeded", "Failed") and pod,
        what=f"pod {name} finished",
        timeout=WAIT_SECONDS,
    )
    return result


def wait_log(plane: controlplane.ControlPlane, namespace: str, name: str, text: str) -> None:
    demo.wait_for(
        lambda: text in plane.kubectl("logs", "-n", namespace, name, check=False).stdout,
        what=f"{text!r} in the logs of {name}",
        timeout=WAIT_SECONDS,
    )


def runner_pid(pod_uid: str) -> int | None:
    """The runner (``python -m entrypoint``, PID 1 of its container) of this pod, from /proc."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "cmdline").read_bytes().split(b"\0")[:3] != [b"python", b"-m", b"entrypoint"]:
                continue
            if f"POD_UID={pod_uid}".encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            ns_pids = next(line for line in (proc / "status").read_text().splitlines() if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if ns_pids.split()[-1] == "1":
            return int(proc.name)
    return None


def real_node_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` plus the toleration and node selector that put a pod on the real node."""
    key = nodeconfig.REAL_NODE_LABEL
    return {
        **spec,
        "nodeSelector": {**spec.get("nodeSelector", {}), key: "true"},
        "tolerations": [
            *spec.get("tolerations", []),
            {"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        ],
    }
