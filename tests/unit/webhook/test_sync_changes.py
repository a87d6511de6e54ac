"""Which pod watch events reach the event loop (sync.RecentPods, issue 15): only those that change
what accounting reads. Skipping the others must leave the cache exactly as applying them does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.clocks import Clock
from tests.unit.webhook.builders import GPU, container, node, pod
from webhook.cache import ClusterCache
from webhook.sync import CacheSync, PodChange, RecentPods

Raw = dict[str, Any]


def new_sync() -> CacheSync:
    clock = Clock()
    return CacheSync(ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60), clock=clock)


def gpu_pod(**spec: Any) -> Raw:
    raw = pod(container(gpus=2, requests={"cpu": "2", "memory": "4Gi"}), name="g", uid="u-g", **spec)
    raw["metadata"]["resourceVersion"] = "1"
    return raw


def cpu_pod(**spec: Any) -> Raw:
    raw = pod(container(requests={"cpu": "500m", "memory": "1Gi"}), name="c", uid="u-c", **spec)
    raw["metadata"]["resourceVersion"] = "1"
    return raw


def changed(raw: Raw, fn: Callable[[Raw], None]) -> Raw:
    out = copy.deepcopy(raw)
    out["metadata"]["resourceVersion"] = "2"  # every event has a new one: never a reason on its own
    fn(out)
    return out


def _status(**fields: Any) -> Callable[[Raw], None]:
    return lambda raw: raw["status"].update(fields)


def _meta(**fields: Any) -> Callable[[Raw], None]:
    return lambda raw: raw["metadata"].update(fields)


def _spec(**fields: Any) -> Callable[[Raw], None]:
    return lambda raw: raw["spec"].update(fields)


def _requests(**values: str) -> Callable[[Raw], None]:
    return lambda raw: raw["spec"]["containers"][0]["resources"]["requests"].update(values)


def _annotate(**values: str) -> Callable[[Raw], None]:
    return lambda raw: raw["metadata"].setdefault("annotations", {}).update(values)


def _pod_scheduled(status: str, reason: str = "", message: str = "") -> Callable[[Raw], None]:
    condition = {"type": "PodScheduled", "status": status, "reason": reason, "message": message}
    return lambda raw: raw["status"].update(conditions=[condition])


KUBELET_STATUS = {
    "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-22T20:40:02Z"},
        {"type": "PodScheduled", "status": "True"},
    ],
    "hostIP": "10.0.0.7",
    "podIP": "10.244.1.9",
    "startTime": "2026-11-22T20:40:02Z",
    "containerStatuses": [{"name": "app", "ready": True, "state": {"running": {}}}],
}
UNSCHEDULABLE_CPU = "0/3 nodes are available: 3 Insufficient cpu."
UNSCHEDULABLE_GPU = f"0/3 nodes are available: 3 Insufficient {GPU}."
TOLERATION = {"key": "k", "operator": "Exists", "effect": "NoSchedule"}

CASES = [
    # (base pod, change, handed to the loop)
    pytest.param(gpu_pod(node_name="a"), lambda raw: None, False, id="resourceVersion-only"),
    pytest.param(gpu_pod(node_name="a"), _status(**KUBELET_STATUS), False, id="kubelet-status-update"),
    pytest.param(gpu_pod(node_name="a"), _status(phase="Running"), False, id="pending-to-running"),
    pytest.param(gpu_pod(node_name="a"), _meta(deletionTimestamp="2026-11-22T20:41:00Z"), False, id="deleting"),
    pytest.param(gpu_pod(node_name="a"), _meta(labels={"x": "y"}), False, id="labels"),
    pytest.param(gpu_pod(node_name="a"), _annotate(other="1"), False, id="unrelated-annotation"),
    pytest.param(gpu_pod(node_name="a"), _status(phase="Succeeded"), True, id="succeeded"),
    pytest.param(gpu_pod(node_name="a"), _status(phase="Failed"), True, id="failed"),
    pytest.param(gpu_pod(), _spec(nodeName="a"), True, id="bound"),
    pytest.param(gpu_pod(node_name="a"), _requests(cpu="3"), True, id="resized-cpu"),
    pytest.param(gpu_pod(node_name="a"), _requests(**{GPU: "3"}), True, id="more-gpus"),
    pytest.param(gpu_pod(), _annotate(**{"nimbix-burst.io/reservation": "r-1"}), True, id="reservation-annotation"),
    pytest.param(gpu_pod(), _status(nominatedNodeName="a"), True, id="nominated"),
    pytest.param(gpu_pod(), _pod_scheduled("False", "Unschedulable", UNSCHEDULABLE_CPU), True, id="blocked-on-cpu"),
    # Short of GPUs is how the cache already sees an unbound GPU pod: nothing accounting reads changed.
    pytest.param(gpu_pod(), _pod_scheduled("False", "Unschedulable", UNSCHEDULABLE_GPU), False, id="short-of-gpus"),
    pytest.param(gpu_pod(schedulingGates=[{"name": "g"}]), _spec(schedulingGates=[]), True, id="ungated"),
    pytest.param(gpu_pod(), _spec(tolerations=[TOLERATION]), True, id="unbound-gpu-pod-tolerations"),
    pytest.param(gpu_pod(), _spec(schedulerName="other"), True, id="scheduler-name"),
    pytest.param(cpu_pod(node_name="a"), _status(**KUBELET_STATUS), False, id="cpu-pod-status"),
    # A bound pod without GPUs is accounted by node and requests only.
    pytest.param(cpu_pod(node_name="a"), _spec(tolerations=[TOLERATION]), False, id="bound-cpu-pod-tolerations"),
    pytest.param(cpu_pod(node_name="a"), _status(phase="Succeeded"), True, id="cpu-pod-finished"),
    pytest.param(cpu_pod(), _status(**KUBELET_STATUS), False, id="unbound-cpu-pod-holds-nothing-either-way"),
    pytest.param(cpu_pod(), _spec(nodeName="a"), True, id="cpu-pod-bound"),
]


@pytest.mark.parametrize(("base", "change", "handed"), CASES)
def test_which_changes_reach_the_loop(base: Raw, change: Callable[[Raw], None], handed: bool) -> None:
    sync = new_sync()
    recent = RecentPods(capacity=8)
    first = sync.parse_pod_event("ADDED", base)
    assert isinstance(first, PodChange)
    assert recent.unchanged(first) is False  # never seen: always handed over
    second = sync.parse_pod_event("MODIFIED", changed(base, change))
    assert isinstance(second, PodChange)
    assert recent.unchanged(second) is (not handed)


def _state(sync: CacheSync) -> tuple[object, ...]:
    cache = sync.cache
    return (
        dict(cache.pods()),
        dict(cache.claims()),
        {name: cache.free(name) for name in ("a", "b")},
        cache.remote_in_use("ns"),
        sync.state.skipped_objects,
    )


def test_skipping_unchanged_events_leaves_the_cache_as_applying_them() -> None:
    """Every case above as one event stream: the cache fed only the handed-over events ends (and
    stays, event by event) the same as the cache fed all of them."""
    events: list[tuple[str, Raw]] = []
    for i, case in enumerate(CASES):
        base, change, _ = case.values
        uid = f"u-{i}"
        first = copy.deepcopy(base)
        first["metadata"]["uid"] = uid
        events.append(("ADDED", first))
        events.append(("MODIFIED", changed(first, change)))
        events.append(("MODIFIED", changed(first, change)))  # the same again: a pure repeat
        events.append(("MODIFIED", changed(first, lambda raw: raw["status"].update(phase="Pending"))))
    events.append(("DELETED", events[0][1]))
    events.append(("MODIFIED", {"metadata": {"name": "no-uid"}}))  # a problem: counted every time
    every, some = new_sync(), new_sync()
    for sync in (every, some):
        sync.apply_event("nodes", "ADDED", node("a", 8))
        sync.apply_event("nodes", "ADDED", node("b", 4))
    recent = RecentPods(capacity=4)  # small: evictions happen along the way
    skipped = 0
    for event_type, raw in events:
        every.apply_event("pods", event_type, raw)
        change = some.parse_pod_event(event_type, raw)
        if isinstance(change, PodChange) and recent.unchanged(change):
            skipped += 1
        else:
            some.apply_pod_change(change)
        assert _state(some) == _state(every)
    assert skipped >= len(CASES)  # at least the pure repeats


def test_deletes_are_always_handed_over_and_forgotten() -> None:
    recent = RecentPods(capacity=8)
    assert recent.unchanged(PodChange("u", None)) is False
    assert recent.unchanged(PodChange("u", None)) is True
    assert recent.unchanged(PodChange("u", None, deleted=True)) is False
    assert recent.unchanged(PodChange("u", None, deleted=True)) is False
    assert len(recent) == 0


def test_bounded_and_cleared() -> None:
    recent = RecentPods(capacity=2)
    for uid in ("a", "b", "c"):
        assert recent.unchanged(PodChange(uid, None)) is False
    assert len(recent) == 2
    assert recent.unchanged(PodChange("a", None)) is False  # forgotten (least recent): handed over again
    assert recent.unchanged(PodChange("c", None)) is True
    recent.clear()
    assert recent.unchanged(PodChange("c", None)) is False


@pytest.mark.parametrize(
    ("raw_version", "expected"),
    [("42", 42), (42, 42), ("", 0), (None, 0), ("opaque-v1", 0), ("-3", 0)],
)
def test_note_version_reads_numbers_only(raw_version: object, expected: int) -> None:
    sync = new_sync()
    sync.note_version("pods", "7")
    sync.note_version("pods", raw_version)
    assert sync.view_versions() == (expected, 0)
