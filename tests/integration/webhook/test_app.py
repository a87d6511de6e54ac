from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any, cast

from aiohttp.test_utils import TestClient

from tests.support.clocks import Clock
from tests.support.webhook_app import ClientFactory, review_body
from tests.unit.webhook.builders import container, pod
from webhook.app import create_app
from webhook.rewrite_terms import RewritePolicy
from webhook.settings import Settings
from webhook.sync import CacheSync

JSON = {"Content-Type": "application/json"}


async def post(client: TestClient[Any, Any], body: str | bytes, headers: dict[str, str] = JSON) -> Any:
    response = await client.post("/mutate", data=body, headers=headers)
    return response.status, (await response.json() if response.content_type == "application/json" else None)


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []


async def test_local_when_a_node_has_room(client: TestClient[Any, Any]) -> None:
    status, answer = await post(client, review_body(pod(container(gpus=2)), uid="abc"))
    assert status == 200
    assert answer["response"]["uid"] == "abc"
    assert answer["response"]["allowed"] is True
    # Only metadata: the annotations, and the decision as a label.
    assert {op["path"] for op in patch_of(answer)} == {
        "/metadata/annotations",
        "/metadata/labels/nimbix-burst.io~1decision",
    }
    assert patch_of(answer)[0]["value"]["nimbix-burst.io/decision"] == "local"
    assert "warnings" not in answer["response"]


