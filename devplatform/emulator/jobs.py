"""Emulated JARVICE jobs: each one really runs `bash -c <parameters.command>` in a subprocess.

Lifecycle: SUBMITTED for `queue_seconds`, then PROCESSING STARTING (platform `INIT[1]:` preamble
lines, the 79-`#` separator, then the command's stdout+stderr appended to one output file), then
COMPLETED / COMPLETED WITH ERROR with the real exit status. terminate (any live state) kills the
process group at once; shutdown (PROCESSING STARTING only) sends SIGTERM and, after
`shutdown_kill_seconds`, SIGKILL; both end TERMINATED. With `cancel_fast_seconds`, jobs that end
faster than that show CANCELED (JARVICE's known issue, reference §7). A job terminated while still
queued ends `queued_end_status` (TERMINATED by default, or CANCELED), never having started.

Machine capacity (`machine_capacity`, nodes per machine type; absent means unlimited): a job whose
queue time is over stays SUBMITTED while its machine's running jobs hold the capacity, with
`job_substatus_text` saying so (WAITING_FOR_CAPACITY_TEXT), and starts once its nodes fit (a job
ending or a config change frees them), lowest job number first.

Walltime (`application.walltime`): a job still running that long after it started (PROCESSING
STARTING) is killed like a terminate and ends TERMINATED with `job_substatus_text` "Job exceeded its
walltime limit". How JARVICE ends such a job is not documented: this is the emulator's assumption.
"""

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from devplatform.emulator import vault as vaults

SUBMITTED: Final = "SUBMITTED"
RUNNING: Final = "PROCESSING STARTING"
COMPLETED: Final = "COMPLETED"
COMPLETED_WITH_ERROR: Final = "COMPLETED WITH ERROR"
TERMINATED: Final = "TERMINATED"
CANCELED: Final = "CANCELED"
TERMINAL: Final = frozenset({COMPLETED, COMPLETED_WITH_ERROR, TERMINATED, CANCELED})

SEPARATOR: Final = b"#" * 79 + b"\n"
PREAMBLE: Final = (
    b"INIT[1]: Initializing networking...\n",
    b"INIT[1]: Platform version 3.21.9-emulator\n",
    b"INIT[1]: Mounting vault...\n",
    b"INIT[1]: Starting application...\n",
)
# Environment variables never passed to jobs (they could carry a runner's credentials).
_SCRUBBED_PREFIXES: Final = ("JARVICE_",)
_SCRUBBED_NAMES: Final = frozenset({"APIKEY", "USERNAME"})
# What a job stopped at its walltime says in job_substatus_text (the emulator's choice).
WALLTIME_EXCEEDED_TEXT: Final = "Job exceeded its walltime limit"
# What a job held back by its machine's capacity says in job_substatus_text (the emulator's choice).
WAITING_FOR_CAPACITY_TEXT: Final = "Waiting for capacity on machine {machine}"
# How often a job held back by capacity looks again (capacity frees when a job ends or the config changes).
CAPACITY_POLL_SECONDS: Final = 0.2


@dataclass
class Timing:
    queue_seconds: float = 2.0
    init_seconds: float = 0.5
    shutdown_kill_seconds: float | None = 10.0
    cancel_fast_seconds: float = 0.0
    # How a job terminated while still queued ends: TERMINATED, or CANCELED (JARVICE may answer
    # either for a job that never ran, reference §6), so that clients can be tried against both.
    queued_end_status: str = "TERMINATED"


