"""Gangs: the pods of one distributed job burst as one multi-node JARVICE job. Pure.

The webhook gives every burst pod of a gang the gang's UID, its size and the pod's rank
(`jarvice.contract`). The runner of rank 0 submits the gang's one job, with `machine.nodes` =
the size; the runners of the other ranks find that job by the gang's label and follow it. This
module reads those variables (every problem said, with what to fix) and holds the rules the
runner needs that are about gangs only: which of the label's jobs a following rank may take, and
how the pod's MASTER_PORT reaches the remote ranks.
"""

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from jarvice import contract
from jarvice.model import JobEntry, is_terminal

# How long a following rank waits for rank 0's job to appear under the gang's label. Rank 0's pod
# may start minutes after the others (scheduling, image pulls) and its runner may spend the outage
# budget on a submit; past this a rank says so and exits, rather than sit in Running forever.
ENV_GANG_WAIT_SECONDS: Final = "NIMBIX_BURST_GANG_WAIT_SECONDS"
DEFAULT_GANG_WAIT_SECONDS: Final = 600.0
# torchrun's variable and default; the fan-out gives every remote rank this port unless the pod's
# environment names another one.
ENV_MASTER_PORT: Final = "MASTER_PORT"
DEFAULT_MASTER_PORT: Final = 29500
# The rank that submits the gang's job; its pod's logs carry the job's output.
SUBMITTING_RANK: Final = contract.GANG_SUBMITTING_RANK

_GANG_VARIABLES: Final = (contract.ENV_GANG_UID, contract.ENV_GANG_SIZE, contract.ENV_GANG_RANK)


@dataclass(frozen=True, slots=True)
class Gang:
    uid: str  # the gang's identity: in the job label in place of the pod UID
    size: int  # pods in the gang = nodes of the JARVICE job
    rank: int  # this pod's rank, 0..size-1
    master_port: int | None = None  # MASTER_PORT from the pod's environment (None: the fan-out's default)
    # When the pod's generation began (Unix seconds; None: not told): a following rank that comes late
    # takes the gang's job that ended before it started, as long as it ended after this.
    since: int | None = None

    @property
    def submits(self) -> bool:
        """Whether this rank submits the job (the others follow it)."""
        return self.rank == SUBMITTING_RANK


def carries_data(gang: Gang | None) -> bool:
    """Whether this runner stages the pod's data (stage-in before the submit, copy-back after): a
    pod on its own, or the rank that submits. The gang's nodes share one vault directory (the job
    label's), so the other ranks' pods, which hold the same volumes, upload and copy back nothing."""
    return gang is None or gang.submits


def _int_value(env: Mapping[str, str], name: str, problems: list[str], *, what: str) -> int | None:
    raw = env.get(name, "").strip()
    try:
        return int(raw)
    except ValueError:
        problems.append(f"{name} must be {what}, got {env.get(name)!r}")
        return None


def parse_gang(env: Mapping[str, str], *, nodes: int | None) -> tuple[Gang | None, list[str]]:
    """The gang this pod belongs to (None: not a gang pod) and every problem found.

    `nodes` is JARVICE_NODES when set: a gang's job has exactly one node per pod, so another value
    is a conflict, not an override.
    """
    present = [name for name in _GANG_VARIABLES if env.get(name, "").strip()]
    if not present:
        return None, []
    problems: list[str] = []
    missing = [name for name in _GANG_VARIABLES if name not in present]
    if missing:
        problems.append(
            f"a gang pod needs all of {', '.join(_GANG_VARIABLES)} (the nimbix-burst webhook sets them together);"
            f" missing {', '.join(missing)}"
        )
        return None, problems
    uid = env[contract.ENV_GANG_UID].strip()
    if not contract.is_uid(uid):
        problems.append(f"{contract.ENV_GANG_UID} must be a lowercase UUID (the gang's identity), got {uid!r}")
    size = _int_value(env, contract.ENV_GANG_SIZE, problems, what="the number of pods in the gang (>= 1)")
    rank = _int_value(env, contract.ENV_GANG_RANK, problems, what="this pod's rank in the gang (0..size-1)")
    if size is not None and size < 1:
        problems.append(f"{contract.ENV_GANG_SIZE} must be >= 1, got {size}")
    elif size is not None and rank is not None and not 0 <= rank < size:
        problems.append(f"{contract.ENV_GANG_RANK} must be within 0..{size - 1} (the gang has {size} pods), got {rank}")
    if size is not None and nodes is not None and nodes != size:
        problems.append(
            f"JARVICE_NODES={nodes} conflicts with {contract.ENV_GANG_SIZE}={size}: a gang's job has one node per"
            " pod; remove JARVICE_NODES"
        )
    master_port = parse_master_port(env.get(ENV_MASTER_PORT), problems)
    since = None
    if env.get(contract.ENV_GANG_SINCE, "").strip():
        since = _int_value(env, contract.ENV_GANG_SINCE, problems, what="Unix seconds (the webhook sets it)")
    if problems or size is None or rank is None:
        return None, problems
    return Gang(uid=uid, size=size, rank=rank, master_port=master_port, since=since), []


def parse_master_port(raw: str | None, problems: list[str]) -> int | None:
    """MASTER_PORT as a TCP port (None when unset or blank)."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        problems.append(f"{ENV_MASTER_PORT} must be a TCP port (1..65535), got {raw!r}")
        return None
    return int(text)


def build_gang_command(shell_command: str, gang: Gang) -> str:
    """The command the gang's job runs: the pod's MASTER_PORT, when it sets one, goes first, so
    every remote rank uses it over the fan-out's default (the pod's other variables stay here)."""
    if gang.master_port is None:
        return shell_command
    return f"export {ENV_MASTER_PORT}={shlex.quote(str(gang.master_port))}; {shell_command}"


def follower_since(gang: Gang, *, now: int) -> int:
    """From when a following rank takes a finished job of the label (see select_gang_jobs): when its
    generation began, if the webhook said so and that is earlier (the rank came late: rank 0's job may
    have run and ended before this runner started), else when this runner started."""
    return now if gang.since is None else min(now, gang.since)


def select_gang_jobs(jobs: Iterable[JobEntry], *, started_at: int) -> tuple[JobEntry, ...]:
    """The label's jobs a following rank may take: every live one, and the finished ones that
    ended at or after `started_at` (Unix seconds: follower_since).

    A finished job that ended earlier belongs to an earlier run: each generation of a gang has a
    label of its own (webhook.gangs), but a generation's identity may be used again once all of its
    pods are gone, and following such a job would report an old result while rank 0 submits the new
    job. The generation's own job may have ended before this rank started (its pod came late); the
    webhook says when the generation began (Gang.since), so that job is taken. A job that ends so fast
    that it is over before the generation's first pod was seen looks like an earlier run's; the rank
    then waits for the gang's job and says so at the end of the wait.
    """
    return tuple(job for job in jobs if not is_terminal(job.state) or job.end_time >= started_at)
