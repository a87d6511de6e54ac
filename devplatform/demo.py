"""`make demo`: the whole thing on an embedded local control plane and its real node, in one command.

Starts etcd + kube-apiserver + kube-controller-manager + kube-scheduler, the real node (containerd +
kubelet + kube-proxy on this machine, advertising 4 ``nvidia.com/gpu``, the project's images
imported), the webhook as a host process registered with the API server, and the JARVICE emulator
listening on the node's gateway address (where pods reach the host). Then, as a user would:

- submits more labeled GPU Jobs than the node's GPUs fit, and shows which stayed local and which
  burst, and why (the webhook's annotations);
- every pod is run by the kubelet: a local Job runs the example app's command in its container; a
  burst Job's container runs the runner, which submits the command to the emulator (which really runs
  it on the host) and streams its output;
- deletes one burst Job while it runs (the pod gets SIGTERM) and shows the emulator's job TERMINATED;
- prints ``kubectl logs`` of a burst pod and the exit codes from the pod statuses (0, and a mirrored 3).

``run_demo(plane, node, ...)`` works on a given control plane and real node (the e2e test runs it on
the session's); ``main()`` creates them. A machine that cannot host the real node (not root, no
cgroups, ...) makes ``main()`` say why and how to run ``--fake-nodes`` instead: the old variant
without a kubelet, where the demo plays the kubelet's part itself. It never falls back silently.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import watch as k8s_watch

from devplatform import images
from devplatform.cluster import addons, controlplane, node, nodes, processes
from devplatform.demo_pods import (
    CONTAINER,
    DECISION,
    EMULATOR_ARGS,
    GPU,
    LOCAL_CPU,
    LOCAL_MEMORY,
    POLL_INTERVAL_SECONDS,
    POLL_SECONDS,
    REASON,
    SECRET,
    _job,
    build_app_container,
    build_gateway_accounts,
    build_gateway_accounts_file,
    build_real_node_placement,
    build_secret,
    fetch_emulator,
    fetch_emulator_jobs,
    read_exit_code,
    read_pod,
    secret_env,
    start_emulator_for_node,
    wait_for,
)

# What the e2e tests, the benchmarks and the data demo take from here, defined in demo_pods.
__all__ = [
    "CONTAINER",
    "DECISION",
    "EMULATOR_ARGS",
    "GPU",
    "LOCAL_CPU",
    "LOCAL_MEMORY",
    "POLL_INTERVAL_SECONDS",
    "POLL_SECONDS",
    "REASON",
    "SECRET",
    "build_app_container",
    "build_gateway_accounts",
    "build_gateway_accounts_file",
    "build_real_node_placement",
    "build_secret",
    "fetch_emulator",
    "fetch_emulator_jobs",
    "read_exit_code",
    "read_pod",
    "start_emulator_for_node",
    "wait_for",
]

NAMESPACE = "demo"
# Cold image builds and node start are bounded by node.py; these bound what the demo waits for.
POD_TIMEOUT_SECONDS = 120.0
DELETE_TIMEOUT_SECONDS = 60.0
# Epochs take 1.5 s each, so the local Jobs still hold their GPUs while the later Jobs are decided.
TRAIN = (
    'echo "training started with \\"quotes\\", a $ sign and unicode: ünïcödé"; '
    "for epoch in 1 2 3; do "
    'echo "epoch $epoch/3 loss=$(python3 -c "print(round(1.0/$epoch, 3))")"; sleep 1.5; done; '
    "echo 'saved model to /data/model.pt'"
)
FAIL = 'echo "loading data"; echo "CUDA error: out of memory" >&2; exit 3'
SWEEP = 'echo "sweep started"; for trial in $(seq 1 600); do echo "trial $trial"; sleep 1; done'


@dataclass(frozen=True)
class DemoJob:
    name: str
    gpus: int
    command: str
    expected_exit: int
    deleted: bool = False  # deleted while it runs: its pod gets SIGTERM, the remote job is terminated


# Created in this order, each one decided before the next: the node has 4 GPUs.
JOBS = (
    DemoJob("resnet-a", 2, TRAIN, 0),
    DemoJob("resnet-b", 2, TRAIN, 0),
    DemoJob("sweep-c", 1, SWEEP, 143, deleted=True),
    DemoJob("bert-d", 4, TRAIN, 0),
    DemoJob("flaky-e", 1, FAIL, 3),
    DemoJob("llm-f", 8, TRAIN, 0),
)
SHOWN_LOGS_JOB = "bert-d"


def say(text: str) -> None:
    print(text, flush=True)


def build_job(job: DemoJob, *, namespace: str, app_name: str) -> dict[str, Any]:
    container = build_app_container(command=job.command, gpus=job.gpus, app_name=app_name)
    return _job(job.name, namespace, build_real_node_placement({"restartPolicy": "Never", "containers": [container]}))


# -- the demo on a real node ------------------------------------------------------------------------


@dataclass
class _JobRun:
    job: DemoJob
    created: float
    pod: dict[str, Any]
    running_after: float | None = None
    exit_seen: int | None = None  # a deleted pod's exit code, read while it terminated


def run_demo(
    plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    *,
    run_dir: Path,
    namespace: str = NAMESPACE,
    out: Callable[[str], None] = say,
) -> bool:
    """The demo on ``plane`` and ``real_node``: starts and registers its own webhook and emulator
    (stopped again at the end); returns whether everything it showed was as expected."""
    webhook = addons.start_webhook(run_dir / "webhook", kubeconfig=plane.kubeconfig_path)
    config_name = ""
    emulator: addons.EmulatorProcess | None = None
    api = plane.api_client()
    try:
        config_name = addons.register_webhook(plane, webhook, name_suffix="-demo")
        emulator = start_emulator_for_node(run_dir / "jarvice", real_node, vaults=True)
        out(f"- webhook at {webhook.url} (registered), JARVICE emulator at {emulator.url} (the node's gateway)")
        nodes.create_namespace(k8s_client.CoreV1Api(api), namespace)
        plane.kubectl("apply", "-f", "-", input=json.dumps(build_secret(emulator, namespace=namespace)))
        app_name = emulator.runner_env()["APP_NAME"]
        gpus = real_node.settings.gpus
        out(
            f"- submitting {len(JOBS)} Jobs (image {images.EXAMPLE_APP}) asking for "
            f"{sum(j.gpus for j in JOBS)} GPUs; node {real_node.name} has {gpus}\n"
        )
        runs = _create_jobs(plane, namespace=namespace, app_name=app_name)
        ok = _show(plane, real_node, emulator, runs, namespace=namespace, out=out)
        from devplatform import demo_data  # noqa: PLC0415 - it builds on this module's pod builders

        return (
            demo_data.run_data_demo(plane, emulator, run_dir=run_dir, namespace=namespace, gpus=gpus * 2, out=out)
            and ok
        )
    finally:
        api.close()
        if config_name:
            plane.kubectl("delete", "mutatingwebhookconfiguration", config_name, "--ignore-not-found", check=False)
        plane.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)
        if emulator is not None:
            addons.stop_jarvice_emulator(emulator)
        addons.stop_webhook(webhook)


def _create_jobs(plane: controlplane.ControlPlane, *, namespace: str, app_name: str) -> list[_JobRun]:
    runs = []
    for job in JOBS:
        created = time.monotonic()
        plane.kubectl("apply", "-f", "-", input=json.dumps(build_job(job, namespace=namespace, app_name=app_name)))
        pod = wait_for(
            functools.partial(_find_job_pod, plane, namespace, job.name), what=f"pod of Job {job.name}", timeout=30
        )
        runs.append(_JobRun(job=job, created=created, pod=pod))
    return runs


def _find_job_pod(plane: controlplane.ControlPlane, namespace: str, job: str) -> dict[str, Any] | None:
    items = plane.read("pods", namespace=namespace, labels=f"job-name={job}").get("items", [])
    return dict(items[0]) if items else None


def _all_pods(
    plane: controlplane.ControlPlane, runs: Sequence[_JobRun], done: Callable[[_JobRun], bool], *, namespace: str
) -> bool:
    """Refreshes every run's pod (one list call); whether ``done`` holds for all of them."""
    by_name = {item["metadata"]["name"]: item for item in plane.read("pods", namespace=namespace).get("items", [])}
    now = time.monotonic()
    for run in runs:
        pod = by_name.get(run.pod["metadata"]["name"])
        if pod is None:
            continue
        run.pod = pod
        phase = pod.get("status", {}).get("phase")
        if run.running_after is None and phase in ("Running", "Succeeded", "Failed"):
            run.running_after = now - run.created
    return all(done(run) for run in runs)


