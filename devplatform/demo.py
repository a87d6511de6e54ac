"""`make demo`: the whole thing on an embedded local control plane, in one command.

Starts etcd + kube-apiserver + kube-controller-manager + kube-scheduler, the webhook (registered
from deploy/'s configuration) and the JARVICE emulator; creates two 4-GPU nodes and a CPU node;
submits more labeled GPU Jobs than fit; shows which stayed local and which burst, and why; then,
since there is no kubelet, plays its part: runs each Job pod's runner with that pod's environment
(env, Secret references and the downward API resolved from the real pod), locally or against the
emulator, streaming output and mirroring exit codes. Tears everything down at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client

from devplatform.cluster import addons, controlplane, nodes

GPU = "nvidia.com/gpu"
NAMESPACE = "demo"
SECRET = "jarvice-credentials"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
TRAIN = (
    'echo "training started with "quotes", a $ sign and unicode: ünïcödé"; '
    'for epoch in 1 2 3; do echo "epoch $epoch/3 loss=$(python3 -c "print(round(1.0/$epoch, 3))")"; sleep 0.3; done; '
    "echo 'saved model to /data/model.pt'"
)
FAIL = 'echo "loading data"; echo "CUDA error: out of memory" >&2; exit 3'


@dataclass(frozen=True)
class DemoJob:
    name: str
    gpus: int
    command: str
    expected_exit: int


JOBS = (
    DemoJob("resnet-a", 4, TRAIN, 0),
    DemoJob("resnet-b", 4, TRAIN, 0),
    DemoJob("bert-c", 4, TRAIN, 0),
    DemoJob("llm-d", 8, TRAIN, 0),
    DemoJob("flaky-e", 2, FAIL, 3),
)


def say(text: str) -> None:
    print(text, flush=True)


def job_manifest(job: DemoJob) -> dict[str, Any]:
    secret_env = [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": key}}}
        for name, key in (("JARVICE_USERNAME", "username"), ("JARVICE_APIKEY", "apikey"), ("JARVICE_API_URL", "url"))
    ]
    downward = [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in (
            ("POD_UID", "metadata.uid"),
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        )
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "namespace": NAMESPACE},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"task-type": "Nimbix"}},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "train",
                            "image": "example.com/my-app:latest",
                            "env": [
                                {"name": "APP_COMMAND_ARGS", "value": job.command},
                                {"name": "APP_NAME", "value": "nimbix-burst-example"},
                                {"name": "APP_COMMAND", "value": "run"},
                                {"name": "JARVICE_POLL_SECONDS", "value": "0.5"},
                                *secret_env,
                                *downward,
                            ],
                            "resources": {
                                "limits": {GPU: str(job.gpus), "cpu": "8", "memory": "32Gi"},
                                "requests": {GPU: str(job.gpus), "cpu": "8", "memory": "32Gi"},
                            },
                        }
                    ],
                },
            },
        },
    }


def wait_for_job_pod(core: Any, job: str, *, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"job-name={job}").items
        if pods:
            return pods[0]
        time.sleep(0.1)
    raise TimeoutError(f"the Job controller created no pod for {job} in {timeout:g}s")


def resolve_env(pod: Mapping[str, Any], secrets: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """What the kubelet would put in the container's environment (the subset this demo uses)."""
    fields = {
        "metadata.uid": pod["metadata"]["uid"],
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
    }
    env: dict[str, str] = {}
    for item in pod["spec"]["containers"][0].get("env", []):
        source = item.get("valueFrom")
        if source is None:
            env[item["name"]] = item.get("value", "")
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
        elif "fieldRef" in source:
            env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
    return env


def run_pod(job: DemoJob, env: Mapping[str, str], results: dict[str, int], lock: threading.Lock) -> None:
    """The pod's container: `python -m entrypoint`, output prefixed like `kubectl logs -f` per pod."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JARVICE_", "REMOTE", "APP_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "entrypoint"],
        env={**base, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        text = line.rstrip("\n")
        if text.startswith("{"):
            text = _summarize_log_line(text)
            if not text:
                continue
        with lock:
            say(f"  [{job.name}] {text}")
    results[job.name] = process.wait()


def _summarize_log_line(line: str) -> str:
    """The runner logs JSON on stderr; show the interesting ones briefly."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return line
    message = record.get("message", "")
    if message == "job state changed":
        return f"(runner) JARVICE job {record.get('job')}: {record.get('state')}"
    if message in ("machine selected", "job finished", "local mode"):
        detail = record.get("reason") or record.get("machine") or ""
        return f"(runner) {message}: {detail}"
    return ""


