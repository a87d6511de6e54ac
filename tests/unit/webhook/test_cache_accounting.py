"""The cache counts what kube-scheduler counts (issue 11 items 5, 6 and the reservation cap of 10).

Driven through CacheSync, the path the watch uses, with raw pod and node JSON.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.clocks import Clock
from tests.support.decisions import decide_pod
from tests.unit.webhook.builders import GPU, container, node, pod
from webhook.admission import decide_placement
from webhook.cache import ClusterCache
from webhook.model import parse_placement, pod_compute, pod_gpus
from webhook.sync import CacheSync, Kind
from webhook.types import Decision

UNSCHEDULABLE_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}


def new_sync(clock: Clock | None = None, **cache_kwargs: Any) -> CacheSync:
    clock = clock or Clock()
    cache = ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60, **cache_kwargs)
    return CacheSync(cache, clock=clock)


def with_uid(raw: dict[str, Any], uid: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["metadata"]["uid"] = uid
    return raw


def gpu_node(name: str, gpus: int, *, alloc: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    raw = node(name, gpus, **kwargs)
    raw["status"]["allocatable"].update(alloc or {})
    return raw


def add(sync: CacheSync, *objects: dict[str, Any]) -> None:
    for raw in objects:
        kind: Kind = "pods" if raw.get("kind") == "Pod" else "nodes"
        assert sync.apply_event(kind, "ADDED", raw) is None


def pending(uid: str, gpus: int, **spec: Any) -> dict[str, Any]:
    return with_uid(pod(container(gpus=gpus), name=uid, **spec), uid)


def unschedulable(raw: dict[str, Any], message: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    raw["status"]["conditions"] = [condition]
    return raw


# ----- item 5: accounting drift --------------------------------------------------------------------


def test_in_place_resize_is_re_accounted() -> None:
    """A 16-core node showed 20 cores free: the resized pod's old request was un-counted on update."""
    sync = new_sync()
    add(sync, gpu_node("a", 4))
    running = with_uid(pod(container(gpus=1, requests={"cpu": "4"}), name="r", node_name="a", phase="Running"), "r")
    add(sync, running)
    assert sync.cache.free("a")["cpu"] == 12000
    resized = copy.deepcopy(running)
    resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"
    sync.apply_event("pods", "MODIFIED", resized)
    assert sync.cache.free("a")["cpu"] == 8000
    sync.apply_event("pods", "MODIFIED", running)  # resized back down
    assert sync.cache.free("a")["cpu"] == 12000
    sync.apply_event("pods", "DELETED", running)
    assert sync.cache.free("a")["cpu"] == 16000


def test_relist_repairs_a_resize() -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 4))
    running = with_uid(pod(container(requests={"cpu": "4"}), name="r", node_name="a", phase="Running"), "r")
    sync.apply_list("pods", [running])
    running["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "10"
    sync.apply_list("pods", [running])
    assert sync.cache.free("a")["cpu"] == 6000


def test_deleting_a_node_moves_its_claims() -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 4), gpu_node("b", 4), pending("p", 4))
    claimed_on = next(iter(sync.cache.claims().values())).node
    other = "b" if claimed_on == "a" else "a"
    sync.apply_event("nodes", "DELETED", gpu_node(claimed_on, 4))
    assert sync.cache.free(other)[GPU] == 0  # the pending pod will be scheduled there now
    assert decide_pod(sync, pod(container(gpus=1))).kind == "remote"


def test_deleting_the_only_node_leaves_no_claim_counted() -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 4), pending("p", 4))
    sync.apply_event("nodes", "DELETED", gpu_node("a", 4))
    assert sync.cache.claimed_total().get(GPU, 0) == 0
    add(sync, gpu_node("b", 8))  # a new node takes the claim that had nowhere to go
    assert sync.cache.free("b")[GPU] == 4


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"allocatable": 1}, id="allocatable-drop"),
        pytest.param({"unschedulable": True}, id="cordoned"),
        pytest.param({"ready": False}, id="not-ready"),
        pytest.param({"taints": [{"key": "k", "effect": "NoSchedule"}]}, id="tainted"),
    ],
)
def test_a_node_that_can_no_longer_honour_a_claim_gives_it_up(change: dict[str, Any]) -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 4), gpu_node("b", 8), pending("p", 3))
    assert next(iter(sync.cache.claims().values())).node == "a"  # best fit
    gpus = change.pop("allocatable", 4)
    sync.apply_event("nodes", "MODIFIED", gpu_node("a", gpus, **change))
    assert next(iter(sync.cache.claims().values())).node == "b"
    assert sync.cache.free("b")[GPU] == 5


def bound(uid: str, gpus: int, node_name: str) -> dict[str, Any]:
    return with_uid(pod(container(gpus=gpus), name=uid, node_name=node_name, phase="Running"), uid)


