"""An Indexed Job's pod admitted before the Job's watch event reached the cache (the Job controller
creates the pods milliseconds after the Job): it waits for the Job, up to --job-wait-seconds, and is
then decided with its gang; a Job that never comes leaves it kept local with its gang, as before."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

from aiohttp.test_utils import TestClient

from jarvice import contract
from tests.integration.webhook.test_gang_waiting import JOB_UID, admitted, notes
from tests.support.clocks import Clock
from tests.support.deadlines import HANG_SECONDS
from tests.support.leases import until
from tests.support.webhook_app import ClientFactory
from tests.unit.webhook.builders import KUBE_SYSTEM, container, namespace, node, pod
from webhook import gangs
from webhook.app import create_app
from webhook.cache import ClusterCache
from webhook.gangs import JobInfo
from webhook.settings import Settings
from webhook.sync import KINDS_WITH_JOBS, CacheSync

JOB = {
    "metadata": {"uid": JOB_UID, "namespace": "ns", "name": "ddp", "creationTimestamp": "2026-11-27T17:00:00Z"},
    "spec": {"completionMode": "Indexed", "parallelism": 2, "completions": 2},
}


class LookedUp(dict[str, JobInfo]):
    """The cache's Jobs, recording which UIDs a review looked up."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)


def full_cluster_without_the_job(settings: Settings, clock: Clock) -> CacheSync:
    cache = ClusterCache(gpu_resources=settings.gpu_resources, clock=clock, reservation_ttl=120)
    sync = CacheSync(cache, clock=clock, kinds=KINDS_WITH_JOBS)
    sync.apply_list("nodes", [node("gpu-a", 0), node("cpu-1", 0)])  # no free GPU: the gang bursts
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [KUBE_SYSTEM, namespace("ns")])
    sync.apply_list("jobs", [])  # listed, but the Job's ADDED event is still on its way
    return sync


def rank_pod(index: int) -> dict[str, Any]:
    raw = pod(container(gpus=1), name=f"ddp-{index}")
    raw["spec"]["restartPolicy"] = "Never"
    raw["metadata"]["annotations"] = {gangs.ANNOTATION_COMPLETION_INDEX: str(index)}
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "ddp", "uid": JOB_UID, "controller": True}
    ]
    return raw


async def client_for(
    aiohttp_client: ClientFactory, settings: Settings, sync: CacheSync, clock: Clock
) -> TestClient[Any, Any]:
    return await aiohttp_client(create_app(settings, cache=sync.cache, sync=sync, clock=clock))


async def test_a_pod_whose_job_comes_while_it_waits_is_decided_with_its_gang(
    aiohttp_client: ClientFactory, settings: Settings, clock: Clock
) -> None:
    sync = full_cluster_without_the_job(settings, clock)
    waits = dataclasses.replace(settings, job_wait_seconds=HANG_SECONDS)
    client = await client_for(aiohttp_client, waits, sync, clock)
    looked = LookedUp()
    sync.cache.gang_index.jobs = looked  # still without the Job; tells when the review first looked for it
    first = asyncio.create_task(admitted(client, rank_pod(0), "r0"))
    await until(lambda: JOB_UID in looked.asked)  # the Job comes only after the review found it missing
    assert not first.done(), "the pod was answered before its Job reached the cache"
    with sync.lock:  # as the Job watch's thread applies it
        assert sync.apply_event("jobs", "ADDED", copy.deepcopy(JOB)) is None
    patched, warnings = await first
    assert notes(patched)[contract.ANNOTATION_DECISION] == "remote", notes(patched)
    assert notes(patched)[contract.ANNOTATION_GANG_RANK] == "0"
    assert "as rank 0 of 2 of one multi-node job" in warnings[0]


async def test_a_pod_whose_job_never_comes_is_kept_local_with_its_gang_after_the_wait(
    aiohttp_client: ClientFactory, settings: Settings, clock: Clock
) -> None:
    sync = full_cluster_without_the_job(settings, clock)
    client = await client_for(aiohttp_client, dataclasses.replace(settings, job_wait_seconds=0.2), sync, clock)
    patched, _ = await admitted(client, rank_pod(0), "r0")
    assert notes(patched)[contract.ANNOTATION_DECISION] == "local"
    assert "not in the webhook's cache yet" in notes(patched)[contract.ANNOTATION_REASON]


async def test_a_pod_of_a_job_already_in_the_cache_does_not_wait(
    aiohttp_client: ClientFactory, settings: Settings, clock: Clock
) -> None:
    sync = full_cluster_without_the_job(settings, clock)
    sync.apply_event("jobs", "ADDED", copy.deepcopy(JOB))
    client = await client_for(aiohttp_client, dataclasses.replace(settings, job_wait_seconds=HANG_SECONDS), sync, clock)
    patched, _ = await admitted(client, rank_pod(0), "r0")  # with the Job known, no wait: answered at once
    assert notes(patched)[contract.ANNOTATION_DECISION] == "remote"
