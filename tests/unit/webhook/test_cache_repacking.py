"""Claims of pods not bound yet are guesses: when no node has room for a new pod only because such
guesses sit on the one node that could host it, and they fit elsewhere, they move and the pod stays
local (the replay's wrong bursts openb-pod-5858 and openb-pod-4640: a sticky claim placed when the
pod appeared, a tighter node freed later).

Pure accounting: a ClusterCache fed typed records directly, no JSON, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from webhook.admission import decide_placement
from webhook.cache import ClusterCache
from webhook.types import NodeInfo, Placement, PodInfo

GPU = "nvidia.com/gpu"


def gpu_node(name: str, gpus: int, cpu: int) -> NodeInfo:
    return NodeInfo(name, {}, (), False, True, {GPU: gpus, "cpu": cpu, "memory": 2**40, "pods": 110})


def needs(gpus: int, cpu: int) -> dict[str, int]:
    return {GPU: gpus, "cpu": cpu, "pods": 1}


def unbound(uid: str, gpus: int, cpu: int, *, nominated: str = "") -> PodInfo:
    return PodInfo(uid, "ns", uid, "", nominated, needs(gpus, cpu), False, Placement(), "")


def bound(uid: str, node: str, gpus: int, cpu: int) -> PodInfo:
    return PodInfo(uid, "ns", uid, node, "", needs(gpus, cpu), False, Placement(), "")


@dataclass(frozen=True)
class Step:
    """One change, in order: a pod appears (or changes), a pod is deleted, or a local reservation."""

    pod: PodInfo | None = None
    delete: str = ""
    reserve: tuple[str, str, int, int] | None = None  # (id, node, gpus, cpu)


@dataclass(frozen=True)
class Case:
    nodes: Sequence[NodeInfo]
    steps: Sequence[Step]
    new_pod: Mapping[str, int]  # what the admitted pod needs
    kind: str  # the decision
    node: str = ""  # local: where
    claims_after: Mapping[str, str] = field(default_factory=dict)  # claim id -> node, after the decision


CASES = {
    # a freed after p1 claimed b: p1 fits on a as well, q fits only on b.
    "sticky-claim-moves-to-the-freed-node": Case(
        [gpu_node("a", 1, 8000), gpu_node("b", 1, 16000)],
        [Step(bound("x", "a", 1, 1000)), Step(unbound("p1", 1, 4000)), Step(delete="x")],
        needs(1, 12000),
        "local",
        "b",
        {"pod:p1": "a"},
    ),
    "a-reservation-moves-too": Case(
        [gpu_node("a", 1, 8000), gpu_node("b", 1, 16000)],
        [Step(bound("x", "a", 1, 1000)), Step(reserve=("r1", "b", 1, 4000)), Step(delete="x")],
        needs(1, 12000),
        "local",
        "b",
        {"res:r1": "a"},
    ),
    "nowhere-else-for-the-claim": Case(
        [gpu_node("a", 1, 2000), gpu_node("b", 1, 16000)],
        [Step(bound("x", "a", 1, 1000)), Step(unbound("p1", 1, 4000)), Step(delete="x")],
        needs(1, 12000),
        "remote",
        claims_after={"pod:p1": "b"},
    ),
    "a-nominated-claim-stays": Case(
        [gpu_node("a", 1, 8000), gpu_node("b", 1, 16000)],
        [Step(bound("x", "a", 1, 1000)), Step(unbound("p1", 1, 4000, nominated="b")), Step(delete="x")],
        needs(1, 12000),
        "remote",
        claims_after={"pod:p1": "b"},
    ),
    "two-claims-leave-together": Case(
        [gpu_node("a", 2, 8000), gpu_node("b", 2, 16000)],
        [
            Step(bound("x", "a", 2, 1000)),
            Step(unbound("p1", 1, 4000)),
            Step(unbound("p2", 1, 4000)),
            Step(delete="x"),
        ],
        needs(2, 12000),
        "local",
        "b",
        {"pod:p1": "a", "pod:p2": "a"},
    ),
    "moving-one-of-two-is-not-enough": Case(
        [gpu_node("a", 1, 8000), gpu_node("b", 2, 16000)],
        [
            Step(bound("x", "a", 1, 1000)),
            Step(unbound("p1", 1, 4000)),
            Step(unbound("p2", 1, 4000)),
            Step(delete="x"),
        ],
        needs(2, 12000),
        "remote",
        claims_after={"pod:p1": "b", "pod:p2": "b"},
    ),
    "room-without-moving-anything": Case(
        [gpu_node("a", 1, 8000), gpu_node("b", 2, 32000)],
        [Step(unbound("p1", 1, 4000))],
        needs(1, 12000),
        "local",
        "b",
        {"pod:p1": "a"},
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_claims_of_unbound_pods_make_room(case: Case) -> None:
    cache = ClusterCache(gpu_resources=(GPU,), clock=lambda: 0.0, reservation_ttl=60)
    for node in case.nodes:
        cache.upsert_node(node)
    for step in case.steps:
        if step.pod is not None:
            cache.upsert_pod(step.pod)
        elif step.reserve is not None:
            reservation, node_name, gpus, cpu = step.reserve
            cache.reserve(reservation, node=node_name, requests=needs(gpus, cpu), placement=Placement())
        else:
            cache.delete_pod(step.delete)
    held = {resource: sum(c.requests.get(resource, 0) for c in cache.claims().values()) for resource in (GPU, "cpu")}

    decision = decide_placement(case.new_pod, Placement(), cache)

    assert (decision.kind, decision.node) == (case.kind, case.node)
    assert {claim_id: claim.node for claim_id, claim in cache.claims().items()} == case.claims_after
    # Moving claims changes where they sit, never what they hold, and never over-commits a node.
    assert {r: sum(c.requests.get(r, 0) for c in cache.claims().values()) for r in (GPU, "cpu")} == held
    for node in case.nodes:
        assert all(amount >= 0 for amount in cache.free(node.name).values()), node.name
