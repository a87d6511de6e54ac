"""Against the real local control plane (devplatform/cluster): issue 6 items 3 (real sync), 4 and 5.

One control plane (etcd, kube-apiserver, kube-scheduler; no controller-manager) filled with a
synthetic cluster of 1,000 nodes and 10,000 pods through the API (pods bound via spec.nodeName,
as the scheduler would have left them), then:
  3b  the real webhook process from start to /readyz 200 (list + apply of the whole cluster);
  4   the naive list-per-request decision vs ours (decide()/admit() from a cache filled from the
      same API server);
  5   pod CREATE latency through the kube-apiserver with the webhook registered (the shipped
      MutatingWebhookConfiguration, via addons.register_webhook) vs not, in interleaved rounds.
Every process started here is stopped by PID.
"""

from __future__ import annotations

import asyncio
import copy
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client

from bench import clusters, inprocess, minimal, naive, procfs, stats
from bench.kubeapi import MERGE_PATCH, KubeApi, KubeApiError, run_bounded
from devplatform import manifests
from devplatform.cluster import addons, controlplane
from webhook import admission, review
from webhook.model import parse_placement, pod_gpus
from webhook.sync import CacheSync, parse_items

CREATE_CONCURRENCY = 24
WEBHOOK_READY_TIMEOUT_SECONDS = 180.0
TOGGLE_TIMEOUT_SECONDS = 20.0
CREATE_NAMESPACE = "bench-create"
LIST_PAGE_SIZE = 500  # as the webhook's watcher
DECISION_ANNOTATION = b"nimbix-burst.io/decision"


def log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def _creatable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as a client would POST it: no server-set metadata."""
    body = copy.deepcopy(dict(obj))
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        body["metadata"].pop(key, None)
    return body


async def populate(api: KubeApi, *, nodes: int, pods_per_node: int) -> dict[str, Any]:
    spec = clusters.SyntheticSpec(nodes=nodes, pods_per_node=pods_per_node)
    raw_nodes = [_creatable(n) for n in clusters.synthetic_nodes(spec)]
    pods = []
    for record in clusters.synthetic_pods(spec):
        pod = _creatable(json.loads(clusters.render_pod(record)))
        pod.pop("status", None)
        pods.append(pod)
    namespaces = sorted({p["metadata"]["namespace"] for p in pods})
    began = time.perf_counter()

    async def make_namespace(name: str) -> None:
        await api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        await api.create(
            f"/api/v1/namespaces/{name}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )

    await run_bounded([_bind(make_namespace, ns) for ns in namespaces], concurrency=CREATE_CONCURRENCY)

    async def make_node(node: dict[str, Any]) -> None:
        await api.create("/api/v1/nodes", node)
        # TaintNodesByCondition adds node.kubernetes.io/not-ready on create; nothing here would
        # remove it (kubernetes.md C6), so set the taints we mean in one merge patch.
        patch = {"spec": {"taints": node["spec"].get("taints")}}
        status, payload = await api.request(
            "PATCH",
            f"/api/v1/nodes/{node['metadata']['name']}",
            body=json.dumps(patch).encode(),
            content_type=MERGE_PATCH,
        )
        if status != 200:
            raise KubeApiError(f"PATCH node: HTTP {status}: {payload[:300]!r}")

    await run_bounded([_bind(make_node, n) for n in raw_nodes], concurrency=CREATE_CONCURRENCY)
    nodes_s = time.perf_counter() - began
    first = await api.get_json(f"/api/v1/nodes/{raw_nodes[0]['metadata']['name']}")
    if clusters.GPU not in first["status"].get("allocatable", {}) or first["spec"].get("taints") != [
        clusters.GPU_TAINT
    ]:
        raise KubeApiError(f"node not as intended after create: {json.dumps(first)[:500]}")
    log(f"{len(raw_nodes)} nodes in {nodes_s:.1f}s")

    async def make_pod(pod: dict[str, Any]) -> None:
        await api.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)

    began_pods = time.perf_counter()
    await run_bounded([_bind(make_pod, p) for p in pods], concurrency=CREATE_CONCURRENCY)
    pods_s = time.perf_counter() - began_pods
    log(f"{len(pods)} pods in {pods_s:.1f}s ({len(pods) / pods_s:.0f}/s)")
    return {
        "nodes": len(raw_nodes),
        "pods": len(pods),
        "gpu_pods": sum(1 for r in clusters.synthetic_pods(spec) if r.gpus),
        "namespaces": len(namespaces),
        "create_nodes_s": round(nodes_s, 2),
        "create_pods_s": round(pods_s, 2),
        "create_concurrency": CREATE_CONCURRENCY,
    }


def _bind(fn: Callable[[Any], Awaitable[None]], arg: Any) -> Callable[[], Awaitable[None]]:
    async def job() -> None:
        await fn(arg)

    return job


# ----- 3b: the real webhook's initial sync ----------------------------------------------------


def _log_time(line: Mapping[str, Any]) -> float:
    return datetime.strptime(str(line["asctime"]), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def read_sync_span(log_path: Path) -> dict[str, Any]:
    """From the webhook's JSON log: seconds from "webhook starting" to the last "cache listed"."""
    started = None
    listed: dict[str, tuple[float, int]] = {}
    for text in log_path.read_text().splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue
        if line.get("message") == "webhook starting" and started is None:
            started = _log_time(line)
        elif line.get("message") == "cache listed" and line.get("kind") not in listed:
            listed[str(line["kind"])] = (_log_time(line), int(line.get("count", 0)))
    if started is None or len(listed) < 2:
        return {}
    return {
        "list_and_apply_s": round(max(t for t, _ in listed.values()) - started, 3),
        "listed": {kind: count for kind, (_, count) in listed.items()},
    }


