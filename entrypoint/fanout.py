"""The fan-out of a multi-node JARVICE job: which rank runs where, with which variables. Pure.

JARVICE starts a job's command on the master node only; the command spreads the work to the
other nodes (nimbix/jardoc `nae.md`). The base image's run command does that for a gang: it runs
the user's command once per line of `/etc/JARVICE/nodes` (master first), each with the variables
torchrun and friends read, so the command line that runs one pod per rank locally runs one node
per rank here. The shell (`entrypoint.fanning`) starts the ranks and waits; this module plans.
"""

import ipaddress
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from entrypoint.gang import DEFAULT_MASTER_PORT, ENV_MASTER_PORT, parse_master_port

# Where JARVICE writes the job's nodes and cores files; the emulator, which runs jobs as local
# processes, points this at a per-job directory instead.
ENV_NODES_DIR: Final = "NIMBIX_BURST_NODES_DIR"
DEFAULT_NODES_DIR: Final = "/etc/JARVICE"
NODES_FILE: Final = "nodes"
# How a rank reaches its node: "ssh" (JARVICE sets up passwordless ssh between a job's nodes) or
# "local" (every rank a process on this host, as in the emulator). Unset: "local" when every node
# is a loopback address, else "ssh".
ENV_TRANSPORT: Final = "NIMBIX_BURST_FANOUT_TRANSPORT"
Transport = Literal["ssh", "local"]
TRANSPORTS: Final[tuple[Transport, ...]] = ("ssh", "local")
# The variables every rank gets (torchrun's names; JOB_COMPLETION_INDEX is what an Indexed Job's
# pod has, so a command written for one pod per rank finds its index either way).
ENV_NODE_RANK: Final = "NODE_RANK"
ENV_NNODES: Final = "NNODES"
ENV_MASTER_ADDR: Final = "MASTER_ADDR"
ENV_JOB_COMPLETION_INDEX: Final = "JOB_COMPLETION_INDEX"
# What the fan-out's own environment passes on to every rank: the remote rank's guard then logs as
# the master does (the job's other variables stay with the master's node).
FORWARDED_VARIABLES: Final = ("LOG_LEVEL",)
# Options for the ssh client: never prompt (a prompt would hang the job), and the job's nodes are
# new to each other, so their host keys cannot be known beforehand.
SSH_OPTIONS: Final = (
    "-o",
    "BatchMode=yes",
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
)
# What runs a remote rank on its node (entrypoint/rankguard.py).
RANK_GUARD_MODULE: Final = "entrypoint.rankguard"
# A node's name in the nodes file: a hostname or an IP address, nothing a shell would interpret.
_NODE_RE: Final = re.compile(r"^[A-Za-z0-9._:-]+$")
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class FanoutError(ValueError):
    """The job's nodes file or the fan-out's variables cannot be used; says what to fix."""


@dataclass(frozen=True, slots=True)
class RankLaunch:
    rank: int
    node: str
    env: Mapping[str, str]  # the rank's variables, on top of the job's environment
    local: bool  # runs on this host (the master's rank, or every rank with the local transport)


@dataclass(frozen=True, slots=True)
class FanoutPlan:
    transport: Transport
    master_addr: str
    master_port: int
    launches: tuple[RankLaunch, ...]


def parse_nodes(text: str, *, source: str) -> tuple[str, ...]:
    """The job's nodes, master first: one per non-blank line."""
    nodes = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not nodes:
        raise FanoutError(f"{source} lists no node")
    bad = [node for node in nodes if not _NODE_RE.match(node)]
    if bad:
        raise FanoutError(f"{source}: {bad[0]!r} is not a host name or address")
    return nodes


def is_loopback(node: str) -> bool:
    if node.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(node).is_loopback
    except ValueError:
        return False


def decide_transport(raw: str | None, nodes: Sequence[str]) -> Transport:
    if raw is not None and raw.strip():
        value = raw.strip().lower()
        for transport in TRANSPORTS:
            if value == transport:
                return transport
        raise FanoutError(f"{ENV_TRANSPORT} must be one of {', '.join(TRANSPORTS)}, got {raw!r}")
    return "local" if all(is_loopback(node) for node in nodes) else "ssh"


def build_rank_env(*, rank: int, nnodes: int, master_addr: str, master_port: int) -> dict[str, str]:
    return {
        ENV_NODE_RANK: str(rank),
        ENV_NNODES: str(nnodes),
        ENV_MASTER_ADDR: master_addr,
        ENV_MASTER_PORT: str(master_port),
        ENV_JOB_COMPLETION_INDEX: str(rank),
    }


def build_fanout(nodes_text: str, *, env: Mapping[str, str], source: str) -> FanoutPlan:
    """One launch per node of the nodes file, rank = its line (the master, first, is rank 0)."""
    nodes = parse_nodes(nodes_text, source=source)
    transport = decide_transport(env.get(ENV_TRANSPORT), nodes)
    problems: list[str] = []
    port = parse_master_port(env.get(ENV_MASTER_PORT), problems)
    if problems:
        raise FanoutError(problems[0])
    master_port = DEFAULT_MASTER_PORT if port is None else port
    master_addr = nodes[0]
    forwarded = {name: env[name] for name in FORWARDED_VARIABLES if env.get(name, "").strip()}
    launches = tuple(
        RankLaunch(
            rank=rank,
            node=node,
            env={
                **build_rank_env(rank=rank, nnodes=len(nodes), master_addr=master_addr, master_port=master_port),
                **forwarded,
            },
            local=transport == "local" or rank == 0,
        )
        for rank, node in enumerate(nodes)
    )
    return FanoutPlan(transport=transport, master_addr=master_addr, master_port=master_port, launches=launches)


def build_local_argv(command: str) -> tuple[str, ...]:
    """A rank on this host: the command as the run command runs a single node's (`bash -l -c`)."""
    return ("bash", "-l", "-c", command)


def build_ssh_argv(launch: RankLaunch, *, command: str, workdir: str, python: str) -> tuple[str, ...]:
    """A rank on another node: ssh runs it there in the same working directory (the same image
    runs on every node, so `python` is this node's interpreter path), with the rank's variables;
    the remote shell gets one quoted string. The rank runs under `entrypoint.rankguard`, which
    stops it when ssh's input ends (the fan-out stops it, or is gone): without a terminal, sshd
    does not signal a command whose client went away."""
    assignments = [f"{name}={value}" for name, value in launch.env.items()]
    guard = [python, "-m", RANK_GUARD_MODULE, command]
    remote = f"cd {shlex.quote(workdir)} && exec " + shlex.join(["env", *assignments, *guard])
    return ("ssh", *SSH_OPTIONS, launch.node, remote)


@dataclass(frozen=True, slots=True)
class RankExit:
    rank: int
    code: int  # the exit status (128+N for a rank killed by signal N)


def decide_exit(exits: Sequence[RankExit]) -> int:
    """The fan-out's status: 0 when every rank succeeded, else the first failed rank's status
    (the first to fail; the others were stopped because of it)."""
    for rank_exit in exits:
        if rank_exit.code != 0:
            return rank_exit.code
    return 0