def _decision(run: _JobRun) -> str:
    return str(run.pod["metadata"].get("annotations", {}).get(DECISION, "-"))


def _show(
    plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    emulator: addons.EmulatorProcess,
    runs: list[_JobRun],
    *,
    namespace: str,
    out: Callable[[str], None],
) -> bool:
    ok = True
    wait_for(
        functools.partial(_all_pods, plane, runs, lambda r: bool(r.pod["spec"].get("nodeName")), namespace=namespace),
        what="pods bound",
        timeout=POD_TIMEOUT_SECONDS,
    )
    out(f"{'JOB':<9} {'GPUs':>4}  {'DECISION':<8} {'POD ON':<18} REASON")
    for run in runs:
        annotations = run.pod["metadata"].get("annotations", {})
        out(
            f"{run.job.name:<9} {run.job.gpus:>4}  {_decision(run):<8} {run.pod['spec']['nodeName']:<18} "
            f"{annotations.get(REASON, '')}"
        )
    decisions = {_decision(run) for run in runs}
    ok &= decisions == {"local", "remote"}
    burst = next((run for run in runs if _decision(run) == "remote"), None)
    if burst is not None:
        container = burst.pod["spec"]["containers"][0]
        shown = {e["name"]: e.get("value") for e in container["env"] if e["name"] in ("REMOTE", "NUM_GPUS", "NUM_CPUS")}
        out(
            f"\na burst pod keeps no GPU: its runner asks for {container['resources'].get('requests')} "
            f"with env {shown};\nit runs on {real_node.name} too, as a CPU pod, and talks to the emulator\n"
        )

    deleted = next(run for run in runs if run.job.deleted)
    ok &= _delete_running(plane, emulator, deleted, namespace=namespace, out=out)

    wait_for(
        functools.partial(
            _all_pods, plane, runs, lambda r: r.job.deleted or read_exit_code(r.pod) is not None, namespace=namespace
        ),
        what="Jobs finished",
        timeout=POD_TIMEOUT_SECONDS,
    )
    shown_run = next(run for run in runs if run.job.name == SHOWN_LOGS_JOB)
    out(f"\n$ kubectl logs -n {namespace} job/{SHOWN_LOGS_JOB}      # a burst pod: the remote output")
    logs = plane.kubectl("logs", "-n", namespace, f"job/{SHOWN_LOGS_JOB}").stdout
    for line in logs.splitlines():
        out(f"  {line}")
    ok &= _decision(shown_run) != "remote" or "epoch 3/3 loss=0.333" in logs

    out(f"\n{'JOB':<9} {'RAN':<28} {'RUNNING AFTER':>13} {'EXIT':>5} {'EXPECTED':>8}")
    for run in runs:
        where = f"locally on {run.pod['spec']['nodeName']}" if _decision(run) == "local" else "on Nimbix (emulator)"
        code = run.exit_seen if run.job.deleted else read_exit_code(run.pod)
        match = code == run.job.expected_exit
        ok &= match
        after = "-" if run.running_after is None else f"{run.running_after:.1f}s"
        note = ("ok" if match else "MISMATCH") + (" (deleted while running)" if run.job.deleted else "")
        shown_code = "-" if code is None else str(code)
        out(f"{run.job.name:<9} {where:<28} {after:>13} {shown_code:>5} {run.job.expected_exit:>8}  {note}")
    return bool(ok)