def read_rss_mb(pid: int) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = round(int(rest.split()[0]) / 1024, 1)
    return {"rss_mb": values.get("VmRSS", 0.0), "peak_rss_mb": values.get("VmHWM", 0.0)}


# ----- 4: naive vs ours ------------------------------------------------------------------------


def fill_cache_from_api(core: Any) -> CacheSync:
    """Our cache, filled as the watcher fills it (raw pages, then apply_list)."""
    sync = inprocess.new_sync(inprocess.default_policy())
    for kind, call in (
        ("nodes", core.list_node),
        ("pods", core.list_pod_for_all_namespaces),
        ("namespaces", core.list_namespace),
    ):
        items: list[Any] = []
        token = ""
        while True:
            response = call(limit=LIST_PAGE_SIZE, _continue=token or None, _preload_content=False)
            page, _, token = parse_items(json.loads(response.data))
            items.extend(page)
            if not token:
                break
        sync.apply_list(kind, items)  # type: ignore[arg-type]  # kind is one of the three literals
    return sync


def measure_naive(core: Any, *, model_runs: int, raw_runs: int) -> dict[str, Any]:
    review_pod = clusters.build_review_pod(gpus=1)
    tolerations = review_pod["spec"]["tolerations"]
    body = json.dumps(clusters.build_review(review_pod, uid="naive-vs-ours", dry_run=True)).encode()
    result: dict[str, Any] = {}
    for name, fn, runs in (
        ("naive_models", naive.decide_with_models, model_runs),
        ("naive_raw_json", naive.decide_with_raw_json, raw_runs),
    ):
        times = []
        chosen = ""
        for _ in range(runs):
            began = time.perf_counter()
            chosen = fn(core, need=1, tolerations=tolerations)
            times.append(time.perf_counter() - began)
        result[name] = {
            "runs": runs,
            "median_ms": round(statistics.median(times) * 1000, 2),
            "min_ms": round(min(times) * 1000, 2),
            "chosen_node": chosen,
        }
        log(f"{name}: median {result[name]['median_ms']} ms per decision over {runs} runs (node {chosen})")

    sync = fill_cache_from_api(core)
    cache = sync.cache
    policy = inprocess.default_policy()
    request = review.parse_review(body)
    gpus = pod_gpus(request.object["spec"], policy.gpu_resources)
    placement = parse_placement(request.object["spec"])
    outcome = admission.admit(request, cache=cache, policy=policy)
    decide_s = inprocess.per_call_seconds(lambda: admission.decide_placement(gpus, placement, cache))
    admit_s = inprocess.per_call_seconds(lambda: admission.admit(request, cache=cache, policy=policy))
    result["ours"] = {
        "nodes": cache.node_count,
        "pods_cached": cache.pod_count,
        "outcome": outcome.outcome,
        "node": outcome.node,
        "decide_us": round(decide_s * 1e6, 2),
        "admit_us": round(admit_s * 1e6, 2),
    }
    best_naive = min(result["naive_models"]["median_ms"], result["naive_raw_json"]["median_ms"]) / 1000
    result["speedup_vs_admit"] = stats.ratio(best_naive, admit_s)
    result["speedup_vs_admit_models"] = stats.ratio(result["naive_models"]["median_ms"] / 1000, admit_s)
    log(f"ours: admit {result['ours']['admit_us']} us -> speedup x{result['speedup_vs_admit']} (vs the faster naive)")
    return result


