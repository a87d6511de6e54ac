"""Which JARVICE jobs nobody wants, which of them are due for termination, and which burst pods get
the end of their job recorded (pure).

A job is this cluster's when its label parses as a runner label carrying this cluster's identity
(`k8s-<cluster>.<pod uid>[-<container>]-<attempt>`, see `jarvice.labels.build_job_label`). A
legacy label (no cluster) or another cluster's is never acted on, only reported.

A gang's job (the pods of one distributed job burst as one multi-node job) carries the gang's UID
instead, and no container: it is wanted while at least one member of the gang exists and every
member can still follow it. A member is a pod the product decided remote whose `nimbix-burst.io/gang`
is the identity its own namespace and owner make (model.member_of), so a pod that merely carries the
annotation is none; members in another namespace never make the job unwanted (none finished, exited for good or past its
deletion deadline), since a distributed job cannot go on without one of its ranks. The UID is one
generation's (webhook.gangs: a retry of the gang, after one of its burst pods finished, is a gang of
its own), so an earlier generation's finished pods never make a later generation's job unwanted,
and an earlier generation's job is unwanted as soon as one pod of its own can no longer follow it.

One of this cluster's other live jobs is *wanted* while a pod with its UID exists, which the product
decided (the `task-type: Nimbix` label and the webhook's `remote` decision: a job of a copy made
without the label, or of a pod decided local, is one nothing accounts for), and whose container can
still follow it: the pod is not terminal (Succeeded/Failed), not past its deletion deadline, and
the container the label names (any app container, for a label without one) has not exited for good
under its restart policy. Of two live jobs of one label only the lowest-numbered is wanted (the
rule the runner follows too). An unwanted job is an *orphan*; it is terminated only after it has
been unwanted for `grace` seconds in a row: a pod the watch has not shown yet, or a status that
lasted one round only, costs nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from controller.model import ReapView, member_of
from jarvice import duplicates
from jarvice.labels import ParsedLabel, parse_job_label
from jarvice.model import is_terminal

# The API server's clock sets deletionTimestamp, ours reads it: allow this much skew between them
# (NTP keeps nodes well within it) before a terminating pod counts as past its deadline; the
# reaper's grace period still applies after that.
DELETION_SKEW_SECONDS = 5.0

Reason = Literal["pod-gone", "pod-finished", "deletion-overdue", "container-exited", "duplicate", "not-decided"]
NotOursKind = Literal["legacy-label", "other-cluster"]


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
    reason: Reason
    first_seen: float  # monotonic seconds
    kept: int | None = None  # for a duplicate: the job of the same label the pod follows


@dataclass(frozen=True, slots=True)
class NotOurs:
    """A live job with a runner label that this cluster's reaper leaves alone."""

    number: int
    label: str
    kind: NotOursKind
    cluster: str | None


@dataclass(frozen=True, slots=True)
class Round:
    first_seen: dict[int, float]  # job number -> when first seen unwanted (carried to the next round)
    orphans: list[Orphan]  # every unwanted job this round, due or not
    due: list[Orphan]  # unwanted for at least the grace period
    newly_seen: list[Orphan]  # orphans not seen in the previous round
    not_ours: list[NotOurs]  # live jobs with a legacy label or another cluster's
    carried_uids: frozenset[str]  # pod UIDs some live job with a runner label (any cluster) carries


def pod_reason(pod: ReapView | None, *, wall_now: float) -> Reason | None:
    """Why no container of `pod` can follow any job any more, or None while one can."""
    if pod is None:
        return "pod-gone"
    if not pod.decided:
        return "not-decided"
    if pod.terminal:
        return "pod-finished"
    if pod.deletion_deadline is not None and wall_now > pod.deletion_deadline + DELETION_SKEW_SECONDS:
        return "deletion-overdue"
    if not pod.following:
        return "container-exited"
    return None


def label_reason(parsed: ParsedLabel, pod: ReapView | None, *, wall_now: float) -> Reason | None:
    """Why the job of `parsed` is not followed by its pod, or None while it may be."""
    reason = pod_reason(pod, wall_now=wall_now)
    if reason is not None or pod is None:
        return reason
    if not any(parsed.names_container(name) for name in pod.following):
        return "container-exited"
    return None


def gang_reason(members: Collection[ReapView], *, wall_now: float) -> Reason | None:
    """Why a gang's job is not wanted (its pods: those carrying the gang's UID), or None while it is."""
    if not members:
        return "pod-gone"
    for pod in members:
        reason = pod_reason(pod, wall_now=wall_now)
        if reason is not None:
            return reason
    return None


def _gangs(pods: Mapping[str, ReapView], *, cluster: str) -> dict[str, dict[str, list[ReapView]]]:
    """Each gang's members (model.member_of: pods the product decided, whose own namespace and owner
    make the identity they carry), by namespace."""
    members: dict[str, dict[str, list[ReapView]]] = {}
    for pod in pods.values():
        if gang := member_of(pod, cluster=cluster):
            members.setdefault(gang, {}).setdefault(pod.namespace, []).append(pod)
    return members


