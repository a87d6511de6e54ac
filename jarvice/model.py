"""Plain data about JARVICE shared by the runner and the controller: wire shapes (TypedDict) and values.

No I/O here. The JARVICE adapter (`jarvice.client`) converts untyped responses into these
values; everything else works on them.
"""

from dataclasses import dataclass
from typing import Final, Literal, NotRequired, TypedDict

# Job status strings, exactly as JARVICE spells them (reference §6).
STATUS_SUBMITTED: Final = "SUBMITTED"
STATUS_SEQUENTIALLY_QUEUED: Final = "SEQUENTIALLY QUEUED"
# "Running", despite the name; /jarvice/shutdown is accepted only in this state.
STATUS_RUNNING: Final = "PROCESSING STARTING"
STATUS_COMPLETED: Final = "COMPLETED"
STATUS_COMPLETED_WITH_ERROR: Final = "COMPLETED WITH ERROR"
STATUS_TERMINATED: Final = "TERMINATED"
STATUS_CANCELED: Final = "CANCELED"

# Every Nimbix client treats exactly these four as terminal (reference §6: J5, J6, J9).
TERMINAL_STATUSES: Final = frozenset(
    {STATUS_COMPLETED, STATUS_COMPLETED_WITH_ERROR, STATUS_TERMINATED, STATUS_CANCELED}
)


# What JARVICE may answer for a job terminated while still queued (reference §6): TERMINATED, or
# CANCELED ("ended without a normal run"). Either, with no start time, ended without ever running.
ENDED_UNSTARTED_STATUSES: Final = frozenset({STATUS_TERMINATED, STATUS_CANCELED})


def ended_without_running(status: str, start_time: int) -> bool:
    """True for a job that ended before it ever started (terminated while queued): it cost nothing."""
    return status.strip().upper() in ENDED_UNSTARTED_STATUSES and not start_time


# A job number in text (an annotation, a ledger entry): ASCII digits, no more than a 64-bit number holds.
MAX_JOB_NUMBER_DIGITS: Final = 18


def parse_job_number(text: object) -> int | None:
    """The job number `text` writes (surrounding spaces allowed), or None. Only ASCII digits: str.isdigit
    also accepts digits int() refuses (a superscript), and text a pod carries must never raise."""
    digits = text.strip() if isinstance(text, str) else ""
    ok = digits.isascii() and digits.isdigit() and len(digits) <= MAX_JOB_NUMBER_DIGITS
    return int(digits) if ok else None


def is_terminal(status: str) -> bool:
    """True for the four terminal statuses (compared case-insensitively, as jarviceclient does)."""
    return status.strip().upper() in TERMINAL_STATUSES


@dataclass(frozen=True, slots=True)
class Machine:
    """One entry of /jarvice/machines, reduced to what machine selection needs."""

    name: str
    cores: int
    gpus: int
    ram_gb: int = 0
    # mc_price per node-hour; None when the catalogue gives none: unknown, never free (a price of 0
    # would make every cost cap pass).
    price: float | None = None
    arch: str = ""
    scale_min: int = 1
    scale_max: int = 1
    description: str = ""
    # mc_slave_gpus: the GPUs of each node after the first (the master) in a multi-node job; None
    # when the catalogue does not say, then taken to be `gpus`.
    slave_gpus: int | None = None

    def gpus_on(self, nodes: int) -> int:
        """The GPUs a job of `nodes` nodes holds: the master's, plus each further node's."""
        further = self.gpus if self.slave_gpus is None else self.slave_gpus
        return self.gpus + further * max(0, nodes - 1)

    def fewest_gpus_per_node(self, nodes: int) -> int:
        """The GPUs of the node with the fewest in a job of `nodes` nodes."""
        if nodes <= 1 or self.slave_gpus is None:
            return self.gpus
        return min(self.gpus, self.slave_gpus)

    def price_for(self, nodes: int) -> float | None:
        """What a job of `nodes` nodes costs an hour (mc_price x nodes); None when the price is unknown."""
        return None if self.price is None else self.price * nodes


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """The answer to /jarvice/submit: the server-generated job name and number."""

    number: int
    name: str


@dataclass(frozen=True, slots=True)
class SignalSent:
    """The answer to /jarvice/signal: the signal number and the process JARVICE gave it to."""

    signal: int
    pid: int | None


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One job from /jarvice/status. `state` is normalised to upper case."""

    number: int
    name: str
    state: str
    substatus: int = 0
    submit_time: int = 0
    start_time: int = 0
    end_time: int = 0

    @property
    def terminal(self) -> bool:
        return is_terminal(self.state)


@dataclass(frozen=True, slots=True)
class JobEntry:
    """One job from /jarvice/jobs (a superset of the status entry)."""

    number: int
    name: str
    state: str
    label: str | None
    exitcode: int | None
    substatus_text: str = ""  # why the job is in its state (e.g. why it was stopped); often empty
    # From job_api_submission (the submit body JARVICE echoes): only the machine and the walltime
    # limit are read, never the rest.
    machine: str = ""  # "" when JARVICE did not say
    nodes: int = 1
    start_time: int = 0  # Unix seconds, 0 while not started
    end_time: int = 0  # Unix seconds, 0 while not ended
    walltime_limit: int | None = None  # application.walltime in seconds; None when JARVICE did not echo one
    job_price: float | None = None  # JARVICE's job_price (what the job cost); None when not reported


# --- wire shapes -------------------------------------------------------------------------------


class ApplicationBody(TypedDict):
    command: str
    parameters: dict[str, str]
    geometry: NotRequired[str]
    walltime: NotRequired[str]


class MachineBody(TypedDict):
    type: str
    nodes: int


class VaultBody(TypedDict):
    name: str
    readonly: bool
    force: bool


class UserBody(TypedDict):
    username: str
    apikey: str


class SubmitBody(TypedDict):
    """POST /jarvice/submit without the `user` block: the adapter adds credentials at send time,
    so a body can be logged or compared without ever holding the API key."""

    app: str
    staging: bool
    checkedout: bool
    application: ApplicationBody
    machine: MachineBody
    job_label: str
    vault: NotRequired[VaultBody]


Mode = Literal["local", "remote"]
