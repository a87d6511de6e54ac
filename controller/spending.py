"""What each namespace spends on JARVICE, counted from JARVICE's own job list (pure).

The controller's leader lists the account's live jobs each round; a job is this cluster's when its
label carries this cluster's identity, and it belongs to the namespace of the pod (or gang) whose
UID the label carries. A live job counts until JARVICE lists it no more, whatever its pod's
annotations say and whether its pod still exists: the namespace of each UID a live job carries is
remembered in the ledger (below), so a job whose pod was deleted still counts.

Figures (money in the account's price unit, `mc_price` per node-hour):
- a live job's cost per hour: its machine's `mc_price` x nodes;
- its worst case: price x nodes x its walltime limit (or the hours it has run, if more): what it
  has cost so far plus what it may still cost before its walltime stops it. A job not started yet
  counts its whole walltime. The limit is the `application.walltime` its submission carries (the
  runner always sends one); a job whose submission does not echo one counts the runner's default;
- an ended job's cost, counted once in the UTC month it ended: JARVICE's `job_price` where the
  history reports one, else price x nodes x the hours from its start to its end; a job JARVICE
  forgot before we saw its end counts price x nodes x the hours from its start to the listing that
  first missed it.
A machine missing from the catalogue is priced as its most expensive machine (and its GPUs as the
most of any), so an unknown machine never lowers a figure.

The ledger (persisted beside the record, so restarts and a new leader count nothing twice): the
jobs live at the last listing (number -> namespace, machine, nodes, start), the namespaces of the
UIDs they carry, and this month's ended jobs: those that ended in the last hour one by one (an
ended job is counted only when it was live at the last listing or ended after it, and not already
counted), older ones folded into a sum per namespace. A job is known by its number and the UID its
label carries together: a number alone may come back from another JARVICE account.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from controller.pricing import Rate
from jarvice.contract import DEFAULT_WALLTIME, parse_walltime_seconds
from jarvice.labels import parse_job_label
from jarvice.model import JobEntry
from kubeplumbing.spendrecord import RECORD_VERSION

SECONDS_PER_HOUR: Final = 3600.0
# What a job counts when its submission echoes no walltime: the runner's own default.
DEFAULT_WALLTIME_SECONDS: Final = parse_walltime_seconds(DEFAULT_WALLTIME) or 86400
# An ended job is kept one by one this long after its end, then folded into its namespace's sum.
KEEP_SECONDS: Final = 3600
# JARVICE's clock against ours: an ended job whose end is this much before the last listing still
# counts when it is not in the ledger (it ended between two listings).
SKEW_SECONDS: Final = 300
# At most this many ended jobs one by one (the ConfigMap stays well under its 1 MiB).
MAX_COUNTED: Final = 2000
DECIMALS: Final = 4


@dataclass(frozen=True, slots=True)
class SpendJob:
    """One of this cluster's JARVICE jobs, as /jarvice/jobs lists it."""

    number: int
    owner: str  # the UID its label carries: its pod's, or its gang's
    machine: str
    nodes: int
    start_time: int = 0  # Unix seconds; 0 while not started
    end_time: int = 0  # Unix seconds; 0 while not ended
    walltime_limit: int | None = None  # seconds; None when JARVICE did not echo one
    job_price: float | None = None


@dataclass(frozen=True, slots=True)
class LiveSeen:
    """A job live at the last listing: enough to cost it if JARVICE forgets it before its end."""

    namespace: str  # "" when unattributed
    owner: str
    machine: str
    nodes: int
    start_time: int


@dataclass(frozen=True, slots=True)
class Counted:
    """An ended job of this month, counted once."""

    namespace: str
    cost: float
    ended_at: int


JobKey = tuple[int, str]


@dataclass(frozen=True, slots=True)
class Ledger:
    month: str
    observed_at: int
    owners: Mapping[str, str] = field(default_factory=dict)  # UID a live job carries -> namespace
    live: Mapping[int, LiveSeen] = field(default_factory=dict)
    # (job number, the UID its label carries) -> its cost: a number alone could come back from
    # another JARVICE account (a changed Secret), a pod UID never does.
    counted: Mapping[JobKey, Counted] = field(default_factory=dict)
    folded: Mapping[str, float] = field(default_factory=dict)  # namespace -> this month's older ended jobs


@dataclass(frozen=True, slots=True)
class Outcome:
    record: dict[str, Any]  # spend.json
    ledger: Ledger