# ----- 5: pod CREATE latency, webhook on vs off -----------------------------------------------


def build_create_pod(name: str) -> dict[str, Any]:
    pod = clusters.build_review_pod(gpus=1, name=name, namespace=CREATE_NAMESPACE)
    pod.pop("status", None)
    meta = pod["metadata"]
    meta.pop("ownerReferences", None)
    meta.pop("generateName", None)
    return pod


@dataclass(frozen=True)
class Registered:
    """One webhook the create phase can register: where it listens, the CA that signed its
    certificate, the marker its mutation leaves in the created pod, and its PID for CPU time."""

    url: str
    ca_pem: bytes
    marker: bytes
    pid: int


BENCH_CONFIGURATION = "nimbix-burst-bench"


async def _set_registered(cp: controlplane.ControlPlane, objects: Any, target: Registered | None) -> None:
    """Register `target` under the shipped configuration (same name, rules, selectors, timeouts for
    every webhook compared), or delete the registration."""
    if target is None:
        await asyncio.to_thread(
            cp.kubectl, "delete", "mutatingwebhookconfiguration", BENCH_CONFIGURATION, "--ignore-not-found"
        )
        return
    config = manifests.webhook_configuration_for_url(
        copy.deepcopy(objects), url=target.url, ca_bundle_pem=target.ca_pem, name_suffix="-bench"
    )
    await asyncio.to_thread(cp.kubectl, "apply", "-f", "-", input=json.dumps(config))


def _answered_by(payload: bytes, markers: Sequence[bytes]) -> bytes | None:
    return next((m for m in markers if m in payload), None)


async def _wait_effective(api: KubeApi, *, marker: bytes | None, markers: Sequence[bytes], serial: list[int]) -> int:
    """Create probe pods until the pod shows the registered webhook's mark (or none)."""
    deadline = time.monotonic() + TOGGLE_TIMEOUT_SECONDS
    probes = 0
    while True:
        serial[0] += 1
        probes += 1
        status, payload = await api.request(
            "POST",
            f"/api/v1/namespaces/{CREATE_NAMESPACE}/pods",
            body=json.dumps(build_create_pod(f"probe-{serial[0]:05d}")).encode(),
        )
        if status != 201:
            raise KubeApiError(f"probe create: HTTP {status}: {payload[:300]!r}")
        if _answered_by(payload, markers) == marker:
            return probes
        if time.monotonic() > deadline:
            raise KubeApiError(f"webhook registration {marker!r} not effective after {TOGGLE_TIMEOUT_SECONDS}s")
        await asyncio.sleep(0.2)


WEBHOOK_CALL_METRIC = "apiserver_admission_webhook_admission_duration_seconds"


def parse_webhook_call_metric(text: str) -> tuple[float, int]:
    """(sum seconds, count) of the API server's own timing of its calls to our webhook."""
    total, count = 0.0, 0
    for line in text.splitlines():
        if line.startswith(WEBHOOK_CALL_METRIC) and 'name="burst.nimbix-burst.io"' in line:
            name, value = line.split("{", 1)[0], float(line.rsplit(" ", 1)[1])
            if name.endswith("_sum"):
                total += value
            elif name.endswith("_count"):
                count += int(value)
    return total, count


async def _webhook_call_metric(api: KubeApi) -> tuple[float, int]:
    status, payload = await api.request("GET", "/metrics")
    if status != 200:
        raise KubeApiError(f"GET /metrics: HTTP {status}")
    return parse_webhook_call_metric(payload.decode())


