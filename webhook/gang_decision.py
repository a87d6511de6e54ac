"""A gang's pod as the decision takes it up (pure): its rank, and whether its gang is decided already.

The rules are webhook.gangs'. The decision (webhook.decision.decide) starts a gang's pod here, from
the gang's GangSnapshot (ClusterCache.gang_snapshot_for), and goes on as for any pod:
  - the first pod of a gang decides for all: local only when every pod fits at once
    (webhook.placement.pack), then a reservation per rank on its node; otherwise remote, a
    reservation per rank counting its GPUs against the namespace's burst budget, which must hold
    the whole gang;
  - a later pod follows what this replica remembers (GangBook), what the outstanding reservations
    say (handed over from the previous leader), or what the gang's pods in the watch cache carry
    (after a restart), in that order; it is never decided alone, so a gang is never split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from jarvice import contract
from webhook.gangs import GangError, GangKind, GangMember, GangSnapshot, GangTerms, JobInfo, find_member
from webhook.reasons import describe_need
from webhook.types import GpuCounts


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class GangPart:
    """What a gang's pod brings to its decision beside what any pod does."""

    name: Final[str]  # the gang, for people: "Indexed Job train", "pod group ddp"
    terms: Final[GangTerms | None]  # its UID, size and this pod's rank (None: size unknown, or no rank left)
    kind: Final[GangKind | None]  # the gang's decision made before (None: this pod is the first, it decides)
    reason: Final[str]  # why this pod follows that decision ("" for the first pod)
    notes: Final[Mapping[str, str]]  # annotations: the gang's UID, size and rank (what is known of them)
    node: Final[str]  # a later pod of a local gang: its rank's reserved node ("": none, or gone)
    expires_at: Final[float]  # until when a record of the gang's decision is kept
    # A later pod of a remote gang that submits its job (rank 0) and whose rank's reservation has
    # lapsed (or was never handed over): the gang's GPUs are counted for it no more, so its budget is
    # asked again before it bursts.
    recount: Final[bool]

    def __init__(
        self,
        name: str,
        terms: GangTerms | None,
        kind: GangKind | None,
        reason: str,
        notes: Mapping[str, str],
        *,
        node: str = "",
        expires_at: float = 0.0,
        recount: bool = False,
    ) -> None:
        self.name = name
        self.terms = terms
        self.kind = kind
        self.reason = reason
        self.notes = notes
        self.node = node
        self.expires_at = expires_at
        self.recount = recount


def awaits_its_job(meta: Mapping[str, Any], jobs: Mapping[str, JobInfo]) -> bool:
    """Whether the pod is an Indexed Job's whose Job `jobs` (the watch cache) does not hold yet: the Job
    controller creates the pods milliseconds after the Job, and its watch event may come later."""
    try:
        member = find_member(meta, namespace="", cluster="", jobs=jobs)
    except (GangError, AttributeError, TypeError):  # unreadable metadata: decided now, with the error it gives
        return False
    return member is not None and member.source == "job" and member.size is None


def describe(member: GangMember) -> str:
    what = "Indexed Job" if member.source == "job" else "pod group"
    return f"{what} {member.name}"


def describe_gang_need(gpus: GpuCounts, size: int) -> str:
    return f"{size} x {describe_need(gpus)}"


def _shown(kind: GangKind) -> str:
    return {"local": "local", "remote": "remote", "kept": "kept local", "denied": "refused"}[kind]


def take_up(gang: GangSnapshot) -> GangPart:
    """The pod's part in its gang: the first pod's rank; a later pod's rank and the decision it follows."""
    member = gang.member
    name = describe(member)
    if member.size is None:
        # The Job's watch event has not reached the cache: its size is unknown. Kept local: no rank
        # is ever burst without its gang, and the gang's other pods will follow this one.
        notes = {contract.ANNOTATION_GANG: member.uid}
        if member.rank is not None:
            notes[contract.ANNOTATION_GANG_RANK] = str(member.rank)
        reason = (
            f"pod of {name}, which is not in the webhook's cache yet (its size is unknown); kept local"
            " so that the gang is never split"
        )
        return GangPart(name, None, "kept", reason, notes)
    size = member.size
    expires_at = gang.now + gang.ttl
    kind, why = (gang.record.kind, gang.record.reason) if gang.record is not None else _recall(member, gang)
    began = None if gang.began is None else math.floor(gang.began)
    if kind is None:
        rank0 = member.rank if member.rank is not None else 0
        terms = GangTerms(member.uid, size, rank0, member.generation, began=began)
        return GangPart(name, terms, None, "", terms.annotations(), expires_at=expires_at)
    rank = member.rank
    if rank is None:
        taken = [each for each, holds in gang.ranks.items() if holds.taken is not None]
        rank = free_rank(size, held=gang.seen.held, taken=taken)
    if rank is None:
        reason = f"all {size} ranks of {name} are held by live pods; this extra pod is kept local"
        return GangPart(name, None, "kept", reason, {})
    terms = GangTerms(member.uid, size, rank, member.generation, began=began)
    reason = f"{name} ({size} pods) is {_shown(kind)}, as decided at its first pod: {why}"
    holds = gang.ranks.get(rank)
    opened = holds.opened if holds is not None else None
    # A place reserved on a node that has gone holds nothing: the pod looks for one anew.
    node = opened.node if opened is not None and opened.local else ""
    recount = kind == "remote" and rank == contract.GANG_SUBMITTING_RANK and opened is None
    return GangPart(name, terms, kind, reason, terms.annotations(), node=node, expires_at=expires_at, recount=recount)


def free_rank(size: int, *, held: Iterable[int], taken: Iterable[int]) -> int | None:
    """A pod group's next rank: the lowest not held by a live pod nor given to an admission whose pod
    the watch has not shown yet; None when every rank is."""
    used = set(held) | set(taken)
    for rank in range(size):
        if rank not in used:
            return rank
    return None


def _recall(member: GangMember, gang: GangSnapshot) -> tuple[GangKind | None, str]:
    """The decision of a gang this replica has no record of: from the reservations it took over
    (a handover), else from the gang's pods in the watch cache (a restart); (None, "") if neither knows."""
    assert member.size is not None
    if gang.marked is not None:
        return gang.marked, "recorded by the previous leader"
    for rank in range(member.size):
        holds = gang.ranks.get(rank)
        for hold in (holds.opened, holds.taken) if holds is not None else ():
            if hold is not None:
                return "local" if hold.local else "remote", "recorded by the previous leader"
    if gang.seen.kind is not None:
        return gang.seen.kind, "as its pods already running or waiting were decided"
    return None, ""
