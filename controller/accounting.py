"""Which live jobs on the add-on's JARVICE accounts nothing accounts for, and which of them to stop (pure).

The gateway alone holds the accounts' keys and writes, before each submit, what it counted for it (the
ledger: namespace, pod, GPUs, cost). A live job is *accounted* while all of these hold:
  - the ledger counted it (its label has an entry) and a pod the product decided remote carries its
    label's UID (the pod itself, or a member of its gang);
  - its size is within what was counted (the GPUs its machine gives on its nodes, no more than counted);
  - its namespace is within its burst budget and cost caps, counting its live accounted jobs.
Anything else is stopped, for one reason: `not-decided` (no entry, or no decided pod), `above-counted-size`,
`over-cap` (the namespace's newest jobs first, until it is within). A job with another cluster's label is
never this cluster's to judge (an account may pay for several clusters): it is left alone.

Two rounds at most: a size above what was counted is proven by one round's listing and entry, so it is
stopped at once; the rest may be one read's lag (a pod the watch has not shown yet, a submit whose entry
landed between two reads, a cap edited that moment), so a round marks it and the next round stops it if it
is still unaccounted for.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from jarvice.labels import parse_job_label
from jarvice.model import is_terminal

StopReason = Literal["not-decided", "above-counted-size", "over-cap"]
STOP_REASONS: Final[tuple[StopReason, ...]] = ("not-decided", "above-counted-size", "over-cap")
# Money compares with this slack: prices are decimals summed as floats.
EPSILON: Final = 1e-9


@dataclass(frozen=True, slots=True)
class Counted:
    """What the gateway's ledger counted for a submit."""

    namespace: str
    pod_uid: str
    gpus: int
    cost_per_hour: float | None
    worst_case: float | None
    at: float  # when it was counted (Unix seconds): the newer of two jobs is stopped first


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A job an account lists, with what its machine gives and what was counted for it."""

    account: str
    number: int
    label: str
    state: str
    machine: str
    nodes: int
    gpus: int | None  # the machine's GPUs on its nodes; None when the machine is not in the catalogue
    cost_per_hour: float | None  # None when the machine gives no price
    counted: Counted | None

    @property
    def key(self) -> tuple[str, int]:
        return (self.account, self.number)


@dataclass(frozen=True, slots=True)
class Caps:
    """A namespace's budget and caps (None: not set), and this month's ended jobs' cost."""

    max_gpus: int | None = None
    max_cost_per_hour: float | None = None
    max_cost_per_month: float | None = None
    month_recorded: float = 0.0


@dataclass(frozen=True, slots=True)
class Stop:
    job: LiveJob
    reason: StopReason
    namespace: str  # "" when nothing tells it (a job no entry counted, whose pod is not known)
    pod_uid: str  # the label's UID ("" for a label that is no runner's)
    detail: str  # what makes it unaccounted, for the Event and the log


@dataclass(frozen=True, slots=True)
class Plan:
    stop: tuple[Stop, ...]  # stopped this round
    marked: frozenset[tuple[str, int]]  # unaccounted, first seen this round: stopped next round if still so
    left_alone: tuple[LiveJob, ...]  # another cluster's jobs


def _size_above(job: LiveJob, counted: Counted) -> str | None:
    if job.gpus is None:
        return f"machine {job.machine!r} is not in the account's catalogue: its size cannot be within what was counted"
    if job.gpus > counted.gpus:
        return f"{job.machine} x {job.nodes} holds {job.gpus} GPU(s); {counted.gpus} were counted"
    return None


def _gpus(job: LiveJob) -> int:
    return job.gpus if job.gpus is not None else job.counted.gpus if job.counted is not None else 0


def _rate(job: LiveJob) -> float:
    if job.cost_per_hour is not None:
        return job.cost_per_hour
    if job.counted is not None and job.counted.cost_per_hour is not None:
        return job.counted.cost_per_hour
    return 0.0


def _over(jobs: Collection[LiveJob], caps: Caps) -> str | None:
    """Why `jobs` (one namespace's) take it past a budget or cap, or None."""
    if caps.max_gpus is not None and (held := sum(_gpus(j) for j in jobs)) > caps.max_gpus:
        return f"its jobs hold {held} GPU(s), its burst budget is {caps.max_gpus}"
    rate = sum(_rate(j) for j in jobs)
    if caps.max_cost_per_hour is not None and rate > caps.max_cost_per_hour + EPSILON:
        return f"its jobs cost {rate:g} per hour, its cap is {caps.max_cost_per_hour:g}"
    if caps.max_cost_per_month is not None:
        month = caps.month_recorded + sum((j.counted.worst_case or 0.0) for j in jobs if j.counted is not None)
        if month > caps.max_cost_per_month + EPSILON:
            return f"this month may cost {month:g}, its cap is {caps.max_cost_per_month:g}"
    return None


def _over_cap(jobs: list[LiveJob], caps: Caps) -> list[tuple[LiveJob, str]]:
    """The newest jobs to stop until the namespace is within its budget and caps (never more)."""
    kept = sorted(jobs, key=lambda j: (j.counted.at if j.counted else 0.0, j.number))
    stopped: list[tuple[LiveJob, str]] = []
    while kept and (why := _over(kept, caps)) is not None:
        stopped.append((kept.pop(), why))
    return stopped


def _uid(label: str) -> str:
    parsed = parse_job_label(label)
    return parsed.pod_uid if parsed is not None else ""


def plan_stops(
    jobs: Collection[LiveJob],
    *,
    cluster: str,
    decided_uids: Collection[str],
    caps: Mapping[str, Caps],
    marked: Collection[tuple[str, int]],
) -> Plan:
    """`decided_uids`: the UIDs a decided pod stands for (its own, and its gang's when it is a member);
    `caps` by namespace (none: no limit); `marked`: the previous round's marks."""
    decided = frozenset(decided_uids)
    previously = frozenset(marked)
    unaccounted: list[Stop] = []
    left_alone: list[LiveJob] = []
    by_namespace: dict[str, list[LiveJob]] = {}
    for job in sorted(jobs, key=lambda j: j.key):
        if is_terminal(job.state):
            continue
        parsed = parse_job_label(job.label)
        if parsed is not None and parsed.cluster is not None and parsed.cluster != cluster:
            left_alone.append(job)
            continue
        uid = _uid(job.label)
        counted = job.counted
        if counted is None or uid not in decided:
            namespace = counted.namespace if counted is not None else ""
            detail = (
                "the gateway counted no submit for it"
                if counted is None
                else "no pod the product decided remote carries its label"
            )
            unaccounted.append(Stop(job, "not-decided", namespace, uid, detail))
        elif (why := _size_above(job, counted)) is not None:
            unaccounted.append(Stop(job, "above-counted-size", counted.namespace, uid, why))
        else:
            by_namespace.setdefault(counted.namespace, []).append(job)
    for namespace, held in sorted(by_namespace.items()):
        limits = caps.get(namespace)
        if limits is None:
            continue
        for job, why in _over_cap(held, limits):
            unaccounted.append(Stop(job, "over-cap", namespace, _uid(job.label), why))
    stop = tuple(s for s in unaccounted if s.reason == "above-counted-size" or s.job.key in previously)
    new_marks = frozenset(s.job.key for s in unaccounted if s not in stop)
    return Plan(stop=stop, marked=new_marks, left_alone=tuple(left_alone))
