"""What the controller records of a burst pod's JARVICE jobs: Events and annotations (pure).

Each job goes through stages: submitted -> queued (held, with JARVICE's substatus text) -> running
-> succeeded or failed. The pod's ledger annotation (`nimbix-burst.io/jobs: 4711=running`) holds
the last stage each job's Events reached; a job's Events are those of the stages past its ledger
entry, so a restarted controller, reading the ledger from the pod, records nothing twice. A stage
is never gone back to, and a stage a job passed between two rounds gets no Event (a job first seen
running has Submitted and Running; one first seen ended, Submitted and its end).

The planner returns the Events and one JSON patch per pod: the patch tests the ledger and the
job-state it was planned from, so a patch planned from a stale view (or racing the reaper's
`job-state: ended`, which is never replaced) is refused by the API server and planned again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from controller import stages
from controller.pricing import Rate
from jarvice import contract, exitcodes
from jarvice.ledger import MAX_LEDGER, Stage, format_ledger, parse_ledger
from jarvice.model import STATUS_RUNNING, ended_without_running, is_terminal

_RANK: Final[Mapping[str, int]] = {"submitted": 0, "queued": 1, "running": 2, "succeeded": 3, "failed": 3}
EventType = Literal["Normal", "Warning"]

REASON_SUBMITTED: Final = "NimbixSubmitted"
REASON_QUEUED: Final = "NimbixQueued"
REASON_RUNNING: Final = "NimbixRunning"
REASON_SUCCEEDED: Final = "NimbixSucceeded"
REASON_FAILED: Final = "NimbixFailed"
# A job that follows one of the pod's that JARVICE ended without ever starting it: the runner moved
# the pod to its next candidate machine (entrypoint.candidates, NIMBIX_BURST_MAX_REMOTE_QUEUE).
REASON_MOVED: Final = "NimbixMoved"

# Money is shown with this many decimals; a smaller change is not worth a patch.
DECIMALS: Final = 2
SECONDS_PER_HOUR: Final = 3600.0


@dataclass(frozen=True, slots=True)
class JobFacts:
    """One JARVICE job of a burst pod, as /jarvice/jobs lists it."""

    number: int
    state: str  # job_status, upper case
    substatus_text: str
    exitcode: int | None
    machine: str  # "" when JARVICE did not say
    nodes: int
    start_time: int  # Unix seconds, 0 while not started
    end_time: int  # Unix seconds, 0 while not ended


@dataclass(frozen=True, slots=True)
class BurstPod:
    """What the recorder reads of a burst pod: its identity and our annotations (raw text)."""

    uid: str
    namespace: str
    name: str
    terminal: bool  # phase Succeeded or Failed: its jobs are over, or orphans the reaper will end
    annotations: Mapping[str, str]
    stages_in: bool = False  # a burst container stages data in (NIMBIX_BURST_STAGE_IN)
    stages_out: bool = False  # ... or out (NIMBIX_BURST_STAGE_OUT)


@dataclass(frozen=True, slots=True)
class Event:
    job: int
    reason: str
    message: str
    event_type: EventType


@dataclass(frozen=True, slots=True)
class PodPlan:
    pod: BurstPod
    events: tuple[Event, ...]
    patch: tuple[dict[str, Any], ...]  # JSON patch ops; empty when nothing changes
    money_only: bool  # only GPU-hours/cost changed (a running job's): the shell refreshes those less often
    problem: str = ""  # an unreadable ledger, said once per plan (the shell logs it)


# --- one job --------------------------------------------------------------------------------------


def job_stage(job: JobFacts) -> Stage:
    if is_terminal(job.state):
        return "succeeded" if exit_code(job) == exitcodes.EXIT_OK else "failed"
    if job.state == STATUS_RUNNING:
        return "running"
    return "queued" if job.substatus_text else "submitted"


def exit_code(job: JobFacts) -> int:
    """The exit status the pod's runner reports for this ended job (jarvice.exitcodes)."""
    return exitcodes.from_job(job.state, job.exitcode).code


def job_hours(job: JobFacts, *, now: float) -> float:
    """Machine-hours of one node so far: from its start to its end (or now)."""
    if job.start_time <= 0:
        return 0.0
    end = job.end_time if job.end_time > 0 else now
    return max(0.0, end - job.start_time) / SECONDS_PER_HOUR


