"""A pod's submit is made to be exactly what was decided: the size counted, a machine within it, the
walltime decided, the pod's application; never what the pod's env asked. Expected values by hand."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gateway.submission import Catalogue, SubmitNotAllowed, admit_submit
from gateway.terms import ContainerTerms, GangTerms
from jarvice.model import Machine

UID = "0b5e1f52-5a4e-4c41-9a0e-2f6f3c1d9e01"
GANG = "7f0c8f8e-9d1d-4a0e-8a63-5a2c1b6e0f11"
CLUSTER = "c1-0123456789ab"
LABEL = f"k8s-{CLUSTER}.{UID}-trainer-1"

MACHINES = {
    "n0": Machine(name="n0", cores=4, gpus=0, price=0.1, scale_max=64),
    "ng1": Machine(name="ng1", cores=8, gpus=1, price=3.2, scale_max=8),
    "ng4": Machine(name="ng4", cores=32, gpus=4, price=12.0, scale_max=8),
    "ngfree": Machine(name="ngfree", cores=8, gpus=1, price=None, scale_max=8),  # gives no mc_price
}
CATALOGUE = Catalogue(machines=MACHINES)

TERMS = ContainerTerms(
    namespace="ns",
    pod_name="p",
    pod_uid=UID,
    container="trainer",
    cluster=CLUSTER,
    gpus_per_node=1,
    counted_gpus=1,
    allowed_machines=(),
    max_price=None,
    walltime_seconds=2 * 3600,
    app="demo-app",
    gang=None,
)


def _body(machine: str = "ng1", nodes: int = 1, walltime: str | None = "02:00:00", **extra: Any) -> dict[str, Any]:
    application: dict[str, Any] = {"command": "Batch", "parameters": {"command": "train"}}
    if walltime is not None:
        application["walltime"] = walltime
    return {
        "app": "demo-app",
        "staging": False,
        "checkedout": False,
        "application": application,
        "machine": {"type": machine, "nodes": nodes},
        "job_label": LABEL,
        "user": {"username": "x", "apikey": "the-pods-token"},
        **extra,
    }


def test_what_was_decided_goes_as_asked_without_the_pods_user_block() -> None:
    admitted = admit_submit(_body(), TERMS, CATALOGUE)
    assert admitted.changes == ()
    assert "user" not in admitted.body
    assert (admitted.machine, admitted.nodes, admitted.gpus, admitted.cost_per_hour) == ("ng1", 1, 1, 3.2)
    assert admitted.worst_case == pytest.approx(6.4)
    assert admitted.body["application"]["parameters"] == {"command": "train"}


def test_a_zero_gpu_machine_on_32_nodes_becomes_the_size_counted() -> None:
    """The review's case: counted at 3.20/h, the env asked n0 x 32 (44.8/h with a real n0 price)."""
    admitted = admit_submit(_body(machine="n0", nodes=32), TERMS, CATALOGUE)
    assert (admitted.machine, admitted.nodes, admitted.cost_per_hour) == ("ng1", 1, 3.2)
    assert admitted.body["machine"] == {"type": "ng1", "nodes": 1}
    assert any("nodes 32 -> 1" in c for c in admitted.changes)
    assert any("'n0' -> 'ng1'" in c for c in admitted.changes)


@pytest.mark.parametrize(
    ("asked", "sent"),
    [("ng4", "ng1"), ("unknown", "ng1"), ("ng1", "ng1")],
)
def test_a_machine_outside_what_was_counted_becomes_the_cheapest_within(asked: str, sent: str) -> None:
    assert admit_submit(_body(machine=asked), TERMS, CATALOGUE).machine == sent


@pytest.mark.parametrize(
    ("asked", "sent"),
    [
        ("02:00:00", "02:00:00"),
        ("01:00:00", "01:00:00"),
        ("99:00:00", "02:00:00"),
        (None, "02:00:00"),
        ("x", "02:00:00"),
    ],
)
def test_the_walltime_is_never_longer_than_decided(asked: str | None, sent: str) -> None:
    assert admit_submit(_body(walltime=asked), TERMS, CATALOGUE).body["application"]["walltime"] == sent


