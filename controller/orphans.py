"""Which JARVICE jobs are orphans, and which orphans are due for termination (pure).

A job is ours when its label parses as a runner label (`k8s-<pod uid>-...`, see
`entrypoint.plan.build_job_label`). It is an *orphan* when no pod with that UID exists. It is
terminated only after it has been seen orphaned for `grace` seconds in a row: a pod the watch has
not shown yet, or a label that matched for one round only, costs nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from entrypoint.plan import parse_job_label

# JARVICE's terminal states (reference §6): a job in one of these has nothing left to stop.
TERMINAL_STATES = frozenset({"COMPLETED", "COMPLETED WITH ERROR", "TERMINATED", "CANCELED"})


@dataclass(frozen=True, slots=True)
class Job:
    number: int
    label: str
    state: str


@dataclass(frozen=True, slots=True)
class Orphan:
    number: int
    label: str
    pod_uid: str
    first_seen: float  # monotonic seconds


@dataclass(frozen=True, slots=True)
class Round:
    first_seen: dict[int, float]  # job number -> when first seen orphaned (carried to the next round)
    orphans: list[Orphan]  # every orphan this round, due or not
    due: list[Orphan]  # orphaned for at least the grace period
    newly_seen: list[Orphan]  # orphans not seen in the previous round


def plan_round(
    jobs: Collection[Job],
    *,
    pod_uids: Collection[str],
    first_seen: Mapping[int, float],
    now: float,
    grace: float,
) -> Round:
    carried: dict[int, float] = {}
    orphans: list[Orphan] = []
    due: list[Orphan] = []
    newly: list[Orphan] = []
    for job in sorted(jobs, key=lambda j: j.number):
        if job.state.upper() in TERMINAL_STATES:
            continue
        parsed = parse_job_label(job.label)
        if parsed is None or parsed.pod_uid in pod_uids:
            continue
        seen = first_seen.get(job.number)
        if seen is None:
            seen = now
        carried[job.number] = seen
        orphan = Orphan(number=job.number, label=job.label, pod_uid=parsed.pod_uid, first_seen=seen)
        orphans.append(orphan)
        if job.number not in first_seen:
            newly.append(orphan)
        if now - seen >= grace:
            due.append(orphan)
    return Round(first_seen=carried, orphans=orphans, due=due, newly_seen=newly)


# Rounds are never closer than this, whatever the grace periods say (JARVICE is a shared API).
MIN_ROUND_SECONDS = 0.5


def next_round_in(planned: Round, *, now: float, grace: float, interval: float) -> float:
    """The interval, or less when a pending orphan's grace period ends sooner."""
    pending = [o.first_seen + grace - now for o in planned.orphans if o not in planned.due]
    return max(MIN_ROUND_SECONDS, min([interval, *pending]))