def test_a_claim_left_on_a_filled_node_takes_room_freed_elsewhere() -> None:
    """The scheduler bound another pod to the node a claim sat on while no other node had room, so
    the claim stayed there, over-committing it. When a GPU frees on another node, the claim's pod
    will be scheduled there: the claim moves, and the freed GPU is not offered to a newcomer."""
    sync = new_sync()
    add(sync, gpu_node("a", 1), gpu_node("b", 1), bound("r", 1, "b"), pending("p", 1))
    assert next(iter(sync.cache.claims().values())).node == "a"
    add(sync, bound("q", 1, "a"))  # not p: the scheduler placed another pod where p's claim sat
    sync.apply_event("pods", "DELETED", bound("r", 1, "b"))
    assert next(iter(sync.cache.claims().values())).node == "b"
    assert sync.cache.free("b")[GPU] == 0
    assert _decide(sync, pod(container(gpus=1))).kind == "remote"


def test_a_claim_left_on_a_filled_node_takes_a_node_that_appears() -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 1), pending("p", 1))
    add(sync, bound("q", 1, "a"))  # the scheduler filled a; no other node for p's claim
    assert next(iter(sync.cache.claims().values())).node == "a"
    add(sync, gpu_node("b", 1))
    assert next(iter(sync.cache.claims().values())).node == "b"
    assert _decide(sync, pod(container(gpus=1))).kind == "remote"


def test_a_claim_no_node_could_take_takes_room_freed_by_a_pod() -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 2), bound("r", 2, "a"), pending("p", 1))
    assert next(iter(sync.cache.claims().values())).node == ""  # nowhere to go: waits, holds nothing
    sync.apply_event("pods", "DELETED", bound("r", 2, "a"))
    assert next(iter(sync.cache.claims().values())).node == "a"
    assert sync.cache.free("a")[GPU] == 1
    assert _decide(sync, pod(container(gpus=2))).kind == "remote"
    assert _decide(sync, pod(container(gpus=1))).kind == "local"


# ----- item 6: claims the scheduler would not make -------------------------------------------------

NOT_CLAIMING = [
    pytest.param(pending("p", 4, schedulingGates=[{"name": "example.com/quota"}]), id="scheduling-gates"),
    pytest.param(pending("p", 4, schedulerName="volcano"), id="other-scheduler"),
    pytest.param(
        unschedulable(pending("p", 4), "0/3 nodes are available: 3 Insufficient cpu."), id="unschedulable-cpu"
    ),
    pytest.param(
        unschedulable(pending("p", 4), "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity."),
        id="unschedulable-affinity",
    ),
]
CLAIMING = [
    pytest.param(pending("p", 4), id="pending"),
    pytest.param(pending("p", 4, schedulerName="default-scheduler", schedulingGates=[]), id="explicit-defaults"),
    pytest.param(
        unschedulable(pending("p", 4), "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
        id="unschedulable-gpu",
    ),
]


@pytest.mark.parametrize("raw", NOT_CLAIMING)
def test_pods_the_scheduler_is_not_placing_claim_nothing(raw: dict[str, Any]) -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 4), raw)
    assert sync.cache.free("a")[GPU] == 4
    assert decide_pod(sync, pod(container(gpus=4))).node == "a"


@pytest.mark.parametrize("raw", CLAIMING)
def test_pods_the_scheduler_is_placing_claim(raw: dict[str, Any]) -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 4), raw)
    assert sync.cache.free("a")[GPU] == 0


def test_ungating_a_pod_makes_it_claim() -> None:
    sync = new_sync()
    gated = pending("p", 4, schedulingGates=[{"name": "g"}])
    add(sync, gpu_node("a", 4), gated)
    ungated = copy.deepcopy(gated)
    del ungated["spec"]["schedulingGates"]
    sync.apply_event("pods", "MODIFIED", ungated)
    assert sync.cache.free("a")[GPU] == 0


def test_scheduler_names_are_configurable() -> None:
    sync = new_sync(scheduler_names=("default-scheduler", "volcano"))
    add(sync, gpu_node("a", 4), pending("p", 4, schedulerName="volcano"))
    assert sync.cache.free("a")[GPU] == 0


def test_a_nominated_pod_claims_even_if_it_was_unschedulable_for_cpu() -> None:
    raw = unschedulable(pending("p", 2), "0/3 nodes are available: 3 Insufficient cpu.")
    raw["status"]["nominatedNodeName"] = "b"
    sync = new_sync()
    add(sync, gpu_node("a", 2), gpu_node("b", 2), raw)
    assert sync.cache.free("b")[GPU] == 0


