"""HTTPS load against the limit server and the real webhook process (issue 6 item 1).

For each target a server process is started, bench.loadgen runs against it in its own process,
and the server is stopped by PID. The webhook is the shipped `python -m webhook`, unmodified; its
cache is filled by its own watcher from bench.fake_apiserver (for clusters of up to 5,000 nodes
that would take too long to create in etcd on this machine).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench import clusters, fake_apiserver, loadgen, minimal, procfs, profiling, stats
from bench.realcluster import read_rss_mb, read_sync_span
from devplatform.cluster import addons, processes

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVER_READY_TIMEOUT_SECONDS = 180.0
WEBHOOK_READY_TIMEOUT_SECONDS = 300.0
LOADGEN_TIMEOUT_SECONDS = 180.0
PROFILE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class LoadPlan:
    rates: tuple[float, ...]
    seconds: float
    connections: int
    saturation_seconds: float


@dataclass(frozen=True, slots=True)
class RequestCase:
    """One kind of request: its name, and the review body sent."""

    name: str  # "local" or "remote"
    gpus: int
    node_selector: Mapping[str, str]
    dry_run: bool
    expect_remote: bool

    def body(self) -> bytes:
        pod = clusters.build_review_pod(gpus=self.gpus)
        if self.node_selector:
            pod["spec"]["nodeSelector"] = dict(self.node_selector)
        return json.dumps(clusters.build_review(pod, dry_run=self.dry_run)).encode()


# Local requests are dryRun=true: the webhook decides and patches exactly as for a real create but
# reserves nothing, so thousands of requests do not drain the cluster's free GPUs during a run.
LOCAL = RequestCase("local", 1, {}, dry_run=True, expect_remote=False)
# Synthetic clusters: every GPU node has at least one GPU in use, so an 8-GPU pod fits nowhere.
REMOTE_CAPACITY = RequestCase("remote", 8, {}, dry_run=False, expect_remote=True)
# The Alibaba cluster keeps whole free 8-GPU nodes, but its T4 nodes are all full: a T4-pinned pod.
REMOTE_ALIBABA = RequestCase("remote", 1, {clusters.GPU_MODEL_LABEL: "T4"}, dry_run=False, expect_remote=True)


def log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


Client = Literal["python", "go"]
# The Go client's pass (5,000 nodes and the limit): the offered rate of the p99 goal, then saturation.
GO_CLIENT_PLAN = LoadPlan(rates=(1000.0,), seconds=3.0, connections=8, saturation_seconds=3.0)


def run_loadgen_measured(
    url: str, ca: Path, body: Path, plan: LoadPlan, server_pid: int, *, client: Client = "python"
) -> dict[str, Any]:
    """run_loadgen, plus the server's CPU time per request over the whole run (a cost that does not
    depend on whether the load generator kept up)."""
    cpu_before = procfs.cpu_seconds(server_pid)
    result = run_loadgen(url, ca, body, plan, client=client)
    server_cpu = procfs.cpu_seconds(server_pid) - cpu_before
    result["server_cpu_s"] = round(server_cpu, 3)
    result["server_cpu_us_per_request"] = round(server_cpu / max(1, result["requests_total"]) * 1e6, 1)
    return result


def run_loadgen(url: str, ca: Path, body: Path, plan: LoadPlan, *, client: Client = "python") -> dict[str, Any]:
    """`client`: bench.loadgen (Python, the issue's instrument) or bench/goloadgen (same phases and
    summaries, a fraction of the CPU per request, on schedule)."""
    program = (
        [sys.executable, "-m", "bench.loadgen"] if client == "python" else [str(minimal.ensure_go_binary("goloadgen"))]
    )
    argv = [
        *program,
        "--url", url, "--ca", str(ca), "--body", str(body),
        "--rates", ",".join(f"{r:g}" for r in plan.rates),
        "--seconds", str(plan.seconds),
        "--connections", str(plan.connections),
        "--saturation-seconds", str(plan.saturation_seconds),
    ]  # fmt: skip
    completed = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=None,  # progress lines pass through
        text=True,
        timeout=LOADGEN_TIMEOUT_SECONDS,
        env=processes.build_child_environment(None),
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{client} loadgen exited with {completed.returncode}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result if client == "python" else loadgen.summarize_raw(result)


def wait_http(url: str, proc: processes.ManagedProcess, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not processes.is_running(proc):
            raise RuntimeError(f"{proc.name} exited; log tail:\n{processes.read_log_tail(proc.log_path)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} not answering {url} after {timeout:g}s")


def write_body(run_dir: Path, case: RequestCase, label: str) -> Path:
    path = run_dir / "bodies" / f"{label}-{case.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(case.body())
    return path


def _check_outcomes(result: Mapping[str, Any], case: RequestCase) -> None:
    phases = [*result["open_loop"], *([result["saturation"]] if result["saturation"] else [])]
    for phase in phases:
        if phase["errors"]:
            raise RuntimeError(f"{case.name}: {phase['errors']} failed requests, first: {phase['first_error']}")
        expected = phase["completed"] if case.expect_remote else 0
        if phase["remote_responses"] != expected:
            raise RuntimeError(
                f"{case.name}: {phase['remote_responses']} of {phase['completed']} responses were remote decisions"
            )


def measure_limit(run_dir: Path, plan: LoadPlan, *, go_client: bool = False) -> dict[str, Any]:
    limit_dir = run_dir / "limit"
    tls_dir = limit_dir / "tls"
    addons.make_webhook_tls(tls_dir)
    port = processes.free_port()
    argv = [sys.executable, "-m", "bench.limit_server", "--port", str(port), "--tls-dir", str(tls_dir)]
    proc = processes.start_process("limit-server", argv, log_path=limit_dir / "limit.log", cwd=REPO_ROOT)
    try:
        context_url = f"https://127.0.0.1:{port}"
        wait_tls_ready(context_url + "/readyz", tls_dir / "ca.crt", proc)
        body = write_body(run_dir, LOCAL, "limit")
        log("limit server (constant response)")
        result = {
            "target": "limit",
            **run_loadgen_measured(context_url + "/mutate", tls_dir / "ca.crt", body, plan, proc.pid),
        }
        if go_client:
            log("limit server, Go client")
            result["go_client"] = run_loadgen_measured(
                context_url + "/mutate", tls_dir / "ca.crt", body, GO_CLIENT_PLAN, proc.pid, client="go"
            )
        return result
    finally:
        processes.stop_process(proc)


def wait_tls_ready(url: str, ca: Path, proc: processes.ManagedProcess) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + SERVER_READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if not processes.is_running(proc):
            raise RuntimeError(f"{proc.name} exited; log tail:\n{processes.read_log_tail(proc.log_path)}")
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} not ready at {url}")


@dataclass(frozen=True, slots=True)
class RunningWebhook:
    webhook: addons.WebhookProcess
    fake_port: int
    served: Mapping[str, Any]  # the fake's /healthz once the webhook is ready
    info: Mapping[str, Any]  # sync time and memory, for the results


@contextlib.contextmanager
def running_webhook(
    cluster_dir: Path,
    cluster: str,
    *,
    webhook_args: Sequence[str] = (),
    webhook_tree: Path | None = None,
    fake_args: Sequence[str] = (),
) -> Iterator[RunningWebhook]:
    """Fake API server with `cluster` -> the real webhook synced from it; both stopped by PID after."""
    port = processes.free_port()
    began = time.perf_counter()
    argv = [sys.executable, "-m", "bench.fake_apiserver", "--cluster", cluster, "--port", str(port), *fake_args]
    fake = processes.start_process("fake-apiserver", argv, log_path=cluster_dir / "fake-apiserver.log", cwd=REPO_ROOT)
    webhook: addons.WebhookProcess | None = None
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", fake, timeout=SERVER_READY_TIMEOUT_SECONDS)
        generated_s = time.perf_counter() - began
        kubeconfig = cluster_dir / "fake.kubeconfig"
        kubeconfig.write_text(json.dumps(fake_apiserver.build_kubeconfig(port)))
        began = time.perf_counter()
        webhook = addons.start_webhook(
            cluster_dir / "webhook", kubeconfig=kubeconfig, args=webhook_args, wait=False, cwd=webhook_tree
        )
        addons.wait_ready(webhook, timeout=WEBHOOK_READY_TIMEOUT_SECONDS)
        ready_s = time.perf_counter() - began
        memory_after_sync = read_rss_mb(webhook.process.pid)
        served = read_fake_counts(port)
        log(
            f"{cluster}: fake API server ready in {generated_s:.1f}s; webhook synced {served['nodes']} nodes,"
            f" {served['pods']} pods, /readyz after {ready_s:.1f}s, RSS {memory_after_sync['rss_mb']} MB"
        )
        info = {
            "webhook_start_to_ready_s": round(ready_s, 3),
            **read_sync_span(webhook.process.log_path),
            "webhook_memory_after_sync": memory_after_sync,
        }
        yield RunningWebhook(webhook, port, served, info)
    finally:
        if webhook is not None:
            addons.stop_webhook(webhook)
        processes.stop_process(fake)


def read_fake_counts(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
        counts: dict[str, Any] = json.loads(response.read())
    return counts


def measure_webhook(
    run_dir: Path,
    cluster: str,
    cases: Sequence[RequestCase],
    plan: LoadPlan,
    *,
    webhook_args: Sequence[str] = (),
    profile_seconds: float = 0.0,
    webhook_tree: Path | None = None,
    go_client: bool = False,
) -> dict[str, Any]:
    """Fake API server with `cluster` -> the real webhook syncs from it -> load per request case.
    `webhook_tree`: where the webhook's packages come from (devplatform.compiled_core.build).
    `go_client`: each case again with bench/goloadgen (GO_CLIENT_PLAN)."""
    label = cluster.replace(":", "-") + (
        "-" + "-".join(a.strip("-").lower() for a in webhook_args) if webhook_args else ""
    )
    with running_webhook(run_dir / label, cluster, webhook_args=webhook_args, webhook_tree=webhook_tree) as running:
        webhook = running.webhook
        result: dict[str, Any] = {
            "cluster": cluster,
            "webhook_args": list(webhook_args),
            "nodes": running.served["nodes"],
            "pods": running.served["pods"],
            **running.info,
            "cases": {},
        }
        for case in cases:
            body = write_body(run_dir, case, label)
            log(f"{cluster} {case.name} requests ({'dryRun, ' if case.dry_run else ''}{case.gpus} GPU)")
            load = run_loadgen_measured(
                webhook.url + "/mutate", webhook.tls_dir / "ca.crt", body, plan, webhook.process.pid
            )
            _check_outcomes(load, case)
            result["cases"][case.name] = load
            if go_client:
                log(f"{cluster} {case.name} requests, Go client")
                precise = run_loadgen_measured(
                    webhook.url + "/mutate", webhook.tls_dir / "ca.crt", body, GO_CLIENT_PLAN, webhook.process.pid,
                    client="go",
                )  # fmt: skip
                _check_outcomes(precise, case)
                result.setdefault("cases_go_client", {})[case.name] = precise
        result["webhook_memory_after_load"] = read_rss_mb(webhook.process.pid)
        result["server_side"] = read_admission_latencies(webhook.process.log_path)
        if profile_seconds:
            result["profile"] = profile_webhook(run_dir, label, webhook, cases, plan, seconds=profile_seconds)
        return result


# Pod events per second, and how they arrive: the fake paces on a 10 ms tick, so 100/s is one
# event per wake-up (as sparse creates bring them) and 1,000/s ten per wake-up.
WATCH_COST_RATES = (100.0, 1000.0)
WATCH_COST_SECONDS = 8.0
WATCH_COST_SETTLE_SECONDS = 2.0


def measure_watch_cost(
    run_dir: Path,
    cluster: str,
    *,
    webhook_tree: Path | None = None,
    rates: Sequence[float] = WATCH_COST_RATES,
    seconds: float = WATCH_COST_SECONDS,
) -> list[dict[str, Any]]:
    """The webhook's CPU per watched pod event (MODIFIED, unchanged for accounting, as most real
    pod events are), with no reviews: what merely watching a busy cluster costs."""
    rows = []
    for rate in rates:
        cluster_dir = run_dir / f"watch-{cluster.replace(':', '-')}-{rate:g}"
        fake_args = ("--pod-events-per-second", f"{rate:g}")
        with running_webhook(cluster_dir, cluster, webhook_tree=webhook_tree, fake_args=fake_args) as running:
            pid = running.webhook.process.pid
            time.sleep(WATCH_COST_SETTLE_SECONDS)
            events_before, cpu_before = (
                read_fake_counts(running.fake_port).get("pod_events", 0),
                procfs.cpu_seconds(pid),
            )
            time.sleep(seconds)
            events = read_fake_counts(running.fake_port).get("pod_events", 0) - events_before
            cpu = procfs.cpu_seconds(pid) - cpu_before
        row = {
            "cluster": cluster,
            "events_per_second": rate,
            "events_per_wakeup": max(1.0, rate * fake_apiserver.EVENT_TICK_SECONDS),
            "events": events,
            "cpu_s": round(cpu, 4),
            "cpu_us_per_event": round(cpu / max(1, events) * 1e6, 1),
        }
        log(f"{cluster} watch: {rate:g} pod events/s -> {row['cpu_us_per_event']} us of webhook CPU per event")
        rows.append(row)
    return rows


def profile_webhook(
    run_dir: Path,
    label: str,
    webhook: addons.WebhookProcess,
    cases: Sequence[RequestCase],
    plan: LoadPlan,
    *,
    seconds: float,
) -> dict[str, Any]:
    """An extra closed-loop run per request case with py-spy sampling the webhook."""
    py_spy = profiling.find_py_spy()
    if py_spy is None:
        log("py-spy not installed: skipping the CPU profile")
        return {"skipped": "py-spy not installed (.venv/bin/pip install py-spy)"}
    saturation_only = LoadPlan(rates=(), seconds=0, connections=plan.connections, saturation_seconds=seconds)
    shares: dict[str, Any] = {"sample_rate_hz": profiling.SAMPLE_RATE_HZ, "seconds": seconds}
    for case in cases:
        out = run_dir / "profiles" / f"{label}-{case.name}.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        body = write_body(run_dir, case, label)
        log(f"{label} {case.name}: py-spy during {seconds:g}s of saturation")
        recorder = profiling.start_recording(py_spy, webhook.process.pid, seconds=seconds, out=out)
        try:
            run_loadgen(webhook.url + "/mutate", webhook.tls_dir / "ca.crt", body, saturation_only)
        finally:
            recorder.wait(timeout=seconds + 30)
        if not out.is_file():
            return {"skipped": f"py-spy wrote no profile (exit {recorder.returncode}); ptrace not permitted?"}
        shares[case.name] = profiling.categorize(out.read_text().splitlines())
    return shares


def read_admission_latencies(log_path: Path) -> dict[str, Any]:
    """The webhook's own per-admission latency_ms (handler time, no TLS/HTTP), per decision."""
    by_decision: dict[str, list[float]] = {}
    for text in log_path.read_text().splitlines():
        if '"message": "admission"' not in text:
            continue
        line = json.loads(text)
        by_decision.setdefault(str(line["decision"]), []).append(float(line["latency_ms"]) / 1000)
    return {decision: stats.summarize_seconds(values) for decision, values in by_decision.items()}


