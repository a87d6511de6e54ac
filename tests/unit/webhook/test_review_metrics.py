"""Metrics.reviews: the per-review counters as plain numbers (issue 15). /metrics must show what
prometheus_client's own Counter, Gauge and Histogram showed for the same updates."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from webhook.cache import ClusterCache
from webhook.metrics import LATENCY_BUCKETS, Metrics
from webhook.sync import CacheSync

# Durations on a bucket's bound, between bounds, below the first and past the last.
DURATIONS = (0.00005, 0.0001, 0.0001000001, 0.0003, 0.001, 0.02, 0.25, 1.0, 3.5)


def new_metrics() -> Metrics:
    cache = ClusterCache(gpu_resources=("nvidia.com/gpu",), clock=time.monotonic, reservation_ttl=60)
    return Metrics(cache, CacheSync(cache, clock=time.monotonic), time.monotonic)


def samples(registry: CollectorRegistry, prefix: str) -> list[str]:
    """The sample lines of one family, without the _created series prometheus_client adds."""
    names = {prefix, *(f"{prefix}_{suffix}" for suffix in ("total", "bucket", "count", "sum"))}
    return [
        line for line in generate_latest(registry).decode().splitlines() if line.split("{")[0].split(" ")[0] in names
    ]


def test_the_latency_histogram_reads_as_prometheus_clients_own() -> None:
    metrics = new_metrics()
    reference = CollectorRegistry()
    histogram = Histogram("nimbix_burst_admission_duration_seconds", "x", buckets=LATENCY_BUCKETS, registry=reference)
    for seconds in DURATIONS:
        metrics.reviews.observe_latency(seconds)
        histogram.observe(seconds)
    ours = samples(metrics.registry, "nimbix_burst_admission_duration_seconds")
    assert ours == samples(reference, "nimbix_burst_admission_duration_seconds")
    assert 'nimbix_burst_admission_duration_seconds_bucket{le="0.0001"} 2.0' in ours  # on the bound: le
    assert 'nimbix_burst_admission_duration_seconds_bucket{le="+Inf"} 9.0' in ours


@pytest.mark.parametrize(
    ("family", "label", "field"),
    [
        ("nimbix_burst_admissions", "decision", "decisions"),
        ("nimbix_burst_admission_errors", "kind", "errors"),
        ("nimbix_burst_over_budget", "action", "over_budget"),
    ],
)
def test_a_labelled_counter_appears_on_first_use_and_counts(family: str, label: str, field: str) -> None:
    metrics = new_metrics()
    assert f'{label}="' not in generate_latest(metrics.registry).decode()  # nothing made ahead of use
    reference = CollectorRegistry()
    counter = Counter(family, "x", [label], registry=reference)
    for value in ("local", "remote", "local"):
        getattr(metrics.reviews, field)[value] += 1  # as the handler counts
        counter.labels(value).inc()
    assert samples(metrics.registry, family) == samples(reference, family)
    assert f'{family}_total{{{label}="local"}} 2.0' in samples(metrics.registry, family)


def test_in_flight_is_a_gauge_of_reviews_being_answered() -> None:
    metrics = new_metrics()
    reference = CollectorRegistry()
    gauge = Gauge("nimbix_burst_admissions_in_flight", "x", registry=reference)
    metrics.reviews.in_flight += 2
    metrics.reviews.in_flight -= 1
    gauge.inc(2)
    gauge.dec()
    family = "nimbix_burst_admissions_in_flight"
    assert samples(metrics.registry, family) == samples(reference, family) == [f"{family} 1.0"]