def _delete_running(
    plane: controlplane.ControlPlane,
    emulator: addons.EmulatorProcess,
    run: _JobRun,
    *,
    namespace: str,
    out: Callable[[str], None],
) -> bool:
    """Deletes a running burst Job: the kubelet sends its pod SIGTERM, the runner terminates the job."""
    pod_name, uid = run.pod["metadata"]["name"], run.pod["metadata"]["uid"]
    if _decision(run) != "remote":
        out(f"{run.job.name} was decided local, not deleting it")
        return False
    wait_for(
        lambda: (
            [j for j in fetch_emulator_jobs(emulator.url, pod_uid=uid) if j["status"] == "PROCESSING STARTING"]
            and "trial 2" in plane.read_log(namespace, pod_name)
        ),
        what=f"remote job of {run.job.name} running",
        timeout=POD_TIMEOUT_SECONDS,
    )
    # The pod object disappears once deleted, its terminated state shown for a moment before: a watch
    # sees every change (a poll can fall between them on a loaded machine), from before the delete.
    seen: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        with plane.api_client() as api:
            stream = k8s_watch.Watch().stream(
                k8s_client.CoreV1Api(api).list_namespaced_pod,
                namespace,
                field_selector=f"metadata.name={pod_name}",
                timeout_seconds=int(DELETE_TIMEOUT_SECONDS) + 30,
            )
            for event in stream:
                watching.set()  # the first event is the pod as it is now
                code = read_exit_code(api.sanitize_for_serialization(event["object"]))
                if code is not None:
                    seen.append(code)
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    wait_for(watching.is_set, what=f"a watch on pod {pod_name}", timeout=POD_TIMEOUT_SECONDS)
    out(f"$ kubectl delete -n {namespace} job/{run.job.name}      # while its remote job runs")
    started = time.monotonic()
    plane.kubectl(
        "delete", "-n", namespace, f"job/{run.job.name}", "--cascade=foreground", "--wait=true",
        f"--timeout={DELETE_TIMEOUT_SECONDS:g}s",
    )  # fmt: skip
    wait_for(
        lambda: _find_job_pod(plane, namespace, run.job.name) is None, what="pod gone", timeout=DELETE_TIMEOUT_SECONDS
    )
    elapsed = time.monotonic() - started
    watcher.join(timeout=5)
    run.exit_seen = seen[0] if seen else None
    remote = fetch_emulator_jobs(emulator.url, pod_uid=uid)
    states = ", ".join(f"job {j['number']} {j['status']}" for j in remote) or "no job"
    out(f"  pod gone after {elapsed:.1f}s (exit code {seen[0] if seen else 'not seen'}); emulator: {states}\n")
    return bool(remote) and all(j["status"] == "TERMINATED" for j in remote)