def gang_reason_by_namespace(groups: Mapping[str, Collection[ReapView]], *, wall_now: float) -> Reason | None:
    """A gang's job is wanted while the members of some namespace all follow it: a pod in another
    namespace never makes it unwanted (only an Indexed Job's pod whose owner reference names a Job of
    another namespace could be there at all, and Kubernetes' garbage collector deletes such a pod)."""
    reasons = [gang_reason(members, wall_now=wall_now) for _, members in sorted(groups.items())]
    if not reasons or any(reason is None for reason in reasons):
        return None if reasons else "pod-gone"
    return reasons[0]


def _kept_of_label(live: Iterable[Job]) -> dict[str, int]:
    """The number of the job each label keeps: the runner's rule (jarvice.duplicates), so both keep the same."""
    of_label: dict[str, list[Job]] = {}
    for job in live:
        of_label.setdefault(job.label, []).append(job)
    kept = {label: duplicates.decide_kept_job(jobs).kept for label, jobs in of_label.items()}
    return {label: job.number for label, job in kept.items() if job is not None}


def plan_round(
    jobs: Collection[Job],
    *,
    pods: Mapping[str, ReapView],
    cluster: str,
    first_seen: Mapping[int, float],
    now: float,
    wall_now: float,
    grace: float,
) -> Round:
    """`now` is monotonic (grace periods), `wall_now` epoch seconds (deletion deadlines)."""
    live: list[tuple[Job, ParsedLabel]] = []
    for job in sorted(jobs, key=lambda j: j.number):
        # A job in a terminal state (JARVICE's four, reference §6) has nothing left to stop.
        parsed = parse_job_label(job.label) if not is_terminal(job.state) else None
        if parsed is not None:
            live.append((job, parsed))
    kept_of_label = _kept_of_label(job for job, _ in live)
    not_ours: list[NotOurs] = []
    carried: dict[int, float] = {}
    orphans: list[Orphan] = []
    due: list[Orphan] = []
    newly: list[Orphan] = []
    gangs = _gangs(pods, cluster=cluster)
    for job, parsed in live:
        if parsed.cluster != cluster:
            kind: NotOursKind = "legacy-label" if parsed.cluster is None else "other-cluster"
            not_ours.append(NotOurs(number=job.number, label=job.label, kind=kind, cluster=parsed.cluster))
            continue
        kept = kept_of_label[job.label]
        if parsed.container is None and parsed.pod_uid in gangs and parsed.pod_uid not in pods:
            reason = gang_reason_by_namespace(gangs[parsed.pod_uid], wall_now=wall_now)
        else:
            reason = label_reason(parsed, pods.get(parsed.pod_uid), wall_now=wall_now)
        if reason is None and kept != job.number:
            reason = "duplicate"
        if reason is None:
            continue
        seen = first_seen.get(job.number, now)
        carried[job.number] = seen
        orphan = Orphan(
            number=job.number,
            label=job.label,
            pod_uid=parsed.pod_uid,
            reason=reason,
            first_seen=seen,
            kept=kept if reason == "duplicate" else None,
        )
        orphans.append(orphan)
        if job.number not in first_seen:
            newly.append(orphan)
        if now - seen >= grace:
            due.append(orphan)
    return Round(
        first_seen=carried,
        orphans=orphans,
        due=due,
        newly_seen=newly,
        not_ours=not_ours,
        carried_uids=frozenset(parsed.pod_uid for _, parsed in live),
    )


# Rounds are never closer than this, whatever the grace periods say (JARVICE is a shared API).
MIN_ROUND_SECONDS = 0.5


def next_round_in(planned: Round, *, now: float, grace: float, interval: float) -> float:
    """The interval, or less when a pending orphan's grace period ends sooner."""
    pending = [o.first_seen + grace - now for o in planned.orphans if o not in planned.due]
    return max(MIN_ROUND_SECONDS, min([interval, *pending]))


def plan_records(
    pods_before: Mapping[str, ReapView],
    *,
    pods_now: Mapping[str, ReapView],
    carried_uids: Collection[str],
    wall_now: float,
    limit: int,
) -> list[ReapView]:
    """The burst pods to mark `job-state: ended`: done (no container can follow a job) already in
    `pods_before`, the pods as they were before the job list (so no runner of theirs could submit
    after it), carried by no live job, and still there and unmarked in `pods_now` (whose view is
    returned). At most `limit`, in namespace/name order so that every pod gets its turn."""
    chosen = [
        pods_now[pod.uid]
        for pod in pods_before.values()
        if pod.burst
        and pod.uid not in carried_uids
        and pod.gang not in carried_uids  # a gang's pods follow the gang's job ("" is never carried)
        and pod_reason(pod, wall_now=wall_now) is not None
        and pod.uid in pods_now
        and not pods_now[pod.uid].job_ended
    ]
    chosen.sort(key=lambda pod: (pod.namespace, pod.name))
    return chosen[:limit]