def test_bound_pods_of_any_scheduler_use_their_node() -> None:
    sync = new_sync()
    raw = with_uid(pod(container(gpus=4), name="v", node_name="a", schedulerName="volcano"), "v")
    add(sync, gpu_node("a", 4), raw)
    assert sync.cache.free("a")[GPU] == 0


def _decide(sync: CacheSync, raw: dict[str, Any]) -> Decision:
    return decide_pod(sync, raw)


@pytest.mark.parametrize(
    ("nodes", "spec", "kind", "node_or_reason"),
    [
        pytest.param(
            [gpu_node("a", 1), gpu_node("b", 8)],
            {"nodeName": "a"},
            "remote",
            "spec.nodeName pins it to a; best node a has 1 free",
            id="nodeName-full-node-while-another-is-free",
        ),
        pytest.param([gpu_node("a", 8), gpu_node("b", 2)], {"nodeName": "a"}, "local", "a", id="nodeName-not-best-fit"),
        pytest.param([gpu_node("a", 8)], {"nodeName": "gone"}, "remote", "pins it to gone", id="nodeName-missing"),
        pytest.param(
            [gpu_node("a", 8, unschedulable=True)], {"nodeName": "a"}, "local", "a", id="nodeName-runs-on-cordoned"
        ),
        pytest.param(
            [gpu_node("a", 8, taints=[{"key": "k", "effect": "NoSchedule"}])],
            {"nodeName": "a"},
            "local",
            "a",
            id="nodeName-kubelet-ignores-NoSchedule",
        ),
        pytest.param(
            [gpu_node("a", 8, taints=[{"key": "k", "effect": "NoExecute"}])],
            {"nodeName": "a"},
            "remote",
            "pins it to a",
            id="nodeName-NoExecute-untolerated",
        ),
        pytest.param(
            [gpu_node("a", 8, labels={"m": "x"})],
            {"nodeName": "a", "nodeSelector": {"m": "y"}},
            "remote",
            "pins it to a",
            id="nodeName-and-selector-mismatch",
        ),
        pytest.param([gpu_node("a", 8, ready=False)], {"nodeName": "a"}, "remote", "pins it", id="nodeName-not-ready"),
        pytest.param(
            [gpu_node("a", 8, unschedulable=True)],
            {"tolerations": [UNSCHEDULABLE_TOLERATION]},
            "local",
            "a",
            id="cordoned-tolerated",
        ),
        pytest.param(
            [gpu_node("a", 8, unschedulable=True), gpu_node("b", 4)],
            {"tolerations": [UNSCHEDULABLE_TOLERATION]},
            "local",
            "b",
            id="cordoned-tolerated-best-fit-across-both",
        ),
        pytest.param(
            [gpu_node("a", 4, unschedulable=True), gpu_node("b", 8)],
            {"tolerations": [UNSCHEDULABLE_TOLERATION]},
            "local",
            "a",
            id="cordoned-tolerated-is-the-best-fit",
        ),
        pytest.param(
            [gpu_node("a", 8, unschedulable=True)],
            {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}]},
            "remote",
            "cordoned",
            id="cordoned-wrong-effect",
        ),
        pytest.param(
            [gpu_node("a", 8, unschedulable=True)],
            {"tolerations": [{"operator": "Exists"}]},
            "local",
            "a",
            id="cordoned-tolerate-everything",
        ),
        pytest.param(
            [gpu_node("a", 8, labels={"kubernetes.io/hostname": "a"}), gpu_node("b", 2)],
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
                            ]
                        }
                    }
                }
            },
            "local",
            "a",
            id="matchFields-metadata-name",
        ),
    ],
)
def test_node_name_and_cordon_filters(
    nodes: list[dict[str, Any]], spec: dict[str, Any], kind: str, node_or_reason: str
) -> None:
    sync = new_sync()
    add(sync, *nodes)
    decision = _decide(sync, pod(container(gpus=2), **spec))
    assert decision.kind == kind, decision.reason
    if kind == "local":
        assert decision.node == node_or_reason
    else:
        assert node_or_reason in decision.reason


def test_a_node_name_pod_reserves_on_its_node() -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 8), gpu_node("b", 2))
    raw = pod(container(gpus=2), nodeName="a")
    decision = _decide(sync, raw)
    assert decision.node == "a"
    requests = {**pod_gpus(raw["spec"], (GPU,)), **pod_compute(raw["spec"])}
    sync.cache.reserve("r", node=decision.node, requests=requests, placement=parse_placement(raw["spec"]))
    assert sync.cache.free("a")[GPU] == 6
    assert sync.cache.free("b")[GPU] == 2


def bound_besteffort(uid: str, node_name: str) -> dict[str, Any]:
    return with_uid(pod(container(), name=uid, node_name=node_name, phase="Running"), uid)