# -- main -------------------------------------------------------------------------------------------


def _leave(run_dir: Path, *, ok: bool) -> None:
    """A demo that passed leaves nothing behind; one that failed keeps its run directory (the logs)."""
    if ok:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        say(f"logs kept in {run_dir}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devplatform.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fake-nodes",
        action="store_true",
        help="no real node: fake nodes in the API, and the demo plays the kubelet's part itself",
    )
    parser.add_argument(
        "--node-wait-seconds",
        type=float,
        default=0.0,
        help="how long to wait for another real node on this machine (make dev-up, a test session) to stop",
    )
    args = parser.parse_args(argv)
    if args.fake_nodes:
        return run_fake_node_demo()
    started = time.monotonic()
    say("nimbix-burst demo: a local control plane, its real node (kubelet), the webhook and a JARVICE emulator")
    bin_dir = controlplane.ensure_binaries()
    say("- images: devplatform/images/build.sh (cached; a cold build takes minutes)")
    archives = node.build_image_archives()
    say(f"- images ready after {time.monotonic() - started:.1f}s")
    processes.exit_through_cleanup_on_hangup("demo")
    run_dir = Path(tempfile.mkdtemp(prefix="nimbix-burst-demo-"))
    plane = controlplane.ControlPlane(run_dir / "controlplane", bin_dir=bin_dir)
    real = node.RealNode(run_dir / "node", control_plane=plane, image_archives=archives)
    ok = False
    try:
        step = time.monotonic()
        plane.start()
        say(f"- control plane v1.32 up in {time.monotonic() - step:.1f}s ({plane.server_url})")
        try:
            real.start(claim_wait_seconds=args.node_wait_seconds)
        except node.NodeHostError as error:
            say(f"\n{error}\n")
            say(
                "make demo needs a real node (root, cgroups, containerd). To run the demo without one, where\n"
                "the demo itself plays the kubelet's part (fake nodes, runners started as host processes):\n"
                "  .venv/bin/python -m devplatform.demo --fake-nodes"
            )
            return 2
        timings = real.timings
        say(
            f"- real node {real.name} Ready ({real.settings.gpus} {GPU}, gateway {real.gateway_address})"
            + (f" in {timings.total_seconds:.1f}s" if timings else "")
        )
        ok = run_demo(plane, real, run_dir=run_dir)
        say(f"\ndemo {'passed' if ok else 'FAILED'} in {time.monotonic() - started:.1f}s")
    finally:
        real.stop()
        plane.stop()
        _leave(run_dir, ok=ok)
    return 0 if ok else 1


# -- --fake-nodes: no kubelet, the demo plays its part (only on explicit request) -------------------

GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
_FAKE_TRAIN = (
    'echo "training started with "quotes", a $ sign and unicode: ünïcödé"; '
    'for epoch in 1 2 3; do echo "epoch $epoch/3 loss=$(python3 -c "print(round(1.0/$epoch, 3))")"; sleep 0.3; done; '
    "echo 'saved model to /data/model.pt'"
)
FAKE_JOBS = (
    DemoJob("resnet-a", 4, _FAKE_TRAIN, 0),
    DemoJob("resnet-b", 4, _FAKE_TRAIN, 0),
    DemoJob("bert-c", 4, _FAKE_TRAIN, 0),
    DemoJob("llm-d", 8, _FAKE_TRAIN, 0),
    DemoJob("flaky-e", 2, FAIL, 3),
)


