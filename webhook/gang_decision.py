"""A gang's pod decided (pure): the gang decided at its first pod, every later pod following it.

The rules are webhook.gangs'. decide_gang() reads plain data: the admission's Snapshot, the gang's
GangSnapshot (ClusterCache.gang_snapshot_for) and the pod's facts (Context); it returns a GangVerdict,
whose effects (GangEffects: claim moves, reservations to release and to make, the record to remember)
the cache applies once (ClusterCache.apply_gang), in the same event-loop tick, under the cache's lock:
  - the first pod of a gang decides for all: local only when every pod fits at once (gangs.pack),
    then a reservation per rank on its node; otherwise remote, a reservation per rank counting its
    GPUs against the namespace's burst budget, which must hold the whole gang;
  - a later pod follows what this replica remembers (GangBook), what the outstanding reservations
    say (handed over from the previous leader), or what the gang's pods in the watch cache carry
    (after a restart), in that order; it is never decided alone, so a gang is never split.
A dry run decides the same and has nothing reserved or remembered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from entrypoint import contract
from webhook import budget, data_volumes, gpu_models, mutation, walltime
from webhook.decision import BurstAsk, choose, remote_gpus
from webhook.gangs import (
    GangEffects,
    GangKind,
    GangMember,
    GangRecord,
    GangSnapshot,
    GangTerms,
    free_rank,
    marker_id,
    open_id,
    pack,
    taken_id,
)
from webhook.reasons import describe_need
from webhook.types import GpuCounts, LocalReservation, PodNeeds, RemoteReservation, Snapshot

NO_EFFECTS = GangEffects()
# What a burst of the gang carries beside its cluster and walltime: (staging, GPU model, machines).
_Extras = tuple[tuple[tuple[str, str, str], ...], str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Context:
    """The admission's facts a gang decision reads."""

    needs: PodNeeds  # one pod's: its GPUs, everything it takes from a node, its placement
    pod: BurstAsk  # what a burst must honour (its data, its GPU model) and the policy
    active_deadline: object  # its spec.activeDeadlineSeconds as received (see walltime.decide_walltime)
    local_refusal: str  # why no local promise may be made now ("" when one may)
    over_budget: budget.OverBudget
    dry_run: bool


@dataclass(frozen=True, slots=True)
class GangVerdict:
    """What a gang's pod gets (webhook.responses answers it), and what the cache applies for it."""

    kind: GangKind
    reason: str
    notes: Mapping[str, str]  # annotations: the gang's UID, size and rank (what is known of them)
    terms: GangTerms | None = None  # a burst pod's gang env (set for kind "remote")
    node: str = ""
    reservation_id: str = ""
    budget_note: str = ""  # kept local or refused by the namespace's burst budget: which budget
    candidates: int = 0
    burst: mutation.BurstTerms | None = None  # remote: the burst's terms, its gang's included
    limit_warning: str = ""  # remote: why the namespace's default walltime was not used
    remote_gpus: int = 0  # remote: what this pod counts against its namespace's budget
    effects: GangEffects = NO_EFFECTS


def _describe(member: GangMember) -> str:
    what = "Indexed Job" if member.source == "job" else "pod group"
    return f"{what} {member.name}"


def decide_gang(context: Context, snapshot: Snapshot, gang: GangSnapshot) -> GangVerdict:
    """The gang's decision for this pod (made now if it is the gang's first), with its effects."""
    member = gang.member
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
        return GangVerdict("kept", reason, notes)
    extras = _burst_extras(context, snapshot)
    size = member.size
    record = gang.record
    kind, why = (record.kind, record.reason) if record is not None else _recall(member, gang)
    if kind is None:
        return _decide_first(member, context, snapshot, gang, extras)
    rank = member.rank
    if rank is None:
        taken = [each for each, holds in gang.ranks.items() if holds.taken is not None]
        rank = free_rank(size, held=gang.seen.held, taken=taken)
    if rank is None:
        reason = f"all {size} ranks of {_describe(member)} are held by live pods; this extra pod is kept local"
        return GangVerdict("kept", reason, {})
    terms = GangTerms(member.uid, size, rank)
    reason = f"{_describe(member)} ({size} pods) is {_shown(kind)}, as decided at its first pod: {why}"
    if kind == "remote" and isinstance(extras, str):
        # Nothing can burst without the cluster's identity (see ClusterCache.snapshot_for).
        return GangVerdict("kept", f"{reason}; not burst: {extras}", terms.annotations())
    if kind == "remote" and not isinstance(extras, str):
        return _take_remote(context, snapshot, terms=terms, reason=reason, extras=extras)
    if kind == "local":
        return _follow_local(context, snapshot, gang, terms=terms, reason=reason)
    return GangVerdict(kind, reason, terms.annotations())


