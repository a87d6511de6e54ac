"""What the runner has done, kept where a restarted runner finds it: the attempt, the job number,
the count of output lines printed, and at the exit whether the result was reported."""

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Final

from entrypoint import output, restart, runsteps
from entrypoint.plan import RemotePlan
from entrypoint.ports import RemoteDeps

log = logging.getLogger(__name__)

# While a long output is replayed, the printed count is saved at most this often (each save is an
# fsync); a runner killed in between prints those lines again after its restart, never loses them.
PROGRESS_SAVE_SECONDS: Final = 1.0


class Progress:
    """The restart record and the output stream's position; one writer, the remote run."""

    def __init__(self, deps: RemoteDeps, *, record: restart.RunnerState) -> None:
        self.deps = deps
        self.record = record
        self.stream = output.StreamState(resumed=record.printed_lines)
        self.saved_at: float | None = None

    def save_job(self, number: int | None) -> None:
        """The job followed (None: saved before the submit, the successor resolves it by the label)."""
        self._save({"job_number": number})

    def save_exit(self, *, reported: bool, exit_code: int) -> None:
        self._save({"reported": reported, "exit_code": exit_code})

    def _save(self, changes: dict[str, object]) -> None:
        self.record = dataclasses.replace(self.record, **changes)  # type: ignore[arg-type]
        try:
            self.deps.journal.save(self.record)
        except OSError as exc:
            log.error("cannot save the restart state", extra={"error": str(exc), "job": self.record.job_number})
        self.saved_at = self.deps.clock()

    def emit(self, lines: Sequence[str], state: output.StreamState, *, force_save: bool = True) -> None:
        """Print lines, then record that they were printed."""
        if lines:
            self.deps.out.write(lines)
        self.stream = state
        if state.emitted == self.record.printed_lines:
            return
        now = self.deps.clock()
        if force_save or self.saved_at is None or now - self.saved_at >= PROGRESS_SAVE_SECONDS:
            self._save({"printed_lines": state.emitted})


class ShellPart:
    """What every part of the remote run's shell (submitting, following, stopping) works with."""

    def __init__(
        self,
        plan: RemotePlan,
        deps: RemoteDeps,
        *,
        label: str,
        progress: Progress,
        note: Callable[[runsteps.Event], None],
    ) -> None:
        self.plan = plan
        self.tuning = plan.tuning
        self.deps = deps
        self.backend = deps.backend
        self.label = label
        self.progress = progress
        self.note = note  # tells the machine a fact seen in the middle of an action

    def say(self, text: str) -> None:
        """A line on stdout for people reading a gang's following rank's logs (the job's output is
        on rank 0's): not application output, so not counted in the restart state."""
        self.deps.out.write([f"nimbix-burst: {text}\n"])
