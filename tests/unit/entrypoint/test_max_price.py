"""NIMBIX_BURST_MAX_PRICE: the price a namespace's cost caps counted a burst at; the runner never
submits to a dearer machine (docs/money-safety.md, "Caps in money")."""

from __future__ import annotations

import dataclasses

import pytest

from entrypoint import candidates, plan
from entrypoint.gang import Gang
from entrypoint.settings import SettingsError, parse_settings
from jarvice import contract
from jarvice.model import Machine
from tests.unit.entrypoint.test_allowed_machines import CATALOGUE, REMOTE_OK, remote_plan


@pytest.mark.parametrize(
    ("gpus", "max_price", "machine", "expected"),
    [
        (1, None, None, ("ng1", "ng1a-spot", "ng1a")),  # cheapest first, never a bigger machine than the first
        (1, "2.4", None, ("ng1", "ng1a-spot")),  # the 3.20 A100 is dearer than what was counted
        (2, "4.2", None, ("ng2",)),
        (1, "2.0", None, None),  # nothing that cheap
        (1, "2.4", "ng1a", None),  # a pin dearer than what was counted is refused
    ],
)
def test_the_runner_never_pays_more_than_was_counted(
    gpus: int, max_price: str | None, machine: str | None, expected: tuple[str, ...] | None
) -> None:
    extra = {contract.ENV_MAX_PRICE: max_price} if max_price is not None else {}
    chosen = candidates.order_candidates(remote_plan(gpus=gpus, allowed=None, machine=machine, extra=extra), CATALOGUE)
    if expected is None:
        assert isinstance(chosen, plan.NoMachineFits)
    else:
        assert isinstance(chosen, candidates.Candidates) and chosen.machines == expected


@pytest.mark.parametrize("raw", ["cheap", "-1", "inf", "nan"])
def test_an_unreadable_ceiling_is_refused_with_what_to_write(raw: str) -> None:
    env = {**REMOTE_OK, contract.ENV_MAX_PRICE: raw}
    with pytest.raises(SettingsError, match="NIMBIX_BURST_MAX_PRICE must be a price per node-hour"):
        parse_settings(env, argv=(), read_file=lambda path: "", hostname="h")


# A 0-GPU machine that scales: the one a pod could ask for many nodes of and still pass the GPU check.
SCALING = {**CATALOGUE, "n1": Machine(name="n1", cores=8, gpus=0, ram_gb=32, price=0.70, arch="x86_64", scale_max=32)}


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ("1", ("n1",)),  # 0.70 an hour, within the 2.40 counted
        ("3", ("n1",)),  # 2.10 an hour
        ("4", None),  # 2.80 an hour: over what was counted, though each node is within the ceiling
        ("32", None),  # 22.40 an hour
    ],
)
def test_the_ceiling_holds_for_the_whole_job_not_per_node(nodes: str, expected: tuple[str, ...] | None) -> None:
    # The webhook counted this pod's one node at 2.40 an hour; JARVICE_NODES is the pod's own to write.
    extra = {contract.ENV_MAX_PRICE: "2.4", "JARVICE_NODES": nodes}
    chosen = candidates.order_candidates(remote_plan(gpus=0, allowed=None, machine="n1", extra=extra), SCALING)
    if expected is None:
        assert isinstance(chosen, plan.NoMachineFits)
        assert "x nodes" in chosen.reason and contract.ENV_MAX_PRICE in chosen.reason
    else:
        assert isinstance(chosen, candidates.Candidates) and chosen.machines == expected


def test_a_gang_is_counted_at_the_ceiling_times_its_size() -> None:
    built = remote_plan(gpus=1, allowed=None, extra={contract.ENV_MAX_PRICE: "2.1"})
    gang = dataclasses.replace(built, nodes=4, gang=Gang(uid="g", size=4, rank=0))
    chosen = candidates.order_candidates(gang, SCALING | {"ng1": dataclasses.replace(CATALOGUE["ng1"], scale_max=8)})
    assert isinstance(chosen, candidates.Candidates) and chosen.machines == ("ng1",)


def test_a_machine_without_a_price_is_never_within_a_ceiling() -> None:
    unpriced = {**CATALOGUE, "ng1": dataclasses.replace(CATALOGUE["ng1"], price=None)}
    extra = {contract.ENV_MAX_PRICE: "2.4"}
    chosen = candidates.order_candidates(remote_plan(gpus=1, allowed=None, extra=extra), unpriced)
    assert isinstance(chosen, candidates.Candidates) and chosen.machines == ("ng1a-spot",)
    pinned = candidates.order_candidates(remote_plan(gpus=1, allowed=None, machine="ng1", extra=extra), unpriced)
    assert isinstance(pinned, plan.NoMachineFits)


def test_without_a_ceiling_a_machine_without_a_price_comes_last() -> None:
    unpriced = {**CATALOGUE, "ng1": dataclasses.replace(CATALOGUE["ng1"], price=None)}
    chosen = candidates.order_candidates(remote_plan(gpus=1, allowed=None), unpriced)
    assert isinstance(chosen, candidates.Candidates) and chosen.machines == ("ng1a-spot", "ng1a", "ng1")


# A 3-GPU machine JARVICE lists without an mc_price: the only one that holds no more GPUs than counted.
UNPRICED_THREE = {**CATALOGUE, "ng3x": Machine(name="ng3x", cores=24, gpus=3, ram_gb=192, price=None, arch="x86_64")}


@pytest.mark.parametrize(
    ("gpus", "machine", "extra", "catalogue", "left_out"),
    [
        # Pinned, but dearer than what was counted: it is listed, the ceiling is why.
        (1, "ng1a", {contract.ENV_MAX_PRICE: "2.4"}, CATALOGUE, "ng1a (3.2 an hour)"),
        # Only a machine without a price fits within the counted GPUs: never taken under a ceiling.
        (3, None, {contract.ENV_MAX_PRICE: "25.6", contract.ENV_COUNTED_GPUS: "3"}, UNPRICED_THREE, "ng3x (no price)"),
    ],
)
def test_when_the_ceiling_leaves_out_every_machine_that_fits_the_reason_names_it(
    gpus: int, machine: str | None, extra: dict[str, str], catalogue: dict[str, Machine], left_out: str
) -> None:
    chosen = candidates.order_candidates(remote_plan(gpus=gpus, allowed=None, machine=machine, extra=extra), catalogue)
    assert isinstance(chosen, plan.NoMachineFits), chosen
    assert contract.ENV_MAX_PRICE in chosen.reason and left_out in chosen.reason, chosen.reason
    assert "not in /jarvice/machines" not in chosen.reason


def test_a_pin_outside_its_node_range_is_refused_for_that_under_a_ceiling_too() -> None:
    # ng1a runs on one node only: that is the reason to give, whatever the ceiling leaves out.
    extra = {contract.ENV_MAX_PRICE: "4.2", "JARVICE_NODES": "2"}  # 2 nodes of ng1 are within it
    chosen = candidates.order_candidates(remote_plan(gpus=1, allowed=None, machine="ng1a", extra=extra), CATALOGUE)
    assert isinstance(chosen, plan.NoMachineFits)
    assert "scales 1..1 node(s)" in chosen.reason and "not in /jarvice/machines" not in chosen.reason, chosen.reason
