"""Gangs: the pods of one distributed job, decided as one (pure).

A gang is the pods of an Indexed Job whose `completions` equals its `parallelism` (at least 2), or the pods of a
Kueue plain-pod group (label `kueue.x-k8s.io/pod-group-name`, annotation `kueue.x-k8s.io/pod-group-total-
count`). A non-indexed Job's pods are independent work items: they are decided one by one, as any pod.

A gang is decided once, at its first pod: local only if all of its pods fit at once (webhook.placement.pack:
each pod on a node, the GPUs one pod takes never counted for another), and then every pod's place is reserved;
otherwise every pod is remote. Later pods follow, whoever receives them, because the decision is kept where a
new leader finds it:
- as reservations, one per rank, handed over with the others (kubeplumbing.leadership): `gang.<uid>.<rank>`
    while the rank's pod has not been admitted, `gang.<uid>.<rank>.pod` once it has (and until the watch shows
    it); local ones on the rank's node, remote ones counting the rank's GPUs against the namespace's burst
    budget; `gang.<uid>.kept` / `.denied` mark a gang kept local or refused without reserving anything;
  - on the gang's pods themselves (their decision and gang annotations), once the watch shows them.
Each generation of a gang is a gang of its own, with an identity of its own (generation_uid): a burst
generation is over once one of its pods has failed or is being deleted (its JARVICE job is then not wanted:
controller.orphans), or once every rank of it succeeded, so the pod that comes next (an Indexed Job's retry, a
reused pod group name) starts the next generation, decided afresh, and its job never shares a label with the
old one. A rank that comes after another rank succeeded, while its generation is not complete, joins it and
follows the job that ran (generation_over). The generations are told apart by what every replica can read
alike: the gang's pods in the watch cache (finished burst pods included) and the outstanding reservations,
both keyed by the generation's identity (see GangIndex.snapshot). A local generation has no job: a replacement
pod joins it, as before.
This module holds the rules and what the cache keeps of gangs (GangIndex, GangBook); it hands a gang's pod's
decision (webhook.decision, which takes the pod up in its gang with webhook.gang_decision) one GangSnapshot,
and what that decision reserves and remembers comes back as its Effects (webhook.verdict), which the cache
applies (ClusterCache.apply).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from jarvice import contract
from jarvice.gangidentity import KUEUE_GROUP_LABEL, generation_uid, pod_group_uid
from kubeplumbing.times import parse_time
from webhook.types import Hold, PodInfo

LABEL_KUEUE_GROUP: Final = KUEUE_GROUP_LABEL
ANNOTATION_KUEUE_TOTAL: Final = "kueue.x-k8s.io/pod-group-total-count"
ANNOTATION_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
JOB_API_VERSION: Final = "batch/v1"
RESERVATION_PREFIX: Final = "gang."
_TAKEN: Final = ".pod"
# How many generations in a row may leave no trace (all their pods deleted) before the search for the
# latest one stops: generations are few (a Job's backoffLimit), and each probe is a few lookups.
GENERATION_GAP: Final = 2

GangSource = Literal["job", "pod-group"]
GangKind = Literal["local", "remote", "kept", "denied"]


class GangError(ValueError):
    """A pod's gang annotations cannot be used; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class JobInfo:
    """An Indexed Job, as the webhook's cache keeps it: what makes its pods a gang."""

    uid: str
    namespace: str
    name: str
    parallelism: int
    completions: int | None
    # metadata.creationTimestamp (epoch s; None: unreadable): what every pod of the gang shares, so
    # each pod's admission counts the gang's wait before bursting from it alike (webhook.waiting).
    created: float | None = None

    @property
    def gang_size(self) -> int | None:
        """The gang's size, or None when its pods are independent work items (decided one by one)."""
        if self.parallelism >= 2 and self.completions == self.parallelism:
            return self.parallelism
        return None


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class GangMember:
    """A pod of a gang, as its admission review shows it."""

    uid: Final[str]  # the generation's identity: generation 1's is the Job's UID or the pod group's uuid5
    source: Final[GangSource]
    name: Final[str]  # the Job's or the group's name, for people
    size: Final[int | None]  # None: the pod's Job is not in the webhook's cache
    rank: Final[int | None]  # an Indexed Job's completion index; None for a pod group (assigned at admission)
    generation: Final[int]  # which generation of the gang the pod is in (see generation_uid)
    since: Final[float | None]  # an Indexed Job's: when the Job was created (epoch s; None: a pod group, or unknown)

    def __init__(
        self,
        uid: str,
        source: GangSource,
        name: str,
        size: int | None,
        rank: int | None,
        *,
        generation: int = 1,
        since: float | None = None,
    ) -> None:
        self.uid = uid
        self.source = source
        self.name = name
        self.size = size
        self.rank = rank
        self.generation = generation
        self.since = since