@dataclass
class Job:
    number: int
    name: str
    owner: str
    app: str
    command_key: str
    command: str
    label: str | None
    machine: str
    nodes: int
    submission: dict[str, Any]
    workdir: Path
    node_names: tuple[str, ...] = ()  # the job's nodes (emulator/nodes.py), master first
    environment: dict[str, str] = field(default_factory=dict)  # on top of the emulator's own
    status: str = SUBMITTED
    substatus: int = 0
    submit_time: int = field(default_factory=lambda: int(time.time()))
    start_time: int = 0
    end_time: int = 0
    exitcode: int = 0
    walltime: str | None = None
    walltime_limit: int | None = None  # application.walltime in seconds; None: no limit
    substatus_text: str = ""
    walltime_timer: asyncio.TimerHandle | None = None
    stop_reason: str | None = None
    process: asyncio.subprocess.Process | None = None
    task: "asyncio.Task[None] | None" = None
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    started_monotonic: float = 0.0
    # The job's vault at /data in a private root (see vault.py); None: the command runs on the host.
    vault: vaults.JobVault | None = None
    waits_for_capacity: bool = False  # its queue time is over and its machine is full
    # Signal override scripts started in the job (signalling.py): they end with the job.
    helpers: list[asyncio.subprocess.Process] = field(default_factory=list)
    signals: list[str] = field(default_factory=list)  # what each /jarvice/signal did (signalling.Action)

    @property
    def output_path(self) -> Path:
        return self.workdir / "output.log"

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def read_output(self) -> bytes:
        try:
            return self.output_path.read_bytes()
        except FileNotFoundError:
            return b""

    def status_entry(self) -> dict[str, Any]:
        return {
            "job_name": self.name,
            "job_status": self.status,
            "job_substatus": self.substatus,
            "job_submit_time": self.submit_time,
            "job_start_time": self.start_time,
            "job_end_time": self.end_time,
            "job_application": self.app,
            "job_command": self.command_key,
            "job_walltime": self.walltime,
            "job_project": None,
        }

    def jobs_entry(self) -> dict[str, Any]:
        return {
            **self.status_entry(),
            "job_label": self.label,
            "job_exitcode": self.exitcode,
            # "The original submit JSON": credentials included, as a real server may echo them.
            "job_api_submission": self.submission,
            "job_owner_username": self.owner,
            "job_substatus_text": self.substatus_text,
            # JobEntry fields of Nimbix's OpenAPI description (J4): the machine, its node count, and
            # the nodes (a string there; that JARVICE separates the names with spaces is UNCONFIRMED).
            "job_mc_name": self.machine,
            "job_mc_scale": self.nodes,
            "job_nodes": " ".join(self.node_names),
        }


def last_lines(data: bytes, count: int) -> bytes:
    """The last `count` lines (0 = all); a final line without a newline counts as a line."""
    if count <= 0 or not data:
        return data
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return b"".join(lines[-count:])


# Files are read in blocks of this size: outputs can be hundreds of MB (the runner's memory test).
READ_BLOCK_BYTES: Final = 256 * 1024


def tail_of_file(path: Path, count: int) -> bytes:
    """`last_lines(path's content, count)` for count > 0, reading only the end of the file."""
    try:
        with path.open("rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            data = b""
            position = end
            while position > 0 and data.count(b"\n") <= count:
                step = min(READ_BLOCK_BYTES, position)
                position -= step
                handle.seek(position)
                data = handle.read(step) + data
    except FileNotFoundError:
        return b""
    return last_lines(data, count)


def application_offset(path: Path) -> int:
    """Where the application's output starts (after the separator line); -1 before it is written."""
    try:
        with path.open("rb") as handle:
            head = handle.read(READ_BLOCK_BYTES)
    except FileNotFoundError:
        return -1
    marker = head.find(SEPARATOR)
    return marker + len(SEPARATOR) if marker >= 0 else -1


def job_environment() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_SCRUBBED_PREFIXES) and key not in _SCRUBBED_NAMES
    }


def has_room(job: "Job", others: Iterable["Job"], capacity: Mapping[str, int]) -> bool:
    """Whether `job` may start on its machine: the machine has no capacity set, or its started live
    jobs' nodes plus this job's fit it, and no lower-numbered job of the machine waits before it."""
    limit = capacity.get(job.machine)
    if limit is None:
        return True
    same = [other for other in others if other.machine == job.machine and other.number != job.number]
    held = sum(other.nodes for other in same if other.status == RUNNING)
    waiting_before = any(
        other.status == SUBMITTED and other.waits_for_capacity and other.number < job.number for other in same
    )
    return not waiting_before and held + job.nodes <= limit


def _walltime(seconds: float) -> str:
    total = max(0, int(seconds))
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


def _kill_group(process: asyncio.subprocess.Process, sig: int) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)


async def _sleep_or_stop(job: Job, seconds: float) -> bool:
    """Sleep; True if the job was stopped meanwhile."""
    if seconds > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(job.stop_event.wait(), timeout=seconds)
    return job.stop_reason is not None


def _stopped(job: Job) -> bool:
    # A function, not an inline test: the flag changes across awaits, which narrowing cannot see.
    return job.stop_reason is not None


