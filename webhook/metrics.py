"""Prometheus metrics, on a registry owned by the app (no global default registry)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.cache import ClusterCache
from webhook.sync import CacheSync

# Sub-millisecond buckets: the handler answers from memory, so the interesting range is tiny.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


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
        yield GaugeMetricFamily("nimbix_burst_cache_nodes", "Nodes in the cache", value=self._cache.node_count)
        yield GaugeMetricFamily(
            "nimbix_burst_cache_pods",
            "Pods the cache accounts: bound non-terminal pods of any kind, plus unbound and terminal GPU pods",
            value=self._cache.pod_count,
        )
        yield GaugeMetricFamily(
            "nimbix_burst_reservations",
            "Reservations outstanding: local admissions whose pod the watch has not shown yet",
            value=self._cache.reservation_count,
        )
        yield GaugeMetricFamily(
            "nimbix_burst_budgeted_namespaces",
            "Namespaces with a burst budget (a nimbix-burst.io/max-remote-gpus annotation)",
            value=self._cache.budgeted_namespaces,
        )
        yield GaugeMetricFamily(
            "nimbix_burst_remote_reservations",
            "Remote decisions counted against a burst budget whose pod the watch has not shown yet",
            value=self._cache.remote_reservation_count,
        )
        yield CounterMetricFamily(
            "nimbix_burst_reservation_cap_hits",
            "Reviews decided remote because the cap on outstanding reservations was reached",
            value=self._cache.reservation_cap_hits,
        )


class Metrics:
    def __init__(self, cache: ClusterCache, sync: CacheSync, clock: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        self.admissions = Counter(
            "nimbix_burst_admissions", "Admission decisions", ["decision"], registry=self.registry
        )
        self.latency = Histogram(
            "nimbix_burst_admission_duration_seconds",
            "Time to answer one AdmissionReview",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "nimbix_burst_admission_errors", "Rejected or failed reviews", ["kind"], registry=self.registry
        )
        self.in_flight = Gauge("nimbix_burst_admissions_in_flight", "Reviews being answered", registry=self.registry)
        self.over_budget = Counter(
            "nimbix_burst_over_budget",
            "Pods that would have burst past their namespace's burst budget, by what was done (local or deny)",
            ["action"],
            registry=self.registry,
        )
        self.tls_reloads = Counter("nimbix_burst_tls_reloads", "Serving certificate reloads", registry=self.registry)
        self.registry.register(_CacheCollector(cache, sync, clock))
        # .labels() checks its arguments and takes a lock on every call; a decision's child, made on
        # first use as .labels() makes it (so /metrics shows the same series), is kept. Few decisions.
        self._admissions_by: dict[str, Counter] = {}

    def admitted(self, decision: str) -> Counter:
        """The admissions counter of one decision (a cached `admissions.labels(decision=...)`)."""
        child = self._admissions_by.get(decision)
        if child is None:
            child = self._admissions_by[decision] = self.admissions.labels(decision=decision)
        return child
