"""In-process measurements: decision cost vs cluster size (issue 6 item 2) and cache scale (item 3).

Run each in a fresh process so one measurement's heap does not disturb the next:
    python -m bench.inprocess decisions --sizes 100,1000,5000,10000
    python -m bench.inprocess cache-scale --cluster synthetic:5000 [--held]
Both print one JSON document on stdout; progress goes to stderr.

The caches are filled through CacheSync (parse_page, then apply_parsed): the code the watcher runs.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import logging
import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import orjson

from bench import clusters
from kubeplumbing.spendrecord import MachineRate, NamespaceSpend, SpendRecord
from webhook import admission, review
from webhook.cache import ClusterCache
from webhook.gangs import ANNOTATION_KUEUE_TOTAL, LABEL_KUEUE_GROUP
from webhook.model import parse_placement, pod_compute, pod_gpus
from webhook.rewrite_terms import RewritePolicy
from webhook.settings import parse_settings
from webhook.sync import CacheSync, ParsedList

# Each timing: REPEATS batches of about BATCH_SECONDS each; the median batch is reported.
REPEATS = 5
BATCH_SECONDS = 0.04
# A GPU model no node carries: a pod pinned to it must scan every node to prove nothing fits.
ABSENT_MODEL = "H100"
# The Alibaba cluster's T4 nodes are all full after placement: a T4-pinned pod ends remote.
ALIBABA_FULL_MODEL = "T4"
PAGE_SIZE = 500  # the watcher's LIST_PAGE_SIZE


class DecisionRow(TypedDict):
    cluster: str
    nodes: int
    pods_cached: int
    claims: int
    case: str
    outcome: str
    decide_us: float  # best of REPEATS batches
    admit_us: float
    handler_us: float  # parse_review + admit + orjson.dumps of the response: the handler's CPU work
    decide_median_us: float
    admit_median_us: float
    handler_median_us: float


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    gpus: int
    node_selector: dict[str, str]
    gang: int = 0  # pods of its Kueue pod group (0: a pod alone); every review is the gang's first (dry run)
    namespace: str = clusters.REVIEW_NAMESPACE


# A namespace with a GPU budget and both cost caps, and the controller's spend record for it: a burst
# there is priced and reconciled with what JARVICE holds on every review (webhook.spending).
CAPPED_NAMESPACE = "capped-team"
CAPPED = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {
        "name": CAPPED_NAMESPACE,
        "uid": "0f7e3c1a-5b2d-4c8e-9a6f-2d4b6e8f0a1c",
        "annotations": {
            "nimbix-burst.io/max-remote-gpus": "100000",
            "nimbix-burst.io/max-cost-per-hour": "1000000",
            "nimbix-burst.io/max-cost-per-month": "100000000",
        },
    },
}


def log(message: str) -> None:
    print(f"    {message}", file=sys.stderr, flush=True)


def default_policy() -> RewritePolicy:
    return parse_settings([], {}, check_files=False).policy


def new_sync(policy: RewritePolicy) -> CacheSync:
    cache = ClusterCache(gpu_resources=policy.gpu_resources, clock=time.monotonic, reservation_ttl=120.0)
    return CacheSync(cache, clock=time.monotonic)


def iter_pod_pages(records: Iterator[clusters.PodRecord], *, gpu_only: bool) -> Iterator[list[dict[str, Any]]]:
    """Pods as the watcher receives them: JSON pages decoded with json.loads."""
    page: list[bytes] = []
    for record in records:
        if gpu_only and not record.gpus:
            continue
        page.append(clusters.render_pod(record))
        if len(page) == PAGE_SIZE:
            yield json.loads(b"[" + b",".join(page) + b"]")
            page = []
    if page:
        yield json.loads(b"[" + b",".join(page) + b"]")


def fill_cache(name: str, policy: RewritePolicy, *, gpu_only: bool) -> CacheSync:
    """A cache holding cluster `name`. With gpu_only, pods without GPUs are left out of the list:
    faster to build; the nodes then show the CPU, memory and pod slots those pods hold as free,
    which does not change what decide() costs (it scans by free GPUs)."""
    raw_nodes, records = clusters.cluster_sources(name)
    sync = new_sync(policy)
    sync.apply_list("nodes", list(raw_nodes))
    pods = [pod for page in iter_pod_pages(records, gpu_only=gpu_only) for pod in page]
    sync.apply_list("pods", pods)
    # kube-system names the cluster; one namespace has a budget and cost caps (the capped cases).
    sync.apply_list("namespaces", [clusters.KUBE_SYSTEM, CAPPED])
    sync.cache.spend.set_record(spend_record(CAPPED_NAMESPACE))
    return sync


def spend_record(namespace: str) -> SpendRecord:
    """The controller's record, fresh: the namespace's jobs hold 8 GPUs; machines of 1 and 8 GPUs."""
    return SpendRecord(
        observed_at=int(time.time()),
        month=time.strftime("%Y-%m", time.gmtime()),
        namespaces={
            namespace: NamespaceSpend(cost_per_hour=20.0, month_recorded=100.0, month_worst_case=400.0, gpus=8)
        },
        unattributed_jobs=0,
        unattributed_cost_per_hour=0.0,
        machines={"n1": MachineRate(gpus=1, price=2.5), "n8": MachineRate(gpus=8, price=20.0)},
    )


def per_call_seconds(fn: Callable[[], object]) -> float:
    """Per-call time, best of REPEATS batches (timeit's advice: the minimum is the run least
    disturbed by everything else on the machine; GC is off during a batch)."""
    return min(per_call_samples(fn))


def per_call_samples(fn: Callable[[], object]) -> list[float]:
    """Per-call times of REPEATS batches of about BATCH_SECONDS each."""
    timer = timeit.Timer(fn)
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= BATCH_SECONDS / 4:
            break
        number *= 4
    number = max(1, int(number * BATCH_SECONDS / elapsed))
    return [timer.timeit(number) / number for _ in range(REPEATS)]


def _us(samples: Sequence[float]) -> tuple[float, float]:
    """(best, median) in microseconds."""
    return round(min(samples) * 1e6, 2), round(statistics.median(samples) * 1e6, 2)


def review_for(case: Case) -> bytes:
    pod = clusters.build_review_pod(gpus=case.gpus, namespace=case.namespace)
    if case.node_selector:
        pod["spec"]["nodeSelector"] = dict(case.node_selector)
    if case.gang:
        pod["metadata"]["labels"][LABEL_KUEUE_GROUP] = f"bench-{case.name}"
        pod["metadata"]["annotations"][ANNOTATION_KUEUE_TOTAL] = str(case.gang)
    return json.dumps(clusters.build_review(pod, uid="bench-review", dry_run=True)).encode()


def measure_case(cluster: str, sync: CacheSync, case: Case, policy: RewritePolicy) -> DecisionRow:
    cache = sync.cache
    body = review_for(case)
    request = review.parse_review(body)
    spec = request.object["spec"]
    gpus = {**pod_gpus(spec, policy.gpu_resources), **pod_compute(spec)}  # what admit() decides on
    placement = parse_placement(spec)
    outcome: str = admission.decide_placement(gpus, placement, cache).kind
    admitted = admission.admit(request, cache=cache, policy=policy)
    if case.gang:
        outcome = admitted.outcome  # the gang's packing decides, not one pod's fit
    if admitted.outcome != outcome:
        raise RuntimeError(f"admit() and decide() disagree for {case.name}: {admitted.outcome} vs {outcome}")

    def handler() -> bytes:
        parsed = review.parse_review(body)
        return orjson.dumps(admission.admit(parsed, cache=cache, policy=policy).response)  # as mutate() does

    decide_us, decide_median = _us(per_call_samples(lambda: admission.decide_placement(gpus, placement, cache)))
    admit_us, admit_median = _us(per_call_samples(lambda: admission.admit(request, cache=cache, policy=policy)))
    handler_us, handler_median = _us(per_call_samples(handler))
    return DecisionRow(
        cluster=cluster,
        nodes=cache.node_count,
        pods_cached=cache.pod_count,
        claims=len(list(_claims(cache))),
        case=case.name,
        outcome=outcome,
        decide_us=decide_us,
        admit_us=admit_us,
        handler_us=handler_us,
        decide_median_us=decide_median,
        admit_median_us=admit_median,
        handler_median_us=handler_median,
    )


def _claims(cache: ClusterCache) -> Iterator[str]:
    """Pods held as claims (unbound GPU pods): the cache's pods without a node."""
    return (uid for uid, pod in cache.pods().items() if not pod.node_name and not pod.terminal)


