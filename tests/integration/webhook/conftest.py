"""The real create_app() under aiohttp's test client, with a cache filled through CacheSync."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from devplatform.cluster.pki import issue_cert, make_ca, write_pair
from tests.support.clocks import Clock
from tests.unit.webhook.builders import KUBE_SYSTEM, node
from webhook.app import create_app
from webhook.cache import ClusterCache
from webhook.settings import Settings, parse_settings
from webhook.sync import CacheSync

ClientFactory = Callable[[web.Application], Awaitable[TestClient[Any, Any]]]


def write_serving_cert(tls_dir: Path, *, common_name: str = "webhook") -> bytes:
    """Writes tls.crt/tls.key like a mounted cert-manager Secret; returns the CA PEM."""
    ca = make_ca("nimbix-burst-test-ca")
    pair = issue_cert(ca, common_name=common_name, dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True)
    tls_dir.mkdir(parents=True, exist_ok=True)
    write_pair(pair, cert_path=tls_dir / "tls.crt", key_path=tls_dir / "tls.key")
    return ca.cert_pem


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


def review_body(pod: dict[str, Any], *, uid: str = "req-1", dry_run: bool = False, operation: str = "CREATE") -> str:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ns",
                "operation": operation,
                "object": pod,
                "dryRun": dry_run,
            },
        }
    )
