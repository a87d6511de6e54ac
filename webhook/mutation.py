"""JSONPatch builders for admitted pods (pure).

Only ops that are valid against the pod as received: `remove` only for keys that exist, `add` of a
whole map or list when it is absent, append with `/-` otherwise (RFC 6902, RFC 6901 escaping).
The pod-level parts are here; what each burst container becomes is `webhook.burst_containers`, what a
rewrite is told `webhook.rewrite_terms`, and the grace period `webhook.grace_period`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jarvice import contract, gpubudget
from jarvice.checkpoint import ANNOTATION_CHECKPOINT_DIR
from webhook import gpu_model_patch, spending
from webhook.burst_containers import container_ops, leave_ops, price_text, walltime_note
from webhook.grace_period import grace_period_ops
from webhook.json_patch import JsonPatchOp, escape
from webhook.rewrite_terms import BurstTerms, RewritePolicy
from webhook.types import Decision, GpuCounts


def _annotation_ops(meta: Mapping[str, Any], values: Mapping[str, str]) -> list[JsonPatchOp]:
    existing = meta.get("annotations")
    if not existing:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]
    return [
        {"op": "replace" if key in existing else "add", "path": f"/metadata/annotations/{escape(key)}", "value": value}
        for key, value in values.items()
    ]


def _decision_label_ops(meta: Mapping[str, Any], decision: str) -> list[JsonPatchOp]:
    """The decision as a label too (`kubectl get pods -l nimbix-burst.io/decision=remote`): the
    labels map is created when the pod has none."""
    labels = meta.get("labels")
    if not labels:
        return [{"op": "add", "path": "/metadata/labels", "value": {contract.LABEL_DECISION: decision}}]
    if labels.get(contract.LABEL_DECISION) == decision:
        return []
    op = "replace" if contract.LABEL_DECISION in labels else "add"
    return [{"op": op, "path": f"/metadata/labels/{escape(contract.LABEL_DECISION)}", "value": decision}]


def build_local_patch(
    pod: Mapping[str, Any],
    *,
    decision: Decision,
    reservation_id: str,
    notes: Mapping[str, str] | None = None,
    admission: str = "",
    gpu_resources: Sequence[str] = (),
) -> list[JsonPatchOp]:
    """Local: annotations (decision, reason, candidate count, reservation id, the admission's token
    and `notes`) and the decision label."""
    values = {
        **_token(admission),
        contract.ANNOTATION_DECISION: contract.DECISION_LOCAL,
        contract.ANNOTATION_REASON: decision.reason,
        contract.ANNOTATION_CANDIDATES: str(decision.candidates),
    }
    if reservation_id:
        values[contract.ANNOTATION_RESERVATION] = reservation_id
    values = {**values, **(notes or {})}
    meta = pod.get("metadata") or {}
    ops = _annotation_ops(meta, values) + _decision_label_ops(meta, contract.DECISION_LOCAL)
    return ops + _leave_ops(pod, gpu_resources)


def _leave_ops(pod: Mapping[str, Any], gpu_resources: Sequence[str]) -> list[JsonPatchOp]:
    """A local pod that names a checkpoint directory leaves with its checkpoint when it is stopped
    (webhook.burst_containers.leave_ops); any other local pod is only annotated."""
    annotations = (pod.get("metadata") or {}).get("annotations")
    directory = annotations.get(ANNOTATION_CHECKPOINT_DIR) if isinstance(annotations, dict) else None
    if not gpu_resources or not isinstance(directory, str) or not directory.strip():
        return []
    return leave_ops(pod.get("spec") or {}, gpu_resources)


def _token(admission: str) -> dict[str, str]:
    """The admission's token (webhook.provenance): what proves a reinvocation is the product's own."""
    return {contract.ANNOTATION_ADMISSION: admission} if admission else {}


def build_grace_patch(pod: Mapping[str, Any]) -> list[JsonPatchOp]:
    """A burst pod whose grace period a later webhook shortened: raised again, and recorded. Empty
    when it is long enough (reinvocation is idempotent)."""
    ops, note = grace_period_ops(pod.get("spec") or {})
    if not ops:
        return []
    return ops + _annotation_ops(pod.get("metadata") or {}, {contract.ANNOTATION_GRACE: note})


def _audit_json(audit: Mapping[str, Any]) -> str:
    """Compact, keys sorted. orjson takes a tenth of the stdlib's time (10 us of a remote review, issue
    15); the stdlib writes what orjson refuses (an integer past 64 bits from a hostile pod). The JSON is
    the same value either way; orjson leaves non-ASCII characters unescaped."""
    try:
        return orjson.dumps(audit, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(audit, sort_keys=True, separators=(",", ":"))


def build_kept_local_patch(
    pod: Mapping[str, Any],
    *,
    reason: str,
    notes: Mapping[str, str] | None = None,
    admission: str = "",
    gpu_resources: Sequence[str] = (),
) -> list[JsonPatchOp]:
    """A pod that would burst but may not (its namespace's budget, an unknown cluster identity) stays
    as submitted and waits for local GPUs: only annotations (decision local, why, and `notes`). No
    reservation: nothing local was promised, the pod claims GPUs like any pending pod."""
    values = {
        **_token(admission),
        contract.ANNOTATION_DECISION: contract.DECISION_LOCAL,
        contract.ANNOTATION_REASON: reason,
        **(notes or {}),
    }
    meta = pod.get("metadata") or {}
    ops = _annotation_ops(meta, values) + _decision_label_ops(meta, contract.DECISION_LOCAL)
    return ops + _leave_ops(pod, gpu_resources)


def build_remote_patch(
    pod: Mapping[str, Any],
    *,
    gpus: GpuCounts,
    decision: Decision,
    policy: RewritePolicy,
    terms: BurstTerms,
    remote_gpus: int | None = None,
    reservation_id: str = "",
    admission: str = "",
    notes: Mapping[str, str] | None = None,
) -> list[JsonPatchOp]:
    """Burst each app container that asked for GPUs, strip GPUs everywhere, and record what changed
    (and `notes`: annotations beside the decision, such as why it did not wait first)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    original_resources: dict[str, dict[str, Any]] = {}
    ops = container_ops(spec, policy, original_resources, terms)
    audit: dict[str, Any] = {k: v for k, v in original_resources.items() if v}
    audit["gpus"] = dict(gpus)
    if "resources" in spec:
        # Pod-level resources size the whole pod for the GPU work that now runs remotely: they would
        # strand it on a big node (the scheduler uses them instead of the container sum). Removed, the
        # pod is sized by its containers' own requests again.
        ops.append({"op": "remove", "path": "/spec/resources"})
        audit["resources"] = spec["resources"]
    node_selector = spec.get("nodeSelector") or {}
    strip_keys = policy.strip_node_selector_keys | ({policy.gpu_model_label} if terms.gpu_model else set())
    stripped_selector = {k: v for k, v in node_selector.items() if k in strip_keys}
    if stripped_selector and len(stripped_selector) == len(node_selector):
        ops.append({"op": "remove", "path": "/spec/nodeSelector"})
    else:
        ops += [{"op": "remove", "path": f"/spec/nodeSelector/{escape(k)}"} for k in stripped_selector]
    if stripped_selector:
        audit["nodeSelector"] = stripped_selector
    if terms.gpu_model:
        affinity_ops, required = gpu_model_patch.build_affinity_ops(spec, label=policy.gpu_model_label)
        ops += affinity_ops
        if required is not None:
            audit["nodeAffinityRequired"] = required
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

    grace_ops, grace_note = grace_period_ops(spec)
    ops += grace_ops
    ops += _annotation_ops(
        pod.get("metadata") or {},
        {
            **_token(admission),
            contract.ANNOTATION_DECISION: contract.DECISION_REMOTE,
            contract.ANNOTATION_REASON: decision.reason,
            contract.ANNOTATION_ORIGINAL_RESOURCES: _audit_json(audit),
            contract.ANNOTATION_WALLTIME: walltime_note(spec, policy, terms.limit),
            # What the namespace's burst budget counts while the pod runs (see webhook.budget).
            gpubudget.ANNOTATION_REMOTE_GPUS: str(sum(gpus.values()) if remote_gpus is None else remote_gpus),
            # Set when the GPUs are reserved against a budget: the pod's appearance releases them.
            **({contract.ANNOTATION_RESERVATION: reservation_id} if reservation_id else {}),
            **({contract.ANNOTATION_GRACE: grace_note} if grace_note else {}),
            **(terms.gang.annotations() if terms.gang is not None else {}),
            **_model_annotations(terms),
            **_cost_annotations(terms),
            **(notes or {}),
        },
    )
    ops += _decision_label_ops(pod.get("metadata") or {}, contract.DECISION_REMOTE)
    return ops


def _cost_annotations(terms: BurstTerms) -> dict[str, str]:
    if not terms.max_price:
        return {}
    # A gang's job is counted on the rank that submits it (its GPUs too: webhook.verdict); the others 0.
    carried = terms.gang is None or terms.gang.rank == contract.GANG_SUBMITTING_RANK
    return {
        spending.ANNOTATION_COST_PER_HOUR: price_text(terms.cost_per_hour if carried else 0.0),
        spending.ANNOTATION_WORST_CASE: price_text(terms.worst_case if carried else 0.0),
    }


def _model_annotations(terms: BurstTerms) -> dict[str, str]:
    if not terms.gpu_model:
        return {}
    return {
        contract.ANNOTATION_GPU_MODEL: terms.gpu_model,
        contract.ANNOTATION_ALLOWED_MACHINES: contract.format_machine_list(terms.allowed_machines),
    }


# Audit key for what reinvocations stripped, beside (never over) what the first rewrite recorded.
_AUDIT_REINVOKED = "reinvoked"


def build_reinvocation_patch(pod: Mapping[str, Any], *, policy: RewritePolicy, terms: BurstTerms) -> list[JsonPatchOp]:
    """A pod already decided remote, changed by a later webhook: strip the GPUs it carries again,
    the same way as the first rewrite. Empty when there is nothing new (reinvocation is idempotent)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    stripped: dict[str, dict[str, Any]] = {}
    # Built, not dataclasses.replace(): the module is compiled with mypyc.
    reinvoked_terms = BurstTerms(
        cluster=terms.cluster, limit=terms.limit, reinvoked=True, gang=terms.gang, own_account=terms.own_account
    )
    ops = container_ops(spec, policy, stripped, reinvoked_terms)
    if not ops:
        return []
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    try:
        audit = json.loads((meta.get("annotations") or {}).get(contract.ANNOTATION_ORIGINAL_RESOURCES, "{}"))
    except ValueError:
        audit = {}
    if not isinstance(audit, dict):
        audit = {}  # not ours to trust: start a fresh record rather than fail the rewrite
    reinvoked = audit.get(_AUDIT_REINVOKED)
    reinvoked = audit[_AUDIT_REINVOKED] = reinvoked if isinstance(reinvoked, dict) else {}
    for list_name, containers in stripped.items():
        if containers:
            recorded = reinvoked.get(list_name)
            reinvoked[list_name] = {**(recorded if isinstance(recorded, dict) else {}), **containers}
    return ops + _annotation_ops(meta, {contract.ANNOTATION_ORIGINAL_RESOURCES: _audit_json(audit)})
