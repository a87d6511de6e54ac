"""The candidate machines of a remote job, in order, and the move of a job JARVICE keeps queued (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from entrypoint import candidates
from entrypoint.candidates import Candidates, Move, Stay, decide_move, order_candidates
from entrypoint.plan import NoMachineFits, RemotePlan
from entrypoint.remote_settings import Tuning
from jarvice import contract
from jarvice.model import Machine
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)


def machine(name: str, cores: int, gpus: int, ram: int, price: float, **kw: object) -> Machine:
    return Machine(name=name, cores=cores, gpus=gpus, ram_gb=ram, price=price, **kw)  # type: ignore[arg-type]


# The emulator's catalogue (devplatform/emulator/catalogue.py), as the runner reads it.
CATALOGUE = {
    m.name: m
    for m in [
        machine("n0", 4, 0, 16, 0.35, arch="x86_64"),
        machine("n1", 8, 0, 32, 0.70, arch="x86_64", scale_max=8),
        machine("ng1", 8, 1, 64, 2.10, arch="x86_64", scale_max=8),
        machine("ng1a", 16, 1, 128, 3.20, arch="x86_64"),
        machine("ng2", 16, 2, 128, 4.20, arch="x86_64", scale_max=8),
        machine("ng4", 32, 4, 256, 8.40, arch="x86_64", scale_max=8),
        machine("ng4v", 48, 4, 384, 10.20, arch="x86_64", scale_max=8),
        machine("ng4a", 32, 4, 512, 12.80, arch="x86_64"),
        machine("ng8", 64, 8, 1024, 25.60, arch="x86_64"),
        machine("np8g4", 160, 4, 512, 9.00, arch="ppc64le"),
    ]
}
V100 = ("ng2", "ng4", "ng4v")


def plan(**fields: object) -> RemotePlan:
    base = RemotePlan(
        shell_command="true",
        job_label="k8s-x-1",
        app_name="app",
        app_command="run",
        command_parameter="command",
        machine=None,
        nodes=1,
        vault=None,
        walltime="01:00:00",
        geometry=None,
        arch=None,
        num_gpus=1,
        num_cpus=1,
        tuning=Tuning(),
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # Cheapest for the job first, within what was counted: bigger machines are never candidates.
        ({"num_gpus": 1, "counted_gpus": 1}, ("ng1", "ng1a")),
        ({"num_gpus": 4, "counted_gpus": 4}, ("ng4", "ng4v", "ng4a")),
        # The pod's GPU model narrows the machines; the order stays by price.
        ({"num_gpus": 4, "counted_gpus": 4, "allowed_machines": V100}, ("ng4", "ng4v")),
        ({"num_gpus": 1, "counted_gpus": 1, "allowed_machines": V100}, ()),  # ng2 holds 2 > 1 counted
        ({"num_gpus": 2, "counted_gpus": 2, "allowed_machines": V100}, ("ng2",)),
        # Without a count, never more GPUs than the best fit holds (ng1: 1 GPU).
        ({"num_gpus": 1}, ("ng1", "ng1a")),
        # Three GPUs: the best fit holds 4, so do the fallbacks; the POWER machine keeps out (another arch).
        ({"num_gpus": 3, "counted_gpus": 4}, ("ng4", "ng4v", "ng4a")),
        # JARVICE_ARCH names the architecture: only its machines.
        ({"num_gpus": 4, "counted_gpus": 4, "arch": "ppc64le"}, ("np8g4",)),
        # Nodes: price for the job is mc_price x nodes; ng4a does not scale to 2 nodes.
        ({"num_gpus": 4, "counted_gpus": 8, "nodes": 2}, ("ng4", "ng4v")),
        # CPU-only jobs, cheapest first among the same size.
        ({"num_gpus": 0, "num_cpus": 5}, ("n1",)),
        # A pin is the only candidate.
        ({"num_gpus": 4, "counted_gpus": 4, "machine": "ng4v"}, ("ng4v",)),
        # RAM per node (mc_ram, GiB): 200 GiB rules out ng4 (256 is enough), 300 GiB leaves ng4v and ng4a.
        ({"num_gpus": 4, "counted_gpus": 4, "memory_gb": 256}, ("ng4", "ng4v", "ng4a")),
        ({"num_gpus": 4, "counted_gpus": 4, "memory_gb": 300}, ("ng4v", "ng4a")),
        ({"num_gpus": 1, "counted_gpus": 1, "memory_gb": 100}, ("ng1a",)),
        # The namespace's order: only the machines it names, in its order, that fit within the budget.
        ({"num_gpus": 4, "counted_gpus": 4, "preferred_machines": ("ng4a", "ng8", "ng4")}, ("ng4a", "ng4")),
        ({"num_gpus": 4, "counted_gpus": 4, "preferred_machines": ("ng4v", "ng4")}, ("ng4v", "ng4")),
    ],
)
def test_the_candidates_in_order(fields: dict[str, object], expected: tuple[str, ...]) -> None:
    result = order_candidates(plan(**fields), CATALOGUE)
    if not expected:
        assert isinstance(result, Candidates) and len(result.machines) == 1  # the budget check refuses it
        assert "over the budget" in result.reason
        return
    assert isinstance(result, Candidates), result
    assert result.machines == expected


def test_every_fitting_machine_over_the_budget_leaves_the_cheapest_for_the_budget_check_to_refuse() -> None:
    result = order_candidates(plan(num_gpus=4, counted_gpus=2), CATALOGUE)
    assert isinstance(result, Candidates) and result.machines == ("ng4",)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_gpus": 16}, "no machine among 10 offers 16 GPU(s)"),
        ({"num_gpus": 4, "allowed_machines": ("ng1",)}, "among the machines with the pod's GPU model (ng1)"),
        (
            {"num_gpus": 4, "counted_gpus": 4, "preferred_machines": ("ng1", "ng8")},
            f"none of {contract.ENV_MACHINES}=ng1,ng8 offers 4 GPU(s)",
        ),
        ({"machine": "nx9"}, "JARVICE_MACHINE 'nx9' is not in /jarvice/machines"),
        ({"num_gpus": 1, "memory_gb": 2048}, "no machine among 10 has 2048 GiB of RAM (NIMBIX_BURST_MEMORY_GB"),
    ],
)
def test_why_no_machine_fits(fields: dict[str, object], message: str) -> None:
    result = order_candidates(plan(**fields), CATALOGUE)
    assert isinstance(result, NoMachineFits) and message in result.reason, result


def test_a_machine_whose_catalogue_entry_gives_no_ram_is_not_held_to_it() -> None:
    unknown = {"ng1x": machine("ng1x", 8, 1, 0, 1.0, arch="x86_64")}
    result = order_candidates(plan(num_gpus=1, memory_gb=64), unknown)
    assert isinstance(result, Candidates) and result.machines == ("ng1x",)


def test_a_pin_smaller_than_the_request_is_kept_with_a_warning() -> None:
    result = order_candidates(plan(num_gpus=4, machine="ng2"), CATALOGUE)
    assert isinstance(result, Candidates) and result.machines == ("ng2",)
    assert result.warning is not None and "smaller than requested" in result.warning


def test_a_pin_outside_its_node_range_is_refused() -> None:
    # ng1a runs on one node only: two would be refused by JARVICE, or priced and counted for one.
    result = order_candidates(plan(num_gpus=1, machine="ng1a", nodes=2), CATALOGUE)
    assert isinstance(result, NoMachineFits)
    assert "scales 1..1 node(s)" in result.reason and "JARVICE_NODES=2" in result.reason


FOUR = ("ng4", "ng4v", "ng4a")


@pytest.mark.parametrize(
    ("state", "queued", "limit", "current", "expected"),
    [
        ("SUBMITTED", 29.0, 30, 0, None),  # not yet
        ("SUBMITTED", 30.0, 30, 0, "ng4v"),
        ("SEQUENTIALLY QUEUED", 31.0, 30, 1, "ng4a"),
        ("submitted", 31.0, 30, 0, "ng4v"),  # JARVICE's case is not trusted
        ("SUBMITTED", 9999.0, 30, 2, None),  # the last candidate: it keeps waiting there
        ("PROCESSING STARTING", 9999.0, 30, 0, None),  # started: it stays, whatever it cost to wait
        ("COMPLETED", 9999.0, 30, 0, None),
        ("SUBMITTED", 9999.0, 0, 0, None),  # 0: never move
    ],
)
def test_the_move(state: str, queued: float, limit: int, current: int, expected: str | None) -> None:
    decision = decide_move(
        state=state, queued_seconds=queued, max_queue_seconds=limit, candidates=FOUR, current=current
    )
    if expected is None:
        assert decision == Stay()
    else:
        assert isinstance(decision, Move) and decision.to == expected
        assert contract.ENV_MAX_REMOTE_QUEUE in decision.reason and f"candidate {current + 2} of 3" in decision.reason


def test_a_gangs_job_never_moves() -> None:
    # Its other ranks follow the job by its label: they would take the terminated job for the gang's end.
    decision = decide_move(
        state="SUBMITTED", queued_seconds=1e6, max_queue_seconds=1, candidates=FOUR, current=0, gang=True
    )
    assert decision == Stay()


def test_a_single_candidate_never_moves() -> None:
    assert (
        decide_move(state="SUBMITTED", queued_seconds=1e6, max_queue_seconds=1, candidates=("ng4",), current=0)
        == Stay()
    )


def test_only_queued_statuses_move() -> None:
    assert frozenset({"SUBMITTED", "SEQUENTIALLY QUEUED"}) == candidates.QUEUED_STATUSES


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("10m", 600), ("1h", 3600), ("90", 90), ("0", 0), (" 2M ", 120), ("168h", 7 * 24 * 3600)],
)
def test_durations(text: str, seconds: int) -> None:
    assert contract.parse_duration_seconds(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is not a duration"),
        ("10 minutes", "is not a duration"),
        ("-5s", "is not a duration"),
        ("1.5m", "is not a duration"),
        ("10d", "is not a duration"),
        ("169h", "longer than a week"),
        ("٣s", "is not a duration"),  # a digit of another script
    ],
)
def test_durations_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        contract.parse_duration_seconds(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("ng4,ng4v", ("ng4", "ng4v")), (" ng4v , ng4 ,ng4v", ("ng4v", "ng4")), ("n3", ("n3",))],
)
def test_machine_order(text: str, expected: tuple[str, ...]) -> None:
    assert contract.parse_machine_order(text) == expected


@pytest.mark.parametrize("text", ["ng4,,ng4v", "ng4;ng4v", ",", "-ng4"])
def test_machine_order_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a JARVICE machine type"):
        contract.parse_machine_order(text)
