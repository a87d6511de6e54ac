"""The replay's imperative shell: build the cluster once, play each policy on it in turn, then
judge, account and report (the pure parts live in plan, checker, accounting and report).

Policies run one after another on the same control plane: nodes and background are built once
(identical starting state, and ~20 s saved per policy), and each policy gets its own namespace,
emptied (grace 0) before the next starts. Not in parallel: with two cores, concurrent runs would
slow each other unevenly, and every duration the replay measures is wall time times the
compression.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from devplatform.cluster import addons
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.processes import ManagedProcess, free_port, start_process, stop_process
from jarvice.gpubudget import ANNOTATION_BUDGET
from kubeplumbing.spendrecord import ANNOTATION_MAX_COST_PER_HOUR
from replay import accounting, cluster, come_home, gangs, objects, record_file, report
from replay.accounting import Policy, PolicySummary, RunRecord
from replay.driver import WORKERS, Driver
from replay.history import AdmissionView
from replay.plan import Plan, build_plan
from replay.recorder import Recorder
from replay.settings import Settings
from replay.trace import parse_nodes, parse_pods

BACKGROUND_NAMESPACE = "replay-background"
WATCH_SYNC_TIMEOUT = 60.0
WEBHOOK_ACTIVE_TIMEOUT = 30.0
# The webhook as it would be deployed, except: a short reservation TTL (a reservation is released
# as soon as its pod shows up in the watch, which takes milliseconds here; the TTL only matters
# for pods that never appear) and only the GPU resource the replay uses.
WEBHOOK_ARGS = ("--reservation-ttl-seconds", "10", "--gpu-resources", objects.GPU_RESOURCE)
# With a cost cap: where the controller writes its spend record, read often (the run is short).
SPEND_ARGS = ("--spend-namespace", "replay-controller", "--spend-poll-seconds", "0.5")
# Kept back from --max-wall-seconds for judging, accounting and writing the report.
ANALYSIS_RESERVE_SECONDS = 45.0
# Per policy, besides the replay itself: namespace, preload, watch list, (webhook), wipe.
POLICY_OVERHEAD_SECONDS = 15.0
# The burst controller under a burst-after setting: as deployed, except that it scans often (one
# scan interval is `compression` times as long in trace time) and talks to no JARVICE.
CONTROLLER_NAMESPACE = "replay-controller"
CONTROLLER_SCAN_SECONDS = 0.1
CONTROLLER_READY_TIMEOUT = 60.0
# Cost caps: the webhook reads the controller's spend record this often (wall seconds), and the run
# waits this long for the first usable one.
SPEND_POLL_SECONDS = 0.5
SPEND_RECORD_TIMEOUT = 60.0


def say(message: str) -> None:
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _jarvice_credentials(emulator: addons.EmulatorProcess) -> dict[str, str]:
    env = emulator.runner_env()
    return {k: env[k] for k in ("JARVICE_API_URL", "JARVICE_USERNAME", "JARVICE_APIKEY") if k in env}


def describe_plan(plan: Plan, settings: Settings) -> list[str]:
    span = plan.end - plan.start
    gpu_pods = sum(1 for name in plan.replay if plan.pods[name].row.gpus > 0)
    return [
        f"slice: pods {settings.start_index}..{settings.start_index + len(plan.replay) - 1} "
        f"({gpu_pods} GPU pods), {span / 86400:.2f} trace days -> {span / settings.compression:.0f} s per policy "
        f"at {settings.compression:g}x",
        f"cluster: {len(plan.nodes)} nodes, {plan.total_gpus} GPUs; background: {len(plan.background)} holder pods "
        f"leave {plan.free_gpus} GPUs free; preload: {len(plan.preload)} pods running at the slice start"
        + (f" ({plan.preload_skipped} did not fit)" if plan.preload_skipped else ""),
        f"events: {len(plan.events)} (creations and deletions)",
        f"gangs: {len(plan.gangs)} trace jobs of {sum(g.size for g in plan.gangs)} pods, each replayed as a pod group"
        if settings.gangs
        else "gangs: off (--no-gangs), every pod alone",
    ]


def _wait_webhook_active(core: Any, namespace: str) -> None:
    """Dry-run creates of a labeled GPU pod until the webhook's annotation shows up: the API
    server picks up a new MutatingWebhookConfiguration asynchronously. Dry runs leave no trace
    (no reservation either)."""
    probe = objects.build_pod(
        "webhook-probe",
        namespace=namespace,
        cpu="1",
        memory="1Gi",
        gpus=1,
        labels={"task-type": "Nimbix"},
    )
    deadline = time.monotonic() + WEBHOOK_ACTIVE_TIMEOUT
    while time.monotonic() < deadline:
        response = core.create_namespaced_pod(namespace, probe, dry_run="All", _preload_content=False)
        annotations = (json.loads(response.data).get("metadata") or {}).get("annotations") or {}
        if "nimbix-burst.io/decision" in annotations:
            return
        time.sleep(0.2)
    raise RuntimeError(f"webhook registered but not called after {WEBHOOK_ACTIVE_TIMEOUT:g}s")


def _controller_leads(port: int) -> bool:
    import urllib.request  # noqa: PLC0415 - only for the burst-after runs

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return False
    return "nimbix_burst_controller_leader 1.0" in text


def start_controller(plane: ControlPlane, core: Any, *, jarvice_env: Mapping[str, str] | None = None) -> ManagedProcess:
    """`python -m controller` on the replay's cluster, leading, bursting the pods that waited in vain.
    With `jarvice_env` (the emulator's credentials) it also keeps the spend record the webhook prices
    bursts and counts cost caps from (its ConfigMap in CONTROLLER_NAMESPACE, rewritten every second)."""
    try:
        cluster.create_namespace(core, CONTROLLER_NAMESPACE)
    except ApiException as error:
        if error.status != 409:  # already there from an earlier setting
            raise
    port = free_port()
    argv = [
        sys.executable, "-m", "controller",
        "--host", "127.0.0.1", "--port", str(port),
        "--kubeconfig", str(plane.kubeconfig_path),
        "--pod-name", "replay-controller",
        "--lease-namespace", CONTROLLER_NAMESPACE,
        "--scan-seconds", str(CONTROLLER_SCAN_SECONDS),
        "--reap-orphans", "false", "--job-events", "false", "--homecoming", "false",
        "--lease-duration-seconds", "4", "--lease-renew-deadline-seconds", "3", "--lease-retry-seconds", "0.5",
        "--spend-interval-seconds", "1",
    ]  # fmt: skip
    env = {**os.environ, **jarvice_env} if jarvice_env else None
    process = start_process("controller", argv, log_path=plane.run_dir / "controller" / "controller.log", env=env)
    deadline = time.monotonic() + CONTROLLER_READY_TIMEOUT
    while not _controller_leads(port):
        if time.monotonic() > deadline:
            stop_process(process)
            raise RuntimeError(f"the burst controller did not lead within {CONTROLLER_READY_TIMEOUT:g}s")
        time.sleep(0.2)
    return process


def _wait_spend_record_read(core: Any, namespace: str) -> None:
    """Until the webhook has read the controller's spend record: before that, a namespace with a cost cap
    keeps every pod local, which would be the setup's doing, not the cap's. Asked with a dry-run create of
    a GPU pod no node can host (a node selector nothing carries), so the webhook prices its burst: the
    answer says "spend record" only while there is none to price it from."""
    probe = objects.build_pod(
        "spend-probe", namespace=namespace, cpu="1", memory="1Gi", gpus=1, labels={"task-type": "Nimbix"}
    )
    probe["spec"]["nodeSelector"] = {objects.ROLE_LABEL: "spend-probe"}
    deadline = time.monotonic() + SPEND_RECORD_TIMEOUT
    budget = ""
    while time.monotonic() < deadline:
        response = core.create_namespaced_pod(namespace, probe, dry_run="All", _preload_content=False)
        annotations = (json.loads(response.data).get("metadata") or {}).get("annotations") or {}
        budget = annotations.get(ANNOTATION_BUDGET, "")
        if annotations.get("nimbix-burst.io/decision") and not accounting.held_for_want_of_record(budget):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the webhook read no usable spend record within {SPEND_RECORD_TIMEOUT:g}s: {budget}")


def _admission_entries(lines: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The webhook's `"message": "admission"` JSON log lines for real (not dry-run) reviews."""
    for line in lines:
        if '"admission"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("message") == "admission" and not entry.get("dry_run"):
            yield entry


def parse_admission_latencies(lines: Sequence[str]) -> list[float]:
    """latency_ms of the webhook's admission log lines (dry runs excluded)."""
    return [float(entry["latency_ms"]) for entry in _admission_entries(lines) if "latency_ms" in entry]


def parse_admission_views(lines: Sequence[str]) -> dict[str, AdmissionView]:
    """namespace/pod -> the resourceVersions the webhook's view held when it decided, and the
    decision's place in the log's order (the order it decided in), from its admission log lines
    (dry runs excluded; lines without a view skipped)."""
    views: dict[str, AdmissionView] = {}
    for entry in _admission_entries(lines):
        pods, nodes = entry.get("view_pods_version"), entry.get("view_nodes_version")
        if isinstance(pods, int) and isinstance(nodes, int):
            views[f"{entry.get('namespace')}/{entry.get('pod')}"] = AdmissionView(pods, nodes, len(views))
    return views


class Replay:
    def __init__(
        self,
        settings: Settings,
        *,
        plan: Plan,
        plane: ControlPlane,
        core: Any,
        deadline: float,
        jarvice_env: Mapping[str, str] | None = None,
    ) -> None:
        """`jarvice_env`: the JARVICE emulator's credentials, for the controller's spend record (cost caps)."""
        self.settings = settings
        self.jarvice_env = jarvice_env
        self.plan = plan
        self.plane = plane
        self.core = core
        self.deadline = deadline

    def build_background(self) -> float:
        began = time.monotonic()
        cluster.create_namespace(self.core, BACKGROUND_NAMESPACE)
        holders = [objects.build_holder_pod(h, namespace=BACKGROUND_NAMESPACE) for h in self.plan.background]
        if holders:
            cluster.kubectl_bulk(self.plane, ["create"], holders)
        return time.monotonic() - began

    def _policy_deadline(self, policies_left: int) -> float:
        now = time.monotonic()
        budget = self.deadline - ANALYSIS_RESERVE_SECONDS - now - POLICY_OVERHEAD_SECONDS * policies_left
        return now + max(budget / policies_left, 0.0) + POLICY_OVERHEAD_SECONDS

    def create_jobs(self, namespace: str) -> dict[str, str]:
        """An inert Job per replayed GPU pod (objects.build_inert_job); pod name -> the Job's UID."""
        in_gangs = gangs.membership(self.plan.gangs)  # a pod group's pods burst as one, at once: no Job
        names = [n for n in self.plan.replay if self.plan.pods[n].row.gpus > 0 and n not in in_gangs]
        cluster.kubectl_bulk(self.plane, ["create"], [objects.build_inert_job(n, namespace=namespace) for n in names])
        batch = k8s_client.BatchV1Api(self.core.api_client)
        listed = json.loads(batch.list_namespaced_job(namespace, _preload_content=False).data)
        uids = {item["metadata"]["name"]: item["metadata"]["uid"] for item in listed["items"]}
        missing = [n for n in names if n not in uids]
        if missing:
            raise RuntimeError(f"{len(missing)} Jobs not created, e.g. {missing[:3]}")
        return uids

    def run_policy(
        self,
        policy: Policy,
        *,
        policies_left: int,
        burst_after: float | None = None,
        cost_cap: float | None = None,
    ) -> RunRecord:
        settings, plan = self.settings, self.plan
        namespace = f"replay-{accounting.run_key(policy, burst_after, cost_cap)}"
        deadline = self._policy_deadline(policies_left)
        cluster.create_namespace(self.core, namespace)
        capped = cost_cap is not None
        if capped:
            annotations = {ANNOTATION_MAX_COST_PER_HOUR: accounting.format_cap(cost_cap or 0.0)}
            self.core.patch_namespace(namespace, {"metadata": {"annotations": annotations}})
        waits = bool(burst_after)  # 0: the webhook as today, bursting at once
        jobs = self.create_jobs(namespace) if waits else {}
        preload = [
            objects.build_preload_pod(
                plan.pods[name].row,
                name=name,
                namespace=namespace,
                node=plan.pods[name].node,
                model_label=settings.model_label,
            )
            for name in plan.preload
        ]
        if preload:
            cluster.kubectl_bulk(self.plane, ["create"], preload)
        driver = Driver(
            self.core,
            plan,
            policy=policy,
            namespace=namespace,
            compression=settings.compression,
            model_label=settings.model_label,
            stranded_timeout=settings.stranded_timeout,
            say=say,
            # In wall time: the webhook and the controller run on the wall clock.
            burst_after=f"{burst_after / settings.compression:.6g}s" if burst_after else "",
            jobs=jobs,
            gang_list=plan.gangs,
        )
        recorder = Recorder(self.core, on_pod=driver.on_pod)
        recorder.start()
        hook: addons.WebhookProcess | None = None
        controller: ManagedProcess | None = None
        config_name = ""
        notes: list[str] = []
        try:
            recorder.wait_synced(WATCH_SYNC_TIMEOUT)
            if waits or capped:
                jarvice_env = self.jarvice_env if capped else None
                controller = start_controller(self.plane, self.core, jarvice_env=jarvice_env)
                say(f"  burst controller pid {controller.pid} leads; log {controller.log_path}")
            if policy == "webhook":
                run_dir = self.plane.run_dir / "webhook"
                # The log is appended to across runs; admission latencies are read from it.
                (run_dir / "logs" / "webhook.log").unlink(missing_ok=True)
                args = (*WEBHOOK_ARGS, *(SPEND_ARGS if capped else ()))
                hook = addons.start_webhook(
                    run_dir, kubeconfig=self.plane.kubeconfig_path, args=args, cwd=settings.webhook_tree
                )
                config_name = addons.register_webhook(self.plane, hook, name_suffix="-replay")
                _wait_webhook_active(self.core, namespace)
                if capped:
                    _wait_spend_record_read(self.core, namespace)
                say(f"  webhook pid {hook.process.pid} registered ({config_name}); log {hook.process.log_path}")
            result = driver.run(recorder, deadline=deadline)
        finally:
            recorder.stop()
            if config_name:
                self.plane.kubectl("delete", "mutatingwebhookconfiguration", config_name, "--ignore-not-found")
            if hook is not None:
                addons.stop_webhook(hook)
            if controller is not None:
                stop_process(controller)
        latencies: list[float] = []
        views: dict[str, AdmissionView] = {}
        if hook is not None:
            log_lines = hook.process.log_path.read_text().splitlines()
            latencies = parse_admission_latencies(log_lines)
            views = parse_admission_views(log_lines)
        if recorder.errors:
            notes.append(f"replay watch errors: {recorder.errors[:3]}")
        cluster.wipe_namespace(self.core, namespace)
        return RunRecord(
            policy=policy,
            namespace=namespace,
            compression=settings.compression,
            trace_start=plan.start,
            trace_end=plan.end,
            wall_start=result.wall_start,
            wall_end=result.wall_end,
            replay_wall_seconds=result.replay_wall_seconds,
            pods=list(driver.outcomes.values()),
            history=recorder.observations(),
            create_latencies_ms=result.create_latencies_ms,
            admission_latencies_ms=latencies,
            views=views,
            max_lag_seconds=result.max_lag_seconds,
            truncated=result.truncated,
            preload_pods=len(plan.preload),
            notes=tuple(notes),
            burst_after=burst_after,
            cost_cap=cost_cap,
            gangs=plan.gangs,
        )


def history_path(out: Path, policy: Policy, burst_after: float | None = None, cost_cap: float | None = None) -> Path:
    return out / f"history-{accounting.run_key(policy, burst_after, cost_cap)}.jsonl.gz"


def save_history(settings: Settings, record: RunRecord) -> None:
    """Written as soon as the policy ends, so a later policy's failure does not lose it."""
    began = time.monotonic()
    saved = record_file.SavedRun(record, model_label=settings.model_label, race_window=settings.race_window)
    path = history_path(settings.out, record.policy, record.burst_after, record.cost_cap)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record_file.encode(saved))
    say(f"  history saved to {path} ({path.stat().st_size / 1e6:.1f} MB in {time.monotonic() - began:.1f}s)")


