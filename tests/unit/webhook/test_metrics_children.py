"""Metrics.admitted: the admissions counter's child per decision, kept instead of looked up by
.labels() on every review (issue 15); /metrics shows the same series as before."""

from __future__ import annotations

import time

from prometheus_client import generate_latest

from webhook.cache import ClusterCache
from webhook.metrics import Metrics
from webhook.sync import CacheSync


def new_metrics() -> Metrics:
    cache = ClusterCache(gpu_resources=("nvidia.com/gpu",), clock=time.monotonic, reservation_ttl=60)
    return Metrics(cache, CacheSync(cache, clock=time.monotonic), time.monotonic)


def test_a_decision_series_appears_on_first_use_and_counts() -> None:
    metrics = new_metrics()
    assert b'decision="' not in generate_latest(metrics.registry)  # nothing made ahead of use
    for decision in ("local", "remote", "local"):
        metrics.admitted(decision).inc()
    text = generate_latest(metrics.registry).decode()
    assert 'nimbix_burst_admissions_total{decision="local"} 2.0' in text
    assert 'nimbix_burst_admissions_total{decision="remote"} 1.0' in text
    assert metrics.admitted("local") is metrics.admissions.labels(decision="local")