def test_the_pods_application_is_the_one_sent() -> None:
    admitted = admit_submit(_body(app="someone-elses-app"), TERMS, CATALOGUE)
    assert admitted.body["app"] == "demo-app"


def test_a_price_ceiling_leaves_out_dearer_machines_and_machines_without_a_price() -> None:
    capped = replace(TERMS, max_price=3.0)
    with pytest.raises(SubmitNotAllowed, match="at most 3 per node-hour with a known price"):
        admit_submit(_body(), capped, CATALOGUE)
    assert CATALOGUE.price(MACHINES["ngfree"]) is None  # ngfree would be "free" if a missing price read as 0


def test_an_uncapped_namespace_may_use_a_machine_without_a_price_and_its_cost_is_unknown() -> None:
    admitted = admit_submit(_body(machine="ngfree"), TERMS, CATALOGUE)
    assert (admitted.machine, admitted.cost_per_hour, admitted.worst_case) == ("ngfree", None, None)


def test_allowed_machines_of_the_pods_gpu_model_hold() -> None:
    assert admit_submit(_body(), replace(TERMS, allowed_machines=("ngfree",)), CATALOGUE).machine == "ngfree"


def test_a_gang_is_one_job_of_its_size_submitted_by_rank_0_only() -> None:
    gang = replace(TERMS, counted_gpus=2, gang=GangTerms(uid=GANG, size=2, rank=0))
    label = f"k8s-{CLUSTER}.{GANG}-trainer-1"
    admitted = admit_submit(_body(nodes=1, job_label=label), gang, CATALOGUE)
    assert (admitted.machine, admitted.nodes, admitted.gpus) == ("ng1", 2, 2)
    with pytest.raises(SubmitNotAllowed, match="rank 1 of a gang follows rank 0's job"):
        admit_submit(_body(job_label=label), replace(gang, gang=GangTerms(uid=GANG, size=2, rank=1)), CATALOGUE)


@pytest.mark.parametrize(
    "label",
    [
        f"k8s-{CLUSTER}.{GANG}-trainer-1",  # another pod's
        f"k8s-other-cluster.{UID}-trainer-1",
        f"k8s-{UID}-trainer-1",  # no cluster: no reaper could stop it
        f"k8s-{CLUSTER}.{UID}-sidecar-1",
        "anything",
    ],
)
def test_a_label_not_the_pods_own_is_refused(label: str) -> None:
    with pytest.raises(SubmitNotAllowed, match="is not a label of this pod's container"):
        admit_submit(_body(job_label=label), TERMS, CATALOGUE)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({**_body(), "machine": "ng1"}, "machine must be an object"),
        ({**_body(), "application": None}, "application must be an object"),
    ],
)
def test_a_malformed_body_is_refused_with_what_to_fix(body: dict[str, Any], says: str) -> None:
    with pytest.raises(SubmitNotAllowed, match=says):
        admit_submit(body, TERMS, CATALOGUE)


def test_nothing_within_the_count_is_refused() -> None:
    with pytest.raises(
        SubmitNotAllowed,
        match=r"within what was counted for this pod \(1 GPU\(s\) on 1 node\(s\), 1 per node, one of ng4\)",
    ):
        admit_submit(_body(), replace(TERMS, allowed_machines=("ng4",)), CATALOGUE)


def test_a_machine_without_a_price_is_never_taken_for_the_cheapest() -> None:
    """ngfree gives no mc_price: read as 0 it would be chosen over ng1 for every substitution."""
    assert admit_submit(_body(machine="ng4"), TERMS, CATALOGUE).machine == "ng1"
    only_unpriced = Catalogue(machines={"ngfree": MACHINES["ngfree"]})
    assert admit_submit(_body(machine="ng4"), TERMS, only_unpriced).machine == "ngfree"
