"""Pods on the real node as a user creates them with kubectl, and the runner's process seen from the
host: build, create, read, wait for a log line or the end, find the runner's PID, sample its memory."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from devplatform import demo
from devplatform.cluster import addons, controlplane, nodeconfig
from tests.support import cgroups
from tests.support.gpus import GPU

WAIT_SECONDS = 120.0


def gpu_holder(name: str, *, gpus: int) -> dict[str, Any]:
    """A plain pod (no task-type label: the product leaves it alone) that holds `gpus` of the real node's GPUs."""
    container = {
        "name": "hold",
        "image": demo.build_app_container(command="", gpus=gpus, app_name="")["image"],
        "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
        "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}},
    }
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": demo.build_real_node_placement(spec)}


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
        lambda: text in plane.read_log(namespace, name),
        what=f"{text!r} in the logs of {name}",
        timeout=WAIT_SECONDS,
    )


def python_module_pids(module: str, *, env: str) -> Iterator[int]:
    """PIDs (on this host) of ``python -m <module>`` whose environment holds ``env`` (``NAME=value``)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "cmdline").read_bytes().split(b"\0")[:3] != [b"python", b"-m", module.encode()]:
                continue
            if env.encode() in (proc / "environ").read_bytes().split(b"\0"):
                yield int(proc.name)
        except OSError:
            continue  # ended while being looked at


def runner_pid(pod_uid: str) -> int | None:
    """The runner (``python -m entrypoint``, PID 1 of its container) of this pod, from /proc."""
    for pid in python_module_pids("entrypoint", env=f"POD_UID={pod_uid}"):
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            ns_pids = next(line for line in status if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if ns_pids.split()[-1] == "1":
            return pid
    return None


class RunnerMemory:
    """Samples the memory of a pod's runner from the host, every `interval` seconds until stopped: its
    peak RSS (VmHWM, KiB) and its container's memory cgroup (peak and limit, bytes; cgroup v1 or v2)."""

    def __init__(self, pod_uid: str, *, interval: float) -> None:
        self.pod_uid, self.interval = pod_uid, interval
        self.vm_hwm_kib = 0
        self.cgroup_peak = 0
        self.cgroup_limit = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            pid = runner_pid(self.pod_uid)
            if pid is not None:
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    hwm = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
                    self.vm_hwm_kib = max(self.vm_hwm_kib, int(hwm.split()[1]))
                    memory = cgroups.read_memory(pid)
                    if memory is not None:
                        self.cgroup_peak = max(self.cgroup_peak, memory[0])
                        self.cgroup_limit = memory[1]
                except (OSError, StopIteration, ValueError):
                    pass  # the runner is starting or has gone: the next sample tells
            self._stop.wait(self.interval)


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
