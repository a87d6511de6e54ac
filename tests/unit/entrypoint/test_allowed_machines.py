"""NIMBIX_BURST_ALLOWED_MACHINES: the machines a pod's GPU model allows, read and validated by the
runner, and the only ones it chooses among (best fit by size, then price)."""

from __future__ import annotations

import pytest

from entrypoint import plan
from entrypoint.settings import SettingsError, parse_settings
from jarvice import contract
from jarvice.model import Machine
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

REMOTE_OK = {
    "REMOTE": "1",
    "JARVICE_USERNAME": "alice",
    "JARVICE_APIKEY": "k3y-XYZ-123456",
    "APP_NAME": "my-app",
    "APP_COMMAND_ARGS": "echo hi",
}


def machine(name: str, cores: int, gpus: int, ram: int, price: float) -> Machine:
    return Machine(name=name, cores=cores, gpus=gpus, ram_gb=ram, price=price, arch="x86_64")


# The emulator's GPU machines, and a cheaper 1-GPU A100 twin to show price breaking a size tie.
CATALOGUE = {
    m.name: m
    for m in [
        machine("ng1", 8, 1, 64, 2.1),  # T4
        machine("ng2", 16, 2, 128, 4.2),  # V100
        machine("ng1a", 16, 1, 128, 3.2),  # A100
        machine("ng1a-spot", 16, 1, 128, 2.4),  # A100, cheaper
        machine("ng4a", 32, 4, 512, 12.8),  # A100
        machine("ng8", 64, 8, 1024, 25.6),  # A100
    ]
}
A100 = ("ng1a", "ng4a", "ng8")


def remote_plan(
    *,
    gpus: int,
    cpus: int = 1,
    allowed: tuple[str, ...] | None,
    machine: str | None = None,
    extra: dict[str, str] | None = None,
) -> plan.RemotePlan:
    env = {**REMOTE_OK, "NUM_GPUS": str(gpus), "NUM_CPUS": str(cpus), **(extra or {})}
    if allowed is not None:
        env[contract.ENV_ALLOWED_MACHINES] = ",".join(allowed)
    if machine is not None:
        env["JARVICE_MACHINE"] = machine
    built = plan.build_plan(parse_settings(env, argv=(), read_file=lambda path: "", hostname="h"))
    assert isinstance(built, plan.RemotePlan)
    return built


@pytest.mark.parametrize(
    ("gpus", "cpus", "allowed", "expected"),
    [
        (1, 1, None, "ng1"),  # no model asked for: the smallest machine of all, a T4
        (1, 1, A100, "ng1a"),  # an A100 asked for: the smallest A100
        (2, 1, A100, "ng4a"),  # 2 GPUs: no 2-GPU A100, the next size up
        (5, 1, A100, "ng8"),
        (1, 1, ("ng1a", "ng1a-spot"), "ng1a-spot"),  # same size: the cheaper
        (1, 20, A100, "ng4a"),  # 20 cores: ng1a has 16
        (1, 1, ("ng2", "gone"), "ng2"),  # a mapped machine the account does not offer is skipped
    ],
    ids=["any", "a100-1", "a100-2", "a100-5", "price", "cores", "unknown-skipped"],
)
def test_the_runner_chooses_only_among_the_allowed_machines(
    gpus: int, cpus: int, allowed: tuple[str, ...] | None, expected: str
) -> None:
    choice = plan.select_machine(remote_plan(gpus=gpus, cpus=cpus, allowed=allowed), CATALOGUE)
    assert isinstance(choice, plan.MachineChoice), choice
    assert choice.machine == expected
    if allowed is not None:
        assert "among the machines with the pod's GPU model" in choice.reason


@pytest.mark.parametrize(
    ("gpus", "allowed", "machine", "fragment"),
    [
        (16, A100, None, "16 GPU(s)"),
        (1, ("h100", "h200"), None, "none of the machines with the pod's GPU model"),
        (1, A100, "ng1", "JARVICE_MACHINE 'ng1' does not carry the pod's GPU model"),
    ],
    ids=["too-big", "none-offered", "pinned-elsewhere"],
)
def test_no_allowed_machine_fits(gpus: int, allowed: tuple[str, ...], machine: str | None, fragment: str) -> None:
    choice = plan.select_machine(remote_plan(gpus=gpus, allowed=allowed, machine=machine), CATALOGUE)
    assert isinstance(choice, plan.NoMachineFits)
    assert fragment in choice.reason


def test_a_pinned_machine_among_the_allowed_is_used() -> None:
    choice = plan.select_machine(remote_plan(gpus=1, allowed=A100, machine="ng4a"), CATALOGUE)
    assert isinstance(choice, plan.MachineChoice) and choice.machine == "ng4a"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("ng4a,ng8", ("ng4a", "ng8")), (" ng8 , ng4a ", ("ng4a", "ng8")), ("ng1a,ng1a", ("ng1a",)), ("  ", None)],
    ids=["list", "spaces", "duplicates", "blank-is-unset"],
)
def test_the_env_is_read(value: str, expected: tuple[str, ...] | None) -> None:
    env = {**REMOTE_OK, contract.ENV_ALLOWED_MACHINES: value}
    settings = parse_settings(env, argv=(), read_file=lambda path: "", hostname="h")
    assert settings.remote is not None and settings.remote.allowed_machines == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("ng4a,,ng8", "'' is not a JARVICE machine type"),
        ("ng4a ng8", "'ng4a ng8'"),
        ("-x", "'-x'"),
        ("a" * 65, "at most 64"),
    ],
    ids=["empty-entry", "space", "leading-dash", "too-long"],
)
def test_a_bad_env_says_what_to_fix(value: str, fragment: str) -> None:
    env = {**REMOTE_OK, contract.ENV_ALLOWED_MACHINES: value}
    with pytest.raises(SettingsError) as caught:
        parse_settings(env, argv=(), read_file=lambda path: "", hostname="h")
    (problem,) = caught.value.problems
    assert problem.startswith("NIMBIX_BURST_ALLOWED_MACHINES: ") and fragment in problem
    assert "comma-separated list such as ng4a,ng8" in problem


def test_the_webhook_and_the_runner_agree_on_the_format() -> None:
    written = contract.format_machine_list(("ng8", "ng4a", "ng8"))
    assert written == "ng4a,ng8"
    assert contract.parse_machine_list(written) == ("ng4a", "ng8")
