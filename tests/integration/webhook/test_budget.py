"""The burst budget through the real create_app(): namespaces fed through CacheSync like the
watcher does, reviews over HTTP, the answer and the metrics."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from jarvice.gpubudget import ANNOTATION_BUDGET, ANNOTATION_MAX_REMOTE_GPUS, ANNOTATION_REMOTE_GPUS
from tests.support.clocks import Clock
from tests.support.webhook_app import ClientFactory, review_body, write_serving_cert
from tests.unit.webhook.builders import KUBE_SYSTEM, container, node, pod
from webhook.app import create_app
from webhook.cache import ClusterCache
from webhook.settings import parse_settings
from webhook.sync import CacheSync


async def make_client(aiohttp_client: ClientFactory, tmp_path: Path, *flags: str) -> TestClient[Any, Any]:
    write_serving_cert(tmp_path / "tls")
    settings = parse_settings(["--tls-dir", str(tmp_path / "tls"), *flags], {})
    clock = Clock(now=100.0)
    sync = CacheSync(ClusterCache(gpu_resources=settings.gpu_resources, clock=clock, reservation_ttl=120), clock=clock)
    sync.apply_list("nodes", [node("gpu-a", 1), node("cpu-1", 0)])
    sync.apply_list("pods", [])
    budgeted = {"metadata": {"name": "ns", "annotations": {ANNOTATION_MAX_REMOTE_GPUS: "4"}}}
    sync.apply_list("namespaces", [budgeted, {"metadata": {"name": "other"}}, KUBE_SYSTEM])
    return await aiohttp_client(create_app(settings, cache=sync.cache, sync=sync, clock=clock))


async def post(client: TestClient[Any, Any], gpus: int, uid: str) -> dict[str, Any]:
    response = await client.post(
        "/mutate", data=review_body(pod(container(gpus=gpus)), uid=uid), headers={"Content-Type": "application/json"}
    )
    assert response.status == 200
    answer: dict[str, Any] = (await response.json())["response"]
    return answer


def annotations(answer: dict[str, Any]) -> dict[str, str]:
    ops = json.loads(base64.b64decode(answer["patch"]))
    found: dict[str, str] = {}
    for op in ops:
        if op["path"] == "/metadata/annotations":
            found.update(op["value"])
    return found


async def test_two_two_gpu_pods_burst_and_the_third_stays_local(aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    client = await make_client(aiohttp_client, tmp_path)
    for uid in ("u1", "u2"):
        answer = await post(client, 2, uid)
        assert annotations(answer)[ANNOTATION_REMOTE_GPUS] == "2"
        assert "will run on Nimbix JARVICE" in answer["warnings"][0]
    answer = await post(client, 2, "u3")
    assert answer["allowed"] is True
    note = "4 of 4 remote GPUs in use in namespace ns; this pod needs 2"
    assert annotations(answer)[ANNOTATION_BUDGET] == note
    assert annotations(answer)["nimbix-burst.io/decision"] == "local"
    assert note in answer["warnings"][0]
    metrics = await (await client.get("/metrics")).text()
    assert 'nimbix_burst_over_budget_total{action="local"} 1.0' in metrics
    assert "nimbix_burst_budgeted_namespaces 1.0" in metrics
    assert "nimbix_burst_remote_reservations 2.0" in metrics
    assert 'nimbix_burst_admissions_total{decision="remote"} 2.0' in metrics


async def test_deny_answers_not_allowed_with_the_message(aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    client = await make_client(aiohttp_client, tmp_path, "--over-budget", "deny")
    assert (await post(client, 4, "u1"))["allowed"] is True
    assert "patch" in await post(client, 1, "local")  # gpu-a's one GPU: local, the budget does not matter
    answer = await post(client, 2, "u2")
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 403
    assert "4 of 4 remote GPUs in use in namespace ns; this pod needs 2" in answer["status"]["message"]
    metrics = await (await client.get("/metrics")).text()
    assert 'nimbix_burst_over_budget_total{action="deny"} 1.0' in metrics
    assert 'nimbix_burst_admissions_total{decision="denied"} 1.0' in metrics
