"""A gang waiting before bursting, through the real app over HTTP (create_app under aiohttp's test client):
an Indexed Job's two pods on a full cluster are answered `local` with one deadline (the Job's creation +
the setting, docs/decision.md "Waiting before bursting"), reserving nothing; their replacements after it
are answered `remote` as one gang."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from aiohttp.test_utils import TestClient

from jarvice import contract
from tests.support.clocks import Clock
from tests.support.webhook_app import ClientFactory, review_body
from tests.unit.webhook.builders import KUBE_SYSTEM, container, namespace, node, pod
from webhook import gangs
from webhook.app import create_app
from webhook.cache import ClusterCache
from webhook.settings import Settings
from webhook.sync import KINDS_WITH_JOBS, CacheSync

JOB_UID = "11111111-2222-3333-4444-555555555555"
CREATED = "2026-11-27T17:00:00Z"
CREATED_EPOCH = 1_795_798_800.0
DEADLINE = "2026-11-27T17:00:30.000Z"  # CREATED + 30 s


@pytest.fixture
def wall() -> Clock:
    return Clock(now=CREATED_EPOCH + 2)


@pytest.fixture
def gang_sync(settings: Settings, clock: Clock, wall: Clock) -> CacheSync:
    cache = ClusterCache(gpu_resources=settings.gpu_resources, clock=clock, reservation_ttl=120, wall_clock=wall)
    sync = CacheSync(cache, clock=clock, kinds=KINDS_WITH_JOBS)
    sync.apply_list("nodes", [node("gpu-a", 0), node("cpu-1", 0)])  # full: no free GPU
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [KUBE_SYSTEM, namespace("ns")])
    job = {
        "metadata": {"uid": JOB_UID, "namespace": "ns", "name": "ddp", "creationTimestamp": CREATED},
        "spec": {"completionMode": "Indexed", "parallelism": 2, "completions": 2},
    }
    sync.apply_list("jobs", [job])
    return sync


@pytest.fixture
async def gang_client(
    aiohttp_client: ClientFactory, settings: Settings, gang_sync: CacheSync, clock: Clock
) -> TestClient[Any, Any]:
    return await aiohttp_client(create_app(settings, cache=gang_sync.cache, sync=gang_sync, clock=clock))


def rank_pod(index: int) -> dict[str, Any]:
    raw = pod(container(gpus=1), name=f"ddp-{index}")
    raw["spec"]["restartPolicy"] = "Never"  # a Job's pods that may wait (webhook.job_policy)
    raw["metadata"]["annotations"] = {
        gangs.ANNOTATION_COMPLETION_INDEX: str(index),
        contract.ANNOTATION_BURST_AFTER: "30s",
    }
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "ddp", "uid": JOB_UID, "controller": True}
    ]
    return raw


async def admitted(client: TestClient[Any, Any], raw: dict[str, Any], uid: str) -> tuple[dict[str, Any], list[str]]:
    """The pod as the API server stores it after the webhook's answer, and the answer's warnings."""
    response = await client.post(
        "/mutate", data=review_body(raw, uid=uid), headers={"Content-Type": "application/json"}
    )
    assert response.status == 200
    answer = (await response.json())["response"]
    ops = json.loads(base64.b64decode(answer["patch"])) if answer.get("patch") else []
    patched: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(raw), ops)
    return patched, list(answer.get("warnings") or [])


def notes(patched: dict[str, Any]) -> dict[str, str]:
    return dict(patched["metadata"].get("annotations") or {})


async def test_a_gangs_pods_wait_with_one_deadline_then_their_replacements_burst_as_one(
    gang_client: TestClient[Any, Any], gang_sync: CacheSync, wall: Clock
) -> None:
    waiting = []
    for index in range(2):
        patched, warnings = await admitted(gang_client, rank_pod(index), f"w{index}")
        shown = copy.deepcopy(patched)
        shown["metadata"]["uid"] = f"pod-w{index}"
        assert gang_sync.apply_event("pods", "ADDED", shown) is None  # the watch shows it before the next
        waiting.append(shown)
        assert notes(patched)[contract.ANNOTATION_DECISION] == "local"
        assert notes(patched)[contract.ANNOTATION_BURST_DEADLINE] == DEADLINE
        assert notes(patched)[contract.ANNOTATION_GANG_RANK] == str(index)
        assert any("its gang waits for local nodes until" in w for w in warnings), warnings
        wall.now += 5
    assert gang_sync.cache.reservation_count == 0

    wall.now = CREATED_EPOCH + 31  # past the deadline: the controller deleted both
    for shown in waiting:
        going = copy.deepcopy(shown)
        going["metadata"]["deletionTimestamp"] = "2026-11-27T17:00:31Z"
        assert gang_sync.apply_event("pods", "MODIFIED", going) is None
    burst = [await admitted(gang_client, rank_pod(index), f"r{index}") for index in range(2)]
    for index, (patched, warnings) in enumerate(burst):
        assert notes(patched)[contract.ANNOTATION_DECISION] == "remote"
        assert contract.ANNOTATION_BURST_DEADLINE not in notes(patched)
        assert f"as rank {index} of 2 of one multi-node job" in warnings[0]
    assert "its gang's wait ended at " + DEADLINE in notes(burst[0][0])[contract.ANNOTATION_BURST_AFTER_IGNORED]
