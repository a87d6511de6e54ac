"""Burst budget per namespace (`nimbix-burst.io/max-remote-gpus`).

Expected values are written from the rules in docs/decision.md ("Burst budget per namespace"), never by
calling the code under test: a pod bursts only if burst GPUs in use in its namespace (its running
burst pods plus remote decisions whose pod has not appeared yet) plus its own stay within the budget.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from jarvice import contract, gpubudget
from jarvice.gpubudget import (
    ANNOTATION_BUDGET,
    ANNOTATION_MAX_REMOTE_GPUS,
    ANNOTATION_REMOTE_GPUS,
    NamespaceBudget,
)
from kubeplumbing import leadership
from tests.support.budgets import NS, burst_pod, make_sync, namespace
from tests.support.clocks import Clock
from tests.support.reinvocation import patched_by
from tests.unit.webhook.builders import GPU, container, pod
from webhook import admission, budget
from webhook.model import parse_pod
from webhook.review import AdmissionRequest
from webhook.rewrite_terms import RewritePolicy
from webhook.sync import CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")


def request(raw: dict[str, Any], uid: str, *, ns: str = NS, dry_run: bool = False) -> AdmissionRequest:
    return AdmissionRequest(
        uid=uid, operation="CREATE", kind="Pod", group="", namespace=ns, dry_run=dry_run, object=raw
    )


def admit(
    sync: CacheSync, gpus: int, uid: str, *, ns: str = NS, over: budget.OverBudget = "local", **kwargs: Any
) -> tuple[admission.Admission, dict[str, Any]]:
    raw = pod(container(gpus=gpus), namespace=ns, name=uid)
    result = admission.admit(request(raw, uid, ns=ns, **kwargs), cache=sync.cache, policy=POLICY, over_budget=over)
    return result, patched_by(raw, result)


# ----- the annotation's value --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "limit", "invalid"),
    [
        ("4", 4, False),
        ("0", 0, False),
        (" 12 ", 12, False),
        ("007", 7, False),
        ("-1", 0, True),
        ("4.0", 0, True),
        ("four", 0, True),
        ("", 0, True),
        ("+3", 0, True),
        ("1e3", 0, True),
        ("٣", 0, True),  # an Arabic-Indic digit: str.isdigit() says yes, Kubernetes users mean no
        ("1234567890", 0, True),  # more digits than any GPU count
    ],
)
def test_budget_values(value: str, limit: int, invalid: bool) -> None:
    parsed = gpubudget.parse_budget(value)
    assert parsed.limit == limit
    assert (parsed.invalid is not None) is invalid


@pytest.mark.parametrize(
    ("limit", "invalid", "in_use", "need", "refused"),
    [
        (4, None, 0, 4, False),  # exactly the budget
        (4, None, 3, 1, False),
        (4, None, 4, 1, True),
        (4, None, 3, 2, True),  # 3 + 2 > 4, though 1 GPU is left
        (0, None, 0, 1, True),  # budget 0: nothing bursts
        (0, "x", 0, 1, True),  # invalid: counts as 0
        (None, None, 100, 8, False),  # no budget: unlimited
    ],
)
def test_over_budget_table(limit: int | None, invalid: str | None, in_use: int, need: int, refused: bool) -> None:
    ns_budget = None if limit is None else NamespaceBudget(limit=limit, invalid=invalid)
    reason = budget.over_budget(ns_budget, namespace=NS, in_use=in_use, need=need)
    assert bool(reason) is refused
    if refused and invalid is None:
        assert reason == f"{in_use} of {limit} remote GPUs in use in namespace {NS}; this pod needs {need}"


# ----- the decision through admit() --------------------------------------------------------------


def test_four_one_gpu_pods_burst_and_the_fifth_stays_local_with_the_reason() -> None:
    sync = make_sync()
    for i in range(4):
        result, patched = admit(sync, 1, f"u{i}")
        assert result.outcome == "remote"
        annotations = patched["metadata"]["annotations"]
        assert annotations[ANNOTATION_REMOTE_GPUS] == "1"
        assert annotations[contract.ANNOTATION_RESERVATION] == f"u{i}"
    result, patched = admit(sync, 1, "u4")
    assert (result.outcome, result.over_budget) == ("local", True)
    note = f"4 of 4 remote GPUs in use in namespace {NS}; this pod needs 1"
    annotations = patched["metadata"]["annotations"]
    assert annotations[ANNOTATION_BUDGET] == note
    assert annotations[contract.ANNOTATION_DECISION] == "local"
    assert contract.ANNOTATION_RESERVATION not in annotations  # nothing local was promised
    assert patched["spec"] == pod(container(gpus=1))["spec"]  # unchanged: it keeps its GPU request
    assert result.response["response"]["allowed"] is True
    assert note in result.response["response"]["warnings"][0]


def test_a_two_gpu_pod_does_not_fit_in_one_gpu_left() -> None:
    sync = make_sync()
    assert admit(sync, 3, "u1")[0].outcome == "remote"
    assert admit(sync, 2, "u2")[0].over_budget
    assert admit(sync, 1, "u3")[0].outcome == "remote"  # the budget is 4: 3 + 1 fits


def test_deny_mode_refuses_with_a_message_saying_what_to_do() -> None:
    sync = make_sync(max_remote="2")
    assert admit(sync, 2, "u1", over="deny")[0].outcome == "remote"
    result, _ = admit(sync, 1, "u2", over="deny")
    assert (result.outcome, result.over_budget) == ("denied", True)
    response = result.response["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "2 of 2 remote GPUs in use in namespace team; this pod needs 1" in message
    assert ANNOTATION_MAX_REMOTE_GPUS in message and "fewer GPUs" in message


def test_a_pod_that_fits_locally_ignores_the_budget() -> None:
    sync = make_sync(local_gpus=2, max_remote="0")
    result, patched = admit(sync, 2, "u1", over="deny")
    assert result.outcome == "local" and not result.over_budget
    assert ANNOTATION_BUDGET not in patched["metadata"]["annotations"]


def test_a_namespace_without_the_annotation_has_no_budget_and_reserves_nothing() -> None:
    sync = make_sync(max_remote="0")
    for i in range(10):
        result, patched = admit(sync, 8, f"u{i}", ns="free")
        assert result.outcome == "remote"
        assert patched["metadata"]["annotations"][ANNOTATION_REMOTE_GPUS] == "8"  # counted if a budget comes
        assert contract.ANNOTATION_RESERVATION not in patched["metadata"]["annotations"]
    assert sync.cache.remote_reservation_count == 0


def test_an_invalid_budget_counts_as_zero_and_names_the_value() -> None:
    sync = make_sync(max_remote="four")
    result, patched = admit(sync, 1, "u1")
    assert result.over_budget and result.outcome == "local"
    assert "'four'" in patched["metadata"]["annotations"][ANNOTATION_BUDGET]


def test_dry_run_gets_the_same_answer_and_reserves_nothing() -> None:
    sync = make_sync(max_remote="1")
    result, patched = admit(sync, 1, "u1", dry_run=True)
    assert result.outcome == "remote"
    assert contract.ANNOTATION_RESERVATION not in patched["metadata"]["annotations"]
    assert sync.cache.remote_in_use(NS) == 0
    assert admit(sync, 1, "u2")[0].outcome == "remote"


def test_without_a_leader_a_budgeted_namespace_does_not_burst_and_is_never_denied() -> None:
    sync = make_sync(max_remote="8")
    raw = pod(container(gpus=1), namespace=NS)
    result = admission.admit(
        request(raw, "u1"), cache=sync.cache, policy=POLICY, local_refusal="no leader answered", over_budget="deny"
    )
    assert (result.outcome, result.over_budget) == ("local", True)
    assert "no leader answered" in result.reason
    assert sync.cache.remote_in_use(NS) == 0
    # A namespace without a budget bursts as before.
    free = admission.admit(
        request(pod(container(gpus=1), namespace="free"), "u2", ns="free"),
        cache=sync.cache,
        policy=POLICY,
        local_refusal="no leader answered",
    )
    assert free.outcome == "remote"


# ----- the cache's count --------------------------------------------------------------------------


def test_burst_pods_count_while_they_run_and_until_they_go() -> None:
    sync = make_sync()
    cache = sync.cache
    assert sync.apply_event("pods", "ADDED", burst_pod("p1", 2, phase="Pending", node_name="")) is None
    assert cache.remote_in_use(NS) == 2  # unbound: counts, claims nothing
    assert cache.claims() == {}
    assert sync.apply_event("pods", "MODIFIED", burst_pod("p1", 2)) is None  # bound: counted once
    assert sync.apply_event("pods", "ADDED", burst_pod("p2", 1)) is None
    assert sync.apply_event("pods", "ADDED", burst_pod("o1", 3, ns="other")) is None
    assert (cache.remote_in_use(NS), cache.remote_in_use("other")) == (3, 3)
    assert sync.apply_event("pods", "MODIFIED", burst_pod("p1", 2, phase="Succeeded")) is None
    assert cache.remote_in_use(NS) == 3  # finished, no word from its runner: its job may run (test_burst_job_state)
    assert sync.apply_event("pods", "DELETED", burst_pod("p1", 2, phase="Succeeded")) is None
    assert sync.apply_event("pods", "DELETED", burst_pod("p2", 1)) is None
    assert cache.remote_in_use(NS) == 0
    sync.apply_list("pods", [])  # a relist drops what is gone
    assert cache.remote_in_use("other") == 0


def test_a_pod_burst_by_an_older_version_counts_from_the_audit_annotation() -> None:
    audit = json.dumps({"gpus": {GPU: 3, "unrelated/thing": 9}})
    raw = pod(
        container(requests={"cpu": "100m"}),
        annotations={contract.ANNOTATION_DECISION: "remote", contract.ANNOTATION_ORIGINAL_RESOURCES: audit},
        uid="old",
    )
    parsed = parse_pod(raw, (GPU,))
    assert parsed is not None and parsed.remote_gpus == 3
    local = pod(container(requests={"cpu": "100m"}), annotations={contract.ANNOTATION_DECISION: "local"}, uid="l")
    assert parse_pod(local, (GPU,)) is None  # unbound, no GPUs, not burst: holds nothing


def test_a_remote_reservation_is_released_when_its_pod_appears() -> None:
    sync = make_sync()
    _, patched = admit(sync, 3, "r1")
    assert sync.cache.remote_in_use(NS) == 3
    patched["metadata"]["uid"] = "pod-uid"
    assert sync.apply_event("pods", "ADDED", patched) is None
    assert sync.cache.remote_in_use(NS) == 3  # the pod now, not the reservation as well
    assert sync.cache.remote_reservation_count == 0
    assert admit(sync, 1, "r2")[0].outcome == "remote"
    assert admit(sync, 1, "r3")[0].over_budget


def test_a_remote_reservation_expires_when_no_pod_follows() -> None:
    clock = Clock()
    sync = make_sync(clock=clock, max_remote="1")
    assert admit(sync, 1, "r1")[0].outcome == "remote"
    assert admit(sync, 1, "r2")[0].over_budget
    clock.now += 60.1
    assert sync.cache.expire_reservations() == 1
    assert admit(sync, 1, "r3")[0].outcome == "remote"


def test_remote_reservations_survive_a_handover_through_the_lease_annotation() -> None:
    clock = Clock()
    old, new = make_sync(clock=clock), make_sync(clock=clock)
    assert admit(old, 3, "r1")[0].outcome == "remote"
    clock.now += 10
    text = leadership.encode_handover(old.cache.export_reservations())
    assert admit(new, 1, "x")[0].outcome == "remote"  # alone, the new leader would overshoot the budget
    new.cache.release_reservation("x")
    new.cache.adopt_reservations(leadership.decode_handover(text))
    assert new.cache.remote_in_use(NS) == 3
    assert admit(new, 2, "r2")[0].over_budget
    clock.now += 50.1  # the original expiry (60 s) is kept
    assert new.cache.expire_reservations() == 1
    assert new.cache.remote_in_use(NS) == 0


def test_a_handed_over_remote_reservation_whose_pod_arrived_is_not_taken_twice() -> None:
    old, new = make_sync(), make_sync()
    _, patched = admit(old, 3, "r1")
    patched["metadata"]["uid"] = "pod-uid"
    assert new.apply_event("pods", "ADDED", patched) is None
    new.cache.adopt_reservations(old.cache.export_reservations())
    assert new.cache.remote_in_use(NS) == 3
    assert new.cache.remote_reservation_count == 0


def test_the_budget_follows_the_namespace_annotation() -> None:
    sync = make_sync(max_remote="1")
    assert sync.apply_event("pods", "ADDED", burst_pod("p1", 1)) is None
    assert admit(sync, 1, "u1")[0].over_budget
    assert sync.apply_event("namespaces", "MODIFIED", namespace(NS, "2")) is None
    assert admit(sync, 1, "u2")[0].outcome == "remote"
    assert sync.apply_event("namespaces", "MODIFIED", namespace(NS, None)) is None  # turned off
    assert sync.cache.budget(NS) is None
    assert admit(sync, 8, "u3")[0].outcome == "remote"
    assert sync.apply_event("namespaces", "ADDED", namespace("late", "0")) is None
    assert sync.apply_event("namespaces", "DELETED", namespace("late", "0")) is None
    assert sync.cache.budgeted_namespaces == 0


def test_a_remote_reservation_travels_in_the_lease_with_an_empty_node() -> None:
    item = leadership.HandedOver(reservation_id="r", namespace=NS, node="", requests={"gpus": 2}, expires_in=5.0)
    text = leadership.encode_handover([item])
    assert json.loads(text)[0]["node"] == ""  # a leader before budgets required a node: it drops the entry
    assert leadership.decode_handover(text) == [item]


def test_a_pod_annotated_with_another_pods_gang_never_replaces_or_removes_its_count() -> None:
    # A label-less pod created with the product's marks and `gang: <uid of a burst pod>` (the webhook
    # never saw it): it may count itself, never stand in for the burst pod it names.
    sync = make_sync()
    assert sync.apply_event("pods", "ADDED", burst_pod("victim", 4)) is None
    twin = burst_pod("twin", 1)
    twin["metadata"]["labels"] = {}
    twin["metadata"]["annotations"][contract.ANNOTATION_GANG] = "victim"
    assert sync.apply_event("pods", "ADDED", twin) is None
    assert admit(sync, 1, "r1")[0].over_budget  # the victim's 4 still count (and the twin's 1)
    assert sync.apply_event("pods", "DELETED", twin) is None
    assert admit(sync, 1, "r2")[0].over_budget  # deleting the twin took nothing of the victim's away
    assert sync.apply_event("pods", "DELETED", burst_pod("victim", 4)) is None
    assert admit(sync, 1, "r3")[0].outcome == "remote"