def run(
    run_dir: Path,
    *,
    clusters_to_run: Sequence[str],
    plan: LoadPlan,
    log_level_variant: str = "",
    profile_cluster: str = "",
    watch_cost_cluster: str = "",
    go_client_cluster: str = "",
    webhook_tree: Path | None = None,
) -> dict[str, Any]:
    results: dict[str, Any] = {"plan": _plan_dict(plan)}
    results["limit"] = measure_limit(run_dir, plan, go_client=bool(go_client_cluster))
    results["webhook"] = []
    for cluster in clusters_to_run:
        cases = (LOCAL, REMOTE_ALIBABA) if cluster == "alibaba" else (LOCAL, REMOTE_CAPACITY)
        profile = PROFILE_SECONDS if cluster == profile_cluster else 0.0
        results["webhook"].append(
            measure_webhook(
                run_dir,
                cluster,
                cases,
                plan,
                profile_seconds=profile,
                webhook_tree=webhook_tree,
                go_client=cluster == go_client_cluster,
            )
        )
    if watch_cost_cluster:
        results["watch_cost"] = measure_watch_cost(run_dir, watch_cost_cluster, webhook_tree=webhook_tree)
    if log_level_variant:
        # The same webhook without its per-admission INFO log line: what that line costs.
        results["webhook_quiet"] = measure_webhook(
            run_dir,
            log_level_variant,
            (LOCAL, REMOTE_CAPACITY),
            plan,
            webhook_args=("--log-level", "WARNING"),
            webhook_tree=webhook_tree,
        )
    return results


def _plan_dict(plan: LoadPlan) -> dict[str, Any]:
    return {
        "rates_rps": list(plan.rates),
        "seconds_per_rate": plan.seconds,
        "saturation_connections": plan.connections,
        "saturation_seconds": plan.saturation_seconds,
    }
