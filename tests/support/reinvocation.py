"""Running the real admission over a pod the way the API server does, twice where a later webhook
changed it (reinvocationPolicy: IfNeeded): every patch applied with jsonpatch."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import jsonpatch

from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, node, pod
from webhook import admission
from webhook.cache import ClusterCache
from webhook.model import parse_namespace, parse_node
from webhook.review import AdmissionRequest
from webhook.rewrite_terms import RewritePolicy

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
AUDIT = "nimbix-burst.io/original-resources"


def make_cache(free_gpus: int) -> ClusterCache:
    cache = ClusterCache(gpu_resources=(GPU,), clock=lambda: 0.0, reservation_ttl=60)
    cache.replace_nodes([parse_node(node("a", free_gpus), (GPU,))])
    cache.replace_pods([])
    cache.namespaces.replace([parse_namespace(KUBE_SYSTEM)])
    return cache


def review(raw: dict[str, Any], uid: str, *, namespace: str = "ns") -> AdmissionRequest:
    return AdmissionRequest(
        uid=uid, operation="CREATE", kind="Pod", group="", namespace=namespace, dry_run=False, object=raw
    )


def patched_by(raw: dict[str, Any], result: admission.Admission) -> dict[str, Any]:
    """The pod as the API server stores it after this answer: its patch (base64 JSON Patch), if any,
    applied to a copy."""
    encoded = result.response["response"].get("patch")
    ops = json.loads(base64.b64decode(encoded)) if encoded else []
    patched: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(raw), ops)
    return patched


def admit(raw: dict[str, Any], cache: ClusterCache, uid: str) -> tuple[dict[str, Any], admission.Admission]:
    result = admission.admit(review(raw, uid), cache=cache, policy=POLICY)
    return patched_by(raw, result), result


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


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}
