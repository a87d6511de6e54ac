"""A gang's pod admitted: the gang decided at its first pod, every later pod following it (no I/O).

The rules are webhook.gangs'; this applies them to the cache, in the same event-loop tick as the
decision, under the cache's lock (like webhook.admission):
  - the first pod of a gang decides for all: local only when every pod fits at once (gangs.pack),
    then a reservation per rank on its node; otherwise remote, a reservation per rank counting its
    GPUs against the namespace's burst budget, which must hold the whole gang;
  - a later pod follows what this replica remembers (GangBook), what the outstanding reservations
    say (handed over from the previous leader), or what the gang's pods in the watch cache carry
    (after a restart), in that order; it is never decided alone, so a gang is never split.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from entrypoint import contract
from webhook import budget, mutation
from webhook import decision as decisions
from webhook.cache import ClusterCache
from webhook.gangs import (
    GangKind,
    GangMember,
    GangRecord,
    GangTerms,
    free_rank,
    marker_id,
    open_id,
    pack,
    read_pods,
    taken_id,
)
from webhook.reasons import describe_need
from webhook.review import AdmissionRequest, build_denial, build_response
from webhook.types import Decision, GpuCounts, Placement, Requests


@dataclass(frozen=True, slots=True)
class Settled:
    """What a gang's pod gets."""

    kind: GangKind
    reason: str
    notes: Mapping[str, str]  # annotations: the gang's UID, size and rank (what is known of them)
    terms: GangTerms | None = None  # a burst pod's gang env (set for kind "remote")
    node: str = ""
    reservation_id: str = ""
    budget_note: str = ""  # kept local or refused by the namespace's burst budget: which budget
    candidates: int = 0


@dataclass(frozen=True, slots=True)
class GangAnswer:
    response: dict[str, Any]
    outcome: Literal["local", "remote", "denied"]  # as webhook.admission.Outcome
    reason: str
    node: str = ""
    over_budget: bool = False


@dataclass(frozen=True, slots=True)
class Context:
    """The admission's facts a gang decision reads."""

    namespace: str
    requests: Requests  # one pod's: GPUs plus what else it takes from a node
    gpus: GpuCounts
    placement: Placement
    local_refusal: str  # why no local promise may be made now ("" when one may)
    burst_problem: str  # why this pod may not burst whatever the decision ("" when it may)
    over_budget: budget.OverBudget
    dry_run: bool


def _describe(member: GangMember) -> str:
    what = "Indexed Job" if member.source == "job" else "pod group"
    return f"{what} {member.name}"


def settle(member: GangMember, context: Context, cache: ClusterCache) -> Settled:
    """The gang's decision for this pod (made now if it is the gang's first), its reservations applied."""
    if member.size is None:
        # The Job's watch event has not reached the cache: its size is unknown. Kept local: no rank
        # is ever burst without its gang, and the gang's other pods will follow this one.
        notes = {contract.ANNOTATION_GANG: member.uid}
        if member.rank is not None:
            notes[contract.ANNOTATION_GANG_RANK] = str(member.rank)
        reason = (
            f"pod of {_describe(member)}, which is not in the webhook's cache yet (its size is unknown); kept local"
            " so that the gang is never split"
        )
        return Settled("kept", reason, notes)
    now = cache.reservations.now()
    cache.gang_index.book.expire(now=now)
    size = member.size
    record = cache.gang_index.book.get(member.uid, now=now)
    kind, why = (record.kind, record.reason) if record is not None else _recall(member, cache)
    if kind is None:
        return _decide_first(member, context, cache, now=now)
    rank = _rank(member, cache, size=size)
    if rank is None:
        reason = f"all {size} ranks of {_describe(member)} are held by live pods; this extra pod is kept local"
        return Settled("kept", reason, {})
    terms = GangTerms(member.uid, size, rank)
    reason = f"{_describe(member)} ({size} pods) is {_shown(kind)}, as decided at its first pod: {why}"
    if kind == "remote" and context.burst_problem:
        # Nothing can burst without the cluster's identity (see admission._cluster_identity).
        return Settled("kept", f"{reason}; not burst: {context.burst_problem}", terms.annotations())
    if kind == "remote":
        reservation = "" if context.dry_run else _take_remote(cache, member.uid, rank, context)
        return Settled("remote", reason, terms.annotations(), terms, reservation_id=reservation)
    if kind == "local":
        return _follow_local(member, context, cache, terms=terms, reason=reason)
    return Settled(kind, reason, terms.annotations())


def _shown(kind: GangKind) -> str:
    return {"local": "local", "remote": "remote", "kept": "kept local", "denied": "refused"}[kind]