@pytest.mark.parametrize(
    ("alloc", "occupants", "spec", "pod_resources", "fits"),
    [
        pytest.param({"pods": "2"}, 2, {}, {}, False, id="pods-allocatable-full-of-best-effort-pods"),
        pytest.param({"pods": "3"}, 2, {}, {}, True, id="pods-allocatable-one-left"),
        pytest.param({"ephemeral-storage": "10Gi"}, 0, {}, {"ephemeral-storage": "20Gi"}, False, id="ephemeral"),
        pytest.param({"ephemeral-storage": "30Gi"}, 0, {}, {"ephemeral-storage": "20Gi"}, True, id="ephemeral-fits"),
        pytest.param({}, 0, {}, {"example.com/fpga": "1"}, False, id="extended-not-advertised"),
        pytest.param({"example.com/fpga": "1"}, 0, {}, {"example.com/fpga": "2"}, False, id="extended-short"),
        pytest.param({"example.com/fpga": "2"}, 0, {}, {"example.com/fpga": "2"}, True, id="extended-fits"),
        pytest.param({"hugepages-1Gi": "4Gi"}, 0, {}, {"hugepages-1Gi": "8Gi"}, False, id="hugepages"),
        pytest.param(
            {}, 0, {"resources": {"requests": {"cpu": "20"}}}, {"cpu": "1"}, False, id="pod-level-cpu-over-node"
        ),
        pytest.param(
            {}, 0, {"resources": {"limits": {"memory": "100Gi"}}}, {}, False, id="pod-level-memory-from-limits"
        ),
        pytest.param({}, 0, {"resources": {"requests": {"cpu": "2"}}}, {"cpu": "40"}, True, id="pod-level-wins"),
        pytest.param({}, 0, {"overhead": {"cpu": "15"}}, {"cpu": "2"}, False, id="overhead"),
    ],
)
def test_node_resources_fit(
    alloc: dict[str, str], occupants: int, spec: dict[str, Any], pod_resources: dict[str, str], fits: bool
) -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 4, alloc=alloc))
    add(sync, *(bound_besteffort(f"o{i}", "a") for i in range(occupants)))
    decision = _decide(sync, pod(container(gpus=1, requests=pod_resources), **spec))
    assert (decision.kind == "local") is fits, decision.reason


def test_besteffort_pods_are_counted_and_released() -> None:
    sync = new_sync()
    add(sync, gpu_node("a", 4, alloc={"pods": "1"}), bound_besteffort("o", "a"))
    assert sync.cache.free("a")["pods"] == 0
    sync.apply_event("pods", "DELETED", bound_besteffort("o", "a"))
    assert sync.cache.free("a")["pods"] == 1


# ----- item 10: a cap on outstanding reservations --------------------------------------------------


def _admit(sync: CacheSync, uid: str, namespace: str) -> Decision:
    raw = pod(container(gpus=1), namespace=namespace)
    spec = raw["spec"]
    requests = {**pod_gpus(spec, (GPU,)), **pod_compute(spec)}
    placement = parse_placement(spec)
    decision = decide_placement(requests, placement, sync.cache, namespace=namespace)
    if decision.kind == "local":
        sync.cache.reserve(uid, node=decision.node, requests=requests, placement=placement, namespace=namespace)
    return decision


@pytest.mark.parametrize(
    ("total", "per_namespace", "admissions", "want_local"),
    [
        pytest.param(None, None, [("x", 6)], 6, id="no-cap"),
        pytest.param(4, None, [("x", 6)], 4, id="total-cap"),
        pytest.param(None, 2, [("x", 3), ("y", 3)], 4, id="namespace-cap"),
        pytest.param(5, 2, [("x", 3), ("y", 3), ("z", 3)], 5, id="both"),
    ],
)
def test_reservation_caps(
    total: int | None, per_namespace: int | None, admissions: list[tuple[str, int]], want_local: int
) -> None:
    sync = new_sync(max_reservations=total, max_reservations_per_namespace=per_namespace)
    add(sync, gpu_node("a", 64))
    decisions = [_admit(sync, f"{ns}{i}", ns) for ns, count in admissions for i in range(count)]
    assert sum(d.kind == "local" for d in decisions) == want_local
    capped = [d for d in decisions if d.kind == "remote"]
    assert all(d.capped and "await their pods" in d.reason for d in capped)


def test_a_reservation_released_frees_room_under_the_cap() -> None:
    clock = Clock()
    sync = new_sync(clock, max_reservations_per_namespace=1)
    add(sync, gpu_node("a", 8))
    assert _admit(sync, "r1", "x").kind == "local"
    assert _admit(sync, "r2", "x").kind == "remote"
    sync.cache.release_reservation("r1")
    assert _admit(sync, "r3", "x").kind == "local"
    clock.now += 61
    assert sync.cache.expire_reservations() == 1
    assert _admit(sync, "r4", "x").kind == "local"