SYNTHETIC_CASES = (
    Case("local", 1, {}),
    Case("remote", 8, {}),
    Case("remote-selector", 1, {clusters.GPU_MODEL_LABEL: ABSENT_MODEL}),
    Case("gang-local", 1, {}, gang=3),
    Case("gang-remote", 8, {}, gang=3),
    Case("remote-capped", 8, {}, namespace=CAPPED_NAMESPACE),
)
ALIBABA_CASES = (
    Case("local", 1, {}),
    Case("remote-selector", 1, {clusters.GPU_MODEL_LABEL: ALIBABA_FULL_MODEL}),
)


def run_decisions(sizes: Sequence[int], *, alibaba: bool) -> dict[str, Any]:
    policy = default_policy()
    rows: list[DecisionRow] = []
    reserve_release: dict[str, float] = {}
    clusters_to_run = [f"synthetic:{size}" for size in sizes] + (["alibaba"] if alibaba else [])
    for name in clusters_to_run:
        began = time.perf_counter()
        sync = fill_cache(name, policy, gpu_only=True)
        log(f"{name}: cache filled in {time.perf_counter() - began:.1f}s ({sync.cache.pod_count} GPU pods)")
        gc.collect()
        for case in ALIBABA_CASES if name == "alibaba" else SYNTHETIC_CASES:
            row = measure_case(name, sync, case, policy)
            rows.append(row)
            log(f"{name} {case.name}: decide {row['decide_us']} us, admit {row['admit_us']} us ({row['outcome']})")
        reserve_release[name] = _reserve_release_us(sync.cache, policy)
        log(f"{name}: reserve+release {reserve_release[name]} us")
        del sync
        gc.collect()
    return {"rows": rows, "reserve_release_us": reserve_release, "per_request_extras_us": measure_request_extras()}


