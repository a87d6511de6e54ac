"""The data path on the dev cluster and in `make demo`: the emulator's vault, put where
docs/data.md tells a user to put a vault's address and host key, and a burst Job whose input goes
out through the vault and whose output comes back to a PersistentVolumeClaim.

- **Where the vault is.** A ConfigMap `jarvice-vault` in the namespace: `sftp` (host:port, which
  `NIMBIX_BURST_VAULT_SFTP` reads through a configMapKeyRef) and `known_hosts` (mounted, named by
  `NIMBIX_BURST_VAULT_KNOWN_HOSTS`). On JARVICE itself `sftp` is left out (the API's host, port 22).
- **The volume.** A hostPath PersistentVolume bound to one claim, so what the Job writes back is a
  directory of this machine the demo prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devplatform import demo_pods as demo
from devplatform.cluster import addons, controlplane

VAULT_CONFIG = "jarvice-vault"
VAULT_MOUNT = "/etc/nimbix-vault"
CLAIM = "training-data"
STAGE_IN = "nimbix-burst.io/stage-in"
STAGE_OUT = "nimbix-burst.io/stage-out"
JOB = "staged"
JOB_TIMEOUT_SECONDS = 180.0
INPUTS = {"a.txt": "alpha\n", "b.txt": "beta\n", "shards/c.txt": "gamma\n"}
# The job reads every input and writes one output per input, upper-cased.
COMMAND = (
    "cd /workspace/data && for f in $(find . -type f | sort); do"
    ' echo "read $f: $(cat $f)"; mkdir -p "/workspace/out/$(dirname $f)";'
    ' tr a-z A-Z < "$f" > "/workspace/out/$f"; done'
)


def vault_args(run_dir: Path) -> tuple[str, ...]:
    """The emulator's options for vaults kept under `run_dir`."""
    return ("--vaults-dir", str(run_dir / "vaults"))


def build_vault_config(emulator: addons.EmulatorProcess, *, namespace: str) -> dict[str, Any]:
    """The `jarvice-vault` ConfigMap: the emulator's SFTP address and host key."""
    info = demo.fetch_emulator(emulator.url, "/_emulator/vault")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": VAULT_CONFIG, "namespace": namespace},
        "data": {"sftp": str(info["sftp"]), "known_hosts": str(info["known_hosts"])},
    }


def build_host_volume(namespace: str, host_dir: Path) -> list[dict[str, Any]]:
    """A hostPath PersistentVolume at `host_dir` and the claim `training-data` bound to it."""
    name = f"pv-{namespace}-{CLAIM}"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(host_dir), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": CLAIM},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": "5Gi"}},
        },
    }
    return [pv, pvc]


def vault_env() -> list[dict[str, Any]]:
    """The runner's vault settings from the `jarvice-vault` ConfigMap, as docs/data.md shows."""
    return [
        {
            "name": "NIMBIX_BURST_VAULT_SFTP",
            "valueFrom": {"configMapKeyRef": {"name": VAULT_CONFIG, "key": "sftp", "optional": True}},
        },
        {"name": "NIMBIX_BURST_VAULT_KNOWN_HOSTS", "value": f"{VAULT_MOUNT}/known_hosts"},
    ]


def build_staged_job(*, namespace: str, app_name: str, gpus: int, command: str = COMMAND) -> dict[str, Any]:
    """A Job with more GPUs than the node has (so it bursts), its input and output on the claim."""
    container = demo.build_app_container(command=command, gpus=gpus, app_name=app_name)
    container["env"] += vault_env()
    container["volumeMounts"] = [
        {"name": "data", "mountPath": "/workspace"},
        {"name": "vault", "mountPath": VAULT_MOUNT, "readOnly": True},
    ]
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}},
        {
            "name": "vault",
            "configMap": {"name": VAULT_CONFIG, "items": [{"key": "known_hosts", "path": "known_hosts"}]},
        },
    ]
    spec = demo.build_real_node_placement({"restartPolicy": "Never", "containers": [container], "volumes": volumes})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": JOB, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": {"task-type": "Nimbix"},
                    "annotations": {STAGE_IN: "/workspace/data", STAGE_OUT: "/workspace/out"},
                },
                "spec": spec,
            },
        },
    }


def _tree(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}: {path.read_text().strip()}" for path in sorted(root.rglob("*")) if path.is_file()
    ]


def run_data_demo(
    plane: controlplane.ControlPlane,
    emulator: addons.EmulatorProcess,
    *,
    run_dir: Path,
    namespace: str,
    gpus: int,
    out: Callable[[str], None],
) -> bool:
    """The staged Job, end to end; prints the input and what came back; whether it all matched."""
    host_dir = run_dir / "pv" / namespace
    (host_dir / "data").mkdir(parents=True, exist_ok=True)
    host_dir.chmod(0o777)  # the runner runs as uid 10001
    for name, text in INPUTS.items():
        (host_dir / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (host_dir / "data" / name).write_text(text)
    for path in [host_dir, *host_dir.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    objects = [*build_host_volume(namespace, host_dir), build_vault_config(emulator, namespace=namespace)]
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    app_name = emulator.runner_env()["APP_NAME"]
    out(f"\n- data: Job {JOB} stages /workspace/data (PVC {CLAIM}) in and /workspace/out back; the input:")
    for line in _tree(host_dir / "data"):
        out(f"    {line}")
    plane.kubectl(
        "create", "-f", "-", input=json.dumps(build_staged_job(namespace=namespace, app_name=app_name, gpus=gpus))
    )
    pod = demo.wait_for(
        lambda: (
            (found := _job_pod(plane, namespace)) is not None
            and found["status"].get("phase") in ("Succeeded", "Failed")
            and found
        ),
        what=f"Job {JOB}'s pod finished",
        timeout=JOB_TIMEOUT_SECONDS,
    )
    logs = str(plane.kubectl("logs", "-n", namespace, pod["metadata"]["name"], check=False).stdout)
    shown = [line for line in logs.splitlines() if line.startswith(("read ", "nimbix-burst: "))]
    out(f"- kubectl logs (decision {pod['metadata']['annotations'].get(demo.DECISION)}):")
    for line in shown:
        out(f"    {line}")
    back = _tree(host_dir / "out") if (host_dir / "out").is_dir() else []
    out("- on the PVC after the Job: /workspace/out")
    for line in back or ["(nothing)"]:
        out(f"    {line}")
    expected = [f"{name}: {text.strip().upper()}" for name, text in sorted(INPUTS.items())]
    ok = demo.read_exit_code(pod) == 0 and back == expected
    out(f"- data {'came back as expected' if ok else 'DID NOT come back as expected'}")
    return ok


def _job_pod(plane: controlplane.ControlPlane, namespace: str) -> dict[str, Any] | None:
    items = plane.read("pods", namespace=namespace, labels=f"job-name={JOB}").get("items") or []
    return dict(items[0]) if items else None
