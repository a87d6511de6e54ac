"""`/jarvice/signal` in the emulator: what a signal does to a running job, and doing it.

JARVICE (reference §4, §12): `/jarvice/signal?signal=N` (default 20, SIGTSTP) sends an integer signal to
the job's process; 20 suspends the job (it keeps its machine and keeps costing) and 18 (SIGCONT) resumes
it. An image may set `JARVICE_SIGNAL_OVERRIDE` to a script that handles API signals itself: JARVICE then
runs that script in the job with the signal number instead, with no time limit.

The emulator has no images: an application's image environment is `EmulatorConfig.image_environment`
(the stand-in for the image's `ENV` lines), which every job of the application also gets in its own
environment, as a container would. `plan_delivery` is pure; `deliver` does it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from devplatform.emulator import jobs

SIGNAL_OVERRIDE_VARIABLE: Final = "JARVICE_SIGNAL_OVERRIDE"
DEFAULT_SIGNAL: Final = 20  # SIGTSTP on Linux/x86, the number JARVICE documents
RESUME_SIGNAL: Final = 18  # SIGCONT
SUSPEND_SIGNAL: Final = DEFAULT_SIGNAL
VALID_SIGNALS: Final = frozenset(int(s) for s in signal.valid_signals())

Action = Literal["override", "suspend", "resume", "send"]


class SignalNotValid(ValueError):
    """The `signal` parameter is not a signal number; the message says what to give."""


@dataclass(frozen=True, slots=True)
class Delivery:
    action: Action
    signal: int  # the number asked for (the override's argument)
    sent: int  # the signal sent to the job's process group (override: none, 0)
    override: str = ""  # the override script, for "override"


def parse_signal(raw: str | None) -> int:
    """The `signal` parameter: absent means 20; else a whole number naming a signal of this system."""
    if raw is None or raw == "":
        return DEFAULT_SIGNAL
    try:
        number = int(raw)
    except ValueError:
        raise SignalNotValid(f"signal {raw!r} is not a whole number (e.g. 20 to suspend, 18 to resume)") from None
    if number not in VALID_SIGNALS:
        raise SignalNotValid(f"signal {number} is not a signal number of this system")
    return number


def plan_delivery(number: int, environment: Mapping[str, str]) -> Delivery:
    """What signal `number` does to a job whose image environment is `environment`."""
    override = environment.get(SIGNAL_OVERRIDE_VARIABLE, "").strip()
    if override:
        return Delivery("override", number, 0, override)
    if number == SUSPEND_SIGNAL:
        # SIGSTOP, not SIGTSTP itself: a program may ignore SIGTSTP, and JARVICE says the job suspends.
        return Delivery("suspend", number, int(signal.SIGSTOP))
    if number == RESUME_SIGNAL:
        return Delivery("resume", number, int(signal.SIGCONT))
    return Delivery("send", number, number)


def override_path(override: str, beside: Path | None) -> str:
    """Where the override script is on this host: a file of the same name next to the application's
    AppDef (how images/base ships its scripts, as for command paths), else the path itself."""
    if beside is not None:
        candidate = beside / Path(override).name
        if candidate.is_file():
            return str(candidate)
    return override


class NotRunning(Exception):
    """The job has no running process to signal."""


class OverrideFailed(Exception):
    """The override script could not be started; the message says why."""


async def deliver(job: jobs.Job, delivery: Delivery, *, beside: Path | None) -> int:
    """Does `delivery` to the running `job`; returns the pid JARVICE's answer names (the override's
    process, or the job's). The override runs in the job's directory (its HOME) and environment (and, for
    a job with a vault, in its private root), its output appended to the job's; it is killed when the
    job ends, as a container's processes are."""
    process = job.process
    if job.status != jobs.RUNNING or process is None or process.returncode is not None:
        raise NotRunning
    if delivery.action != "override":
        try:
            os.killpg(process.pid, delivery.sent)
        except ProcessLookupError:
            raise NotRunning from None
        return process.pid
    argv = [override_path(delivery.override, beside), str(delivery.signal)]
    if job.vault is not None:
        # A job with a vault runs in a private root (vault.py): the override runs in it too, where it
        # sees what the job wrote.
        argv = ["nsenter", "--target", str(process.pid), "--mount", "--root", "--wd", "--", *argv]
    with job.output_path.open("ab") as out:
        try:
            helper = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                cwd=job.workdir,
                env={**jobs.job_environment(), "HOME": str(job.workdir), **job.environment},
                start_new_session=True,
            )
        except OSError as exc:
            raise OverrideFailed(f"{SIGNAL_OVERRIDE_VARIABLE} {argv[0]} cannot run: {exc.strerror or exc}") from None
    job.helpers.append(helper)
    return helper.pid
