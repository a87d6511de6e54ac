"""The emulator's multi-node jobs: the scale check of machine.nodes and the nodes/cores files."""

import shlex

import pytest

from devplatform.emulator import nodes
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

SPEC = {"mc_scale_min": 1, "mc_scale_max": 4}


@pytest.mark.parametrize(
    ("count", "problem"),
    [
        (1, None),
        (4, None),
        (5, "machine ng1 scales to 1..4 node(s), machine.nodes is 5"),
        (0, "machine ng1 scales to 1..4 node(s), machine.nodes is 0"),
        ("2", "machine.nodes must be an integer, got '2'"),
        (True, "machine.nodes must be an integer, got True"),
    ],
    ids=["one", "the-most", "too-many", "none", "a-string", "a-boolean"],
)
def test_machine_nodes_within_the_machines_scale(count: object, problem: str | None) -> None:
    assert nodes.check_scale("ng1", SPEC, count) == problem


def test_more_nodes_than_the_emulator_has_addresses_for() -> None:
    assert nodes.check_scale("big", {"mc_scale_min": 1, "mc_scale_max": 1000}, 300) == (
        "the emulator runs at most 254 nodes per job, machine.nodes is 300"
    )


def test_the_nodes_and_cores_files() -> None:
    names = nodes.build_node_names(2)
    assert names == ("127.0.0.1", "127.0.0.2")
    assert nodes.render_nodes(names) == "127.0.0.1\n127.0.0.2\n"
    assert nodes.render_cores(names, cores_per_node=3) == "127.0.0.1\n" * 3 + "127.0.0.2\n" * 3


def test_a_catalogue_applications_multi_node_command_goes_through_the_fan_out() -> None:
    command = 'echo "it\'s $NODE_RANK"'
    built = nodes.build_fanout_command(command, python="/venv/bin/python")
    assert shlex.split(built) == ["exec", "/venv/bin/python", "-m", "entrypoint.fanning", command]