def measure_request_extras() -> dict[str, float]:
    """What mutate() adds around admit() per request, with the webhook's own logging setup and
    metrics objects: the INFO JSON line (to /dev/null) and the prometheus updates."""
    # Imported here: it pulls in aiohttp and the kubernetes client, which would inflate the
    # cache-scale process's baseline RSS.
    from kubeplumbing.logs import configure_logging  # noqa: PLC0415
    from webhook.admission_log import AdmissionLine  # noqa: PLC0415

    configure_logging("INFO")
    root = logging.getLogger()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below, after the timing
    try:
        for handler in root.handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(devnull)
        logger = logging.getLogger("webhook.app")
        extra = {
            "uid": "84d60ba8-411c-40c1-b721-e87975a78644",
            "namespace": "ml-team",
            "pod": "trainer-7f9c4b8d6-x2k9q",
            "decision": "local",
            "reason": "10+ candidate node(s) can host 1 nvidia.com/gpu; best fit node-00120",
            "node": "node-00120",
            "dry_run": False,
            "latency_ms": 0.213,
        }
        write_line = AdmissionLine.for_logger(logger)  # what the webhook's composition root wires in
        log_us = per_call_seconds(lambda: write_line(dict(extra))) * 1e6
    finally:
        root.handlers[:] = []
        devnull.close()
    from webhook.metrics import Metrics  # noqa: PLC0415 - prometheus_client, same reason

    sync = new_sync(default_policy())
    metrics = Metrics(sync.cache, sync, time.monotonic)

    counts = metrics.reviews

    def update_metrics() -> None:  # what the handler updates for a review
        counts.in_flight += 1
        counts.decisions["local"] += 1
        counts.observe_latency(0.0002)
        counts.in_flight -= 1

    metrics_us = per_call_seconds(update_metrics) * 1e6
    return {"log_line_us": round(log_us, 2), "metrics_us": round(metrics_us, 2)}


def _reserve_release_us(cache: ClusterCache, policy: RewritePolicy) -> float:
    """What a non-dry-run local admission adds: reserve on the chosen node, later released."""
    fit = cache.find_fit({policy.gpu_resources[0]: 1}, parse_placement(clusters.build_review_pod(gpus=1)["spec"]))
    if fit.node is None:
        return 0.0
    node = fit.node.name
    gpus = {policy.gpu_resources[0]: 1}
    placement = parse_placement({})

    def cycle() -> None:
        cache.reserve("bench-reservation", node=node, requests=gpus, placement=placement)
        cache.release_reservation("bench-reservation")

    return round(per_call_seconds(cycle) * 1e6, 2)


