"""A gang's plan: one job for the whole gang (its label, its nodes, its command), and the machine and
GPU budget over every node, the further nodes with `mc_slave_gpus`."""

import pytest

from entrypoint import budget, plan
from entrypoint.settings import parse_settings
from jarvice import labels
from jarvice.client import parse_jobs, parse_machines
from jarvice.model import Machine
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

GANG = "6f1c0d2e-8b3a-4c5d-9e7f-0a1b2c3d4e5f"
POD = "11111111-2222-4333-8444-555555555555"


def remote_plan(**env: str) -> plan.RemotePlan:
    base = {
        "REMOTE": "1",
        "JARVICE_USERNAME": "alice",
        "JARVICE_APIKEY": "secret-key-1",
        "APP_NAME": "app-1",
        "APP_COMMAND_ARGS": "torchrun train.py",
        "POD_UID": POD,
        "NIMBIX_BURST_CONTAINER": "trainer",
        "NIMBIX_BURST_GANG_UID": GANG,
        "NIMBIX_BURST_GANG_SIZE": "3",
        "NIMBIX_BURST_GANG_RANK": "1",
    }
    settings = parse_settings({**base, **env}, argv=(), read_file=lambda p: "", hostname="h")
    built = plan.build_plan(settings, attempt=2)
    assert isinstance(built, plan.RemotePlan)
    return built


@pytest.mark.parametrize(
    ("env", "label"),
    [
        ({}, f"k8s-{GANG}-2"),
        ({"NIMBIX_BURST_CLUSTER": "prod-0123456789ab"}, f"k8s-prod-0123456789ab.{GANG}-2"),
        ({"NIMBIX_BURST_GANG_RANK": "0"}, f"k8s-{GANG}-2"),  # every rank computes the same label
    ],
    ids=["no-cluster", "cluster", "rank-0"],
)
def test_the_gangs_one_job_label(env: dict[str, str], label: str) -> None:
    built = remote_plan(**env)
    assert built.job_label == label
    parsed = labels.parse_job_label(label)
    assert parsed is not None and parsed.pod_uid == GANG and parsed.container is None and parsed.attempt == 2


def test_the_gangs_job_has_one_node_per_pod_and_the_pods_master_port() -> None:
    built = remote_plan(MASTER_PORT="23456")
    assert built.nodes == 3 and built.gang is not None and built.gang.rank == 1
    body = plan.build_submit_body(built, machine="ng1")
    assert body["machine"] == {"type": "ng1", "nodes": 3}
    assert body["application"]["parameters"]["command"] == "export MASTER_PORT=23456; torchrun train.py"


def test_a_pod_on_its_own_is_planned_as_before() -> None:
    settings = parse_settings(
        {"REMOTE": "1", "JARVICE_USERNAME": "a", "JARVICE_APIKEY": "k", "APP_NAME": "x", "APP_COMMAND_ARGS": "true",
         "POD_UID": POD, "MASTER_PORT": "23456"},
        argv=(), read_file=lambda p: "", hostname="h",
    )  # fmt: skip
    built = plan.build_plan(settings)
    assert isinstance(built, plan.RemotePlan)
    assert (built.gang, built.nodes, built.shell_command, built.job_label) == (None, 1, "true", f"k8s-{POD}-1")


MACHINES = {
    # 4 GPUs on the master, 2 on each further node
    "mixed": Machine("mixed", cores=32, gpus=4, scale_max=8, slave_gpus=2, price=1.0),
    "even": Machine("even", cores=32, gpus=4, scale_max=8, slave_gpus=4, price=2.0),
    "single": Machine("single", cores=64, gpus=8, scale_max=1, price=0.5),
    "unsaid": Machine("unsaid", cores=16, gpus=2, scale_max=4, price=3.0),  # no mc_slave_gpus
}


@pytest.mark.parametrize(
    ("gpus", "nodes", "expected"),
    [
        (4, 1, "mixed"),  # one node: the master's GPUs alone
        (2, 3, "unsaid"),  # both mixed and unsaid qualify; the smaller (2 GPUs a node) wins
        (4, 2, "even"),  # mixed's second node has only 2
        (3, 2, "even"),
    ],
    ids=["one-node", "two-per-node", "four-per-node", "three-per-node"],
)
def test_every_node_must_hold_one_pods_gpus(gpus: int, nodes: int, expected: str) -> None:
    choice = plan.choose_machine(MACHINES, gpus=gpus, cpus=1, nodes=nodes)
    assert isinstance(choice, plan.MachineChoice) and choice.machine == expected


def test_no_machine_holds_the_gang() -> None:
    choice = plan.choose_machine(MACHINES, gpus=4, cpus=1, nodes=9)
    assert isinstance(choice, plan.NoMachineFits) and "9 node(s)" in choice.reason


@pytest.mark.parametrize(
    ("machine", "nodes", "counted", "refused", "fragment"),
    [
        (MACHINES["mixed"], 3, 8, False, ""),  # 4 + 2 x 2
        (MACHINES["mixed"], 3, 7, True, "4 GPU(s) + 2 x 2 further node(s) = 8 GPU(s)"),
        (MACHINES["even"], 2, 8, False, ""),
        (MACHINES["unsaid"], 4, 7, True, "2 GPU(s) x 4 node(s) = 8 GPU(s)"),
    ],
    ids=["mixed-fits", "mixed-over", "even-fits", "unsaid-over"],
)
def test_the_budget_counts_every_node(machine: Machine, nodes: int, counted: int, refused: bool, fragment: str) -> None:
    result = budget.check_gpu_budget(machine, nodes=nodes, counted_gpus=counted)
    assert (result is not None) is refused
    if result is not None:
        assert fragment in result.reason


def test_slave_gpus_and_end_times_are_read_from_jarvice() -> None:
    machines = parse_machines(
        {
            "a": {"mc_cores": 8, "mc_gpus": 4, "mc_slave_gpus": 2},
            "b": {"mc_cores": 8, "mc_gpus": 4},
            "c": {"mc_cores": 8, "mc_gpus": 4, "mc_slave_gpus": "lots"},
        }
    )
    assert [machines[name].slave_gpus for name in "abc"] == [2, None, None]
    jobs = parse_jobs({"7": {"job_status": "COMPLETED", "job_end_time": 1700000000}, "8": {"job_status": "SUBMITTED"}})
    assert (jobs[7].end_time, jobs[8].end_time) == (1700000000, 0)
