"""Exit statuses: terminal job state / return code / signal in, a process exit status out. Pure.

The application's own codes pass through (1..125 by convention, 128+N for signal N). The runner's
own failures use the sysexits-style block 69..80, which ordinary programs rarely return, so a pod
status tells "the app failed" apart from "the runner could not do its job".
"""

from dataclasses import dataclass
from typing import Final

from jarvice import model

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1  # COMPLETED WITH ERROR without a usable job_exitcode
EXIT_REMOTE_UNAVAILABLE: Final = 69  # JARVICE unreachable for longer than the outage budget (EX_UNAVAILABLE)
EXIT_INTERNAL: Final = 70  # a bug in the runner (EX_SOFTWARE)
EXIT_NO_GANG_JOB: Final = 71  # a gang's following rank waited and no job of the gang's label appeared
EXIT_STAGE_LINK: Final = 72  # the job could not make a staged path at its absolute path (EX_OSFILE; docs/data.md)
EXIT_OVER_BUDGET: Final = 73  # the machine holds more GPUs than the namespace's budget counted (nothing submitted)
EXIT_WALLTIME: Final = 74  # JARVICE stopped the job at its walltime (JARVICE_WALLTIME, else 24:00:00)
EXIT_TRANSFER: Final = 75  # a vault transfer failed; nothing lost, the log says where the data is (EX_TEMPFAIL)
EXIT_PROTOCOL: Final = 76  # JARVICE answered something unexpected, or rejected a request (EX_PROTOCOL)
EXIT_CREDENTIALS: Final = 77  # JARVICE rejected the username/API key (EX_NOPERM)
EXIT_CONFIG: Final = 78  # invalid settings, incl. an APP_NAME JARVICE does not know (EX_CONFIG)
EXIT_NO_MACHINE: Final = 79  # no machine in /jarvice/machines fits NUM_GPUS/NUM_CPUS/JARVICE_NODES
EXIT_CANCELED: Final = 80  # job ended CANCELED with no non-zero job_exitcode
# The job ended COMPLETED after a move home asked it for a checkpoint, and the checkpoint was copied
# back: the Job's podFailurePolicy ignores this code (webhook/job_policy.py) and creates the replacement.
EXIT_MOVED_HOME: Final = 81
EXIT_COMMAND_NOT_EXECUTABLE: Final = 126  # as the shell reports it
EXIT_COMMAND_NOT_FOUND: Final = 127  # as the shell reports it
SIGNAL_BASE: Final = 128
EXIT_TERMINATED: Final = SIGNAL_BASE + 15  # SIGTERM: remote TERMINATED, or the runner was told to stop
MAX_EXIT: Final = 255


@dataclass(frozen=True, slots=True)
class ExitDecision:
    code: int
    reason: str
    warning: str | None = None


def from_signal(signum: int) -> int:
    return min(SIGNAL_BASE + abs(signum), MAX_EXIT)


def from_returncode(returncode: int) -> int:
    """subprocess returncode (negative = killed by signal -N) to an exit status."""
    if returncode < 0:
        return from_signal(-returncode)
    return _not_reserved(returncode) if returncode <= MAX_EXIT else EXIT_FAILURE


def _not_reserved(code: int) -> int:
    """A program's own EXIT_MOVED_HOME is reported as a failure: its Job would ignore it and run the pod
    again forever."""
    return EXIT_FAILURE if code == EXIT_MOVED_HOME else code


def normalize_job_exitcode(code: int) -> int:
    """JARVICE job_exitcode to an exit status: negative n (a signal, e.g. -15) => 128+|n|."""
    if code < 0:
        return from_signal(code)
    # Above 255 cannot be a process status; do not let it wrap around to 0 (success).
    return _not_reserved(code) if code <= MAX_EXIT else EXIT_FAILURE


def from_job(state: str, exitcode: int | None, *, walltime_exceeded: bool = False) -> ExitDecision:
    """The runner's exit status for a finished remote job (`walltime_exceeded`: stopped at its wall time)."""
    status = state.strip().upper()
    if status == model.STATUS_COMPLETED:
        if exitcode:
            return ExitDecision(normalize_job_exitcode(exitcode), f"COMPLETED with job_exitcode {exitcode}")
        return ExitDecision(EXIT_OK, "COMPLETED")
    if status == model.STATUS_COMPLETED_WITH_ERROR:
        if exitcode:
            return ExitDecision(normalize_job_exitcode(exitcode), f"COMPLETED WITH ERROR, job_exitcode {exitcode}")
        return ExitDecision(EXIT_FAILURE, f"COMPLETED WITH ERROR without a non-zero job_exitcode ({exitcode})")
    if status == model.STATUS_TERMINATED:
        if walltime_exceeded:
            return ExitDecision(EXIT_WALLTIME, "TERMINATED at its walltime")
        return ExitDecision(EXIT_TERMINATED, "TERMINATED")
    if status == model.STATUS_CANCELED:
        if exitcode:
            return ExitDecision(
                normalize_job_exitcode(exitcode),
                f"CANCELED with job_exitcode {exitcode} (fast jobs can end CANCELED)",
            )
        return ExitDecision(
            EXIT_CANCELED,
            f"CANCELED with job_exitcode {exitcode}",
            warning=(
                "CANCELED with no non-zero exit code is ambiguous: JARVICE also reports very short "
                "jobs as CANCELED; treating it as a failure"
            ),
        )
    return ExitDecision(EXIT_PROTOCOL, f"job ended in an unknown state {state!r}")
