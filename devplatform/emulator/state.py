"""The emulator's state while it runs, shared by the JARVICE API, the fault injection and the
/_emulator/ controls: its jobs, the fault plan, the request statistics and the random source."""

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
from devplatform.emulator.numbering import JobNumbers

REDACTED: Final = "***"


@dataclass
class Stats:
    requests: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    submit_rejected: list[dict[str, Any]] = field(default_factory=list)


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