# ----- cache scale -----------------------------------------------------------------------------


def read_status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _malloc_trim() -> bool:
    """Hand freed heap pages back to the OS (glibc), so RSS shows what is still in use."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    libc.malloc_trim(0)
    return True


def run_cache_scale(name: str, *, held: bool) -> dict[str, Any]:
    """One initial sync of cluster `name` into a fresh cache, in this fresh process.

    watcher  what webhook/watching.py does: each page is decoded and parsed (CacheSync.parse_page,
             in the watcher's worker thread) and dropped; then CacheSync.apply_parsed runs under
             the cache's lock (the only part that blocks admissions);
    held     what it did before commit 9e07697: every raw page kept, then CacheSync.apply_list.
    """
    policy = default_policy()
    gc.collect()
    rss_before = read_status_kb("VmRSS")
    raw_nodes, records = clusters.cluster_sources(name)
    nodes = list(raw_nodes)
    sync = new_sync(policy)
    sync.apply_list("nodes", nodes)
    del nodes
    pod_count = 0
    result: dict[str, Any] = {"cluster": name, "mode": "held" if held else "watcher"}
    if held:
        began = time.perf_counter()
        pods = [pod for page in iter_pod_pages(records, gpu_only=False) for pod in page]
        result["decode_s"] = round(time.perf_counter() - began, 3)
        pod_count = len(pods)
        result["rss_with_raw_list_mb"] = round(read_status_kb("VmRSS") / 1024, 1)
        began = time.perf_counter()
        sync.apply_list("pods", pods)
        result["apply_on_loop_s"] = round(time.perf_counter() - began, 3)  # parse + apply, all on the loop
        del pods
    else:
        parsed = ParsedList()
        began = time.perf_counter()
        for page in iter_pod_pages(records, gpu_only=False):
            sync.parse_page("pods", page, into=parsed)
            pod_count += len(page)
        result["decode_and_parse_s"] = round(time.perf_counter() - began, 3)  # the worker thread's part
        began = time.perf_counter()
        sync.apply_parsed("pods", parsed)
        result["apply_on_loop_s"] = round(time.perf_counter() - began, 3)
        del parsed
    sync.apply_list("namespaces", [clusters.KUBE_SYSTEM])  # no burst budgets; kube-system names the cluster
    log(f"{name} ({result['mode']}): {result}")
    gc.collect()
    rss_after = read_status_kb("VmRSS")
    trimmed = _malloc_trim()
    rss_trimmed = read_status_kb("VmRSS")
    result.update(
        {
            "nodes": sync.cache.node_count,
            "pods_listed": pod_count,
            "pods_cached": sync.cache.pod_count,
            "rss_before_mb": round(rss_before / 1024, 1),
            "rss_peak_mb": round(read_status_kb("VmHWM") / 1024, 1),
            "rss_after_sync_mb": round(rss_after / 1024, 1),
            "rss_after_trim_mb": round(rss_trimmed / 1024, 1) if trimmed else None,
            "rss_growth_mb": round((rss_after - rss_before) / 1024, 1),
            "python_blocks_in_use_after": sys.getallocatedblocks(),
            "ready": sync.fully_synced,
        }
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess")
    sub = parser.add_subparsers(dest="command", required=True)
    decisions = sub.add_parser("decisions", help="time decide()/admit() vs cluster size")
    decisions.add_argument("--sizes", default="100,1000,5000,10000")
    decisions.add_argument("--no-alibaba", action="store_true")
    scale = sub.add_parser("cache-scale", help="RSS and apply_list time of one initial sync")
    scale.add_argument("--cluster", default="synthetic:5000")
    scale.add_argument("--held", action="store_true", help="keep every raw page, then apply_list (the old watcher)")
    args = parser.parse_args(argv)
    if args.command == "decisions":
        sizes = [int(s) for s in args.sizes.split(",") if s]
        result = run_decisions(sizes, alibaba=not args.no_alibaba)
    else:
        result = run_cache_scale(args.cluster, held=args.held)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