def _shown(kind: GangKind) -> str:
    return {"local": "local", "remote": "remote", "kept": "kept local", "denied": "refused"}[kind]


def _burst_extras(context: Context, snapshot: Snapshot) -> _Extras | str:
    """A gang's burst terms beside its cluster and walltime, as decide() works them out for one pod;
    or why it may not burst whatever is decided (then every pod of it is kept local): more than one
    runner, no cluster identity, no machine offers its GPU model, its data cannot follow."""
    spec, policy = context.pod.spec, context.pod.policy
    bursting = mutation.burst_container_names(spec, policy=policy)
    if len(bursting) > 1:
        return f"a gang's pod bursts as one rank of one job, and this one has {len(bursting)} containers with GPUs"
    model = gpu_models.parse_constraint(context.needs.placement, label=policy.gpu_model_label)
    machines = gpu_models.resolve(model, policy.gpu_model_map) if model is not None else None
    if snapshot.cluster_unknown:
        return snapshot.cluster_unknown
    if isinstance(machines, gpu_models.NoMachineOffers):
        return machines.reason
    data = data_volumes.plan_data(spec, context.pod.annotations, burst_containers=bursting)
    if isinstance(data, data_volumes.DataRefusal):
        return data.reason
    staging = tuple((c.container, c.env_value("in"), c.env_value("out")) for c in data.staging)
    allowed = machines.machines if isinstance(machines, gpu_models.AllowedMachines) else ()
    return staging, gpu_models.describe_constraint(model) if model is not None else "", allowed


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


def _record(member: GangMember, gang: GangSnapshot, kind: GangKind, reason: str) -> GangRecord:
    assert member.size is not None
    return GangRecord(kind=kind, reason=reason, size=member.size, expires_at=gang.now + gang.ttl)


def _decide_first(
    member: GangMember, context: Context, snapshot: Snapshot, gang: GangSnapshot, extras: _Extras | str
) -> GangVerdict:
    assert member.size is not None
    size = member.size
    needs = context.needs
    rank = member.rank if member.rank is not None else 0
    terms = GangTerms(member.uid, size, rank)
    need = describe_gang_need(needs.gpus, size)
    packing = pack(snapshot.view, needs.requests, needs.placement, size=size)
    refusal = snapshot.reservation_refusal
    if packing.fits and not context.local_refusal and not refusal:
        places = ", ".join(sorted(set(packing.nodes)))
        reason = f"all {size} pods of {_describe(member)} fit at once ({need}) on {places}"
        local = tuple(
            LocalReservation(
                taken_id(member.uid, each) if each == rank else open_id(member.uid, each),
                node,
                needs.requests,
                needs.placement,
                needs.namespace,
            )
            for each, node in enumerate(packing.nodes)
        )
        effects = GangEffects(member.uid, local=local, record=_record(member, gang, "local", reason))
        return GangVerdict(
            "local",
            reason,
            terms.annotations(),
            node=packing.nodes[rank],
            reservation_id="" if context.dry_run else taken_id(member.uid, rank),
            candidates=len(set(packing.nodes)),
            effects=NO_EFFECTS if context.dry_run else effects,
        )
    if packing.fits:
        reason = f"all {size} pods of {_describe(member)} fit ({need}), but {context.local_refusal or refusal}"
    else:
        reason = (
            f"{_describe(member)} needs {need} at once; only {len(packing.nodes)} of its {size} pods fit on the"
            " nodes now"
        )
    return _decide_remote(member, context, snapshot, gang, terms=terms, reason=reason, extras=extras)


def describe_gang_need(gpus: GpuCounts, size: int) -> str:
    return f"{size} x {describe_need(gpus)}"


def _decide_remote(
    member: GangMember,
    context: Context,
    snapshot: Snapshot,
    gang: GangSnapshot,
    *,
    terms: GangTerms,
    reason: str,
    extras: _Extras | str,
) -> GangVerdict:
    namespace = context.needs.namespace
    if isinstance(extras, str):
        return _mark(member, context, gang, kind="kept", reason=f"{reason}; not burst: {extras}", terms=terms)
    per_pod = remote_gpus(context.needs.gpus)
    refusal = budget.over_budget(
        snapshot.budget, namespace=namespace, in_use=snapshot.remote_in_use, need=per_pod * terms.size
    )
    if refusal:
        refusal += f" (the whole gang of {terms.size} pods)"
    elif context.local_refusal and snapshot.budget is not None:
        refusal = f"{context.local_refusal}, so no burst can be counted against the budget of namespace {namespace}"
        why = f"{reason}; not burst: {refusal}"
        return _mark(member, context, gang, kind="kept", reason=why, terms=terms, budget_note=refusal)
    if refusal:
        kind: GangKind = "denied" if context.over_budget == "deny" else "kept"
        why = f"{reason}; not burst: {refusal}"
        return _mark(member, context, gang, kind=kind, reason=why, terms=terms, budget_note=refusal)
    ids = (
        taken_id(member.uid, rank) if rank == terms.rank else open_id(member.uid, rank) for rank in range(terms.size)
    )
    remote = tuple(RemoteReservation(each, namespace, per_pod) for each in ids)
    effects = GangEffects(member.uid, remote=remote, record=_record(member, gang, "remote", reason))
    return _burst(context, snapshot, terms=terms, reason=reason, extras=extras, effects=effects)


