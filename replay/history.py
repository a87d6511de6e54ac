"""What the replay saw happen, as plain values: node and pod states from its own watch, stamped
with the (monotonic, wall-clock) time they arrived, plus the decisions it observed (pure).

Written independently of webhook/ on purpose: the wrong-burst checker must not share the code it
is checking. Units: GPUs and pods in whole devices, cpu in millicores, memory in MiB.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
TERMINAL_PHASES = ("Succeeded", "Failed")

_QUANTITY = re.compile(r"^([0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SCALE = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(1024),
    "Mi": Decimal(1024**2),
    "Gi": Decimal(1024**3),
    "Ti": Decimal(1024**4),
    "Pi": Decimal(1024**5),
    "Ei": Decimal(1024**6),
}


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (Gt/Lt are not used by the replay: no match)
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Placement:
    node_selector: Mapping[str, str] = field(default_factory=dict)
    terms: tuple[tuple[Requirement, ...], ...] | None = None  # required node affinity; terms are ORed
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSeen:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect), NoSchedule/NoExecute only
    unschedulable: bool


@dataclass(frozen=True, slots=True)
class PodSeen:
    key: str  # namespace/name
    node: str  # "" while unbound
    requests: Mapping[str, int]
    terminal: bool
    placement: Placement
    unschedulable_message: str = ""  # PodScheduled=False, reason Unschedulable: the scheduler's message
    decision: str = ""  # the nimbix-burst.io/decision annotation


ObservationKind = Literal["node", "node-deleted", "pod", "pod-deleted"]


@dataclass(frozen=True, slots=True)
class Observation:
    at: float  # monotonic seconds when the replay's watch delivered it
    kind: ObservationKind
    name: str  # node name or pod key
    node: NodeSeen | None = None
    pod: PodSeen | None = None
    version: int = 0  # the object's resourceVersion (a deletion's for a deletion); 0 when unknown


@dataclass(frozen=True, slots=True)
class AdmissionView:
    """What the webhook's log says of one decision: the resourceVersions of pods and nodes its view
    held, and its place in the order the webhook decided (it decides one review at a time)."""

    pods: int
    nodes: int
    sequence: int


@dataclass(frozen=True, slots=True)
class Decision:
    """A burst or keep-local decision the replay observed, with the time window it was made in.

    For the webhook: the pod CREATE call (sent .. answered). For the burst-on-failure controller:
    from the watch event that showed the pod Unschedulable until the copy was created.
    """

    key: str  # namespace/name of the pod as submitted
    kind: Literal["local", "remote"]
    started: float
    finished: float
    requests: Mapping[str, int]  # what the pod asked for before any rewrite
    placement: Placement
    # The webhook's view when it decided, from its log; None when not known (the burst-on-failure
    # controller, an older webhook).
    view: AdmissionView | None = None


class ObjectError(ValueError):
    pass


def parse_quantity(raw: object) -> Decimal:
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise ObjectError(f"quantity must be a string or number, got {raw!r}")
    match = _QUANTITY.match(str(raw).strip())
    if match is None:
        raise ObjectError(f"invalid quantity {raw!r}")
    try:
        return Decimal(match.group(1)) * _SCALE[match.group(2) or ""]
    except InvalidOperation as exc:
        raise ObjectError(f"invalid quantity {raw!r}") from exc


def to_units(resource: str, raw: object) -> int:
    """A quantity in the replay's units: cpu -> millicores, memory -> MiB, devices -> count (rounded up)."""
    value = parse_quantity(raw)
    if resource == CPU:
        return math.ceil(value * 1000)
    if resource == MEMORY:
        return math.ceil(value / (1024**2))
    return math.ceil(value)


def resource_version(raw: Mapping[str, Any]) -> int:
    """metadata.resourceVersion as a number (etcd's), 0 when absent or not a number."""
    text = str(_map(raw.get("metadata")).get("resourceVersion") or "")
    return int(text) if text.isdigit() else 0


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def pod_key(raw: Mapping[str, Any]) -> str:
    meta = _map(raw.get("metadata"))
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def parse_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Sum over app containers of requests (a request defaults from its limit), per resource.

    The replay's pods have one container and no init containers, so the plain sum is the
    effective request (kubernetes.md A1 rule 4 reduces to it).
    """
    total: dict[str, int] = {}
    for container in _list(spec.get("containers")):
        resources = _map(_map(container).get("resources"))
        merged = {**_map(resources.get("limits")), **_map(resources.get("requests"))}
        for resource, quantity in merged.items():
            amount = to_units(str(resource), quantity)
            if amount:
                total[str(resource)] = total.get(str(resource), 0) + amount
    return total


def parse_placement(spec: Mapping[str, Any]) -> Placement:
    required = _map(
        _map(_map(spec.get("affinity")).get("nodeAffinity")).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    terms: tuple[tuple[Requirement, ...], ...] | None = None
    if required:
        terms = tuple(
            tuple(
                Requirement(
                    key=str(_map(r).get("key", "")),
                    operator=str(_map(r).get("operator", "")),
                    values=tuple(str(v) for v in _list(_map(r).get("values"))),
                )
                for r in _list(_map(term).get("matchExpressions"))
            )
            for term in _list(required.get("nodeSelectorTerms"))
        )
    tolerations = tuple(
        Toleration(
            key=str(_map(t).get("key") or ""),
            operator=str(_map(t).get("operator") or "Equal"),
            value=str(_map(t).get("value") or ""),
            effect=str(_map(t).get("effect") or ""),
        )
        for t in _list(spec.get("tolerations"))
    )
    selector = {str(k): str(v) for k, v in _map(spec.get("nodeSelector")).items()}
    return Placement(node_selector=selector, terms=terms, tolerations=tolerations)


def _unschedulable_message(status: Mapping[str, Any]) -> str:
    for condition in _list(status.get("conditions")):
        c = _map(condition)
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "unschedulable")
    return ""


def parse_pod(raw: Mapping[str, Any]) -> PodSeen:
    spec = _map(raw.get("spec"))
    status = _map(raw.get("status"))
    annotations = _map(_map(raw.get("metadata")).get("annotations"))
    return PodSeen(
        key=pod_key(raw),
        node=str(spec.get("nodeName") or ""),
        requests=parse_requests(spec),
        terminal=status.get("phase") in TERMINAL_PHASES,
        placement=parse_placement(spec),
        unschedulable_message=_unschedulable_message(status),
        decision=str(annotations.get("nimbix-burst.io/decision", "")),
    )


def parse_node(raw: Mapping[str, Any]) -> NodeSeen:
    meta = _map(raw.get("metadata"))
    spec = _map(raw.get("spec"))
    allocatable = {
        str(resource): to_units(str(resource), quantity)
        for resource, quantity in _map(_map(raw.get("status")).get("allocatable")).items()
    }
    taints = tuple(
        (str(_map(t).get("key", "")), str(_map(t).get("value") or ""), str(_map(t).get("effect", "")))
        for t in _list(spec.get("taints"))
        if _map(t).get("effect") in ("NoSchedule", "NoExecute")
    )
    return NodeSeen(
        name=str(meta.get("name", "")),
        labels={str(k): str(v) for k, v in _map(meta.get("labels")).items()},
        allocatable=allocatable,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
    )