@dataclass(init=False, unsafe_hash=True, slots=True)
class GangTerms:
    """What every pod of a gang carries: the contract's env (burst pods) and annotations."""

    uid: Final[str]
    size: Final[int]
    rank: Final[int]
    generation: Final[int]
    # When the generation began (Unix seconds, contract.ENV_GANG_SINCE; None: no pod of it seen yet).
    began: Final[int | None]

    def __init__(self, uid: str, size: int, rank: int, generation: int = 1, *, began: int | None = None) -> None:
        self.uid = uid
        self.size = size
        self.rank = rank
        self.generation = generation
        self.began = began

    def annotations(self) -> dict[str, str]:
        return {
            contract.ANNOTATION_GANG: self.uid,
            contract.ANNOTATION_GANG_SIZE: str(self.size),
            contract.ANNOTATION_GANG_RANK: str(self.rank),
            contract.ANNOTATION_GANG_GENERATION: str(self.generation),
        }


def parse_job(raw: Mapping[str, Any]) -> JobInfo | None:
    """A watched Job: its gang facts when it is Indexed (None for any other Job: its pods are not a gang)."""
    meta = raw.get("metadata")
    spec = raw.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return None
    if spec.get("completionMode") != "Indexed":
        return None
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not (isinstance(uid, str) and uid and isinstance(namespace, str) and isinstance(name, str)):
        return None
    return JobInfo(
        uid=uid,
        namespace=namespace,
        name=name,
        parallelism=parallelism if type(parallelism) is int else 1,
        completions=completions if type(completions) is int else None,
        created=parse_time(meta.get("creationTimestamp")),
    )


