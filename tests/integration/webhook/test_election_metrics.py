"""The router's and the elector's counters, and whether this replica leads, on /metrics."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import generate_latest

from tests.support.leases import FixedElector, InMemoryLease, Replica, until
from webhook.cache import ClusterCache
from webhook.forwarding import ForwardFailed
from webhook.metrics import Metrics
from webhook.replicas import DecideHere, NoLeader, Relayed, ReplicaRouter, Unready
from webhook.sync import CacheSync


class FlakyForwarder:
    def __init__(self, failures: int) -> None:
        self.failures = failures

    async def forward(self, url: str, body: bytes, *, timeout: float) -> bytes:
        if self.failures:
            self.failures -= 1
            raise ForwardFailed(f"leader {url} unreachable")
        return b"{}"

    async def close(self) -> None:
        pass


def _metrics() -> Metrics:
    cache = ClusterCache(gpu_resources=("nvidia.com/gpu",), clock=time.monotonic, reservation_ttl=60)
    return Metrics(cache, CacheSync(cache, clock=time.monotonic), time.monotonic)


def _lines(metrics: Metrics) -> set[str]:
    return {line for line in generate_latest(metrics.registry).decode().splitlines() if not line.startswith("#")}


async def test_forwards_and_leaderless_reviews_are_counted() -> None:
    elector = FixedElector("follower", "https://leader:8443")
    ready = [True]
    router = ReplicaRouter(
        elector, FlakyForwarder(failures=1), budget=0.3, forward_timeout=0.1, cache_ready=lambda: (ready[0], "stale")
    )
    lease_counts = Replica(InMemoryLease(), "a").elector
    metrics = _metrics()
    metrics.watch_election(router=router, elector=lease_counts)
    assert isinstance(await router.place(b"{}", forwarded_by=""), Relayed)  # one failure, then the answer
    elector._url = ""  # the holder advertises no URL: nobody to forward to
    assert isinstance(await router.place(b"{}", forwarded_by=""), NoLeader)
    ready[0] = False
    assert isinstance(await router.place(b"{}", forwarded_by=""), Unready)
    lines = _lines(metrics)
    assert 'nimbix_burst_forwards_total{result="ok"} 1.0' in lines
    assert 'nimbix_burst_forwards_total{result="failed"} 1.0' in lines
    assert "nimbix_burst_leaderless_total 2.0" in lines
    assert "nimbix_burst_leader 0.0" in lines


async def test_the_leader_gauge_and_the_elector_counters() -> None:
    lease = InMemoryLease()
    replica = Replica(lease, "a")
    ready = [True]
    router = ReplicaRouter(
        replica.elector, FlakyForwarder(0), budget=0.1, forward_timeout=0.1, cache_ready=lambda: (ready[0], "stale")
    )
    metrics = _metrics()
    metrics.watch_election(router=router, elector=replica.elector)
    task = asyncio.create_task(replica.elector.run())
    try:
        await until(lambda: replica.elector.standing() == "leader")
        assert isinstance(await router.place(b"{}", forwarded_by=""), DecideHere)
        # Polled: on a loaded machine a renewal can miss its 0.5 s deadline and the lead be taken again.
        await until(lambda: "nimbix_burst_leader 1.0" in _lines(metrics))
        assert any(line.startswith("nimbix_burst_leadership_started_total ") for line in _lines(metrics))
        ready[0] = False  # the router stops deciding at once, before the elector's next round
        assert "nimbix_burst_leader 0.0" in _lines(metrics)
        replica.fit = False
        await until(lambda: replica.elector.stepped_down == 1)
        assert "nimbix_burst_leadership_stepped_down_total 1.0" in _lines(metrics)

        def unreachable(namespace: str, name: str) -> None:
            raise OSError("connection refused")

        lease.read = unreachable  # type: ignore[method-assign]
        await until(lambda: replica.elector.round_failures > 0)
        assert any(line.startswith('nimbix_burst_lease_errors_total{kind="round"}') for line in _lines(metrics))
    finally:
        task.cancel()
