"""The demo's building blocks, also used by the e2e tests, the data demo and the benchmarks: a labelled
GPU pod's app container (the runner, its credentials from the namespace's Secret), the placement on the
real node, the emulator for the node, and small readers of the emulator and the pods.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from devplatform import images
from devplatform.cluster import addons, controlplane, node, nodeconfig

GPU = nodeconfig.GPU_RESOURCE
SECRET = "jarvice-credentials"
CONTAINER = "train"
DECISION = "nimbix-burst.io/decision"
REASON = "nimbix-burst.io/reason"
# Fast emulator timings so the demo's remote jobs start within a second.
EMULATOR_ARGS = ("--queue-seconds", "0.5", "--init-seconds", "0.2")
# The runner polls JARVICE this often (the default, 5 s, is for a real cloud).
POLL_SECONDS = "0.5"
# What a local container asks for besides GPUs: the real node has only this machine's cores.
LOCAL_CPU, LOCAL_MEMORY = "100m", "64Mi"
POLL_INTERVAL_SECONDS = 0.2  # wait_for's first re-check
# ... growing to this: a probe is often a kubectl process (~0.1 s of CPU), and a wait of a minute that
# probed five times a second kept a core a quarter busy, beside the e2e sessions it slowed.
POLL_INTERVAL_MAX_SECONDS = 1.0
POLL_INTERVAL_GROWTH = 1.5


def build_real_node_placement(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` plus the node selector and toleration that put a pod on the real node (tainted or not)."""
    key = nodeconfig.REAL_NODE_LABEL
    return {
        **spec,
        "nodeSelector": {**spec.get("nodeSelector", {}), key: "true"},
        "tolerations": [
            *spec.get("tolerations", []),
            {"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        ],
    }


def secret_env() -> list[dict[str, Any]]:
    """The runner's JARVICE credentials, from the Secret `build_secret` writes."""
    return [
        {"name": variable, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": key}}}
        for variable, key in (
            ("JARVICE_USERNAME", "username"),
            ("JARVICE_APIKEY", "apikey"),
            ("JARVICE_API_URL", "url"),
        )
    ]


def _job(name: str, namespace: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A demo Job: one pod, opted in to bursting (the task-type label), never retried."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"task-type": "Nimbix"}}, "spec": pod_spec},
        },
    }


def build_app_container(
    *,
    command: str,
    gpus: int,
    app_name: str,
    name: str = CONTAINER,
    image: str = images.EXAMPLE_APP,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The example app's container: the runner (its ENTRYPOINT) runs APP_COMMAND_ARGS, here or on
    JARVICE, with the credentials from the ``jarvice-credentials`` Secret."""
    plain = {
        "APP_COMMAND_ARGS": command,
        "APP_NAME": app_name,
        "APP_COMMAND": "run",
        "JARVICE_POLL_SECONDS": POLL_SECONDS,
    }
    plain.update(env or {})
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "Never",
        "env": [*({"name": key, "value": value} for key, value in plain.items()), *secret_env()],
        "resources": {
            "limits": {GPU: str(gpus)},
            "requests": {GPU: str(gpus), "cpu": LOCAL_CPU, "memory": LOCAL_MEMORY},
        },
    }


def build_secret(emulator: addons.EmulatorProcess, *, namespace: str) -> dict[str, Any]:
    """The JARVICE credentials Secret; ``url`` is the emulator on the node's gateway."""
    creds = emulator.runner_env()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": namespace},
        "stringData": {
            "username": creds["JARVICE_USERNAME"],
            "apikey": creds["JARVICE_APIKEY"],
            "url": creds["JARVICE_API_URL"],
        },
    }


def build_gateway_accounts_file(emulator: addons.EmulatorProcess, *, paid: Sequence[str] = ("*",)) -> str:
    """The gateway's accounts.json (docs/install.md): the emulator's account, paying for `paid`."""
    creds = emulator.runner_env()
    account: dict[str, Any] = {
        "name": "emulator",
        "username": creds["JARVICE_USERNAME"],
        "apikey": creds["JARVICE_APIKEY"],
        "url": creds["JARVICE_API_URL"],
        "namespaces": list(paid),
    }
    vault = _emulator_vault(emulator.url)
    if vault is not None:  # its vault, logged in to with the account's username and key (the defaults)
        account["vault"] = vault
    return json.dumps({"accounts": [account]})


def _emulator_vault(url: str) -> dict[str, str] | None:
    """The emulator's vault as an account's `vault` entry (docs/install.md), None if it serves none."""
    try:
        info = fetch_emulator(url, "/_emulator/vault")
    except urllib.error.HTTPError as error:
        if error.code == 404:  # started without --vaults-dir
            return None
        raise
    if not info.get("sftp") or not info.get("host_key"):
        return None
    return {"address": str(info["sftp"]), "host_key": str(info["host_key"])}


def build_gateway_accounts(emulator: addons.EmulatorProcess, *, namespace: str, name: str) -> dict[str, Any]:
    """The gateway's accounts Secret, the emulator's account paying for every namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {"accounts.json": build_gateway_accounts_file(emulator)},
    }


def start_emulator_for_node(run_dir: Path, real_node: node.RealNode, *, vaults: bool = False) -> addons.EmulatorProcess:
    """The JARVICE emulator on the node's gateway address, where runners in pods reach it; with
    `vaults`, its vault too (SFTP on the same address; jobs in private roots, as root). The example
    application's image environment is the base image's (its JARVICE_SIGNAL_OVERRIDE), as on dev-up."""
    args: tuple[str, ...] = (*EMULATOR_ARGS, *addons.SIGNAL_OVERRIDE_ARGS)
    if vaults:
        args = (*args, "--vaults-dir", str(run_dir / "vaults"))
    return addons.start_jarvice_emulator(run_dir, host=real_node.gateway_address, args=args)


def fetch_emulator(url: str, path: str) -> Any:
    """GET one of the emulator's test controls (``/_emulator/jobs``, ``/_emulator/submissions``)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url + path, timeout=10) as response:
        return json.loads(response.read())


def fetch_emulator_jobs(url: str, *, pod_uid: str) -> list[dict[str, Any]]:
    """The emulator's jobs whose label names this pod (``k8s-[<cluster>.]<uid>-...``: the UID is whole)."""
    return [job for job in fetch_emulator(url, "/_emulator/jobs") if pod_uid in str(job.get("job_label", ""))]


def read_pod(plane: controlplane.ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return plane.read("pods", name, namespace=namespace)


def read_exit_code(pod: Mapping[str, Any]) -> int | None:
    """``status.containerStatuses[0].state.terminated.exitCode``, or None while it runs."""
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    terminated = statuses[0].get("state", {}).get("terminated")
    return None if terminated is None else int(terminated["exitCode"])


def poll_intervals() -> Iterator[float]:
    """The pauses between a wait's probes: quick at first, then at most POLL_INTERVAL_MAX_SECONDS."""
    interval = POLL_INTERVAL_SECONDS
    while True:
        yield interval
        interval = min(interval * POLL_INTERVAL_GROWTH, POLL_INTERVAL_MAX_SECONDS)


def wait_for(
    probe: Callable[[], Any],
    *,
    what: str,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """``probe()``'s first true value; TimeoutError once ``timeout`` seconds pass without one (the
    probe runs once more at the deadline)."""
    deadline, pauses = clock() + timeout, poll_intervals()
    while True:
        value = probe()
        if value:
            return value
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError(f"no {what} after {timeout:g} s")
        sleep(min(next(pauses), left))