def month_of(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m")


def this_clusters_jobs(entries: Iterable[JobEntry], *, cluster: str) -> list[SpendJob]:
    """The jobs whose label is a runner label carrying `cluster` (legacy labels and other clusters'
    are not counted: nobody here can tell whose they are)."""
    jobs = []
    for entry in entries:
        parsed = parse_job_label(entry.label or "")
        if parsed is None or parsed.cluster != cluster:
            continue
        jobs.append(
            SpendJob(
                number=entry.number,
                owner=parsed.pod_uid,
                machine=entry.machine,
                nodes=entry.nodes,
                start_time=entry.start_time,
                end_time=entry.end_time,
                walltime_limit=entry.walltime_limit,
                job_price=entry.job_price,
            )
        )
    return jobs


def needs_history(previous: Ledger | None, live: Iterable[SpendJob]) -> bool:
    """Whether the ended jobs must be listed this round: a job of the last listing is not live any
    more (its cost is read from the history), or there is no ledger yet (this month's ended jobs
    are read once)."""
    if previous is None:
        return True
    now_live = {(job.number, job.owner) for job in live}
    return any((number, seen.owner) not in now_live for number, seen in previous.live.items())


def _rate(machine: str, machines: Mapping[str, Rate]) -> Rate:
    known = machines.get(machine)
    if known is not None:
        return known
    if not machines:
        return Rate(gpus=0, price=0.0)
    return Rate(gpus=max(m.gpus for m in machines.values()), price=max(m.price for m in machines.values()))


def _hours(start: int, end: float) -> float:
    return max(0.0, end - start) / SECONDS_PER_HOUR if start > 0 else 0.0


def ended_cost(job: SpendJob, machines: Mapping[str, Rate]) -> float:
    """JARVICE's job_price where it reports one, else price x nodes x hours run."""
    if job.job_price is not None:
        return job.job_price
    return _rate(job.machine, machines).price * job.nodes * _hours(job.start_time, job.end_time)


def worst_case(job: SpendJob, machines: Mapping[str, Rate], *, now: int) -> float:
    """Price x nodes x the longer of its walltime and the hours it has run."""
    limit = job.walltime_limit if job.walltime_limit is not None else DEFAULT_WALLTIME_SECONDS
    hours = max(limit / SECONDS_PER_HOUR, _hours(job.start_time, now))
    return _rate(job.machine, machines).price * job.nodes * hours


def _count_ended(
    live: Mapping[JobKey, SpendJob],
    ended: Sequence[SpendJob],
    counted: dict[JobKey, Counted],
    *,
    machines: Mapping[str, Rate],
    owners: Mapping[str, str],
    previous: Ledger | None,
    month: str,
    now: int,
) -> None:
    history = {(job.number, job.owner): job for job in ended if (job.number, job.owner) not in live}
    if previous is not None:
        for number, seen in previous.live.items():
            key = (number, seen.owner)
            if key in live or key in counted:
                continue
            facts = history.get(key)
            if facts is not None and facts.end_time > 0:
                cost, end = ended_cost(facts, machines), facts.end_time
            else:  # forgotten by JARVICE: it ran at most until this listing
                cost = _rate(seen.machine, machines).price * seen.nodes * _hours(seen.start_time, now)
                end = now
            namespace = seen.namespace or owners.get(seen.owner, "")
            if namespace and month_of(end) == month:
                counted[key] = Counted(namespace=namespace, cost=cost, ended_at=end)
    for key, job in history.items():
        if key in counted or job.end_time <= 0 or month_of(job.end_time) != month:
            continue
        was_live = previous is not None and key[0] in previous.live and previous.live[key[0]].owner == key[1]
        if was_live or (previous is not None and job.end_time <= previous.observed_at - SKEW_SECONDS):
            continue  # counted above, or ended before the last listing: counted then (or folded since)
        namespace = owners.get(job.owner, "")
        if namespace:
            counted[key] = Counted(namespace=namespace, cost=ended_cost(job, machines), ended_at=job.end_time)


def _fold(counted: dict[JobKey, Counted], folded: dict[str, float], *, now: int) -> None:
    by_age = sorted(counted.items(), key=lambda item: (item[1].ended_at, item[0]))
    excess = len(by_age) - MAX_COUNTED
    for index, (key, entry) in enumerate(by_age):
        if index < excess or entry.ended_at < now - KEEP_SECONDS:
            folded[entry.namespace] = folded.get(entry.namespace, 0.0) + entry.cost
            del counted[key]


def _money(value: float) -> float:
    return round(value, DECIMALS)


def build(
    *,
    live: Sequence[SpendJob],
    ended: Sequence[SpendJob],
    machines: Mapping[str, Rate],
    pod_namespaces: Mapping[str, str],
    previous: Ledger | None,
    now: int,
) -> Outcome:
    """The record and the ledger after one listing. `live`: this cluster's live jobs; `ended`: its
    ended jobs from the history when it was listed this round (see `needs_history`), else empty;
    `pod_namespaces`: the namespace of each pod's (and gang's) UID the controller knows now;
    `previous`: the last ledger (None: none yet); `now`: Unix seconds of the listing."""
    month = month_of(now)
    same_month = previous is not None and previous.month == month
    counted = dict(previous.counted) if previous is not None and same_month else {}
    folded = dict(previous.folded) if previous is not None and same_month else {}
    owners = {**(previous.owners if previous is not None else {}), **pod_namespaces}
    live_by_key = {(job.number, job.owner): job for job in live}
    _count_ended(live_by_key, ended, counted, machines=machines, owners=owners, previous=previous, month=month, now=now)
    _fold(counted, folded, now=now)

    namespaces: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return namespaces.setdefault(
            name, {"pods": {}, "cost_per_hour": 0.0, "month_recorded": 0.0, "month_worst_case": 0.0}
        )

    for counted_entry in counted.values():
        entry(counted_entry.namespace)["month_recorded"] += counted_entry.cost
    for name, cost in folded.items():
        entry(name)["month_recorded"] += cost
    unattributed_jobs, unattributed_cost = 0, 0.0
    seen: dict[int, LiveSeen] = {}
    live_owners: dict[str, str] = {}
    worst: dict[str, float] = {}
    for job in sorted(live, key=lambda j: j.number):
        namespace = owners.get(job.owner, "")
        rate = _rate(job.machine, machines)
        seen[job.number] = LiveSeen(namespace, job.owner, job.machine, job.nodes, job.start_time)
        if not namespace:
            unattributed_jobs += 1
            unattributed_cost += rate.price * job.nodes
            continue
        live_owners[job.owner] = namespace
        spend = entry(namespace)
        pod = spend["pods"].setdefault(job.owner, {"gpus": 0, "cost_per_hour": 0.0, "worst_case": 0.0})
        pod["gpus"] += rate.gpus * job.nodes
        pod["cost_per_hour"] += rate.price * job.nodes
        pod["worst_case"] += worst_case(job, machines, now=now)
        spend["cost_per_hour"] += rate.price * job.nodes
        worst[namespace] = worst.get(namespace, 0.0) + worst_case(job, machines, now=now)
    for name, spend in namespaces.items():
        spend["month_worst_case"] = spend["month_recorded"] + worst.get(name, 0.0)
        for key in ("cost_per_hour", "month_recorded", "month_worst_case"):
            spend[key] = _money(spend[key])
        for pod in spend["pods"].values():
            pod["cost_per_hour"], pod["worst_case"] = _money(pod["cost_per_hour"]), _money(pod["worst_case"])
    record = {
        "version": RECORD_VERSION,
        "observed_at": now,
        "month": month,
        "machines": {name: {"gpus": rate.gpus, "price": rate.price} for name, rate in sorted(machines.items())},
        "namespaces": dict(sorted(namespaces.items())),
        "unattributed": {"jobs": unattributed_jobs, "cost_per_hour": _money(unattributed_cost)},
    }
    ledger = Ledger(month=month, observed_at=now, owners=live_owners, live=seen, counted=counted, folded=folded)
    return Outcome(record=record, ledger=ledger)


def worth_writing(old: Mapping[str, Any] | None, new: Mapping[str, Any], *, refresh: float) -> bool:
    """Whether the record changed (apart from when it was observed), or the one written is older
    than `refresh` seconds (so its age tells readers the controller is still counting)."""
    if old is None:
        return True
    if {k: v for k, v in old.items() if k != "observed_at"} != {k: v for k, v in new.items() if k != "observed_at"}:
        return True
    old_at = old.get("observed_at")
    return not isinstance(old_at, int) or new["observed_at"] - old_at >= refresh


# --- the ledger as the ConfigMap holds it -----------------------------------------------------------


def ledger_to_text(ledger: Ledger) -> str:
    return json.dumps(
        {
            "month": ledger.month,
            "observed_at": ledger.observed_at,
            "owners": dict(sorted(ledger.owners.items())),
            "live": {
                str(n): [s.namespace, s.owner, s.machine, s.nodes, s.start_time] for n, s in sorted(ledger.live.items())
            },
            "counted": [
                [n, o, c.namespace, _money(c.cost), c.ended_at] for (n, o), c in sorted(ledger.counted.items())
            ],
            "folded": {name: _money(cost) for name, cost in sorted(ledger.folded.items())},
        },
        separators=(",", ":"),
    )


class LedgerError(ValueError):
    """The ConfigMap's ledger cannot be read."""


def parse_ledger(text: str) -> Ledger:
    """The ledger as `ledger_to_text` wrote it; raises LedgerError saying what is wrong."""
    try:
        raw = json.loads(text)
        live = {int(n): LiveSeen(str(v[0]), str(v[1]), str(v[2]), int(v[3]), int(v[4])) for n, v in raw["live"].items()}
        counted = {(int(v[0]), str(v[1])): Counted(str(v[2]), float(v[3]), int(v[4])) for v in raw["counted"]}
        return Ledger(
            month=str(raw["month"]),
            observed_at=int(raw["observed_at"]),
            owners={str(k): str(v) for k, v in raw["owners"].items()},
            live=live,
            counted=counted,
            folded={str(k): float(v) for k, v in raw["folded"].items()},
        )
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise LedgerError(f"the spend ledger is unreadable ({type(exc).__name__}: {str(exc)[:200]})") from exc
