"""The real create_app() under aiohttp's test client, with a cache filled through CacheSync."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.support.clocks import Clock
from tests.support.webhook_app import ClientFactory, write_serving_cert
from tests.unit.webhook.builders import KUBE_SYSTEM, node
from webhook.app import create_app
from webhook.cache import ClusterCache
from webhook.settings import Settings, parse_settings
from webhook.sync import CacheSync


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    write_serving_cert(tmp_path / "tls")
    return parse_settings(["--tls-dir", str(tmp_path / "tls"), "--max-body-bytes", "65536"], {})


@pytest.fixture
def clock() -> Clock:
    return Clock(now=100.0)


@pytest.fixture
def sync(settings: Settings, clock: Clock) -> CacheSync:
    cache = ClusterCache(gpu_resources=settings.gpu_resources, clock=clock, reservation_ttl=120)
    return CacheSync(cache, clock=clock)


@pytest.fixture
def synced(sync: CacheSync) -> CacheSync:
    sync.apply_list("nodes", [node("gpu-a", 4), node("gpu-b", 2), node("cpu-1", 0)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [KUBE_SYSTEM])
    return sync


@pytest.fixture
async def client(
    aiohttp_client: ClientFactory, settings: Settings, synced: CacheSync, clock: Clock
) -> TestClient[Any, Any]:
    return await aiohttp_client(create_app(settings, cache=synced.cache, sync=synced, clock=clock))