def main() -> int:
    started = time.monotonic()
    say("nimbix-burst demo: a local control plane, the webhook, and a JARVICE emulator")
    bin_dir = controlplane.ensure_binaries()
    run_dir = Path(tempfile.mkdtemp(prefix="nimbix-burst-demo-"))
    plane = controlplane.ControlPlane(run_dir / "controlplane", bin_dir=bin_dir)
    webhook: addons.WebhookProcess | None = None
    emulator: addons.EmulatorProcess | None = None
    ok = False
    try:
        plane.start()
        say(f"- control plane v1.32 up in {time.monotonic() - started:.1f}s ({plane.server_url})")
        webhook = addons.start_webhook(
            run_dir / "webhook", kubeconfig=plane.kubeconfig_path, args=["--strip-toleration-keys", GPU]
        )
        addons.register_webhook(plane, webhook)
        emulator = addons.start_jarvice_emulator(
            run_dir / "jarvice", args=["--queue-seconds", "0.5", "--init-seconds", "0.2"]
        )
        say(f"- webhook at {webhook.url}, JARVICE emulator at {emulator.url}")
        api = plane.api_client()
        core, batch = k8s_client.CoreV1Api(api), k8s_client.BatchV1Api(api)
        for name, gpus in (("gpu-node-1", 4), ("gpu-node-2", 4)):
            nodes.create_gpu_node(core, name, gpus=gpus, taints=[GPU_TAINT], labels={"kubernetes.io/hostname": name})
        nodes.create_gpu_node(
            core, "cpu-node-1", gpus=0, cpu="4", memory="8Gi", labels={"kubernetes.io/hostname": "cpu-node-1"}
        )
        say(
            "- cluster: gpu-node-1 (4 GPUs), gpu-node-2 (4 GPUs), both tainted nvidia.com/gpu; cpu-node-1 (4 CPUs, 8Gi)"
        )
        nodes.create_namespace(core, NAMESPACE)
        creds = emulator.runner_env()
        secret_data = {
            "username": creds["JARVICE_USERNAME"],
            "apikey": creds["JARVICE_APIKEY"],
            "url": creds["JARVICE_API_URL"],
        }
        core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": SECRET}, "stringData": secret_data})
        say(f"- submitting {len(JOBS)} Jobs asking for {sum(j.gpus for j in JOBS)} GPUs; the cluster has 8\n")

        pods: dict[str, dict[str, Any]] = {}
        for job in JOBS:
            batch.create_namespaced_job(NAMESPACE, job_manifest(job))
            pod = wait_for_job_pod(core, job.name)
            node = nodes.wait_for_pod_bound(core, NAMESPACE, pod.metadata.name)
            raw = api.sanitize_for_serialization(core.read_namespaced_pod(pod.metadata.name, NAMESPACE))
            raw["spec"]["nodeName"] = node
            pods[job.name] = raw

        say(f"{'JOB':<10} {'GPUs':>4}  {'DECISION':<8} {'BOUND TO':<11} REASON")
        for job in JOBS:
            annotations = pods[job.name]["metadata"].get("annotations", {})
            say(
                f"{job.name:<10} {job.gpus:>4}  {annotations.get('nimbix-burst.io/decision', '-'):<8} "
                f"{pods[job.name]['spec']['nodeName']:<11} {annotations.get('nimbix-burst.io/reason', '')}"
            )
        remote_pod = next(
            p for p in pods.values() if p["metadata"]["annotations"]["nimbix-burst.io/decision"] == "remote"
        )
        container = remote_pod["spec"]["containers"][0]
        env_shown = {
            e["name"]: e.get("value") for e in container["env"] if e["name"] in ("REMOTE", "NUM_GPUS", "NUM_CPUS")
        }
        say(f"\na burst pod now asks for {container['resources']['requests']} with env {env_shown}")
        say("\nplaying the kubelet: running each pod's container (python -m entrypoint) with its environment\n")

        secrets = {SECRET: secret_data}
        results: dict[str, int] = {}
        lock = threading.Lock()
        threads = [
            threading.Thread(target=run_pod, args=(job, resolve_env(pods[job.name], secrets), results, lock))
            for job in JOBS
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        say(f"\n{'JOB':<10} {'RAN':<22} {'EXIT':>4}  {'EXPECTED':>8}")
        ok = True
        for job in JOBS:
            decision = pods[job.name]["metadata"]["annotations"]["nimbix-burst.io/decision"]
            where = (
                f"locally on {pods[job.name]['spec']['nodeName']}" if decision == "local" else "on Nimbix (emulator)"
            )
            match = results.get(job.name) == job.expected_exit
            ok &= match
            verdict = "ok" if match else "MISMATCH"
            say(f"{job.name:<10} {where:<22} {results.get(job.name, -1):>4}  {job.expected_exit:>8}  {verdict}")
        decisions = {p["metadata"]["annotations"]["nimbix-burst.io/decision"] for p in pods.values()}
        ok &= decisions == {"local", "remote"}
        api.close()
        say(f"\ndemo {'passed' if ok else 'FAILED'} in {time.monotonic() - started:.1f}s")
    finally:
        if emulator is not None:
            addons.stop_jarvice_emulator(emulator)
        if webhook is not None:
            addons.stop_webhook(webhook)
        plane.stop()
        if ok:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            say(f"logs kept in {run_dir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
