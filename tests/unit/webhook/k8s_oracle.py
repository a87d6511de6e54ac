"""Kubernetes' rules for "can this node host this pod", written from the documentation and the
kube-scheduler/kubelet sources, over raw pod and node JSON. It imports nothing from `webhook`: it
is the independent reference the cache is checked against (tests/unit/webhook/test_cache_oracle.py).

Sources: NodeResourcesFit (`fit.go`: every requested resource, plus the pod count), PodRequests
(`component-helpers/resource/helpers.go`: containers, sidecars, init containers, pod-level
cpu/memory, overhead), TaintToleration, NodeAffinity, NodeName, NodeUnschedulable, and the kubelet's
admission for pods created with spec.nodeName (`lifecycle/predicate.go`: resources, node affinity,
NoExecute taints only).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

GPU = "nvidia.com/gpu"
GPU_RESOURCES = (GPU,)
# Resources a real kubelet always reports; hand-made node objects may lack them, and then they do
# not limit (the webhook's documented leniency; kubelets never omit them).
STANDARD = {"cpu", "memory", "ephemeral-storage", "pods"}
NOT_READY_TAINT_KEYS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"}
SCHEDULERS = {"default-scheduler"}

_SUFFIX = {
    "": Fraction(1), "m": Fraction(1, 1000), "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30),
}  # fmt: skip
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|m|k|M|G)?$")


def quantity(text: str) -> Fraction:
    """The small subset of resource.Quantity the generators produce."""
    match = _QUANTITY.match(text)
    assert match is not None, text
    return Fraction(match.group(1)) * _SUFFIX[match.group(2) or ""]


def amount(resource: str, text: str) -> int:
    """Quantity.MilliValue() for cpu, Value() for the rest: both round up."""
    return math.ceil(quantity(text) * (1000 if resource == "cpu" else 1))


def _request_of(holder: Mapping[str, Any], resource: str) -> Fraction | None:
    resources = holder.get("resources") or {}
    for source in ("requests", "limits"):  # requests default from limits
        if resource in (resources.get(source) or {}):
            return quantity(resources[source][resource])
    return None


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What the pod takes from its node, per resource (zero omitted), plus one `pods`."""
    spec = pod["spec"]
    names: set[str] = set(spec.get("overhead") or {})
    for holder in [*spec.get("containers", []), *spec.get("initContainers", []), spec]:
        for source in ("requests", "limits"):
            names |= set((holder.get("resources") or {}).get(source) or {})
    result = {"pods": 1}
    for name in names:
        pod_level = _request_of(spec, name) if name in ("cpu", "memory") else None
        if pod_level is not None:
            total = pod_level
        else:
            app = sum((_request_of(c, name) or Fraction(0) for c in spec.get("containers", [])), Fraction(0))
            sidecars = Fraction(0)
            init_peak = Fraction(0)
            for init in spec.get("initContainers", []):
                own = _request_of(init, name) or Fraction(0)
                if init.get("restartPolicy") == "Always":
                    sidecars += own
                else:
                    init_peak = max(init_peak, own + sidecars)
            total = max(app + sidecars, init_peak)
        if name in (spec.get("overhead") or {}):
            total += quantity(spec["overhead"][name])
        value = math.ceil(total * (1000 if name == "cpu" else 1))
        if value > 0:
            result[name] = value
    return result


def requests_gpus(pod: Mapping[str, Any]) -> bool:
    return any(pod_requests(pod).get(r, 0) > 0 for r in GPU_RESOURCES)


def node_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    raw = node["status"].get("allocatable") or {}
    values = {r: amount(r, v) for r, v in raw.items()}
    return {r: v for r, v in values.items() if not (r in GPU_RESOURCES and v == 0)}


def terminal(pod: Mapping[str, Any]) -> bool:
    return pod["status"].get("phase") in ("Succeeded", "Failed")


def bound_to(pod: Mapping[str, Any]) -> str:
    return str(pod["spec"].get("nodeName") or "")


def used(pods: Mapping[str, Mapping[str, Any]], node_name: str) -> dict[str, int]:
    """Effective requests of the non-terminal pods bound to the node."""
    total: dict[str, int] = {}
    for pod in pods.values():
        if bound_to(pod) == node_name and not terminal(pod):
            for resource, value in pod_requests(pod).items():
                total[resource] = total.get(resource, 0) + value
    return total


def claims_gpus(pod: Mapping[str, Any]) -> bool:
    """An unbound GPU pod the scheduler is trying to place (see docs/decision.md)."""
    spec, status = pod["spec"], pod["status"]
    if bound_to(pod) or terminal(pod) or not requests_gpus(pod):
        return False
    if spec.get("schedulingGates") or spec.get("schedulerName", "default-scheduler") not in SCHEDULERS:
        return False
    if status.get("nominatedNodeName"):
        return True
    for condition in status.get("conditions") or []:
        scheduled = (condition["type"], condition["status"], condition.get("reason"))
        if scheduled == ("PodScheduled", "False", "Unschedulable"):
            return any(r in condition.get("message", "") for r in GPU_RESOURCES)
    return True


def _tolerates(toleration: Mapping[str, str], taint: Mapping[str, str]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(toleration.get("key")) and toleration.get("value", "") == taint.get("value", "")


def _tolerated(taint: Mapping[str, str], pod: Mapping[str, Any]) -> bool:
    return any(_tolerates(t, taint) for t in pod["spec"].get("tolerations") or [])


def _requirement(req: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, op, wanted = req["key"], req["operator"], req.get("values") or []
    if op == "In":
        return key in values and values[key] in wanted
    if op == "NotIn":
        return key not in values or values[key] not in wanted
    if op == "Exists":
        return key in values
    if op == "DoesNotExist":
        return key not in values
    if op in ("Gt", "Lt"):
        try:
            left, right = int(values[key]), int(wanted[0])
        except (KeyError, ValueError, IndexError):
            return False
        return left > right if op == "Gt" else left < right
    return False


def _affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    spec = pod["spec"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in required.get("nodeSelectorTerms") or []:
        expressions, matched_fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not expressions and not matched_fields:
            continue  # an empty term matches nothing
        if all(_requirement(r, labels) for r in expressions) and all(_requirement(r, fields) for r in matched_fields):
            return True
    return False


def ready(node: Mapping[str, Any]) -> bool:
    conditions = node["status"].get("conditions") or []
    ready_true = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    tainted = any(t["key"] in NOT_READY_TAINT_KEYS for t in node["spec"].get("taints") or [])
    return ready_true and not tainted


def passes_filters(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Every filter but resources."""
    if not ready(node) or not _affinity(pod, node):
        return False
    taints = node["spec"].get("taints") or []
    wanted = pod["spec"].get("nodeName")
    if wanted:  # the kubelet admits it: NodeName, node affinity, NoExecute taints; cordon is no matter
        if node["metadata"]["name"] != wanted:
            return False
        return all(_tolerated(t, pod) for t in taints if t["effect"] == "NoExecute")
    if node["spec"].get("unschedulable") and not _tolerated(UNSCHEDULABLE_TAINT, pod):
        return False
    return all(_tolerated(t, pod) for t in taints if t["effect"] in ("NoSchedule", "NoExecute"))


def fits(request: Mapping[str, int], allocatable: Mapping[str, int], taken: Mapping[str, int]) -> bool:
    for resource, value in request.items():
        if resource not in allocatable:
            if resource in STANDARD:
                continue
            return False
        if allocatable[resource] - taken.get(resource, 0) < value:
            return False
    return True
