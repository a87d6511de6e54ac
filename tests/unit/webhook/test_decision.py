"""Accounting and decisions, driven through the same CacheSync path the watch uses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.clocks import Clock
from tests.support.decisions import decide_pod
from tests.unit.webhook.builders import GPU, container, node, pod
from webhook.cache import ClusterCache
from webhook.sync import CacheSync
from webhook.types import Placement

LEGACY = "alpha.kubernetes.io/nvidia-gpu"


def make_sync(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = (), clock: Clock | None = None) -> CacheSync:  # type: ignore[assignment]
    cache = ClusterCache(gpu_resources=(GPU, LEGACY), clock=clock or Clock(), reservation_ttl=60)
    sync = CacheSync(cache, clock=clock or Clock())
    sync.apply_list("nodes", nodes)
    sync.apply_list(
        "pods",
        [{**p, "metadata": {**p["metadata"], "uid": p["metadata"].get("uid") or p["metadata"]["name"]}} for p in pods],
    )
    return sync


def bound(name: str, node_name: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    return pod(container(gpus=gpus), name=name, node_name=node_name, phase=phase)


@pytest.mark.parametrize(
    ("nodes", "pods", "want", "kind", "node_or_reason"),
    [
        pytest.param([node("a", 4)], [], 1, "local", "a", id="room"),
        pytest.param([node("a", 2), node("b", 2)], [], 4, "remote", "best node a has 2 free", id="fragmentation"),
        pytest.param([node("a", 4), node("b", 1)], [], 1, "local", "b", id="best-fit-smallest"),
        pytest.param([node("a", 4)], [bound("x", "a", 3)], 2, "remote", "best node a has 1 free", id="used"),
        pytest.param([node("a", 4)], [bound("x", "a", 3, "Succeeded")], 2, "local", "a", id="succeeded-frees"),
        pytest.param([node("a", 4)], [bound("x", "a", 3, "Failed")], 4, "local", "a", id="failed-frees"),
        pytest.param([node("a", 4)], [bound("x", "a", 3, "Unknown")], 2, "remote", "1 free", id="unknown-holds"),
        pytest.param(
            [node("a", 4)], [pod(container(gpus=3), name="pending")], 2, "remote", "claimed", id="pending-claims"
        ),
        pytest.param([node("a", 4, unschedulable=True)], [], 1, "remote", "1 GPU node cordoned", id="cordoned"),
        pytest.param([node("a", 4, ready=False)], [], 1, "remote", "cordoned or not ready", id="not-ready"),
        pytest.param(
            [node("a", 4, taints=[{"key": "k", "effect": "NoSchedule"}])],
            [],
            1,
            "remote",
            "1 node with enough free GPUs excluded by taints or selectors",
            id="tainted",
        ),
        pytest.param([node("cpu", 0)], [], 1, "remote", "no node advertises nvidia.com/gpu", id="no-gpu-nodes"),
        pytest.param([], [], 1, "remote", "no node advertises", id="empty-cluster"),
    ],
)
def test_decide(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], want: int, kind: str, node_or_reason: str
) -> None:
    decision = decide_pod(make_sync(nodes, pods), pod(container(gpus=want), name="new"))
    assert decision.kind == kind, decision.reason
    if kind == "local":
        assert decision.node == node_or_reason
    else:
        assert node_or_reason in decision.reason


def test_node_selector_to_model_without_free_gpus_goes_remote() -> None:
    sync = make_sync([node("v100", 1, labels={"model": "V100"}), node("t4", 8, labels={"model": "T4"})])
    decision = decide_pod(sync, pod(container(gpus=2), nodeSelector={"model": "V100"}))
    assert decision.kind == "remote"
    assert "best node v100 has 1 free" in decision.reason
    assert decide_pod(sync, pod(container(gpus=2), nodeSelector={"model": "T4"})).node == "t4"


def test_legacy_resource_name_is_accounted_separately() -> None:
    sync = make_sync([node("a", 4)])
    assert decide_pod(sync, pod(container(gpus=1, resource=LEGACY))).kind == "remote"


def test_multi_resource_pod_needs_both_on_one_node() -> None:
    sync = make_sync([node("a", 4), node("b", 4, resource=LEGACY)])
    both = pod(container("x", gpus=1), container("y", gpus=1, resource=LEGACY))
    assert decide_pod(sync, both).kind == "remote"


def test_reservations_stop_double_booking_and_release_when_pod_appears() -> None:
    clock = Clock()
    sync = make_sync([node("a", 2), node("b", 1)], clock=clock)
    cache = sync.cache
    locals_ = []
    for i in range(5):
        d = decide_pod(sync, pod(container(gpus=1)))
        if d.kind == "local":
            cache.reserve(f"r{i}", node=d.node, requests={GPU: 1}, placement=Placement())
            locals_.append(d.node)
    assert sorted(locals_) == ["a", "a", "b"]
    assert cache.reservation_count == 3
    # The pod for r0 appears, bound to b: the reservation turns into real usage, no double count.
    sync.apply_event(
        "pods",
        "ADDED",
        {
            **bound("p0", "b", 1),
            "metadata": {
                "name": "p0",
                "namespace": "ns",
                "uid": "u0",
                "annotations": {"nimbix-burst.io/reservation": "r0"},
            },
        },
    )
    assert cache.reservation_count == 2
    assert decide_pod(sync, pod(container(gpus=1))).kind == "remote"
    # Reservations whose pods never appear expire after the TTL.
    clock.now += 61
    assert cache.expire_reservations() == 2
    assert decide_pod(sync, pod(container(gpus=1))).node == "a"


def test_thirty_admissions_against_ten_free_gpus() -> None:
    sync = make_sync([node(f"n{i}", 2) for i in range(5)])
    kinds = []
    for i in range(30):
        d = decide_pod(sync, pod(container(gpus=1)))
        if d.kind == "local":
            sync.cache.reserve(f"r{i}", node=d.node, requests={GPU: 1}, placement=Placement())
        kinds.append(d.kind)
    assert kinds.count("local") == 10
    assert kinds.count("remote") == 20


def test_watch_events_move_usage_between_states() -> None:
    sync = make_sync([node("a", 4)])
    p = {**pod(container(gpus=4), name="p"), "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}
    sync.apply_event("pods", "ADDED", p)  # pending: a claim
    assert sync.cache.free("a")[GPU] == 0
    p["spec"] = {**p["spec"], "nodeName": "a"}
    sync.apply_event("pods", "MODIFIED", p)  # bound: usage, claim gone
    assert sync.cache.free("a")[GPU] == 0
    p["status"] = {"phase": "Succeeded"}
    sync.apply_event("pods", "MODIFIED", p)
    assert sync.cache.free("a")[GPU] == 4
    sync.apply_event("pods", "DELETED", p)
    assert sync.cache.free("a")[GPU] == 4
    sync.apply_event("nodes", "DELETED", node("a", 4))
    assert decide_pod(sync, pod(container(gpus=1))).kind == "remote"


def test_nominated_node_claim_lands_on_that_node() -> None:
    sync = make_sync([node("a", 2), node("b", 2)])
    p = {**pod(container(gpus=2), name="p"), "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    p["status"] = {"phase": "Pending", "nominatedNodeName": "b"}
    sync.apply_event("pods", "ADDED", p)
    assert sync.cache.free("b")[GPU] == 0
    assert sync.cache.free("a")[GPU] == 2


def test_relist_replaces_state() -> None:
    sync = make_sync([node("a", 4)], [bound("x", "a", 4)])
    assert sync.cache.free("a")[GPU] == 0
    sync.apply_list("pods", [])
    sync.apply_list("nodes", [node("b", 1)])
    assert sync.cache.node("a") is None
    assert decide_pod(sync, pod(container(gpus=1))).node == "b"


def test_candidate_count_is_capped() -> None:
    sync = make_sync([node(f"n{i}", 8) for i in range(50)])
    d = decide_pod(sync, pod(container(gpus=1)))
    assert d.kind == "local"
    assert d.candidates == 10
    assert d.reason.startswith("10+ candidate")


def test_binding_elsewhere_moves_claims_instead_of_hiding_a_deficit() -> None:
    """We reserve on our best-fit guess; kube-scheduler may bind somewhere else."""
    sync = make_sync([node("a", 1), node("b", 1)])
    cache = sync.cache
    first = decide_pod(sync, pod(container(gpus=1)))
    cache.reserve("r1", node=first.node, requests={GPU: 1}, placement=Placement())
    other = "b" if first.node == "a" else "a"
    # An unlabeled pod (never seen by the webhook) is bound by the scheduler to the node we reserved.
    sync.apply_event(
        "pods", "ADDED", bound("x", first.node, 1) | {"metadata": {"name": "x", "namespace": "ns", "uid": "ux"}}
    )
    assert cache.free(first.node)[GPU] == 0
    assert cache.free(other)[GPU] == 0  # the reservation moved there
    assert decide_pod(sync, pod(container(gpus=1))).kind == "remote"


def test_gpus_free_but_cpu_taken_is_not_a_fit() -> None:
    """openb-node-1418 in the replay: 1 GPU free but 4 of 16 cores; a 12-core 1-GPU pod cannot go there."""
    busy = bound("x", "a", 1) | {"metadata": {"name": "x", "namespace": "ns", "uid": "ux"}}
    busy["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "12"
    cpu_only = pod(container(requests={"cpu": "2"}), name="c", node_name="b", phase="Running")
    cpu_only["metadata"]["uid"] = "uc"
    sync = make_sync([node("a", 2), node("b", 2)], [busy, cpu_only])  # nodes have 16 cores
    assert sync.cache.free("a")["cpu"] == 4000
    assert sync.cache.free("b")["cpu"] == 14000  # a pod without GPUs still holds CPU
    big = pod(container(gpus=1, requests={"cpu": "12"}))
    assert decide_pod(sync, big).node == "b"
    sync.cache.reserve("r", node="b", requests={GPU: 1, "cpu": 12000}, placement=Placement())
    decision = decide_pod(sync, big)
    assert decision.kind == "remote"
    assert "2 nodes with enough free GPUs lack the CPU, memory, pod slots or other resources" in decision.reason
    assert decide_pod(sync, pod(container(gpus=1, requests={"cpu": "2"}))).kind == "local"