async def test_remote_when_no_node_can_host(client: TestClient[Any, Any]) -> None:
    status, answer = await post(client, review_body(pod(container(gpus=8))))
    assert status == 200
    ops = patch_of(answer)
    assert {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu"} in ops
    assert "Nimbix" in answer["response"]["warnings"][0]
    assert "best node gpu-a has 4 free" in answer["response"]["warnings"][0]


async def test_reservations_are_held_across_requests_but_not_for_dry_run(client: TestClient[Any, Any]) -> None:
    kinds = []
    for i in range(4):  # 4 + 2 free: a dry run first must not consume anything
        _, answer = await post(client, review_body(pod(container(gpus=2)), uid=f"dry{i}", dry_run=True))
        kinds.append(patch_of(answer)[0]["value"]["nimbix-burst.io/decision"])
    assert kinds == ["local"] * 4
    kinds = []
    for i in range(4):
        _, answer = await post(client, review_body(pod(container(gpus=2)), uid=f"r{i}"))
        kinds.append(json.dumps(patch_of(answer)))
    assert ['"remote"' in k for k in kinds] == [False, False, False, True]


async def test_unlabeled_and_cpu_only_pods_are_untouched(client: TestClient[Any, Any]) -> None:
    for raw in (pod(container(gpus=8), labels={"app": "x"}), pod(container())):
        status, answer = await post(client, review_body(raw))
        assert status == 200
        assert answer["response"] == {"uid": "req-1", "allowed": True}
    # A decision the webhook did not make (no admission token it issued) is no decision: the pod is
    # decided afresh (the product's own reinvocation: tests/unit/webhook/test_provenance.py).
    status, answer = await post(
        client, review_body(pod(container(gpus=8), annotations={"nimbix-burst.io/decision": "local"}))
    )
    assert status == 200 and "patch" in answer["response"]
    assert "carried marks only nimbix-burst writes" in answer["response"]["warnings"][0]
    status, answer = await post(client, review_body(pod(container(gpus=8)), operation="UPDATE"))
    assert answer["response"] == {"uid": "req-1", "allowed": True}


async def test_malformed_reviews_get_a_clear_4xx(client: TestClient[Any, Any]) -> None:
    status, answer = await post(client, b"{nope")
    assert status == 400 and "not JSON" in answer["error"]
    status, answer = await post(client, json.dumps({"apiVersion": "admission.k8s.io/v1beta1"}))
    assert status == 400 and "admissionReviewVersions" in answer["error"]
    bad_quantity = pod(container(limits={"nvidia.com/gpu": "lots"}))
    status, answer = await post(client, review_body(bad_quantity))
    assert status == 400 and "invalid quantity" in answer["error"]
    status, answer = await post(client, review_body(pod(container(gpus=1))), headers={"Content-Type": "text/plain"})
    assert status == 415
    response = await client.post("/mutate", data=b"x" * 70000, headers=JSON)
    assert response.status == 413


async def test_unexpected_error_fails_open_with_the_uid(
    aiohttp_client: ClientFactory, settings: Settings, synced: CacheSync, clock: Clock
) -> None:
    class BrokenPolicy:
        """Raises on first use, as a bug in the decision would. Not a subclass: the compiled core's
        classes cannot be subclassed by interpreted ones (tests/integration/test_compiled_core.py)."""

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("bug")

    broken = dataclasses.replace(settings, policy=cast(RewritePolicy, BrokenPolicy()))
    client = await aiohttp_client(create_app(broken, cache=synced.cache, sync=synced, clock=clock))
    status, answer = await post(client, review_body(pod(container(gpus=1)), uid="u-err"))
    assert status == 200
    assert answer["response"]["uid"] == "u-err"
    assert answer["response"]["allowed"] is True
    assert "patch" not in answer["response"]
    assert "internal webhook error" in answer["response"]["warnings"][0]
    metrics = await (await client.get("/metrics")).text()
    assert 'nimbix_burst_admissions_total{decision="error"} 1.0' in metrics


async def test_readyz_follows_sync_and_watch_health(
    aiohttp_client: ClientFactory, settings: Settings, sync: CacheSync, clock: Clock
) -> None:
    client = await aiohttp_client(create_app(settings, cache=sync.cache, sync=sync, clock=clock))
    response = await client.get("/readyz")
    assert response.status == 503 and "first full list" in await response.text()
    sync.apply_list("nodes", [])
    sync.apply_list("pods", [])
    response = await client.get("/readyz")  # the burst budgets are not known yet
    assert response.status == 503 and "namespaces" in await response.text()
    sync.apply_list("namespaces", [])
    assert (await client.get("/readyz")).status == 200
    sync.mark_broken("namespaces")
    clock.now += settings.watch_stale_seconds + 1
    response = await client.get("/readyz")
    assert response.status == 503 and "namespaces watch broken" in await response.text()
    sync.mark_contact("namespaces")
    assert (await client.get("/readyz")).status == 200
    sync.mark_broken("pods")
    clock.now += settings.watch_stale_seconds - 1
    assert (await client.get("/readyz")).status == 200
    clock.now += 2
    response = await client.get("/readyz")
    assert response.status == 503 and "watch broken" in await response.text()
    sync.mark_contact("pods")
    assert (await client.get("/readyz")).status == 200
    assert (await client.get("/healthz")).status == 200


async def test_metrics_count_decisions_and_show_free_gpus(client: TestClient[Any, Any]) -> None:
    await post(client, review_body(pod(container(gpus=1)), uid="a"))
    await post(client, review_body(pod(container(gpus=16)), uid="b"))
    text = await (await client.get("/metrics")).text()
    assert 'nimbix_burst_admissions_total{decision="local"} 1.0' in text
    assert 'nimbix_burst_admissions_total{decision="remote"} 1.0' in text
    assert 'nimbix_burst_free_gpus{resource="nvidia.com/gpu"} 5.0' in text
    assert "nimbix_burst_admission_duration_seconds_bucket" in text


async def test_a_job_create_gets_its_failure_policy_rule_even_before_the_cache_is_ready(
    aiohttp_client: ClientFactory, settings: Settings, sync: CacheSync, clock: Clock
) -> None:
    """A Job is answered without the cluster state (webhook.job_policy): an unsynced replica answers it."""
    client = await aiohttp_client(create_app(settings, cache=sync.cache, sync=sync, clock=clock))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"task-type": "Nimbix"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "train", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
            },
        },
    }
    review = json.loads(review_body(job, uid="job-1"))
    review["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    review["request"]["resource"] = {"group": "batch", "version": "v1", "resource": "jobs"}
    status, answer = await post(client, json.dumps(review))
    assert status == 200 and answer["response"]["uid"] == "job-1"
    assert patch_of(answer) == [
        {
            "op": "add",
            "path": "/spec/podFailurePolicy",
            "value": {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    {"action": "Ignore", "onExitCodes": {"containerName": "train", "operator": "In", "values": [81]}},
                ]
            },
        }
    ]


async def test_metrics_say_how_far_each_watch_has_got(
    aiohttp_client: ClientFactory, settings: Settings, sync: CacheSync, clock: Clock
) -> None:
    client = await aiohttp_client(create_app(settings, cache=sync.cache, sync=sync, clock=clock))
    sync.note_version("pods", "41")
    sync.note_version("nodes", "7")
    text = await (await client.get("/metrics")).text()
    assert 'nimbix_burst_cache_resource_version{kind="pods"} 41.0' in text
    assert 'nimbix_burst_cache_resource_version{kind="nodes"} 7.0' in text
    sync.note_version("pods", "42")
    assert 'nimbix_burst_cache_resource_version{kind="pods"} 42.0' in await (await client.get("/metrics")).text()
