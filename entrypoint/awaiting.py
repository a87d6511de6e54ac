"""A gang's following rank waiting for the job rank 0 submits: the pause between looks at the
gang's label, and the end of the wait. The remote run's shell for the "awaiting" phase
(`entrypoint.runstate` decides what a listing means)."""

import logging
from typing import Any

from entrypoint import runsteps
from entrypoint.gang import ENV_GANG_WAIT_SECONDS
from entrypoint.progress import ShellPart

log = logging.getLogger(__name__)


class GangWaiter(ShellPart):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.since: float | None = None  # the first look (monotonic clock)

    def await_job(self, action: runsteps.AwaitGangJob) -> runsteps.GangWaitClosed | None:
        """Pause before the next look; the wait's end once the window has passed."""
        now = self.deps.clock()
        if self.since is None:
            self.since = now
            gang = self.plan.gang
            assert gang is not None
            log.info(
                "waiting for rank 0 to submit the gang's job",
                extra={"job_label": self.label, "rank": gang.rank, "size": gang.size},
            )
            self.say(f"rank {gang.rank} of {gang.size} waits for the gang's JARVICE job (label {self.label})")
        waited = now - self.since
        if waited < self.tuning.gang_wait_seconds:
            self.deps.sleep(min(self.tuning.poll_seconds, self.tuning.gang_wait_seconds - waited))
            return None
        earlier = "; the label's finished jobs ended before this rank started (an earlier run's)"
        log.error(
            "no job of the gang's label appeared; rank 0's pod submits it (see its logs)",
            extra={
                "job_label": self.label,
                "waited_seconds": round(waited, 1),
                "jobs": list(action.earlier_jobs),
                "variable": ENV_GANG_WAIT_SECONDS,
                "reason": "no job carries the label" + (earlier if action.earlier_jobs else ""),
            },
        )
        self.say(f"no job of the gang's label appeared in {round(waited)} s; giving up")
        return runsteps.GangWaitClosed(waited_seconds=waited, earlier_jobs=action.earlier_jobs)
