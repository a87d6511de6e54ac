"""The reservation cap through the real app: over the cap a pod bursts, and /metrics says so."""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp.test_utils import TestClient

from tests.support.clocks import Clock
from tests.support.webhook_app import review_body
from tests.unit.webhook.builders import KUBE_SYSTEM, container, node, pod
from webhook.app import create_app
from webhook.cache import ClusterCache
from webhook.settings import Settings
from webhook.sync import CacheSync


async def test_reviews_over_the_namespace_cap_burst_and_are_counted(
    aiohttp_client: Any, settings: Settings, clock: Clock
) -> None:
    cache = ClusterCache(
        gpu_resources=settings.gpu_resources,
        clock=clock,
        reservation_ttl=120,
        max_reservations=3,
        max_reservations_per_namespace=2,
    )
    sync = CacheSync(cache, clock=clock)
    sync.apply_list("nodes", [node("gpu-a", 8)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [KUBE_SYSTEM])
    client: TestClient[Any, Any] = await aiohttp_client(create_app(settings, cache=cache, sync=sync, clock=clock))

    async def decide(uid: str, namespace: str) -> str:
        raw = json.loads(review_body(pod(container(gpus=1), namespace=namespace), uid=uid))
        raw["request"]["namespace"] = namespace
        response = json.loads(await (await client.post("/mutate", json=raw)).text())["response"]
        patch = json.loads(base64.b64decode(response["patch"]))
        texts = [json.dumps(op.get("value")) for op in patch if "annotations" in op["path"]]
        return "local" if any('"local"' in t for t in texts) else " ".join(texts)

    outcomes = [await decide(f"a{i}", "a") for i in range(3)] + [await decide(f"b{i}", "b") for i in range(2)]
    assert outcomes[:2] == ["local", "local"]
    assert "local admissions in namespace a await their pods (cap 2)" in outcomes[2]
    assert outcomes[3] == "local"
    assert "3 local admissions await their pods (cap 3)" in outcomes[4]
    text = await (await client.get("/metrics")).text()
    assert "nimbix_burst_reservations 3.0" in text
    assert "nimbix_burst_reservation_cap_hits_total 2.0" in text
    assert "nimbix_burst_cache_pods 0.0" in text