def _recall(member: GangMember, cache: ClusterCache) -> tuple[GangKind | None, str]:
    """The decision of a gang this replica has no record of: from the reservations it took over
    (a handover), else from the gang's pods in the watch cache (a restart); (None, "") if neither knows."""
    reservations = cache.reservations
    assert member.size is not None
    marked: tuple[GangKind, ...] = ("kept", "denied")
    for kind in marked:
        if reservations.holds(marker_id(member.uid, kind)):
            return kind, "recorded by the previous leader"
    for rank in range(member.size):
        for reservation in (open_id(member.uid, rank), taken_id(member.uid, rank)):
            if reservations.local_node(reservation) is not None:
                return "local", "recorded by the previous leader"
            if reservations.holds(reservation):
                return "remote", "recorded by the previous leader"
    seen = read_pods(cache.gang_index.pods(member.uid))
    if seen.kind is not None:
        return seen.kind, "as its pods already running or waiting were decided"
    return None, ""


def _taken(cache: ClusterCache, gang_uid: str, size: int) -> list[int]:
    return [rank for rank in range(size) if cache.reservations.holds(taken_id(gang_uid, rank))]


def _rank(member: GangMember, cache: ClusterCache, *, size: int) -> int | None:
    if member.rank is not None:
        return member.rank
    held = read_pods(cache.gang_index.pods(member.uid)).held
    return free_rank(size, held=held, taken=_taken(cache, member.uid, size))


def _decide_first(member: GangMember, context: Context, cache: ClusterCache, *, now: float) -> Settled:
    assert member.size is not None
    size = member.size
    rank = member.rank if member.rank is not None else 0
    terms = GangTerms(member.uid, size, rank)
    need = describe_gang_need(context.gpus, size)
    packing = pack(cache.view, context.requests, context.placement, size=size)
    refusal = cache.reservations.refusal(context.namespace)
    if packing.fits and not context.local_refusal and not refusal:
        places = ", ".join(sorted(set(packing.nodes)))
        reason = f"all {size} pods of {_describe(member)} fit at once ({need}) on {places}"
        if not context.dry_run:
            for each, node in enumerate(packing.nodes):
                reservation = taken_id(member.uid, each) if each == rank else open_id(member.uid, each)
                cache.reserve(
                    reservation,
                    node=node,
                    requests=context.requests,
                    placement=context.placement,
                    namespace=context.namespace,
                )
            _remember(cache, member, "local", reason, now=now)
        return Settled(
            "local",
            reason,
            terms.annotations(),
            node=packing.nodes[rank],
            reservation_id="" if context.dry_run else taken_id(member.uid, rank),
            candidates=len(set(packing.nodes)),
        )
    if packing.fits:
        reason = f"all {size} pods of {_describe(member)} fit ({need}), but {context.local_refusal or refusal}"
    else:
        reason = (
            f"{_describe(member)} needs {need} at once; only {len(packing.nodes)} of its {size} pods fit on the"
            " nodes now"
        )
    return _decide_remote(member, context, cache, terms=terms, reason=reason, now=now)


def describe_gang_need(gpus: GpuCounts, size: int) -> str:
    return f"{size} x {describe_need(gpus)}"


def _decide_remote(
    member: GangMember, context: Context, cache: ClusterCache, *, terms: GangTerms, reason: str, now: float
) -> Settled:
    namespace = context.namespace
    if context.burst_problem:
        why = f"{reason}; not burst: {context.burst_problem}"
        return _mark(member, context, cache, kind="kept", reason=why, terms=terms, now=now)
    per_pod = decisions.remote_gpus(context.gpus)
    whole = per_pod * terms.size
    refusal = budget.over_budget(
        cache.budget(namespace), namespace=namespace, in_use=cache.remote_in_use(namespace), need=whole
    )
    if refusal:
        refusal += f" (the whole gang of {terms.size} pods)"
    elif context.local_refusal and cache.budget(namespace) is not None:
        refusal = f"{context.local_refusal}, so no burst can be counted against the budget of namespace {namespace}"
        why = f"{reason}; not burst: {refusal}"
        return _mark(member, context, cache, kind="kept", reason=why, terms=terms, budget_note=refusal, now=now)
    if refusal:
        kind: GangKind = "denied" if context.over_budget == "deny" else "kept"
        why = f"{reason}; not burst: {refusal}"
        return _mark(member, context, cache, kind=kind, reason=why, terms=terms, budget_note=refusal, now=now)
    if not context.dry_run:
        for rank in range(terms.size):
            reservation = taken_id(member.uid, rank) if rank == terms.rank else open_id(member.uid, rank)
            cache.reserve_remote(reservation, namespace=namespace, gpus=per_pod)
        _remember(cache, member, "remote", reason, now=now)
    reservation = "" if context.dry_run else taken_id(member.uid, terms.rank)
    return Settled("remote", reason, terms.annotations(), terms, reservation_id=reservation)


def _mark(
    member: GangMember,
    context: Context,
    cache: ClusterCache,
    *,
    kind: GangKind,
    reason: str,
    terms: GangTerms,
    now: float,
    budget_note: str = "",
) -> Settled:
    """A gang kept local or refused: nothing reserved, but remembered (and marked for a new leader)."""
    if not context.dry_run:
        cache.reserve_remote(marker_id(member.uid, kind), namespace=context.namespace, gpus=0)
        _remember(cache, member, kind, reason, now=now)
    return Settled(kind, reason, terms.annotations(), budget_note=budget_note)


