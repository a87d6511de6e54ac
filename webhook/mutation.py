"""JSONPatch builders for admitted pods (pure).

Only ops that are valid against the pod as received: `remove` only for keys that exist, `add` of a
whole map or list when it is absent, append with `/-` otherwise (RFC 6902, RFC 6901 escaping).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from entrypoint import contract
from webhook.resources import all_containers, effective_request, format_quantity_cores
from webhook.types import Decision, GpuCounts

JsonPatchOp = dict[str, Any]
_COMPUTE = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class RewritePolicy:
    gpu_resources: tuple[str, ...]
    remote_cpu: str  # the runner's footprint: it only submits, polls and streams logs
    remote_memory: str
    strip_node_selector_keys: frozenset[str] = frozenset()
    strip_toleration_keys: frozenset[str] = frozenset()
    strip_runtime_classes: frozenset[str] = frozenset()


def escape(token: str) -> str:
    """RFC 6901: '~' -> '~0', '/' -> '~1' (resource names contain '/')."""
    return token.replace("~", "~0").replace("/", "~1")


def _annotation_ops(meta: Mapping[str, Any], values: Mapping[str, str]) -> list[JsonPatchOp]:
    existing = meta.get("annotations")
    if not existing:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]
    return [
        {"op": "replace" if key in existing else "add", "path": f"/metadata/annotations/{escape(key)}", "value": value}
        for key, value in values.items()
    ]


def build_local_patch(pod: Mapping[str, Any], *, decision: Decision, reservation_id: str) -> list[JsonPatchOp]:
    """Local: only annotations (decision, reason, candidate count, reservation id)."""
    values = {
        contract.ANNOTATION_DECISION: contract.DECISION_LOCAL,
        contract.ANNOTATION_REASON: decision.reason,
        contract.ANNOTATION_CANDIDATES: str(decision.candidates),
    }
    if reservation_id:
        values[contract.ANNOTATION_RESERVATION] = reservation_id
    return _annotation_ops(pod.get("metadata") or {}, values)


def _resource_ops(
    base: str, container: Mapping[str, Any], policy: RewritePolicy, original: dict[str, Any]
) -> list[JsonPatchOp]:
    ops: list[JsonPatchOp] = []
    resources = container.get("resources") or {}
    footprint = {"cpu": policy.remote_cpu, "memory": policy.remote_memory}
    saved: dict[str, dict[str, Any]] = {}
    for source in ("requests", "limits"):
        values = resources.get(source) or {}
        for resource in policy.gpu_resources:
            if resource in values:
                ops.append({"op": "remove", "path": f"{base}/resources/{source}/{escape(resource)}"})
                saved.setdefault(source, {})[resource] = values[resource]
        for resource in _COMPUTE:
            if resource in values and values[resource] != footprint[resource]:
                ops.append(
                    {"op": "replace", "path": f"{base}/resources/{source}/{resource}", "value": footprint[resource]}
                )
                saved.setdefault(source, {})[resource] = values[resource]
    if saved:
        original[str(container.get("name", ""))] = saved
    return ops


def _env_ops(base: str, container: Mapping[str, Any], wanted: Sequence[tuple[str, str, bool]]) -> list[JsonPatchOp]:
    """wanted: (name, value, replace_existing)."""
    env = container.get("env")
    if not env:
        return [{"op": "add", "path": f"{base}/env", "value": [{"name": n, "value": v} for n, v, _ in wanted]}]
    index_of = {item.get("name"): i for i, item in enumerate(env)}
    ops: list[JsonPatchOp] = []
    for name, value, replace_existing in wanted:
        if name not in index_of:
            ops.append({"op": "add", "path": f"{base}/env/-", "value": {"name": name, "value": value}})
        elif replace_existing:
            # Replace the whole entry: a valueFrom must not survive beside the new value.
            path = f"{base}/env/{index_of[name]}"
            ops.append({"op": "replace", "path": path, "value": {"name": name, "value": value}})
    return ops


def _pod_cpu_cores(spec: Mapping[str, Any]) -> int:
    try:
        return format_quantity_cores(effective_request(spec, "cpu"))
    except ValueError:
        return 1


def build_remote_patch(
    pod: Mapping[str, Any], *, gpus: GpuCounts, decision: Decision, policy: RewritePolicy
) -> list[JsonPatchOp]:
    """Strip GPUs, shrink to the runner's footprint, set REMOTE=1, and record what changed."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    ops: list[JsonPatchOp] = []
    original_resources: dict[str, dict[str, Any]] = {"containers": {}, "initContainers": {}}
    num_gpus = str(max(gpus.values()))
    num_cpus = str(_pod_cpu_cores(spec))
    for list_name, index, container in all_containers(spec):
        base = f"/spec/{list_name}/{index}"
        ops += _resource_ops(base, container, policy, original_resources[list_name])
        if list_name == "containers":
            # Only app containers run the runner; init containers stay plain local steps.
            wanted = [
                (contract.ENV_REMOTE, "1", True),
                (contract.ENV_NUM_GPUS, num_gpus, False),
                (contract.ENV_NUM_CPUS, num_cpus, False),
            ]
            ops += _env_ops(base, container, wanted)

    audit: dict[str, Any] = {k: v for k, v in original_resources.items() if v}
    audit["gpus"] = dict(gpus)
    node_selector = spec.get("nodeSelector") or {}
    stripped_selector = {k: v for k, v in node_selector.items() if k in policy.strip_node_selector_keys}
    if stripped_selector and len(stripped_selector) == len(node_selector):
        ops.append({"op": "remove", "path": "/spec/nodeSelector"})
    else:
        ops += [{"op": "remove", "path": f"/spec/nodeSelector/{escape(k)}"} for k in stripped_selector]
    if stripped_selector:
        audit["nodeSelector"] = stripped_selector
    tolerations = spec.get("tolerations") or []
    stripped = [i for i, t in enumerate(tolerations) if t.get("key") in policy.strip_toleration_keys]
    # Highest index first so earlier removals do not shift later paths.
    ops += [{"op": "remove", "path": f"/spec/tolerations/{i}"} for i in reversed(stripped)]
    if stripped:
        audit["tolerations"] = [tolerations[i] for i in stripped]
    runtime_class = spec.get("runtimeClassName")
    if runtime_class and runtime_class in policy.strip_runtime_classes:
        ops.append({"op": "remove", "path": "/spec/runtimeClassName"})
        audit["runtimeClassName"] = runtime_class
        if "overhead" in spec:
            # The RuntimeClass admission plugin rejects an overhead without its RuntimeClass.
            ops.append({"op": "remove", "path": "/spec/overhead"})
            audit["overhead"] = spec["overhead"]

    ops += _annotation_ops(
        pod.get("metadata") or {},
        {
            contract.ANNOTATION_DECISION: contract.DECISION_REMOTE,
            contract.ANNOTATION_REASON: decision.reason,
            contract.ANNOTATION_ORIGINAL_RESOURCES: json.dumps(audit, sort_keys=True, separators=(",", ":")),
        },
    )
    return ops