def build_notes(settings: Settings, plan: Plan, runs: Sequence[RunRecord]) -> list[str]:
    c = settings.compression
    notes = [
        f"Time: 1 wall second = {c:g} trace seconds ({c / 60:.0f} min). Pending times are wall times x {c:g}, so "
        f"they include the stack's own latency magnified; kube-scheduler retries a failed pod after a 1-10 s "
        f"backoff, i.e. {c / 3600:.1f}-{10 * c / 3600:.0f} trace hours.",
        f"Background: the openb sample never asks for more than ~70 of its {plan.total_gpus} GPUs at once, so "
        f"{len(plan.background)} holder pods keep all but {plan.free_gpus} GPUs busy (fragments of 1-8 GPUs on random "
        f"nodes, seed {settings.seed}); {len(plan.preload)} pods running at the slice start are pre-bound.",
        "GPU-hours to Nimbix: each burst pod's whole trace life (deletion - creation) x its GPUs; pods "
        f"still alive at the slice end count until their trace deletion. Price {settings.price_per_gpu_hour:.2f} USD "
        "per GPU-hour is an assumption.",
        f"Wrong burst: some node had the pod's GPUs, CPU and memory, counting unbound GPU pods and local decisions "
        f"not yet seen as claims, at every moment from {settings.race_window:g} s before the decision started until "
        "it finished (replay/checker.py). 'By GPUs alone': the same, CPU and memory not checked. 'Upper bound': "
        "GPUs free when it finished, claims and races ignored.",
        f"Stranded: kept its GPU request (no burst) and not bound within {settings.stranded_timeout:g} wall seconds "
        "of its creation, among pods that lived at least that long.",
    ]
    if settings.burst_after:
        notes.append(
            "burst-after: each GPU pod of those runs is owned by a Job of its own and carries the setting (in wall"
            f" time: trace time / {c:g}); the real webhook keeps it local until its deadline and the real burst"
            f" controller (scanning every {CONTROLLER_SCAN_SECONDS:g} s, {CONTROLLER_SCAN_SECONDS * c / 60:.0f} trace"
            " min) deletes it then; the replay creates the replacement, as its Job would, at once (a real Job waits"
            " its failure back-off, 10 s, first), which the webhook decides again. 'creation -> burst delay' is the"
            " wait; the waiting pods count in 'kept local, no node had GPUs' (they were kept local on purpose)."
        )
    for run in runs:
        title = accounting.run_title(run.policy, run.burst_after, run.cost_cap)
        notes += [f"{title}: {note}" for note in run.notes]
        if run.truncated:
            notes.append(f"{title}: stopped early by --max-wall-seconds (not every pod was replayed)")
    return notes


