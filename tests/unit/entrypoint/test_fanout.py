"""The fan-out's plan: the nodes file to one launch per rank, with torchrun's variables."""

import shlex

import pytest

from entrypoint import fanout
from entrypoint.fanout import FanoutError, RankExit
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)


def variables(rank: int, nnodes: int, addr: str, port: int) -> dict[str, str]:
    return {
        "NODE_RANK": str(rank),
        "NNODES": str(nnodes),
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(port),
        "JOB_COMPLETION_INDEX": str(rank),
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node-a\nnode-b\n", ("node-a", "node-b")),
        ("  node-a  \n\n\nnode-b", ("node-a", "node-b")),
        ("10.0.0.5\n10.0.0.6\n10.0.0.7\n", ("10.0.0.5", "10.0.0.6", "10.0.0.7")),
        ("fd00::1\n", ("fd00::1",)),
    ],
    ids=["names", "blank-lines-and-spaces", "addresses", "ipv6"],
)
def test_the_nodes_file(text: str, expected: tuple[str, ...]) -> None:
    assert fanout.parse_nodes(text, source="nodes") == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [("", "nodes lists no node"), ("\n \n", "nodes lists no node"), ("a\nb; rm -rf /\n", "is not a host name")],
    ids=["empty", "blank", "shell-text"],
)
def test_a_nodes_file_that_cannot_be_used(text: str, problem: str) -> None:
    with pytest.raises(FanoutError, match=problem):
        fanout.parse_nodes(text, source="nodes")


@pytest.mark.parametrize(
    ("raw", "nodes", "expected"),
    [
        (None, ("127.0.0.1", "127.0.0.2"), "local"),
        (None, ("localhost",), "local"),
        (None, ("::1",), "local"),
        (None, ("127.0.0.1", "node-b"), "ssh"),
        (None, ("node-a", "node-b"), "ssh"),
        ("", ("node-a",), "ssh"),
        ("local", ("node-a", "node-b"), "local"),
        (" SSH ", ("127.0.0.1",), "ssh"),
    ],
    ids=["loopback", "localhost", "ipv6-loopback", "mixed", "names", "blank-variable", "forced-local", "forced-ssh"],
)
def test_the_transport(raw: str | None, nodes: tuple[str, ...], expected: str) -> None:
    assert fanout.decide_transport(raw, nodes) == expected


def test_an_unknown_transport_is_refused() -> None:
    with pytest.raises(FanoutError, match="NIMBIX_BURST_FANOUT_TRANSPORT must be one of ssh, local"):
        fanout.decide_transport("rsh", ("a",))


def test_every_node_is_a_rank_the_master_first() -> None:
    plan = fanout.build_fanout("node-a\nnode-b\nnode-c\n", env={}, source="nodes")
    assert (plan.transport, plan.master_addr, plan.master_port) == ("ssh", "node-a", 29500)
    assert [(launch.rank, launch.node, launch.local) for launch in plan.launches] == [
        (0, "node-a", True),  # the master's rank runs where the fan-out does
        (1, "node-b", False),
        (2, "node-c", False),
    ]
    assert [dict(launch.env) for launch in plan.launches] == [variables(rank, 3, "node-a", 29500) for rank in range(3)]


def test_the_master_port_comes_from_the_environment() -> None:
    plan = fanout.build_fanout("127.0.0.1\n127.0.0.2\n", env={"MASTER_PORT": "23456"}, source="nodes")
    assert plan.transport == "local" and all(launch.local for launch in plan.launches)
    assert [launch.env["MASTER_PORT"] for launch in plan.launches] == ["23456", "23456"]


def test_a_master_port_that_is_no_port_is_refused() -> None:
    with pytest.raises(FanoutError, match="MASTER_PORT must be a TCP port"):
        fanout.build_fanout("a\nb\n", env={"MASTER_PORT": "0"}, source="nodes")


@pytest.mark.parametrize(
    ("command", "workdir", "python"),
    [
        ('python train.py --name "it\'s" $HOME', "/home/app dir", "/opt/venv/bin/python"),
        ("a && b; echo \"$NODE_RANK\" | tee 'x y'", "/home/app", "/opt/venv/bin/python"),
        ("exit 3", "/data/it's here", "/usr/local/bin/python3"),
        ("printf '%s\\n' \"$(hostname)\" >&2", "/", "/opt/my venv/bin/python"),
    ],
    ids=["quotes-and-variables", "shell-operators", "quote-in-workdir", "substitution-and-space-in-python"],
)
def test_a_remote_rank_runs_through_ssh_under_its_guard_in_the_same_directory_with_its_variables(
    command: str, workdir: str, python: str
) -> None:
    plan = fanout.build_fanout("node-a\nnode-b\n", env={}, source="nodes")
    argv = fanout.build_ssh_argv(plan.launches[1], command=command, workdir=workdir, python=python)
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and argv[-2] == "node-b"
    assert "-n" not in argv and "-t" not in argv and "-tt" not in argv  # its input is the guard's signal; no terminal
    remote = shlex.split(argv[-1])  # what the remote user's shell parses
    assert remote[:3] == ["cd", workdir, "&&"]
    assert remote[3:5] == ["exec", "env"]
    assert remote[5:10] == [f"{k}={v}" for k, v in variables(1, 2, "node-a", 29500).items()]
    # The command arrives as one string, byte for byte, for the guard (which runs it with `bash -l -c`).
    assert remote[10:] == [python, "-m", "entrypoint.rankguard", command]


@pytest.mark.parametrize(
    ("env", "forwarded"),
    [
        ({"LOG_LEVEL": "INFO", "SECRET_TOKEN": "x", "PATH": "/bin"}, ["LOG_LEVEL=INFO"]),
        ({"LOG_LEVEL": "debug; rm -rf /"}, ["LOG_LEVEL=debug; rm -rf /"]),  # one quoted word, never a command
        ({"LOG_LEVEL": "  "}, []),
        ({}, []),
    ],
    ids=["only-the-log-level-travels", "quoted", "blank-is-not-forwarded", "unset"],
)
def test_the_remote_guard_logs_at_the_fan_outs_level(env: dict[str, str], forwarded: list[str]) -> None:
    plan = fanout.build_fanout("node-a\nnode-b\n", env=env, source="nodes")
    remote = shlex.split(fanout.build_ssh_argv(plan.launches[1], command="true", workdir="/", python="py")[-1])
    assert remote[10:-4] == forwarded


@pytest.mark.parametrize(
    ("exits", "expected"),
    [
        ([RankExit(0, 0), RankExit(1, 0)], 0),
        ([RankExit(1, 5), RankExit(0, 143)], 5),  # rank 1 failed first; rank 0 was stopped because of it
        ([RankExit(0, 3), RankExit(1, 7)], 3),
        ([RankExit(1, 0), RankExit(0, 137)], 137),
    ],
    ids=["all-succeed", "first-failure-wins", "two-failures", "killed"],
)
def test_the_fan_outs_status(exits: list[RankExit], expected: int) -> None:
    assert fanout.decide_exit(exits) == expected
