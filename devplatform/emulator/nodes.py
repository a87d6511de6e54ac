"""A job's nodes in the emulator: the scale check of `machine.nodes`, and each job's stand-in for
/etc/JARVICE (its `nodes` and `cores` files).

On JARVICE a job of N nodes runs on N machines; the command starts on the first (master) node,
`/etc/JARVICE/nodes` lists the nodes (master first) and `/etc/JARVICE/cores` repeats each node once
per core (nimbix/jardoc `nae.md`). The emulator runs a job as local processes, so its nodes are
loopback addresses (127.0.0.1, 127.0.0.2, ...: distinct, all this host) and the files live in a
directory of the job's own, named to the job by NIMBIX_BURST_NODES_DIR (the fan-out reads it;
a job cannot get a private /etc/JARVICE without a mount namespace, which needs root).

Everything above `write_jarvice_dir` is pure.
"""

import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from entrypoint import fanout

JARVICE_DIR_NAME: Final = "etc-JARVICE"
# The Python that runs the fan-out on this host (the image's /opt/venv/bin/python on JARVICE).
ENV_PYTHON: Final = "NIMBIX_BURST_PYTHON"
# 127.0.0.0/8 is loopback; node i is 127.0.0.(i+1), so a job's nodes stay within one /24.
MAX_NODES: Final = 254


def check_scale(machine: str, spec: Mapping[str, Any], nodes: object) -> str | None:
    """Why `machine.nodes` cannot be run on `machine` (None: it can). The emulator answers such a
    submit with JARVICE's documented 400 "Missing or Malformed API Syntax" (reference §8); that
    JARVICE answers exactly this for a node count out of the machine's scale is UNCONFIRMED."""
    if not isinstance(nodes, int) or isinstance(nodes, bool):
        return f"machine.nodes must be an integer, got {nodes!r}"
    low, high = int(spec.get("mc_scale_min", 1)), int(spec.get("mc_scale_max", 1))
    if not low <= nodes <= high:
        return f"machine {machine} scales to {low}..{high} node(s), machine.nodes is {nodes}"
    if nodes > MAX_NODES:
        return f"the emulator runs at most {MAX_NODES} nodes per job, machine.nodes is {nodes}"
    return None


def build_node_names(count: int) -> tuple[str, ...]:
    return tuple(f"127.0.0.{index + 1}" for index in range(count))


def render_nodes(nodes: Sequence[str]) -> str:
    return "".join(f"{node}\n" for node in nodes)


def render_cores(nodes: Sequence[str], *, cores_per_node: int) -> str:
    return "".join(f"{node}\n" for node in nodes for _ in range(max(1, cores_per_node)))


def build_fanout_command(command: str, *, python: str) -> str:
    """A catalogue application's multi-node job: the command through the fan-out the base image's
    run command uses (catalogue applications stand for images built FROM the base image)."""
    return "exec " + shlex.join([python, "-m", "entrypoint.fanning", command])


def build_job_environment(jarvice_dir: Path) -> dict[str, str]:
    """What every job of the emulator gets on top of the emulator's environment."""
    return {fanout.ENV_NODES_DIR: str(jarvice_dir), ENV_PYTHON: sys.executable}


def write_jarvice_dir(workdir: Path, *, nodes: Sequence[str], cores_per_node: int) -> Path:
    """The job's /etc/JARVICE stand-in, under its work directory."""
    directory = workdir / JARVICE_DIR_NAME
    directory.mkdir(parents=True, exist_ok=True)
    (directory / fanout.NODES_FILE).write_text(render_nodes(nodes), encoding="utf-8")
    (directory / "cores").write_text(render_cores(nodes, cores_per_node=cores_per_node), encoding="utf-8")
    return directory