def _mark(
    member: GangMember,
    context: Context,
    gang: GangSnapshot,
    *,
    kind: GangKind,
    reason: str,
    terms: GangTerms,
    budget_note: str = "",
) -> GangVerdict:
    """A gang kept local or refused: nothing reserved, but remembered (and marked for a new leader)."""
    marker = RemoteReservation(marker_id(member.uid, kind), context.needs.namespace, 0)
    effects = GangEffects(member.uid, remote=(marker,), record=_record(member, gang, kind, reason))
    return GangVerdict(
        kind, reason, terms.annotations(), budget_note=budget_note, effects=NO_EFFECTS if context.dry_run else effects
    )


def _take_remote(
    context: Context, snapshot: Snapshot, *, terms: GangTerms, reason: str, extras: _Extras
) -> GangVerdict:
    """The rank's remote reservation, now for this pod (its annotation releases it when it appears).
    A lapsed one is made again: the pod's GPUs count until the watch shows it."""
    taken = RemoteReservation(taken_id(terms.uid, terms.rank), context.needs.namespace, remote_gpus(context.needs.gpus))
    effects = GangEffects(release=(open_id(terms.uid, terms.rank),), remote=(taken,))
    return _burst(context, snapshot, terms=terms, reason=reason, extras=extras, effects=effects)


def _burst(
    context: Context, snapshot: Snapshot, *, terms: GangTerms, reason: str, extras: _Extras, effects: GangEffects
) -> GangVerdict:
    """A remote verdict: the gang's burst terms (its cluster, its walltime, `extras`) for this rank;
    `effects` are dropped for a dry run."""
    limit, limit_warning = walltime.decide_walltime(
        context.active_deadline,
        namespace=context.needs.namespace,
        namespace_default=snapshot.default_walltime,
        webhook_default=context.pod.policy.default_walltime_seconds,
    )
    staging, model, machines = extras
    burst = mutation.BurstTerms(
        cluster=snapshot.cluster, limit=limit, gang=terms, staging=staging, gpu_model=model, allowed_machines=machines
    )
    reservation = "" if context.dry_run else taken_id(terms.uid, terms.rank)
    return GangVerdict(
        "remote",
        reason,
        terms.annotations(),
        terms,
        reservation_id=reservation,
        burst=burst,
        limit_warning=limit_warning,
        remote_gpus=remote_gpus(context.needs.gpus),
        effects=NO_EFFECTS if context.dry_run else effects,
    )


def _follow_local(
    context: Context, snapshot: Snapshot, gang: GangSnapshot, *, terms: GangTerms, reason: str
) -> GangVerdict:
    """The rank's reserved place, now this pod's. Without one (it lapsed, or this pod replaces one),
    a place if a node has room now; else the pod waits for local GPUs: its gang runs here. Claim
    moves that made room are applied whatever follows (a dry run's too), as for a single pod."""
    needs = context.needs
    opened, taken = open_id(terms.uid, terms.rank), taken_id(terms.uid, terms.rank)
    holds = gang.ranks.get(terms.rank)
    node = holds.opened.node if holds is not None and holds.opened is not None and holds.opened.local else ""
    moves = NO_EFFECTS.moves
    if not node:  # none, or one whose node has gone (it holds nothing)
        choice = choose(
            needs.requests, needs.placement, snapshot.view, reservation_refusal=snapshot.reservation_refusal
        )
        moves = choice.moves
        if choice.decision.kind != "local":
            why = f"{reason}; this pod waits for local GPUs ({choice.decision.reason})"
            return GangVerdict("kept", why, terms.annotations(), effects=GangEffects(moves=moves))
        node = choice.decision.node
    if context.dry_run:
        return GangVerdict("local", reason, terms.annotations(), node=node, effects=GangEffects(moves=moves))
    local = LocalReservation(taken, node, needs.requests, needs.placement, needs.namespace)
    effects = GangEffects(moves=moves, release=(opened,), local=(local,))
    return GangVerdict("local", reason, terms.annotations(), node=node, reservation_id=taken, effects=effects)