def _controller_job(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(uid, name) of the Job that controls the pod, if one does."""
    for ref in meta.get("ownerReferences") or ():
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        if ref.get("apiVersion") == JOB_API_VERSION and ref.get("kind") == "Job":
            uid, name = ref.get("uid"), ref.get("name")
            if isinstance(uid, str) and uid:
                return uid, str(name or "")
    return None


def _whole(text: object, where: str, *, minimum: int) -> int:
    value = text.strip() if isinstance(text, str) else ""
    if not (value.isascii() and value.isdigit()) or len(value) > 9 or int(value) < minimum:
        raise GangError(f"{where} must be a whole number >= {minimum}, got {text!r}")
    return int(value)


def find_member(
    meta: Mapping[str, Any], *, namespace: str, cluster: str, jobs: Mapping[str, JobInfo]
) -> GangMember | None:
    """The gang the pod belongs to, or None when it is decided on its own. `cluster`: the cluster's
    identity (names a pod group; "" when unknown: a pod group is then not recognised). Raises
    GangError for annotations that say "gang" but cannot be read."""
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    group = labels.get(LABEL_KUEUE_GROUP)
    if isinstance(group, str) and group:
        if ANNOTATION_KUEUE_TOTAL not in annotations:
            raise GangError(
                f"pod group {group!r}: the pod lacks the {ANNOTATION_KUEUE_TOTAL} annotation (how many pods the"
                " group has); set it on every pod of the group"
            )
        total = _whole(annotations.get(ANNOTATION_KUEUE_TOTAL), ANNOTATION_KUEUE_TOTAL, minimum=1)
        if total < 2 or not cluster:
            return None
        return GangMember(pod_group_uid(cluster, namespace, group), "pod-group", group, total, None)
    owner = _controller_job(meta)
    if owner is None or ANNOTATION_COMPLETION_INDEX not in annotations:
        return None
    job_uid, job_name = owner
    index = _whole(annotations.get(ANNOTATION_COMPLETION_INDEX), ANNOTATION_COMPLETION_INDEX, minimum=0)
    job = jobs.get(job_uid)
    if job is None:
        return GangMember(job_uid, "job", job_name, None, index)
    if job.namespace != namespace:
        return None  # an owner reference may name any Job: a gang is only ever its own namespace's
    size = job.gang_size
    if size is None or index >= size:
        return None  # completions != parallelism: a work queue of indexes, decided pod by pod
    return GangMember(job_uid, "job", job_name, size, index, since=job.created)


# ----- what the cache tells of a gang ------------------------------------------------------------


def open_id(gang_uid: str, rank: int) -> str:
    """The reservation of a rank whose pod has not been admitted yet."""
    return f"{RESERVATION_PREFIX}{gang_uid}.{rank}"


def taken_id(gang_uid: str, rank: int) -> str:
    """The reservation of a rank whose pod was admitted and not seen yet (its reservation annotation)."""
    return f"{RESERVATION_PREFIX}{gang_uid}.{rank}{_TAKEN}"


def marker_id(gang_uid: str, kind: GangKind) -> str:
    """A reservation of nothing, marking a gang kept local or refused (so a new leader knows)."""
    return f"{RESERVATION_PREFIX}{gang_uid}.{kind}"


@dataclass(init=False, unsafe_hash=True, slots=True)
class SeenGang:
    """The gang's decision as its pods in the watch cache show it."""

    kind: Final[Literal["local", "remote"] | None]  # None: no live pod of it carries a decision
    held: Final[frozenset[int]]  # ranks of its live pods and of its burst pods that succeeded

    def __init__(self, kind: Literal["local", "remote"] | None, held: frozenset[int]) -> None:
        self.kind = kind
        self.held = held


def read_pods(pods: Iterable[PodInfo]) -> SeenGang:
    """The decision of the gang's live pods (not finished, not being deleted: a gang whose pods are all
    gone or going is decided afresh) and of its burst pods that succeeded (their job ran for the whole
    gang, which a late rank follows: see generation_over), the lowest rank's first; and the ranks they
    hold. A pod kept local to wait before bursting (webhook.waiting) carries no decision of its gang:
    each of a waiting gang's pods decides it again (to wait until the same deadline, or to follow a
    gang now local)."""
    live = sorted((p for p in pods if _holds_rank(p)), key=lambda p: p.gang_rank)
    kind: Literal["local", "remote"] | None = None
    for pod in live:
        if pod.waiting:
            continue
        if pod.decision == contract.DECISION_REMOTE:
            kind = "remote"
            break
        if pod.decision == contract.DECISION_LOCAL:
            kind = "local"
            break
    return SeenGang(kind, frozenset(p.gang_rank for p in live if p.gang_rank >= 0))


def parse_terms(annotations: Mapping[str, Any]) -> GangTerms | None:
    """The gang annotations of a pod already decided (None when it has none, or they are not ours)."""
    uid = annotations.get(contract.ANNOTATION_GANG)
    if not isinstance(uid, str) or not uid:
        return None
    try:
        size = _whole(annotations.get(contract.ANNOTATION_GANG_SIZE), "size", minimum=1)
        rank = _whole(annotations.get(contract.ANNOTATION_GANG_RANK), "rank", minimum=0)
        generation = _whole(annotations.get(contract.ANNOTATION_GANG_GENERATION, "1"), "generation", minimum=1)
    except GangError:
        return None
    return GangTerms(uid, size, rank, generation) if rank < size else None


def _holds_rank(pod: PodInfo) -> bool:
    """Live, or a burst pod that succeeded: its rank is taken in its generation."""
    if pod.deleting:
        return False
    return not pod.terminal or (pod.succeeded and pod.decision == contract.DECISION_REMOTE)


def generation_over(pods: Iterable[PodInfo], *, size: int) -> bool:
    """Whether no pod may join a generation any more: one of its burst pods failed or is being deleted, so
    its JARVICE job is not wanted (controller.orphans; the pod that comes next is a retry); or each of its
    `size` ranks has a burst pod that succeeded (a pod that comes now is a new run, e.g. a reused pod group
    name). A burst pod that succeeded while some rank has none leaves it open: its job ran on every node,
    and the rank that comes late (its Job recreates evicted ranks apart) follows that job."""
    done: set[int] = set()
    for pod in pods:
        if pod.decision != contract.DECISION_REMOTE:
            continue
        if pod.deleting or (pod.terminal and not pod.succeeded):
            return True
        if pod.succeeded:
            done.add(pod.gang_rank)
    return done >= set(range(size))


@dataclass(init=False, unsafe_hash=True, slots=True)
class GangRecord:
    """What the leader remembers of a gang it decided (the reservations carry the decision itself;
    this keeps what they cannot: the reason, for the followers' annotations)."""

    kind: Final[GangKind]
    reason: Final[str]
    size: Final[int]
    expires_at: Final[float]

    def __init__(self, kind: GangKind, reason: str, size: int, expires_at: float) -> None:
        self.kind = kind
        self.reason = reason
        self.size = size
        self.expires_at = expires_at


@dataclass(frozen=True, slots=True)
class RankHolds:
    """What the outstanding reservations hold for one rank of a gang (see open_id, taken_id)."""

    opened: Hold | None  # the rank's place while its pod has not been admitted (None: none)
    taken: Hold | None  # the place of the rank's admitted pod until the watch shows it (None: none)


NOT_READ = SeenGang(None, frozenset())
_MARKS: tuple[GangKind, ...] = ("kept", "denied")


@dataclass(init=False, unsafe_hash=True, slots=True)
class GangSnapshot:
    """What the cache knows of one gang, handed to its decision (webhook.gang_decision) in one call
    (ClusterCache.gang_snapshot_for). It reads only what the decision may need: every rank and the gang's pods
    when this replica has no record of the gang or the pod has no rank yet (a pod group's); else its rank."""

    member: Final[GangMember]  # the pod, as a member of its gang
    record: Final[GangRecord | None]  # this replica's record of the gang (None: none, or it expired)
    marked: Final[GangKind | None]  # a marker held for a gang kept local or refused (see marker_id)
    ranks: Final[Mapping[int, RankHolds]]  # the ranks read that have a reservation outstanding
    seen: Final[SeenGang]  # the gang's pods in the watch cache (NOT_READ when not needed)
    now: Final[float]
    ttl: Final[float]  # how long a reservation, and a record, lasts
    began: Final[float | None]  # the creation of the generation's earliest pod in the watch cache (None: none)

    def __init__(
        self,
        member: GangMember,
        record: GangRecord | None,
        marked: GangKind | None,
        ranks: Mapping[int, RankHolds],
        seen: SeenGang,
        *,
        now: float,
        ttl: float,
        began: float | None = None,
    ) -> None:
        self.member = member
        self.record = record
        self.marked = marked
        self.ranks = ranks
        self.seen = seen
        self.now = now
        self.ttl = ttl
        self.began = began


class GangBook:
    """The gangs this replica decided, until their reservations would have expired (state)."""

    def __init__(self) -> None:
        self._records: dict[str, GangRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def get(self, gang_uid: str, *, now: float) -> GangRecord | None:
        record = self._records.get(gang_uid)
        if record is not None and record.expires_at <= now:
            del self._records[gang_uid]
            return None
        return record

    def put(self, gang_uid: str, record: GangRecord) -> None:
        self._records[gang_uid] = record

    def expire(self, *, now: float) -> None:
        self._records = {uid: record for uid, record in self._records.items() if record.expires_at > now}


class GangIndex:
    """What the watch shows of gangs (state): Indexed Jobs by UID (their size), and the pods
    carrying each gang's annotation (kept beside the cache's pods by webhook.sync), by namespace: a
    pod in another namespace that names a gang's identity never tells its decision or ends its
    generation; and the gangs this replica decided (`book`)."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobInfo] = {}
        self._pods: dict[tuple[str, str], dict[str, PodInfo]] = {}  # (namespace, gang UID) -> pod UID -> the pod
        self.book = GangBook()

    def replace_pods(self, pods: Iterable[PodInfo]) -> None:
        self._pods = {}
        for pod in pods:
            self.update(None, pod)

    def replace_jobs(self, jobs: Iterable[JobInfo]) -> None:
        self.jobs = {job.uid: job for job in jobs}

    def upsert_job(self, job: JobInfo) -> None:
        self.jobs[job.uid] = job

    def delete_job(self, uid: str) -> None:
        self.jobs.pop(uid, None)

    def pods(self, namespace: str, gang_uid: str) -> list[PodInfo]:
        return list(self._pods.get((namespace, gang_uid), {}).values())

    def snapshot(
        self,
        meta: Mapping[str, Any],
        *,
        namespace: str,
        cluster: str,
        now: float,
        ttl: float,
        hold: Callable[[str], Hold | None],
    ) -> GangSnapshot | None:
        """The gang of the pod whose metadata is `meta` (see find_member: None when the pod is decided
        alone; GangError when its annotations cannot be read), as its GangSnapshot (see there), expired
        records dropped first. `hold`: what an outstanding reservation holds (Reservations.hold)."""
        member = find_member(meta, namespace=namespace, cluster=cluster, jobs=self.jobs)
        if member is None:
            return None
        size = member.size
        if size is None:
            return GangSnapshot(member, None, None, {}, NOT_READ, now=now, ttl=ttl)
        self.book.expire(now=now)
        member = self._generation_of(member, size, namespace=namespace, now=now, hold=hold)
        uid = member.uid
        record = self.book.get(uid, now=now)
        marked = next((kind for kind in _MARKS if hold(marker_id(uid, kind)) is not None), None)
        wide = record is None or member.rank is None
        ranks: dict[int, RankHolds] = {}
        for rank in range(size) if wide else (member.rank or 0,):
            opened, taken = hold(open_id(uid, rank)), hold(taken_id(uid, rank))
            if opened is not None or taken is not None:
                ranks[rank] = RankHolds(opened, taken)
        pods = self.pods(namespace, uid)
        seen = read_pods(pods) if wide else NOT_READ
        # A rank that comes late follows a job that may have ended before its runner starts: it is told
        # from when its generation's jobs are its own (an identity used again begins again: no pod left).
        began = min((pod.created for pod in pods if pod.created > 0), default=None)
        return GangSnapshot(member, record, marked, ranks, seen, now=now, ttl=ttl, began=began)

    def _generation_of(
        self, member: GangMember, size: int, *, namespace: str, now: float, hold: Callable[[str], Hold | None]
    ) -> GangMember:
        """The member in the gang's latest generation, or in the next one when the latest is over
        (generation_over). The latest is the highest that leaves a trace here: a record, a pod in the
        watch cache, an outstanding reservation (the previous leader's, for a generation whose pods
        the watch has not shown yet)."""
        latest, generation, misses = 0, 0, 0
        while misses < GENERATION_GAP:
            generation += 1
            if self._traced(generation_uid(member.uid, generation), size, namespace=namespace, now=now, hold=hold):
                latest, misses = generation, 0
            else:
                misses += 1
        if latest == 0:
            return member
        if generation_over(self.pods(namespace, generation_uid(member.uid, latest)), size=size):
            latest += 1
        return replace(member, uid=generation_uid(member.uid, latest), generation=latest)

    def _traced(self, uid: str, size: int, *, namespace: str, now: float, hold: Callable[[str], Hold | None]) -> bool:
        if (namespace, uid) in self._pods or self.book.get(uid, now=now) is not None:
            return True
        if any(hold(marker_id(uid, kind)) is not None for kind in _MARKS):
            return True
        return any(
            hold(open_id(uid, rank)) is not None or hold(taken_id(uid, rank)) is not None for rank in range(size)
        )

    def update(self, old: PodInfo | None, pod: PodInfo | None) -> None:
        """A pod's change: `old` as it was (None: new), `pod` as it is (None: gone)."""
        if old is not None and old.gang and (pod is None or (pod.namespace, pod.gang) != (old.namespace, old.gang)):
            key = (old.namespace, old.gang)
            members = self._pods[key]
            del members[old.uid]
            if not members:
                del self._pods[key]
        if pod is not None and pod.gang:
            self._pods.setdefault((pod.namespace, pod.gang), {})[pod.uid] = pod