@dataclass(frozen=True, slots=True)
class Money:
    gpu_hours: float
    cost: float
    unknown: tuple[str, ...]  # machines without a rate: their jobs are not in the figures


def total_money(jobs: Collection[JobFacts], rates: Mapping[str, Rate], *, now: float) -> Money:
    gpu_hours = cost = 0.0
    unknown: set[str] = set()
    for job in jobs:
        hours = job_hours(job, now=now)
        rate = rates.get(job.machine)
        if rate is None:
            if hours > 0:
                unknown.add(job.machine or "(not given)")
            continue
        gpu_hours += rate.gpus * job.nodes * hours
        cost += rate.price * job.nodes * hours
    return Money(gpu_hours=gpu_hours, cost=cost, unknown=tuple(sorted(unknown)))


def _money_text(value: float) -> str:
    return f"{value:.{DECIMALS}f}"


def _job_money(job: JobFacts, rates: Mapping[str, Rate], *, now: float) -> str:
    money = total_money([job], rates, now=now)
    if money.unknown:
        return f"GPU-hours and cost unknown (machine {money.unknown[0]} not in /jarvice/machines)"
    return f"{_money_text(money.gpu_hours)} GPU-hours, cost {_money_text(money.cost)}"


def _where(job: JobFacts) -> str:
    return f"machine {job.machine or '(not given)'} x{job.nodes}"


def build_events(
    job: JobFacts, *, recorded: Stage | None, rates: Mapping[str, Rate], now: float
) -> tuple[list[Event], Stage | None]:
    """The Events past the job's ledger stage `recorded`, and the stage to record (None: none yet)."""
    stage = job_stage(job)
    if recorded is not None and _RANK[stage] <= _RANK[recorded]:
        return [], recorded
    events: list[Event] = []
    if recorded is None:
        events.append(
            Event(job.number, REASON_SUBMITTED, f"JARVICE job {job.number} submitted: {_where(job)}", "Normal")
        )
    if stage == "queued":
        text = f"JARVICE job {job.number} queued ({job.state}): {job.substatus_text}"
        events.append(Event(job.number, REASON_QUEUED, text, "Normal"))
    elif stage == "running":
        events.append(Event(job.number, REASON_RUNNING, f"JARVICE job {job.number} running: {_where(job)}", "Normal"))
    elif stage in ("succeeded", "failed"):
        text = f"JARVICE job {job.number} {job.state}, exit code {exit_code(job)}; {_job_money(job, rates, now=now)}"
        if stage == "failed" and job.substatus_text:
            text += f"; {job.substatus_text}"
        if stage == "succeeded":
            events.append(Event(job.number, REASON_SUCCEEDED, text, "Normal"))
        else:
            events.append(Event(job.number, REASON_FAILED, text, "Warning"))
    return events, stage


def build_move_event(job: JobFacts, jobs: Sequence[JobFacts]) -> list[Event]:
    """The move Event of a newly seen job whose predecessor (the pod's job just before it) ended
    without ever starting (TERMINATED or CANCELED): a job the runner left queued on a full machine."""
    earlier = [other for other in jobs if other.number < job.number]
    if not earlier:
        return []
    before = max(earlier, key=lambda other: other.number)
    if not ended_without_running(before.state, before.start_time):
        return []
    text = (
        f"JARVICE job {before.number} on {_where(before)} was terminated while queued (it never started, no cost);"
        f" moved to job {job.number} on {_where(job)}"
    )
    return [Event(job.number, REASON_MOVED, text, "Normal")]


# --- one pod --------------------------------------------------------------------------------------


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _path(key: str) -> str:
    return f"/metadata/annotations/{_escape(key)}"


