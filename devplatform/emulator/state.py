"""The emulator's state while it runs, shared by the JARVICE API, the fault injection and the
/_emulator/ controls: its jobs (and their numbers), the fault plan, the request statistics and the
random source."""

import asyncio
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from devplatform.emulator import jobs
from devplatform.emulator.config import EmulatorConfig
from devplatform.emulator.faults import Faults
from devplatform.emulator.numbering import NEXT_NUMBER_FILE, first_unused_number, parse_recorded_number

REDACTED: Final = "***"


@dataclass
class Stats:
    requests: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    submit_rejected: list[dict[str, Any]] = field(default_factory=list)


class JobNumbers:
    """Hands out job numbers and their fresh directories under ``workdir`` (numbering.py says why
    they never repeat over it)."""

    def __init__(self, workdir: Path, *, first: int) -> None:
        self.workdir = workdir
        self._record = workdir / NEXT_NUMBER_FILE
        try:
            recorded = parse_recorded_number(self._record.read_text())
        except FileNotFoundError:
            recorded = None
        existing = (entry.name for entry in workdir.iterdir() if entry.is_dir())
        self._next = first_unused_number(first, recorded=recorded, existing=existing)

    @property
    def next_number(self) -> int:
        return self._next

    def allocate(self) -> tuple[int, Path]:
        """A number never handed out over this directory, and its new, empty job directory."""
        while True:
            number = self._next
            self._next += 1
            directory = self.workdir / str(number)
            try:
                directory.mkdir()
            except FileExistsError:
                continue  # made by something this emulator does not know of: never share it
            self._write_record()
            return number, directory

    def _write_record(self) -> None:
        partial = self._record.with_name(NEXT_NUMBER_FILE + ".partial")
        partial.write_text(f"{self._next}\n")
        partial.replace(self._record)


class EmulatorState:
    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.faults = Faults()
        self.stats = Stats()
        self.jobs: dict[int, jobs.Job] = {}
        self.rng = random.Random(config.seed)
        self.background: set[asyncio.Task[None]] = set()
        self._owned_workdir = config.workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="jarvice-emulator-")) if config.workdir is None else config.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Never a number (or job directory) an earlier emulator over this workdir handed out.
        self.numbers = JobNumbers(self.workdir, first=config.first_job_number)

    def has_room(self, job: jobs.Job) -> bool:
        """Whether the job's machine can start it now (the machine capacity, `jobs.has_room`)."""
        return jobs.has_room(job, self.jobs.values(), self.config.machine_capacity)

    def spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    async def close(self) -> None:
        """Kill every job's process group and wait for the job tasks; remove an owned workdir."""
        for job in self.jobs.values():
            if not job.terminal:
                jobs.terminate(job)
        tasks = [t for t in self.background if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._owned_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


STATE: Final = web.AppKey("state", EmulatorState)


def redact_submission(body: Any) -> Any:
    """A submit body as the controls show it: every `apikey` replaced."""
    if isinstance(body, dict):
        return {k: (REDACTED if k == "apikey" else redact_submission(v)) for k, v in body.items()}
    if isinstance(body, list):
        return [redact_submission(v) for v in body]
    return body
