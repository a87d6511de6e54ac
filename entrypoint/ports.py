"""What the remote run talks to: JARVICE, stdout, the restart state, the termination message.

Protocols and the bundle of them (`RemoteDeps`), so tests drive the run with a fake backend and a
fake clock; `entrypoint.__main__` builds the real ones.
"""

import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from entrypoint import restart
from entrypoint.signals import CancelToken
from entrypoint.termination import KeptInVault
from jarvice.model import JobEntry, JobStatus, Machine, SignalSent, SubmitBody, SubmitResult
from jarvice.redaction import Secret


class JobBackend(Protocol):
    """What the runner needs from JARVICE (`jarvice.client.JarviceClient` implements it)."""

    def fetch_machines(self) -> Mapping[str, Machine]: ...

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> Mapping[int, JobEntry]: ...

    def submit(self, body: SubmitBody) -> SubmitResult: ...

    def fetch_status(self, number: int, *, deadline: float | None = None) -> JobStatus: ...

    def fetch_tail(self, number: int, *, lines: int) -> str: ...

    def open_output(
        self, number: int, *, endpoint: Literal["tail", "output"], deadline: float | None = None
    ) -> AbstractContextManager[Iterator[str]]: ...

    def shutdown(self, number: int, *, deadline: float | None = None) -> None: ...

    def terminate(self, number: int, *, deadline: float | None = None) -> None: ...

    def signal(self, number: int, signal: int, *, deadline: float | None = None) -> SignalSent: ...


def no_move_mark() -> int | None:
    """Without the pod's annotations file (not through the gateway): no move home is ever asked."""
    return None


class OutputSink(Protocol):
    def write(self, lines: Sequence[str]) -> None: ...


class Journal(Protocol):
    """Where the restart state goes (`entrypoint.statefile.StateFile` implements it)."""

    def save(self, state: restart.RunnerState) -> None: ...


class NoJournal:
    """Without NIMBIX_BURST_STATE_DIR: nothing is kept, restarts re-attach by label only."""

    def save(self, state: restart.RunnerState) -> None:
        pass


class TerminationLog(Protocol):
    """Where the termination message goes (best effort: a failure is the writer's to log)."""

    def write(self, message: str) -> None: ...


class NoTerminationLog:
    def write(self, message: str) -> None:
        pass


class EarlyExit(NamedTuple):
    """The run ends before anything is submitted (a failed stage-in, an earlier copy-back finished)."""

    code: int
    reported: bool  # False: a restarted runner goes on with the same attempt (resumes the upload)


class DataStage(Protocol):
    """The pod's data carried to the job and back (`entrypoint.vault_staging.VaultStaging`)."""

    def prepare(self) -> EarlyExit | None: ...

    def command(self, shell_command: str) -> str:
        """The command to submit: where the data is was settled by prepare()."""
        ...

    def finish(self, *, job: int | None, job_may_run: bool, exit_code: int, stopping_since: float | None) -> int: ...

    def kept_in_vault(self) -> KeptInVault | None:
        """After finish(): the outputs its copy-back did not place in the pod (None: none)."""
        ...


@dataclass(frozen=True, slots=True)
class RemoteDeps:
    backend: JobBackend
    out: OutputSink
    sleep: Callable[[float], None]
    clock: Callable[[], float]
    rng: random.Random
    cancel: CancelToken
    journal: Journal = field(default_factory=NoJournal)
    termination: TerminationLog = field(default_factory=NoTerminationLog)
    data: DataStage | None = None  # None: nothing staged (no NIMBIX_BURST_STAGE_IN/OUT)
    # Unix time: when a gang's following rank started, to compare with JARVICE's job_end_time.
    wall_clock: Callable[[], float] = time.time
    # The JARVICE job the controller's move-home mark names now (entrypoint.homeward), read each poll.
    move_mark: Callable[[], int | None] = no_move_mark
    # The pod names a checkpoint directory: its job command records the job's process group for a move.
    checkpoints: bool = False
    # The key as it is now (None: the settings' own): a projected token is refreshed while a job runs,
    # and the copy-back after it logs in to the vault (through the gateway) with the current one.
    apikey: Callable[[], Secret] | None = None
