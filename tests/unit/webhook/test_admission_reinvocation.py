"""Reinvocation (reinvocationPolicy: IfNeeded): a later webhook changed a pod we already decided.

Each case runs the real admission twice (first decision, then the reinvocation) over the pod as the
API server would send it, applying every patch with jsonpatch.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, node, pod
from webhook import admission
from webhook.cache import ClusterCache
from webhook.model import parse_namespace, parse_node
from webhook.mutation import RewritePolicy
from webhook.review import AdmissionRequest

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
AUDIT = "nimbix-burst.io/original-resources"


def make_cache(free_gpus: int) -> ClusterCache:
    cache = ClusterCache(gpu_resources=(GPU,), clock=lambda: 0.0, reservation_ttl=60)
    cache.replace_nodes([parse_node(node("a", free_gpus), (GPU,))])
    cache.replace_pods([])
    cache.replace_namespaces([parse_namespace(KUBE_SYSTEM)])
    return cache


def review(raw: dict[str, Any], uid: str) -> AdmissionRequest:
    return AdmissionRequest(
        uid=uid, operation="CREATE", kind="Pod", group="", namespace="ns", dry_run=False, object=raw
    )


def admit(raw: dict[str, Any], cache: ClusterCache, uid: str) -> tuple[dict[str, Any], admission.Admission]:
    result = admission.admit(review(raw, uid), cache=cache, policy=POLICY)
    encoded = result.response["response"].get("patch")
    ops = json.loads(base64.b64decode(encoded)) if encoded else []
    patched: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(raw), ops)
    return patched, result


def add_gpu(*names: str, init: bool = False) -> Callable[[dict[str, Any]], None]:
    """A later webhook: sets one GPU (limit and the defaulted request) on the named containers."""

    def mutate(raw: dict[str, Any]) -> None:
        for c in raw["spec"]["initContainers" if init else "containers"]:
            if c["name"] in names:
                resources = c.setdefault("resources", {})
                resources.setdefault("limits", {})[GPU] = "1"
                resources.setdefault("requests", {})[GPU] = "1"

    return mutate


def first_pass(free_gpus: int) -> tuple[dict[str, Any], ClusterCache]:
    raw = pod(
        container("app", gpus=2, requests={"cpu": "8"}),
        container("log", requests={"cpu": "1"}),
        init=[container("fetch", requests={"cpu": "2"})],
    )
    cache = make_cache(free_gpus)
    decided, _ = admit(raw, cache, "first")
    return decided, cache


def gpus_left(raw: dict[str, Any]) -> list[str]:
    spec = raw["spec"]
    return [
        c["name"]
        for c in spec["containers"] + spec.get("initContainers", [])
        for source in ("requests", "limits")
        if GPU in c.get("resources", {}).get(source, {})
    ]


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


@pytest.mark.parametrize(
    ("later", "newly_burst"),
    [
        pytest.param(add_gpu("app"), set(), id="gpu-back-on-the-burst-container"),
        pytest.param(add_gpu("log"), {"log"}, id="gpu-on-a-local-container"),
        pytest.param(add_gpu("fetch", init=True), set(), id="gpu-on-an-init-container"),
        pytest.param(add_gpu("app", "log"), {"log"}, id="gpu-on-every-container"),
    ],
)
def test_remote_pod_gets_gpus_from_a_later_webhook_stripped(
    later: Callable[[dict[str, Any]], None], newly_burst: set[str]
) -> None:
    decided, cache = first_pass(free_gpus=1)
    assert decided["metadata"]["annotations"]["nimbix-burst.io/decision"] == "remote"
    changed = copy.deepcopy(decided)
    later(changed)
    assert gpus_left(changed)

    again, result = admit(changed, cache, "reinvoked")
    assert result.outcome == "remote"
    assert gpus_left(again) == []
    assert result.response["response"]["warnings"]
    for before, after in zip(changed["spec"]["containers"], again["spec"]["containers"], strict=True):
        if before["name"] in newly_burst:
            env = env_of(after)
            assert env["REMOTE"] == "1" and env["NUM_GPUS"] == "1" and env["NIMBIX_BURST_CONTAINER"] == "log"
            assert after["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}  # the full footprint
        else:
            # Exactly the GPU is stripped: what the first pass set stays as it was.
            expected = copy.deepcopy(before)
            for source in ("requests", "limits"):
                expected.get("resources", {}).get(source, {}).pop(GPU, None)
            assert after == expected
    assert again["spec"]["initContainers"][0]["resources"]["requests"] == {"cpu": "2"}
    audit = json.loads(again["metadata"]["annotations"][AUDIT])
    first_audit = json.loads(decided["metadata"]["annotations"][AUDIT])
    assert {k: v for k, v in audit.items() if k != "reinvoked"} == first_audit  # the original stays recorded
    assert set(audit["reinvoked"].get("containers", {})) | set(audit["reinvoked"].get("initContainers", {})) == set(
        gpus_left(changed)
    )
    assert [v["name"] for v in again["spec"]["volumes"]] == ["nimbix-burst-state"]

    # Idempotent: another reinvocation with nothing new changes nothing.
    third, result = admit(again, cache, "reinvoked-again")
    assert "patch" not in result.response["response"]
    assert result.outcome == "skipped"
    assert third == again


def test_reinvocation_with_nothing_new_is_an_empty_patch() -> None:
    decided, cache = first_pass(free_gpus=1)
    _, result = admit(decided, cache, "reinvoked")
    assert "patch" not in result.response["response"]
    assert result.outcome == "skipped"


def test_local_pod_is_left_alone_on_reinvocation() -> None:
    decided, cache = first_pass(free_gpus=8)
    assert decided["metadata"]["annotations"]["nimbix-burst.io/decision"] == "local"
    changed = copy.deepcopy(decided)
    add_gpu("log")(changed)
    _, result = admit(changed, cache, "reinvoked")
    assert "patch" not in result.response["response"]
    assert result.outcome == "skipped"


def test_second_later_gpu_is_recorded_beside_the_first() -> None:
    decided, cache = first_pass(free_gpus=1)
    changed = copy.deepcopy(decided)
    add_gpu("app")(changed)
    once, _ = admit(changed, cache, "r1")
    add_gpu("fetch", init=True)(once)
    twice, _ = admit(once, cache, "r2")
    audit = json.loads(twice["metadata"]["annotations"][AUDIT])
    assert audit["reinvoked"] == {
        "containers": {"app": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}},
        "initContainers": {"fetch": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}},
    }
