"""Only a replica whose cache is synced (nodes, pods and namespaces listed) and fresh (no watch broken
longer than --watch-stale-seconds) decides a review; any other answers as an unready replica would
(HTTP 503: the API server applies the webhook's failurePolicy), or forwards to a leader that can."""

from __future__ import annotations

import time
from typing import Any

from aiohttp.test_utils import TestClient

from tests.support.clocks import Clock
from tests.support.leases import FixedElector
from tests.support.webhook_app import ClientFactory, review_body
from tests.unit.webhook.builders import container, node, pod
from webhook.app import ROUTER, cache_fitness, create_app
from webhook.replicas import ReplicaRouter
from webhook.settings import Settings
from webhook.sync import CacheSync

JSON = {"Content-Type": "application/json"}
RELAYED = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}'


class RecordingForwarder:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def forward(self, url: str, body: bytes, *, timeout: float) -> bytes:
        self.sent.append(url)
        return RELAYED

    async def close(self) -> None:
        pass


async def _client(
    aiohttp_client: ClientFactory, settings: Settings, sync: CacheSync, clock: Clock, *, router: Any = None
) -> TestClient[Any, Any]:
    app = create_app(settings, cache=sync.cache, sync=sync, clock=clock)
    if router is not None:
        app[ROUTER] = router
    return await aiohttp_client(app)


def _router(sync: CacheSync, settings: Settings, elector: FixedElector, forwarder: RecordingForwarder) -> ReplicaRouter:
    return ReplicaRouter(
        elector,
        forwarder,
        budget=0.1,
        forward_timeout=0.1,
        clock=time.monotonic,
        cache_ready=lambda: cache_fitness(sync, stale_after=settings.watch_stale_seconds),
    )


async def _post_gpu_pod(client: TestClient[Any, Any], uid: str) -> tuple[int, str]:
    response = await client.post("/mutate", data=review_body(pod(container(gpus=1)), uid=uid), headers=JSON)
    return response.status, await response.text()


async def test_a_replica_that_listed_nodes_but_not_pods_promises_nothing(
    aiohttp_client: ClientFactory, settings: Settings, sync: CacheSync, clock: Clock
) -> None:
    sync.apply_list("nodes", [node("gpu-a", 4)])  # every GPU looks free until the pods are listed
    client = await _client(aiohttp_client, settings, sync, clock)
    status, text = await _post_gpu_pod(client, "u1")
    assert status == 503
    assert "namespaces and pods" in text
    assert sync.cache.export_reservations() == []
    metrics = await (await client.get("/metrics")).text()
    assert 'nimbix_burst_admission_errors_total{kind="unready"} 1.0' in metrics


async def test_a_replica_whose_watch_is_stale_stops_deciding_and_resumes_when_fresh(
    aiohttp_client: ClientFactory, settings: Settings, synced: CacheSync, clock: Clock
) -> None:
    client = await _client(aiohttp_client, settings, synced, clock)
    synced.mark_broken("pods")
    clock.now += settings.watch_stale_seconds - 1
    assert (await _post_gpu_pod(client, "u1"))[0] == 200  # within the limit: still decides
    clock.now += 2
    status, text = await _post_gpu_pod(client, "u2")
    assert status == 503 and "pods watch broken" in text
    assert [r.reservation_id for r in synced.cache.export_reservations()] == ["u1"]
    synced.mark_contact("pods")
    assert (await _post_gpu_pod(client, "u3"))[0] == 200


async def test_the_lease_holder_does_not_decide_with_an_unsynced_cache(
    aiohttp_client: ClientFactory, settings: Settings, sync: CacheSync, clock: Clock
) -> None:
    sync.apply_list("nodes", [node("gpu-a", 4)])
    forwarder = RecordingForwarder()
    router = _router(sync, settings, FixedElector("leader"), forwarder)
    client = await _client(aiohttp_client, settings, sync, clock, router=router)
    status, text = await _post_gpu_pod(client, "u1")
    assert status == 503 and "waiting for the first full list" in text
    assert sync.cache.export_reservations() == []
    forwarded = await client.post(
        "/mutate",
        data=review_body(pod(container(gpus=1)), uid="u2"),
        headers={**JSON, "X-Nimbix-Burst-Forwarded-By": "b"},
    )
    assert forwarded.status == 503  # the sender asks again: by then a fit replica may lead
    assert sync.cache.export_reservations() == []


async def test_an_unsynced_follower_forwards_to_the_leader(
    aiohttp_client: ClientFactory, settings: Settings, sync: CacheSync, clock: Clock
) -> None:
    forwarder = RecordingForwarder()
    router = _router(sync, settings, FixedElector("follower", "https://leader:8443"), forwarder)
    client = await _client(aiohttp_client, settings, sync, clock, router=router)
    status, text = await _post_gpu_pod(client, "u1")
    assert (status, text.encode()) == (200, RELAYED)
    assert forwarder.sent == ["https://leader:8443"]