def summarize_runs(settings: Settings, runs: Sequence[RunRecord], *, say: Callable[[str], None]) -> list[PolicySummary]:
    summaries = []
    for run in runs:
        began = time.monotonic()
        judgement, _ = accounting.judge_run(run, model_label=settings.model_label, race_window=settings.race_window)
        summaries.append(
            accounting.summarize(
                run,
                judgement,
                price_per_gpu_hour=settings.price_per_gpu_hour,
                stranded_timeout=settings.stranded_timeout,
            )
        )
        title = accounting.run_title(run.policy, run.burst_after, run.cost_cap)
        say(f"  judged {title}: {len(run.history)} observations in {time.monotonic() - began:.1f}s")
    return summaries


def plan_runs(settings: Settings) -> list[tuple[Policy, float | None, float | None]]:
    """The runs in order, as (policy, burst-after, cost cap): each policy once, the webhook once per
    burst-after setting and cost cap when given (every pair: a row of the trade-off table each)."""
    runs: list[tuple[Policy, float | None, float | None]] = []
    for policy in settings.policies:
        if policy == "webhook" and (settings.burst_after or settings.cost_caps):
            waits: tuple[float | None, ...] = settings.burst_after or (None,)
            caps: tuple[float | None, ...] = settings.cost_caps or (None,)
            runs += [(policy, wait, cap) for wait in waits for cap in caps]
        else:
            runs.append((policy, None, None))
    return runs