def _remember(cache: ClusterCache, member: GangMember, kind: GangKind, reason: str, *, now: float) -> None:
    assert member.size is not None
    expires_at = now + cache.reservations.ttl
    cache.gang_index.book.put(member.uid, GangRecord(kind=kind, reason=reason, size=member.size, expires_at=expires_at))


def _take_remote(cache: ClusterCache, gang_uid: str, rank: int, context: Context) -> str:
    """The rank's remote reservation, now for this pod (its annotation releases it when it appears).
    A lapsed one is made again: the pod's GPUs count until the watch shows it."""
    taken = taken_id(gang_uid, rank)
    cache.release_reservation(open_id(gang_uid, rank))
    cache.reserve_remote(taken, namespace=context.namespace, gpus=decisions.remote_gpus(context.gpus))
    return taken


def _follow_local(
    member: GangMember, context: Context, cache: ClusterCache, *, terms: GangTerms, reason: str
) -> Settled:
    """The rank's reserved place, now this pod's. Without one (it lapsed, or this pod replaces one),
    a place if a node has room now; else the pod waits for local GPUs: its gang runs here."""
    opened, taken = open_id(member.uid, terms.rank), taken_id(member.uid, terms.rank)
    node = cache.reservations.local_node(opened)
    if not node:  # none, or one whose node has gone (it holds nothing)
        choice = decisions.choose(
            context.requests,
            context.placement,
            cache.view,
            reservation_refusal=cache.reservations.refusal(context.namespace),
        )
        cache.move_claims(choice.moves)
        decided: Decision = choice.decision
        if decided.kind != "local":
            return Settled("kept", f"{reason}; this pod waits for local GPUs ({decided.reason})", terms.annotations())
        node = decided.node
    if context.dry_run:
        return Settled("local", reason, terms.annotations(), node=node)
    cache.release_reservation(opened)
    cache.reserve(taken, node=node, requests=context.requests, placement=context.placement, namespace=context.namespace)
    return Settled("local", reason, terms.annotations(), node=node, reservation_id=taken)


def answer(
    request: AdmissionRequest,
    settled: Settled,
    *,
    gpus: GpuCounts,
    policy: mutation.RewritePolicy,
    burst_terms: mutation.BurstTerms,
    warnings: list[str],
) -> GangAnswer:
    """The admission response for a gang's pod. `burst_terms` (cluster, walltime) and `warnings`
    (the walltime's, the env's) are the admission's, used when the pod bursts."""
    pod = request.object
    if settled.kind == "denied":
        message = (
            f"nimbix-burst: the burst budget of namespace {request.namespace} does not allow this pod's gang:"
            f" {settled.budget_note or settled.reason}. Delete the gang and create it again when burst pods in"
            f" {request.namespace} have finished, use fewer pods or GPUs, or ask an administrator to raise the"
            f" namespace's {budget.ANNOTATION_MAX_REMOTE_GPUS} annotation"
        )
        return GangAnswer(build_denial(request.uid, message), "denied", settled.reason, over_budget=True)
    if settled.kind == "kept":
        notes = dict(settled.notes)
        if settled.budget_note:
            notes[budget.ANNOTATION_BUDGET] = settled.budget_note
        patch = mutation.build_kept_local_patch(pod, reason=settled.reason, notes=notes)
        warning = f"nimbix-burst: kept local, not burst: {settled.reason}"
        response = build_response(request.uid, patch=patch, warnings=[warning])
        return GangAnswer(response, "local", settled.reason, over_budget=bool(settled.budget_note))
    if settled.kind == "local":
        decision = Decision(kind="local", reason=settled.reason, node=settled.node, candidates=settled.candidates)
        patch = mutation.build_local_patch(
            pod, decision=decision, reservation_id=settled.reservation_id, notes=settled.notes
        )
        return GangAnswer(build_response(request.uid, patch=patch), "local", settled.reason, settled.node)
    terms = mutation.BurstTerms(  # built, not dataclasses.replace(): BurstTerms is compiled with mypyc
        cluster=burst_terms.cluster,
        limit=burst_terms.limit,
        staging=burst_terms.staging,
        gpu_model=burst_terms.gpu_model,
        allowed_machines=burst_terms.allowed_machines,
        gang=settled.terms,
    )
    decision = Decision(kind="remote", reason=settled.reason)
    patch = mutation.build_remote_patch(
        pod,
        gpus=gpus,
        decision=decision,
        policy=policy,
        terms=terms,
        remote_gpus=decisions.remote_gpus(gpus),
        reservation_id=settled.reservation_id,
    )
    shown = f"rank {settled.terms.rank} of {settled.terms.size}" if settled.terms is not None else "a rank"
    said = [f"nimbix-burst: this pod will run on Nimbix JARVICE as {shown} of one multi-node job: {settled.reason}"]
    return GangAnswer(build_response(request.uid, patch=patch, warnings=said + warnings), "remote", settled.reason)
