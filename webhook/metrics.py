"""Prometheus metrics, on a registry owned by the app (no global default registry)."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PrometheusCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from webhook.cache import ClusterCache
from webhook.sync import CacheSync

# Sub-millisecond buckets: the handler answers from memory, so the interesting range is tiny.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class ReviewCounts:
    """The per-review metrics as plain numbers. Every review updates five of them; prometheus_client's
    objects take a lock and look up the process id for each update, 4 % of a review's CPU under load
    (issue 15). Plain numbers are exact here because one thread touches them: the event loop's, which
    runs both the handler that counts and the /metrics handler that reads."""

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        # By label value; a Counter starts a new one at zero, so `counts.errors["malformed"] += 1`.
        self.decisions: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.over_budget: Counter[str] = Counter()
        self.in_flight = 0
        self.buckets = buckets
        # Not cumulative: a duration's bucket is the first bound >= it (le), the last one is +Inf.
        self.latency_counts = [0] * (len(buckets) + 1)
        self.latency_sum = 0.0

    def observe_latency(self, seconds: float) -> None:
        self.latency_counts[bisect_left(self.buckets, seconds)] += 1
        self.latency_sum += seconds


class _ReviewCollector(Collector):
    """ReviewCounts in the exposition format, under the names prometheus_client's Counter, Gauge and
    Histogram gave them."""

    def __init__(self, counts: ReviewCounts) -> None:
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        counts = self._counts
        yield _labelled_counter("nimbix_burst_admissions", "Admission decisions", "decision", counts.decisions)
        cumulative, buckets = 0, []
        for bound, count in zip((*map(floatToGoString, counts.buckets), "+Inf"), counts.latency_counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "nimbix_burst_admission_duration_seconds",
            "Time to answer one AdmissionReview",
            buckets=buckets,
            sum_value=counts.latency_sum,
        )
        yield _labelled_counter("nimbix_burst_admission_errors", "Rejected or failed reviews", "kind", counts.errors)
        yield GaugeMetricFamily("nimbix_burst_admissions_in_flight", "Reviews being answered", value=counts.in_flight)
        yield _labelled_counter(
            "nimbix_burst_over_budget",
            "Pods that would have burst past their namespace's burst budget, by what was done (local or deny)",
            "action",
            counts.over_budget,
        )


def _labelled_counter(name: str, documentation: str, label: str, values: Counter[str]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=[label])
    for value, count in sorted(values.items()):
        family.add_metric([value], count)
    return family


class _CacheCollector(Collector):
    """Values computed from the cache at scrape time."""

    def __init__(self, cache: ClusterCache, sync: CacheSync, clock: Callable[[], float]) -> None:
        self._cache = cache
        self._sync = sync
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        with self._sync.lock:  # one consistent reading; the watch threads write under this lock
            families = list(self._families())
        yield from families

    def _families(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        free = GaugeMetricFamily(
            "nimbix_burst_free_gpus", "Free GPUs on schedulable nodes, as the webhook sees them", labels=["resource"]
        )
        for resource, count in sorted(self._cache.total_free().items()):
            free.add_metric([resource], count)
        yield free
        age = self._clock() - self._sync.state.last_contact if self._sync.state.last_contact else float("nan")
        yield GaugeMetricFamily("nimbix_burst_cache_age_seconds", "Seconds since the last watch contact", value=age)
        # How far each watch has got: compared with an object's resourceVersion, it says whether the
        # decisions already see that change (an operator's check, and the tests' wait instead of a sleep).
        versions = GaugeMetricFamily(
            "nimbix_burst_cache_resource_version",
            "The resourceVersion the cache holds each kind as of (its last list or watch event)",
            labels=["kind"],
        )
        for kind, version in sorted(self._sync.state.versions.items()):
            versions.add_metric([kind], version)
        yield versions
        cache = self._cache
        for name, documentation, value in (
            ("nimbix_burst_cache_nodes", "Nodes in the cache", cache.node_count),
            (
                "nimbix_burst_cache_pods",
                "Pods the cache accounts: bound non-terminal pods of any kind, plus unbound and terminal GPU pods",
                cache.pod_count,
            ),
            (
                "nimbix_burst_reservations",
                "Reservations outstanding: local admissions whose pod the watch has not shown yet",
                cache.reservation_count,
            ),
            (
                "nimbix_burst_budgeted_namespaces",
                "Namespaces with a burst budget (a nimbix-burst.io/max-remote-gpus annotation)",
                cache.budgeted_namespaces,
            ),
            (
                "nimbix_burst_remote_reservations",
                "Remote decisions counted against a burst budget whose pod the watch has not shown yet",
                cache.remote_reservation_count,
            ),
        ):
            yield GaugeMetricFamily(name, documentation, value=value)
        yield CounterMetricFamily(
            "nimbix_burst_reservation_cap_hits",
            "Reviews decided remote because the cap on outstanding reservations was reached",
            value=self._cache.reservation_cap_hits,
        )


class RouterCounts(Protocol):
    """What /metrics reads of the replica router (webhook.replicas.ReplicaRouter)."""

    forwarded: int
    forward_failures: int
    leaderless: int

    def leading(self) -> bool: ...


class ElectorCounts(Protocol):
    """What /metrics reads of the Lease elector (kubeplumbing.lease.LeaseElector)."""

    started_leading: int
    stepped_down: int
    round_failures: int
    release_failures: int


class _ElectionCollector(Collector):
    """The router's and the elector's plain counters (the event loop writes and reads them), and
    whether this replica leads, read at scrape time."""

    def __init__(self, router: RouterCounts, elector: ElectorCounts) -> None:
        self._router = router
        self._elector = elector

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        router, elector = self._router, self._elector
        yield GaugeMetricFamily(
            "nimbix_burst_leader",
            "1 while this replica decides: it holds the Lease and its cache is synced and fresh",
            value=1 if router.leading() else 0,
        )
        yield _labelled_counter(
            "nimbix_burst_forwards",
            "Reviews this replica forwarded to the leader, by result (ok: answered; failed: tried again)",
            "result",
            Counter(ok=router.forwarded, failed=router.forward_failures),
        )
        yield CounterMetricFamily(
            "nimbix_burst_leaderless",
            "Reviews no leader answered within --leader-wait-seconds (no local promise made, or HTTP 503)",
            value=router.leaderless,
        )
        yield CounterMetricFamily(
            "nimbix_burst_leadership_started",
            "Times this replica took the Lease (and the reservations handed over in it)",
            value=elector.started_leading,
        )
        yield CounterMetricFamily(
            "nimbix_burst_leadership_stepped_down",
            "Times this replica released the Lease because its cache was not synced or fresh",
            value=elector.stepped_down,
        )
        yield _labelled_counter(
            "nimbix_burst_lease_errors",
            "Lease calls that failed: round (a read or renewal: one round lost), release (no handover written)",
            "kind",
            Counter(round=elector.round_failures, release=elector.release_failures),
        )


class Metrics:
    def __init__(self, cache: ClusterCache, sync: CacheSync, clock: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        self.reviews = ReviewCounts()
        self.registry.register(_ReviewCollector(self.reviews))
        self.tls_reloads = PrometheusCounter(
            "nimbix_burst_tls_reloads", "Serving certificate reloads", registry=self.registry
        )
        self.registry.register(_CacheCollector(cache, sync, clock))

    def watch_election(self, *, router: RouterCounts, elector: ElectorCounts) -> None:
        """With leader election: export the router's and the elector's counters and the leader gauge."""
        self.registry.register(_ElectionCollector(router, elector))