def _parse_money(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def plan_pod(pod: BurstPod, jobs: Sequence[JobFacts], *, rates: Mapping[str, Rate], now: float) -> PodPlan:
    """The Events and the annotation patch for `pod`, given every job of it JARVICE listed (live and
    ended) and the machines' rates. `now`: Unix seconds (JARVICE's times are the wall clock)."""
    annotations = pod.annotations
    ledger, problem = parse_ledger(annotations.get(contract.ANNOTATION_JOB_LEDGER, ""))
    floor = min(ledger) if len(ledger) >= MAX_LEDGER else 0
    considered = sorted((job for job in jobs if job.number >= floor), key=lambda job: job.number)
    events: list[Event] = []
    new_ledger = dict(ledger)
    for job in considered:
        job_events, stage = build_events(job, recorded=ledger.get(job.number), rates=rates, now=now)
        events += job_events
        if job.number not in ledger:
            events += build_move_event(job, jobs)
        if stage is not None:
            new_ledger[job.number] = stage
    wanted: dict[str, str] = {}
    if considered:
        latest = considered[-1]
        wanted[contract.ANNOTATION_JOB_LEDGER] = format_ledger(new_ledger)
        wanted[contract.ANNOTATION_JOB_NUMBER] = str(latest.number)
        wanted[contract.ANNOTATION_JOB_MACHINE] = latest.machine
        wanted[contract.ANNOTATION_JOB_NODES] = str(latest.nodes)
        if annotations.get(contract.ANNOTATION_JOB_STATE) != contract.JOB_STATE_ENDED:
            wanted[contract.ANNOTATION_JOB_STATE] = new_ledger[latest.number]
        money = total_money(jobs, rates, now=now)
        complete = set(ledger) <= {job.number for job in jobs}
        if not money.unknown:
            for key, value in (
                (contract.ANNOTATION_GPU_HOURS, money.gpu_hours),
                (contract.ANNOTATION_COST, money.cost),
            ):
                shown = _parse_money(annotations.get(key, ""))
                # Never lowered while a recorded job is not listed (it still cost what it cost); with
                # every job listed the total is exact (a running job's estimate ran to our clock).
                if shown is None or complete or round(value, DECIMALS) > shown:
                    wanted[key] = _money_text(value)
    stage_events, pod_stage = _stage(pod, jobs, recorded_jobs=bool(ledger))
    events += stage_events
    if pod_stage is not None:
        wanted[contract.ANNOTATION_STAGE] = pod_stage
    changed = {key: value for key, value in wanted.items() if annotations.get(key) != value}
    money_keys = {contract.ANNOTATION_GPU_HOURS, contract.ANNOTATION_COST}
    return PodPlan(
        pod=pod,
        events=tuple(events),
        patch=build_patch(pod, changed) if changed else (),
        money_only=bool(changed) and set(changed) <= money_keys,
        problem=problem,
    )


def _stage(pod: BurstPod, jobs: Sequence[JobFacts], *, recorded_jobs: bool) -> tuple[list[Event], str | None]:
    """The pod's stage (controller.stages) and the Event of a data stage it moved into."""
    seen = [stages.JobSeen(job.number, job.state, job.start_time > 0) for job in jobs]
    latest = stages.latest_job(seen)
    view = stages.StagedPod(
        terminal=pod.terminal,
        stages_in=pod.stages_in,
        stages_out=pod.stages_out,
        gang=job_uid(pod) is None,
        recorded_jobs=recorded_jobs,
    )
    stage = stages.pod_stage(view, latest)
    event = stages.stage_event(pod.annotations.get(contract.ANNOTATION_STAGE, ""), stage, latest)
    if event is None:
        return [], stage
    return [Event(latest.number if latest is not None else 0, event.reason, event.message, "Normal")], stage


def build_patch(pod: BurstPod, values: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """A JSON patch that applies only to the pod as it was read: its UID, and the ledger and
    job-state it had (or their absence: an `add` of them would then replace a newer value, so the
    patch tests what it saw instead: a key that appeared makes the test of its absence fail)."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": pod.uid}]
    for key in (contract.ANNOTATION_JOB_LEDGER, contract.ANNOTATION_JOB_STATE):
        if key in pod.annotations:
            ops.append({"op": "test", "path": _path(key), "value": pod.annotations[key]})
    for key, value in values.items():
        ops.append({"op": "replace" if key in pod.annotations else "add", "path": _path(key), "value": value})
    return tuple(ops)


def plan_round(
    pods: Collection[BurstPod],
    jobs_of: Mapping[str, Sequence[JobFacts]],
    *,
    rates: Mapping[str, Rate],
    now: float,
) -> list[PodPlan]:
    """A plan for each pod with something to record, in namespace/name order (so a capped round
    gives every pod its turn across rounds); pods with stage changes come before money-only ones."""
    plans = [plan_pod(pod, jobs_of.get(pod.uid, ()), rates=rates, now=now) for pod in pods]
    wanted = [plan for plan in plans if plan.patch or plan.events or plan.problem]
    wanted.sort(key=lambda plan: (plan.money_only, plan.pod.namespace, plan.pod.name))
    return wanted


def job_uid(pod: BurstPod) -> str | None:
    """The UID the pod's JARVICE jobs carry in their label: its own; for a gang's pod the gang's
    identity, and only on the submitting rank, which carries the gang's one job (its Events, its
    cost); None for the other ranks (no job is theirs: they follow rank 0's)."""
    gang = pod.annotations.get(contract.ANNOTATION_GANG)
    if not gang:
        return pod.uid
    if pod.annotations.get(contract.ANNOTATION_GANG_RANK) == str(contract.GANG_SUBMITTING_RANK):
        return gang
    return None


def record_owners(pods: Iterable[BurstPod]) -> dict[str, str]:
    """The pod that records the jobs of each UID a job label may carry (see job_uid). A pod's own UID
    is always its own, whatever another pod's gang annotation says; a gang's, its one submitting
    rank's: when two pods claim to be it (one merely carrying the annotation), neither records it,
    so no pod takes another's jobs (their Events, cost, job-state)."""
    pods = list(pods)
    owners = {pod.uid: pod.uid for pod in pods}
    claimed: dict[str, list[str]] = {}
    for pod in pods:
        key = job_uid(pod)
        if key is not None and key != pod.uid:
            claimed.setdefault(key, []).append(pod.uid)
    for key, claimants in claimed.items():
        if key not in owners and len(claimants) == 1:
            owners[key] = claimants[0]
    return owners


def needs_finished_jobs(
    pods: Collection[BurstPod], *, known: Collection[int], live_pods: Collection[str], searched: Mapping[str, str]
) -> list[str]:
    """The pods for which /jarvice/jobs?completed=true (the account's whole history) must be listed
    this round: their ledger names a job that is neither live nor already known ended (`known`: the
    numbers of both), or they finished with no job live and none recorded. A pod is looked up once
    per ledger (`searched`: pod UID -> the ledger it was looked up with), so a job JARVICE has
    forgotten does not cost a history listing every round."""
    wanted = []
    for pod in pods:
        if job_uid(pod) is None:
            continue  # a gang's following rank: the history has no job of its own to find
        text = pod.annotations.get(contract.ANNOTATION_JOB_LEDGER, "")
        if searched.get(pod.uid) == text:
            continue
        ledger, _ = parse_ledger(text)
        if any(number not in known for number in ledger) or (pod.terminal and not ledger and pod.uid not in live_pods):
            wanted.append(pod.uid)
    return wanted


# The annotations the recorder reads back (the rest of a pod is not kept).
_RECORDED_KEYS: Final = (
    contract.ANNOTATION_JOB_LEDGER,
    contract.ANNOTATION_JOB_STATE,
    contract.ANNOTATION_JOB_NUMBER,
    contract.ANNOTATION_JOB_MACHINE,
    contract.ANNOTATION_JOB_NODES,
    contract.ANNOTATION_GPU_HOURS,
    contract.ANNOTATION_COST,
    contract.ANNOTATION_STAGE,
    contract.ANNOTATION_GANG,
    contract.ANNOTATION_GANG_RANK,
    contract.ANNOTATION_GANG,
)
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


def parse_burst_pod(obj: Mapping[str, Any]) -> BurstPod | None:
    """A pod the webhook decided remote, or None for any other pod."""
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if annotations.get(contract.ANNOTATION_DECISION) != contract.DECISION_REMOTE:
        return None
    spec = obj.get("spec") or {}
    containers = spec.get("containers") if isinstance(spec, dict) else None
    containers = [c for c in containers if isinstance(c, dict)] if isinstance(containers, list) else []
    return BurstPod(
        uid=str(metadata.get("uid") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        terminal=(obj.get("status") or {}).get("phase") in _TERMINAL_PHASES,
        annotations={key: str(annotations[key]) for key in _RECORDED_KEYS if key in annotations},
        stages_in=stages.stages_data(containers, contract.ENV_STAGE_IN),
        stages_out=stages.stages_data(containers, contract.ENV_STAGE_OUT),
    )