async def measure_creates(
    cp: controlplane.ControlPlane,
    targets: Mapping[str, Registered],
    api: KubeApi,
    *,
    webhook_log: Path,
    rounds: int,
    per_round: int,
) -> dict[str, Any]:
    """Sequential creates with each of `targets` registered in turn and with none ("off"), in
    interleaved rounds (the order rotates each round, so drift and position hit all alike). Per
    variant: latency, the API server's time per webhook call, and each webhook process's CPU time
    over its rounds; ours also while the others are registered (it still watches every create)."""
    await api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CREATE_NAMESPACE}}
    )
    for sa in ("default", "trainer"):
        await api.create(
            f"/api/v1/namespaces/{CREATE_NAMESPACE}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}},
        )
    objects = await asyncio.to_thread(manifests.render_kustomize, cp.bin_dir / "kubectl")
    variants = ["off", *targets]
    markers = [t.marker for t in targets.values()]
    samples: dict[str, list[float]] = {v: [] for v in variants}
    round_medians: dict[str, list[float]] = {v: [] for v in variants}
    calls: dict[str, list[float]] = {v: [0.0, 0.0] for v in variants}
    # cpu[process][variant registered] = [cpu seconds, creates]
    cpu: dict[str, dict[str, list[float]]] = {name: {v: [0.0, 0.0] for v in variants} for name in targets}
    serial = [0]
    for round_index in range(rounds):
        shift = round_index % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            target = targets.get(variant)
            await _set_registered(cp, objects, target)
            await _wait_effective(api, marker=target.marker if target else None, markers=markers, serial=serial)
            metric_before = await _webhook_call_metric(api)
            cpu_before = {name: procfs.cpu_seconds(t.pid) for name, t in targets.items()}
            for _ in range(per_round):
                serial[0] += 1
                body = json.dumps(build_create_pod(f"create-{serial[0]:05d}")).encode()
                began = time.perf_counter()
                status, payload = await api.request("POST", f"/api/v1/namespaces/{CREATE_NAMESPACE}/pods", body=body)
                elapsed = time.perf_counter() - began
                if status != 201:
                    raise KubeApiError(f"create: HTTP {status}: {payload[:300]!r}")
                if _answered_by(payload, markers) != (target.marker if target else None):
                    raise KubeApiError(f"round {round_index} webhook {variant}: unexpected mutation state")
                samples[variant].append(elapsed)
            for name, t in targets.items():
                cpu[name][variant][0] += procfs.cpu_seconds(t.pid) - cpu_before[name]
                cpu[name][variant][1] += per_round
            metric_after = await _webhook_call_metric(api)
            calls[variant][0] += metric_after[0] - metric_before[0]
            calls[variant][1] += metric_after[1] - metric_before[1]
            recent = samples[variant][-per_round:]
            round_medians[variant].append(statistics.median(recent))
            log(f"round {round_index + 1}/{rounds} {variant:>7}: median {statistics.median(recent) * 1000:.2f} ms")
    await _set_registered(cp, objects, None)
    handler = [
        float(line["latency_ms"])
        for line in _read_json_lines(webhook_log)
        if line.get("message") == "admission" and line.get("namespace") == CREATE_NAMESPACE
    ]
    summaries = {v: stats.summarize_seconds(samples[v]) for v in variants}
    off = summaries["off"]
    per_variant: dict[str, Any] = {}
    for variant in targets:
        summary = summaries[variant]
        own = cpu[variant][variant]
        per_variant[variant] = {
            **summary,
            "ratio_p50": stats.ratio(summary["p50_ms"], off["p50_ms"]),
            "added_p50_ms": round(summary["p50_ms"] - off["p50_ms"], 3),
            # Each round against the "off" round of the same round, so slow drift cancels.
            "added_p50_paired_median_ms": round(
                statistics.median(a - b for a, b in zip(round_medians[variant], round_medians["off"], strict=True))
                * 1000,
                3,
            ),
            "apiserver_calls": int(calls[variant][1]),
            "apiserver_call_mean_ms": round(calls[variant][0] / calls[variant][1] * 1000, 3)
            if calls[variant][1]
            else None,
            "cpu_per_create_us": round(own[0] / own[1] * 1e6, 1) if own[1] else None,
        }
    ours = cpu.get("ours", {})
    idle = [sum(ours[v][i] for v in variants if v != "ours") for i in (0, 1)] if ours else [0.0, 0.0]
    if ours:
        per_variant["ours"]["cpu_per_create_idle_us"] = round(idle[0] / idle[1] * 1e6, 1) if idle[1] else None
    on_summary = summaries.get("ours", off)

    def round_ratios(other: str) -> list[float]:
        """Per round: ours' added latency over `other`'s, each against that round's "off" (the spread)."""
        if "ours" not in round_medians or other not in round_medians:
            return []
        rounds_of = zip(round_medians["ours"], round_medians[other], round_medians["off"], strict=True)
        return [round((ours - off) / (theirs - off), 3) for ours, theirs, off in rounds_of if theirs != off]

    def added_ratio(other: str, field: str) -> float | None:
        """Ours' added latency over `other`'s; `field`: pooled p50 difference, or paired median."""
        ours_added = per_variant.get("ours", {}).get(field)
        if other not in per_variant or ours_added is None:
            return None
        return stats.ratio(ours_added, per_variant[other][field])

    return {
        "rounds_each": rounds,
        "creates_per_round": per_round,
        "variants": per_variant,
        "added_ratio_vs_aiohttp": added_ratio("aiohttp", "added_p50_ms"),
        "added_ratio_vs_go": added_ratio("go", "added_p50_ms"),
        # Steadier between runs: one slow round moves a pooled p50 by a millisecond, a median of
        # within-round differences hardly at all.
        "added_ratio_paired_vs_aiohttp": added_ratio("aiohttp", "added_p50_paired_median_ms"),
        "added_ratio_paired_vs_go": added_ratio("go", "added_p50_paired_median_ms"),
        "added_ratio_rounds_vs_aiohttp": round_ratios("aiohttp"),
        "added_ratio_rounds_vs_go": round_ratios("go"),
        "off": off,
        "on": on_summary,
        "mutated_creates": len(samples.get("ours", [])),
        "ratio_p50": stats.ratio(on_summary["p50_ms"], off["p50_ms"]),
        "ratio_mean": stats.ratio(on_summary["mean_ms"], off["mean_ms"]),
        "ratio_p99": stats.ratio(on_summary["p99_ms"], off["p99_ms"]),
        "ratio_p50_paired_median": round(
            statistics.median(a / b for a, b in zip(round_medians["ours"], round_medians["off"], strict=True)), 3
        )
        if "ours" in round_medians
        else None,
        "apiserver_webhook_calls": int(calls["ours"][1]) if "ours" in calls else 0,
        "apiserver_webhook_call_mean_ms": per_variant.get("ours", {}).get("apiserver_call_mean_ms"),
        "webhook_handler_p50_ms": round(statistics.median(handler), 3) if handler else None,
    }


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    for text in path.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            continue
    return lines