def run(settings: Settings) -> int:
    began = time.monotonic()
    deadline = began + settings.max_wall_seconds
    nodes = parse_nodes(_read(settings.nodes))
    pods = parse_pods(_read(settings.pods))
    plan = build_plan(
        nodes,
        pods,
        start_index=settings.start_index,
        count=settings.count,
        free_gpus=settings.free_gpus,
        seed=settings.seed,
        background_gpus_only=settings.background_gpus_only,
        gangs=settings.gangs,
    )
    for line in describe_plan(plan, settings):
        say(line)
    run_dir = (settings.out / "run").resolve()
    say(f"starting the control plane in {run_dir}")
    plane = cluster.start_control_plane(run_dir)
    setup: dict[str, Any] = {"nodes": len(nodes), "total_gpus": plan.total_gpus, "free_gpus": plan.free_gpus}
    runs: list[RunRecord] = []
    emulator: addons.EmulatorProcess | None = None
    try:
        if any(cap is not None for cap in settings.cost_caps):
            # Prices for the cost caps: the emulator's machine list (mc_price), through the controller's
            # spend record, as the webhook reads them from JARVICE's in production. No job reaches it.
            emulator = addons.start_jarvice_emulator(run_dir / "jarvice")
            say(f"JARVICE emulator pid {emulator.process.pid} at {emulator.url} (machine prices for the cost caps)")
        core = cluster.core_api(plane, pool_size=WORKERS + 4)
        timings = cluster.create_nodes(plane, nodes, model_label=settings.model_label)
        problems = cluster.check_nodes(core, nodes)
        if problems:
            raise cluster.ClusterError(f"{len(problems)} node problems, e.g. {problems[:3]}")
        say(
            f"created {timings.count} nodes in {timings.total_seconds:.1f}s "
            f"(create {timings.create_seconds:.1f}s, status+untaint {timings.status_and_untaint_seconds:.1f}s)"
        )
        jarvice_env = _jarvice_credentials(emulator) if emulator is not None else None
        replay = Replay(settings, plan=plan, plane=plane, core=core, deadline=deadline, jarvice_env=jarvice_env)
        background_seconds = replay.build_background()
        say(f"background: {len(plan.background)} holder pods in {background_seconds:.1f}s")
        setup |= {
            "node_creation_seconds": round(timings.total_seconds, 2),
            "node_create_pass_seconds": round(timings.create_seconds, 2),
            "node_status_untaint_pass_seconds": round(timings.status_and_untaint_seconds, 2),
            "background_pods": len(plan.background),
            "background_seconds": round(background_seconds, 2),
            "preload_pods": len(plan.preload),
            "preload_skipped": plan.preload_skipped,
            "trace_start": plan.start,
            "trace_end": plan.end,
            "events": len(plan.events),
        }
        variants = plan_runs(settings)
        for i, (policy, burst_after, cost_cap) in enumerate(variants):
            say(f"policy {policy} ({accounting.run_title(policy, burst_after, cost_cap)})")
            left = len(variants) - i
            runs.append(replay.run_policy(policy, policies_left=left, burst_after=burst_after, cost_cap=cost_cap))
            if settings.save_history:
                save_history(settings, runs[-1])
    finally:
        if emulator is not None:
            addons.stop_jarvice_emulator(emulator)
        plane.stop()
    if os.environ.get("REPLAY_DUMP"):
        with (settings.out / "runs.pickle").open("wb") as handle:
            pickle.dump(runs, handle)
    say("judging decisions against the reference checker")
    summaries = summarize_runs(settings, runs, say=say)
    wall = time.monotonic() - began
    setup["total_wall_seconds"] = round(wall, 1)
    config = {
        "nodes": str(settings.nodes),
        "pods": str(settings.pods),
        "start_index": settings.start_index,
        "count": settings.count,
        "compression": settings.compression,
        "policies": list(settings.policies),
        "price_per_gpu_hour": settings.price_per_gpu_hour,
        "free_gpus": settings.free_gpus,
        "background_gpus_only": settings.background_gpus_only,
        "seed": settings.seed,
        "gpu_model_label": settings.model_label,
        "stranded_timeout_seconds": settings.stranded_timeout,
        "race_window_seconds": settings.race_window,
        "max_wall_seconds": settings.max_wall_seconds,
        "burst_after_seconds": list(settings.burst_after),
        "max_cost_per_hour": list(settings.cost_caps),
        "webhook_tree": str(settings.webhook_tree) if settings.webhook_tree is not None else None,
        "gangs": settings.gangs,
    }
    notes = build_notes(settings, plan, runs)
    for summary in summaries:
        if summary.create_errors or summary.webhook_fail_open:
            notes.append(
                f"{summary.title}: {summary.create_errors} pod CREATEs failed, "
                f"{summary.webhook_fail_open} GPU pods admitted without a webhook decision (failed open)"
            )
    table = report.build_table(summaries)
    document = report.build_document(summaries, config=config, setup=setup)
    document["notes"] = notes
    markdown = report.build_markdown(table, config=config, setup=setup, notes=notes)
    moved = come_home.what_ifs(runs, settings.come_home) if settings.come_home is not None else []
    document["come_home"] = {title: result.as_dict() for title, result in moved}
    lines = [f"{title}: {line}" for title, result in moved for line in come_home.describe(result)]
    if lines:
        markdown += "\n".join(["", "## What-if: moving running bursts home", "", *(f"- {x}" for x in lines), ""])
    report.write_files(settings.out, document=document, markdown=markdown)
    report.write_png(settings.out / "timeline.png", summaries, free_gpus=plan.free_gpus, trace_start=plan.start)
    # A row per (burst-after, cap) setting: every webhook run, the uncapped one ("none") included.
    tradeoff = [s for s in summaries if s.policy == "webhook"] if settings.burst_after or settings.cost_caps else []
    if tradeoff:
        report.write_tradeoff_png(settings.out / "tradeoff.png", tradeoff)
        say("")
        say(report.build_tradeoff_table(tradeoff))
    say("")
    say(table)
    for line in lines:
        say(line)
    say("")
    say(f"total wall time {time.monotonic() - began:.0f}s; report in {settings.out}/report.{{json,md}}, timeline.png")
    return 0
