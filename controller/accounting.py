"""Which live jobs on the add-on's JARVICE accounts nothing accounts for, and which of them to stop (pure).

The gateway alone holds the accounts' keys and writes, before each submit, what it counted for it (the
ledger: namespace, pod, GPUs, cost). A live job is *accounted* while all of these hold:
  - the ledger counted it (its label has an entry) and a pod the product decided remote carries its
    label's UID (the pod itself, or a member of its gang);
  - its size is within what was counted (the GPUs its machine gives on its nodes, no more than counted);
  - its namespace is within its burst budget and cost caps, counting its live accounted jobs.
Anything else is stopped, for one reason: `not-decided` (no entry, or no decided pod), `above-counted-size`,
`over-cap` (the namespace's newest jobs first, until it is within). Only a job whose label claims this
cluster is judged: another cluster's, a label of earlier releases (no cluster) or one no runner makes is
left alone, as the orphan reaper leaves them (an account may also pay for other clusters' and people's work);
so is a job the gateway did not submit of a pod whose namespace pays with its own key (it sent it with that key).

Two rounds at most: a size above what was counted is proven by one round's listing and entry, so it is
stopped at once; the rest may be one read's lag (a pod the watch has not shown yet, a submit whose entry
landed between two reads, a cap edited that moment), so a round marks it and the next round stops it if it
is still unaccounted for.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from jarvice.gpubudget import parse_budget
from jarvice.labels import parse_job_label
from jarvice.model import is_terminal
from kubeplumbing.spendrecord import (
    ANNOTATION_MAX_COST_PER_HOUR,
    ANNOTATION_MAX_COST_PER_MONTH,
    ANNOTATION_MAX_REMOTE_GPUS,
    parse_cost_cap,
)

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
    left_alone: tuple[LiveJob, ...]  # jobs whose label does not claim this cluster


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
    own_key_uids: Collection[str] = (),
    orphans_reaped: bool = False,
) -> Plan:
    """`decided_uids`: the UIDs a decided pod stands for (its own, and its gang's when it is a member);
    `caps` by namespace (none: no limit); `marked`: the previous round's marks; `own_key_uids`: the pods
    of namespaces that pay with their own key (`jarvice-account: own`): a job of theirs the gateway did
    not submit was sent with that namespace's key, which may be one of the add-on's accounts too.
    `orphans_reaped`: the orphan reaper runs. Then a job the gateway counted whose pod has ended or gone
    since is an orphan, the reaper's to stop after its grace (`CONTROLLER_ORPHAN_GRACE_SECONDS`, its own
    Event and count), not an unaccounted job; without the reaper it is stopped here as one."""
    decided = frozenset(decided_uids)
    own_key = frozenset(own_key_uids)
    previously = frozenset(marked)
    unaccounted: list[Stop] = []
    left_alone: list[LiveJob] = []
    by_namespace: dict[str, list[LiveJob]] = {}
    for job in sorted(jobs, key=lambda j: j.key):
        if is_terminal(job.state):
            continue
        parsed = parse_job_label(job.label)
        if parsed is None or parsed.cluster != cluster:
            left_alone.append(job)
            continue
        uid = parsed.pod_uid
        counted = job.counted
        if counted is None and uid in own_key:
            left_alone.append(job)
            continue
        if counted is not None and uid not in decided and orphans_reaped:
            left_alone.append(job)  # counted when its pod was decided: an orphan now, the reaper's
            continue
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


def caps_of(annotations: Mapping[str, str], *, month_recorded: float) -> Caps | None:
    """A namespace's budget and caps from its annotations (an unreadable value caps at 0, as the
    webhook and the gateway read it); None when it sets none."""
    gpus = annotations.get(ANNOTATION_MAX_REMOTE_GPUS)
    hour = annotations.get(ANNOTATION_MAX_COST_PER_HOUR)
    month = annotations.get(ANNOTATION_MAX_COST_PER_MONTH)
    if gpus is None and hour is None and month is None:
        return None
    return Caps(
        max_gpus=None if gpus is None else parse_budget(gpus).limit,
        max_cost_per_hour=None if hour is None else parse_cost_cap(hour).limit,
        max_cost_per_month=None if month is None else parse_cost_cap(month).limit,
        month_recorded=month_recorded,
    )


class GatewayAnswerError(ValueError):
    """The gateway's /controller/jobs answer is not what it sends."""


def _number(value: object, where: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GatewayAnswerError(f"{where} is {value!r}, not a number")
    return float(value)


def _int(value: object, where: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise GatewayAnswerError(f"{where} is {value!r}, not a whole number")
    return value


def _parse_counted(raw: Any, where: str) -> Counted | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise GatewayAnswerError(f"{where} is not an object")
    return Counted(
        namespace=str(raw.get("namespace") or ""),
        pod_uid=str(raw.get("pod_uid") or ""),
        gpus=_int(raw.get("gpus"), f"{where}.gpus") or 0,
        cost_per_hour=_number(raw.get("cost_per_hour"), f"{where}.cost_per_hour", optional=True),
        worst_case=_number(raw.get("worst_case"), f"{where}.worst_case", optional=True),
        at=_number(raw.get("at"), f"{where}.at") or 0.0,
    )


def parse_gateway_jobs(document: Any) -> list[LiveJob]:
    """The live jobs of /controller/jobs (`{"accounts": [{"name", "jobs": [...]}]}`)."""
    accounts = document.get("accounts") if isinstance(document, Mapping) else None
    if not isinstance(accounts, list):
        raise GatewayAnswerError('the answer is not {"accounts": [...]}')
    jobs: list[LiveJob] = []
    for account in accounts:
        if not isinstance(account, Mapping) or not isinstance(account.get("jobs"), list):
            raise GatewayAnswerError('an account is not {"name": ..., "jobs": [...]}')
        name = str(account.get("name") or "")
        for i, raw in enumerate(account["jobs"]):
            where = f"accounts[{name}].jobs[{i}]"
            if not isinstance(raw, Mapping):
                raise GatewayAnswerError(f"{where} is not an object")
            jobs.append(
                LiveJob(
                    account=name,
                    number=_int(raw.get("number"), f"{where}.number") or 0,
                    label=str(raw.get("label") or ""),
                    state=str(raw.get("state") or ""),
                    machine=str(raw.get("machine") or ""),
                    nodes=_int(raw.get("nodes"), f"{where}.nodes") or 0,
                    gpus=_int(raw.get("gpus"), f"{where}.gpus", optional=True),
                    cost_per_hour=_number(raw.get("cost_per_hour"), f"{where}.cost_per_hour", optional=True),
                    counted=_parse_counted(raw.get("counted"), f"{where}.counted"),
                )
            )
    return jobs
