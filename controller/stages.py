"""The stage a burst pod is in, as the controller sees it from outside (pure).

The runner has no Kubernetes API access, by design: it cannot say on its pod what it does. The
controller, which watches the pods and lists their JARVICE jobs every round, derives it:

| What the controller sees | Stage |
|---|---|
| the pod has ended (Succeeded or Failed) | `ended` |
| no job of the pod yet, and the pod stages data in | `staging-in` |
| no job of the pod yet, no data to stage in | `submitting` |
| its latest job submitted or queued, or ended unstarted (the runner moves it to its next machine) | `queued` |
| its latest job running | `running` |
| its latest job ended, the pod still running, and it stages data out | `copying-back` |
| its latest job ended, the pod still running, nothing to copy back | `finishing` |

It is a view at the pace of the controller's rounds: a stage shorter than a round may never show,
and a runner restarted in its pod after its job ended (a retry of the same pod, or a copy-back
finished by the next runner) shows `copying-back` until its next job is listed. A gang's pods share
one job under the gang's identity: its submitting rank (rank 0) shows that job's stage, the ranks
that follow it get none. A pod whose
recorded jobs are not listed this round keeps the stage it has (a stage is never guessed back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from jarvice.model import STATUS_RUNNING, ended_without_running, is_terminal

PodStage = Literal["staging-in", "submitting", "queued", "running", "copying-back", "finishing", "ended"]
STAGES: Final[tuple[PodStage, ...]] = (
    "staging-in",
    "submitting",
    "queued",
    "running",
    "copying-back",
    "finishing",
    "ended",
)

REASON_STAGING_IN: Final = "NimbixStagingIn"
REASON_COPYING_BACK: Final = "NimbixCopyingBack"


@dataclass(frozen=True, slots=True)
class StagedPod:
    """What of a burst pod its stage is derived from."""

    terminal: bool  # phase Succeeded or Failed
    stages_in: bool  # a burst container has NIMBIX_BURST_STAGE_IN
    stages_out: bool  # a burst container has NIMBIX_BURST_STAGE_OUT
    gang: bool  # a rank that follows its gang's job (rank 0 submits it and carries its stage)
    recorded_jobs: bool  # the controller's ledger names a job of it


@dataclass(frozen=True, slots=True)
class JobSeen:
    """The pod's latest JARVICE job, as listed."""

    number: int
    state: str  # job_status, upper case
    started: bool  # JARVICE gave it a start time


def pod_stage(pod: StagedPod, latest: JobSeen | None) -> PodStage | None:
    """The pod's stage (see the table above); None when it has none or it is not known this round."""
    if pod.gang:
        return None
    if pod.terminal:
        return "ended"
    if latest is None:
        if pod.recorded_jobs:  # its jobs are not listed this round: not known
            return None
        return "staging-in" if pod.stages_in else "submitting"
    if latest.state == STATUS_RUNNING:
        return "running"
    if not is_terminal(latest.state):
        return "queued"
    if ended_without_running(latest.state, int(latest.started)):
        return "queued"
    return "copying-back" if pod.stages_out else "finishing"


@dataclass(frozen=True, slots=True)
class StageEvent:
    reason: str
    message: str


def stage_event(before: str, stage: PodStage | None, latest: JobSeen | None) -> StageEvent | None:
    """The Event of a pod that moved into a data stage (`before`: the stage its annotation had): the
    job stages have Events of their own (controller.jobrecords), the data stages have these."""
    if stage is None or stage == before:
        return None
    if stage == "staging-in":
        return StageEvent(REASON_STAGING_IN, "the runner stages the pod's data into the JARVICE vault")
    if stage == "copying-back":
        job = f"JARVICE job {latest.number}" if latest is not None else "the JARVICE job"
        return StageEvent(
            REASON_COPYING_BACK, f"{job} ended; the runner copies its outputs back into the pod's volumes"
        )
    return None


def latest_job(jobs: Sequence[JobSeen]) -> JobSeen | None:
    return max(jobs, key=lambda job: job.number) if jobs else None


def stages_data(containers: Sequence[Mapping[str, object]], variable: str) -> bool:
    """Whether a container's env names `variable` (the webhook writes the staging variables)."""
    for container in containers:
        env = container.get("env")
        for item in env if isinstance(env, list) else ():
            if isinstance(item, dict) and item.get("name") == variable:
                return True
    return False