def _finish(job: Job, status: str, exitcode: int) -> None:
    if job.walltime_timer is not None:
        job.walltime_timer.cancel()
    for helper in job.helpers:  # a container's processes end with it
        if helper.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(helper.pid, signal.SIGKILL)
    if job.vault is not None:
        # An object vault gets the job's writes on a normal end (a shutdown included), never after a
        # terminate or the walltime (reference section 5, vault.objects).
        if status != TERMINATED or job.stop_reason == "shutdown":
            vaults.write_back(job.vault)
        vaults.discard_scratch(job.vault)
    job.status = status
    job.exitcode = exitcode
    job.end_time = int(time.time())
    started = job.start_time or job.end_time
    job.walltime = _walltime(job.end_time - started)


def _stop_at_walltime(job: Job) -> None:
    if not job.terminal:
        job.substatus_text = WALLTIME_EXCEEDED_TEXT
        job.stop_reason = job.stop_reason or "walltime"
        terminate(job)


async def _wait_for_room(job: Job, room: Callable[[Job], bool]) -> bool:
    """Hold the job SUBMITTED until its machine has room; True if it was stopped meanwhile."""
    while not room(job):
        job.waits_for_capacity = True
        job.substatus_text = WAITING_FOR_CAPACITY_TEXT.format(machine=job.machine)
        if await _sleep_or_stop(job, CAPACITY_POLL_SECONDS):
            return True
    if job.waits_for_capacity:
        job.waits_for_capacity = False
        job.substatus_text = ""
    return False


async def run_job(job: Job, timing: Timing, room: Callable[[Job], bool] = lambda _job: True) -> None:
    """The job's whole life; runs as one task per job. `room`: whether its machine can take it now."""
    try:
        if await _sleep_or_stop(job, timing.queue_seconds) or await _wait_for_room(job, room):
            _finish(job, timing.queued_end_status, -15)
            return
        job.status = RUNNING
        job.start_time = int(time.time())
        if job.walltime_limit is not None:
            job.walltime_timer = asyncio.get_running_loop().call_later(job.walltime_limit, _stop_at_walltime, job)
        with job.output_path.open("ab") as out:
            for line in PREAMBLE:
                out.write(line)
                out.flush()
                if await _sleep_or_stop(job, timing.init_seconds / len(PREAMBLE)):
                    break
            out.write(SEPARATOR)
            out.flush()
            if _stopped(job):
                _finish(job, TERMINATED, -15)
                return
            job.started_monotonic = time.monotonic()
            argv = ["bash", "-c", job.command]
            job.process = await asyncio.create_subprocess_exec(
                *(argv if job.vault is None else vaults.wrap_argv(job.vault, argv)),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                cwd=job.workdir,
                # HOME is the job's directory, as a JARVICE job has its user's home: a login shell
                # (`bash -l`, the AppDef's run command) never reads the emulator host's dotfiles.
                env={**job_environment(), "HOME": str(job.workdir), **job.environment},
                start_new_session=True,
            )
        if _stopped(job):  # stopped while the process was being created
            _kill_group(job.process, signal.SIGKILL)
        returncode = await job.process.wait()
        runtime = time.monotonic() - job.started_monotonic
        if _stopped(job):
            _finish(job, TERMINATED, returncode)
        elif timing.cancel_fast_seconds > 0 and runtime < timing.cancel_fast_seconds:
            _finish(job, CANCELED, returncode)
        else:
            _finish(job, COMPLETED if returncode == 0 else COMPLETED_WITH_ERROR, returncode)
    except asyncio.CancelledError:
        if job.process is not None:
            _kill_group(job.process, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(job.process.wait())
        if not job.terminal:
            _finish(job, TERMINATED, -9)
        raise


def terminate(job: Job) -> None:
    """Kill at once, in any live state."""
    job.stop_reason = job.stop_reason or "terminate"
    job.stop_event.set()
    if job.process is not None:
        _kill_group(job.process, signal.SIGKILL)


async def _kill_later(job: Job, seconds: float) -> None:
    await asyncio.sleep(seconds)
    if job.process is not None:
        _kill_group(job.process, signal.SIGKILL)


def shutdown(job: Job, timing: Timing) -> "asyncio.Task[None] | None":
    """Graceful stop (the OS poweroff path): SIGTERM now, SIGKILL after the kill delay."""
    job.stop_reason = job.stop_reason or "shutdown"
    job.stop_event.set()
    if job.process is None:
        return None
    _kill_group(job.process, signal.SIGTERM)
    if timing.shutdown_kill_seconds is None:
        return None
    return asyncio.create_task(_kill_later(job, timing.shutdown_kill_seconds))
