"""A new leader takes over its predecessor's reservations (ClusterCache.export/adopt_reservations)."""

from __future__ import annotations

from jarvice import contract
from kubeplumbing import leadership
from tests.support.clocks import Clock
from tests.support.decisions import decide_pod
from tests.unit.webhook.builders import GPU, container, node, pod
from webhook.cache import ClusterCache
from webhook.sync import CacheSync
from webhook.types import Placement


def leader_and_follower() -> tuple[CacheSync, CacheSync, Clock]:
    clock = Clock()
    syncs = []
    for _ in range(2):
        sync = CacheSync(ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60), clock=clock)
        assert sync.apply_event("nodes", "ADDED", node("a", 2)) is None
        syncs.append(sync)
    return syncs[0], syncs[1], clock


def test_reservations_survive_a_handover_through_the_lease_annotation() -> None:
    old, new, clock = leader_and_follower()
    old.cache.reserve("r1", node="a", requests={GPU: 2}, placement=Placement(), namespace="ns")
    clock.now += 10
    text = leadership.encode_handover(old.cache.export_reservations())
    one_gpu = pod(container(gpus=1))
    assert decide_pod(new, one_gpu).kind == "local"  # the new leader alone would promise them again
    new.cache.adopt_reservations(leadership.decode_handover(text))
    assert decide_pod(new, one_gpu).kind == "remote"
    clock.now += 50.1  # the reservation keeps its original expiry (60 s), not a fresh one
    assert new.cache.expire_reservations() == 1
    assert decide_pod(new, one_gpu).kind == "local"


def test_a_reservation_whose_pod_already_arrived_is_not_taken_over() -> None:
    old, new, _clock = leader_and_follower()
    old.cache.reserve("r1", node="a", requests={GPU: 2}, placement=Placement(), namespace="ns")
    handed = old.cache.export_reservations()
    arrived = pod(container(gpus=2), name="p1", node_name="a", annotations={contract.ANNOTATION_RESERVATION: "r1"})
    arrived["metadata"]["uid"] = "uid-p1"
    assert new.apply_event("pods", "ADDED", arrived) is None
    new.cache.adopt_reservations(handed)
    assert new.cache.export_reservations() == []  # the pod's own claim counts; no second hold


def test_only_placed_live_reservations_are_exported() -> None:
    old, _new, clock = leader_and_follower()
    old.cache.reserve("live", node="a", requests={GPU: 1}, placement=Placement(), namespace="ns")
    old.cache.reserve("short", node="a", requests={GPU: 1}, placement=Placement(), namespace="ns", ttl=1)
    clock.now += 2
    assert [r.reservation_id for r in old.cache.export_reservations()] == ["live"]