def fake_job_manifest(job: DemoJob) -> dict[str, Any]:
    downward = [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in (
            ("POD_UID", "metadata.uid"),
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        )
    ]
    container = {
        "name": "train",
        "image": "example.com/my-app:latest",
        "env": [
            {"name": "APP_COMMAND_ARGS", "value": job.command},
            {"name": "APP_NAME", "value": "nimbix-burst-example"},
            {"name": "APP_COMMAND", "value": "run"},
            {"name": "JARVICE_POLL_SECONDS", "value": "0.5"},
            *secret_env(),
            *downward,
        ],
        "resources": {
            "limits": {GPU: str(job.gpus), "cpu": "8", "memory": "32Gi"},
            "requests": {GPU: str(job.gpus), "cpu": "8", "memory": "32Gi"},
        },
    }
    toleration = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
    return _job(job.name, NAMESPACE, {"restartPolicy": "Never", "tolerations": [toleration], "containers": [container]})


def _wait_for_job_pod(core: Any, job: str, *, timeout: float = 30) -> Any:
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


def _run_pod_as_kubelet(job: DemoJob, env: Mapping[str, str], results: dict[str, int], lock: threading.Lock) -> None:
    """The pod's container: `python -m entrypoint`, output prefixed like `kubectl logs -f` per pod."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JARVICE_", "REMOTE", "APP_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "entrypoint"],
        env={**base, "LOG_LEVEL": "INFO", **env},  # its progress lines are summarised below
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


def run_fake_node_demo() -> int:
    """The demo without a kubelet: fake nodes in the API; the demo runs each pod's runner itself."""
    started = time.monotonic()
    say("nimbix-burst demo (--fake-nodes): no kubelet; this demo plays its part")
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
        emulator = addons.start_jarvice_emulator(run_dir / "jarvice", args=EMULATOR_ARGS)
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
        secret_data = build_secret(emulator, namespace=NAMESPACE)["stringData"]
        core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": SECRET}, "stringData": secret_data})
        say(f"- submitting {len(FAKE_JOBS)} Jobs asking for {sum(j.gpus for j in FAKE_JOBS)} GPUs; the cluster has 8\n")

        pods: dict[str, dict[str, Any]] = {}
        for job in FAKE_JOBS:
            batch.create_namespaced_job(NAMESPACE, fake_job_manifest(job))
            pod = _wait_for_job_pod(core, job.name)
            bound = nodes.wait_for_pod_bound(core, NAMESPACE, pod.metadata.name)
            raw = api.sanitize_for_serialization(core.read_namespaced_pod(pod.metadata.name, NAMESPACE))
            raw["spec"]["nodeName"] = bound
            pods[job.name] = raw

        say(f"{'JOB':<10} {'GPUs':>4}  {'DECISION':<8} {'BOUND TO':<11} REASON")
        for job in FAKE_JOBS:
            annotations = pods[job.name]["metadata"].get("annotations", {})
            say(
                f"{job.name:<10} {job.gpus:>4}  {annotations.get(DECISION, '-'):<8} "
                f"{pods[job.name]['spec']['nodeName']:<11} {annotations.get(REASON, '')}"
            )
        say("\nplaying the kubelet: running each pod's container (python -m entrypoint) with its environment\n")
        secrets = {SECRET: secret_data}
        results: dict[str, int] = {}
        lock = threading.Lock()
        threads = [
            threading.Thread(
                target=_run_pod_as_kubelet, args=(job, resolve_env(pods[job.name], secrets), results, lock)
            )
            for job in FAKE_JOBS
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        say(f"\n{'JOB':<10} {'RAN':<22} {'EXIT':>4}  {'EXPECTED':>8}")
        ok = True
        for job in FAKE_JOBS:
            decision = pods[job.name]["metadata"]["annotations"][DECISION]
            where = (
                f"locally on {pods[job.name]['spec']['nodeName']}" if decision == "local" else "on Nimbix (emulator)"
            )
            match = results.get(job.name) == job.expected_exit
            ok &= match
            verdict = "ok" if match else "MISMATCH"
            say(f"{job.name:<10} {where:<22} {results.get(job.name, -1):>4}  {job.expected_exit:>8}  {verdict}")
        ok &= {p["metadata"]["annotations"][DECISION] for p in pods.values()} == {"local", "remote"}
        api.close()
        say(f"\ndemo {'passed' if ok else 'FAILED'} in {time.monotonic() - started:.1f}s")
    finally:
        if emulator is not None:
            addons.stop_jarvice_emulator(emulator)
        if webhook is not None:
            addons.stop_webhook(webhook)
        plane.stop()
        _leave(run_dir, ok=ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