# ----- the whole phase ---------------------------------------------------------------------------


def run(
    run_dir: Path,
    *,
    nodes: int,
    pods_per_node: int,
    naive_model_runs: int,
    naive_raw_runs: int,
    create_rounds: int,
    creates_per_round: int,
    webhook_tree: Path | None = None,
) -> dict[str, Any]:
    bin_dir = controlplane.ensure_binaries()
    cp = controlplane.ControlPlane(run_dir / "controlplane", bin_dir=bin_dir, controller_manager=False)
    result: dict[str, Any] = {}
    webhook: addons.WebhookProcess | None = None
    minimals: list[addons.WebhookProcess] = []
    began = time.perf_counter()
    cp.start()
    log(f"control plane up in {time.perf_counter() - began:.1f}s")
    try:

        async def fill() -> dict[str, Any]:
            async with KubeApi(cp.kubeconfig_path, connections=CREATE_CONCURRENCY) as api:
                return await populate(api, nodes=nodes, pods_per_node=pods_per_node)

        result["cluster"] = asyncio.run(fill())

        webhook_dir = run_dir / "webhook-real"
        began = time.perf_counter()
        webhook = addons.start_webhook(webhook_dir, kubeconfig=cp.kubeconfig_path, wait=False, cwd=webhook_tree)
        addons.wait_ready(webhook, timeout=WEBHOOK_READY_TIMEOUT_SECONDS)
        ready_s = time.perf_counter() - began
        result["sync"] = {
            "start_to_ready_s": round(ready_s, 3),
            **read_sync_span(webhook.process.log_path),
            **read_rss_mb(webhook.process.pid),
        }
        log(f"webhook: start to /readyz {ready_s:.2f}s ({result['sync']})")

        api_client = cp.api_client()
        try:
            core = k8s_client.CoreV1Api(api_client)
            result["naive"] = measure_naive(core, model_runs=naive_model_runs, raw_runs=naive_raw_runs)
        finally:
            api_client.close()

        targets: dict[str, Registered] = {}
        for kind in ("go", "aiohttp"):
            started_minimal, url = minimal.start(kind, run_dir / f"minimal-{kind}")
            minimals.append(started_minimal)
            targets[kind] = Registered(
                url=url,
                ca_pem=started_minimal.ca.cert_pem,
                marker=minimal.MINIMAL_LABEL + b'":"' + kind.encode(),
                pid=started_minimal.process.pid,
            )
        targets["ours"] = Registered(
            url=webhook.url + "/mutate", ca_pem=webhook.ca.cert_pem, marker=DECISION_ANNOTATION, pid=webhook.process.pid
        )

        async def creates() -> dict[str, Any]:
            assert webhook is not None
            async with KubeApi(cp.kubeconfig_path, connections=4) as api:
                return await measure_creates(
                    cp, targets, api, webhook_log=webhook.process.log_path, rounds=create_rounds,
                    per_round=creates_per_round,
                )  # fmt: skip

        result["pod_create"] = asyncio.run(creates())
    finally:
        for started_minimal in minimals:
            addons.stop_webhook(started_minimal)
        if webhook is not None:
            addons.stop_webhook(webhook)
        cp.stop()
    return result
