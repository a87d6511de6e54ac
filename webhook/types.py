"""Plain typed values shared by the webhook's pure modules.

Wire data (Kubernetes JSON) is converted into these at the edge (`model.py`), so decision code
never touches raw dictionaries or the kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

GpuCounts = Mapping[str, int]
"""Resource name -> whole-device count, e.g. {"nvidia.com/gpu": 4}."""

Requests = Mapping[str, int]
"""What a pod takes from a node: GPU counts plus CPU_MILLI and MEMORY_BYTES, e.g.
{"nvidia.com/gpu": 1, "cpu": 12000, "memory": 17179869184}."""

# CPU and memory are accounted next to GPUs under these keys: a node whose GPUs are free but whose
# CPU is taken cannot host the pod, and kube-scheduler would leave it Pending there.
CPU_MILLI = "cpu"
MEMORY_BYTES = "memory"

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" (the API default) or "Exists"
    value: str
    effect: str  # "" tolerates every effect


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One nodeSelectorTerm: all requirements must hold (terms are ORed)."""

    match_expressions: tuple[SelectorRequirement, ...]
    match_fields: tuple[SelectorRequirement, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """Everything in a pod spec that restricts which nodes it may use."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    # None: no required node affinity. An empty tuple matches no node (API semantics).
    required_terms: tuple[SelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The fields of a Node that GPU accounting needs, nothing more."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]  # NoSchedule/NoExecute only: the ones that filter
    unschedulable: bool
    ready: bool
    allocatable: Requests  # GPU resources it advertises, plus CPU_MILLI and MEMORY_BYTES

    @property
    def has_gpus(self) -> bool:
        return any(resource not in (CPU_MILLI, MEMORY_BYTES) for resource in self.allocatable)

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable


@dataclass(frozen=True, slots=True)
class PodInfo:
    """The fields of a pod that accounting needs. Stored: GPU pods, and other pods while they hold CPU
    or memory on a node (bound, not terminal)."""

    uid: str
    namespace: str
    name: str
    node_name: str  # "" while unbound
    nominated_node: str
    requests: Requests  # effective GPU counts, CPU (milli) and memory (bytes)
    terminal: bool  # Succeeded or Failed: holds nothing
    placement: Placement
    reservation_id: str  # our annotation: the admission that reserved GPUs for this pod


DecisionKind = Literal["local", "remote", "skipped"]


@dataclass(frozen=True, slots=True)
class Decision:
    kind: DecisionKind
    reason: str
    node: str = ""  # local: the node we reserved on
    candidates: int = 0  # local: how many nodes could host the pod (capped, see decision.py)
