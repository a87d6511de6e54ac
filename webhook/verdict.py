"""The verdict (pure): what the decision's steps found, as one answer and what the cache applies for it.

The decision's last step (webhook.decision.decide), for a pod alone and a gang's pod alike: its
placement (webhook.placement), its burst's terms or why it may not burst (webhook.burst) and what its
namespace's budget said (webhook.budget) become one Verdict, which webhook.responses answers, and
its Effects, which the cache applies once (ClusterCache.apply): claim moves, reservations to release
and to make, a gang's decision to remember. A dry run decides the same and has nothing reserved or
remembered (claim moves excepted: they only say where claims sit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from jarvice import contract
from jarvice.contract import GANG_SUBMITTING_RANK
from jarvice.gpubudget import ANNOTATION_BUDGET
from webhook.budget import BudgetRefusal, OverBudget
from webhook.burst import NotBurst, Terms
from webhook.gang_decision import GangPart
from webhook.gangs import GangKind, GangRecord, GangTerms, marker_id, open_id, taken_id
from webhook.placement import Choice
from webhook.rewrite_terms import BurstTerms
from webhook.types import ClaimMove, Decision, LocalReservation, PodNeeds, RemoteReservation
from webhook.waiting import NoWait, Wait, format_deadline

Route = Literal["local", "remote", "kept-local", "over-budget", "reinvoked"]


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class Effects:
    """What a decision has the cache do, in this order (ClusterCache.apply): move claims, count a
    reservation cap met (`capped`), release reservations, make the local and remote ones, remember a
    gang's decision (`record`, under `gang`)."""

    gang: Final[str]
    moves: Final[tuple[ClaimMove, ...]]
    release: Final[tuple[str, ...]]
    local: Final[tuple[LocalReservation, ...]]
    remote: Final[tuple[RemoteReservation, ...]]
    record: Final[GangRecord | None]
    capped: Final[bool]
    wait: Final[tuple[str, float] | None]  # a Job's UID and the deadline its pods wait until (webhook.waiting)

    def __init__(
        self,
        gang: str = "",
        moves: tuple[ClaimMove, ...] = (),
        release: tuple[str, ...] = (),
        local: tuple[LocalReservation, ...] = (),
        remote: tuple[RemoteReservation, ...] = (),
        *,
        record: GangRecord | None = None,
        capped: bool = False,
        wait: tuple[str, float] | None = None,
    ) -> None:
        self.gang = gang
        self.moves = moves
        self.release = release
        self.local = local
        self.remote = remote
        self.record = record
        self.capped = capped
        self.wait = wait


NO_EFFECTS = Effects()


@dataclass(init=False, unsafe_hash=True, slots=True)
class Verdict:
    """Where a pod goes (webhook.responses answers it), and what the cache applies for it.

    route: local (on decision.node); remote (burst with `burst`); kept-local (would burst but may not,
    for `refusal`, not the pod's doing; or a gang's pod following its gang's decision to stay);
    over-budget (would burst past its namespace's budget: `refusal`; left local, or refused when
    `deny`); reinvoked (decided remote before: no new decision, the burst's terms for GPUs added
    since)."""

    route: Final[Route]
    decision: Final[Decision]  # the placement's: local on its node, or why no node could host the pod
    reason: Final[str]  # what the pod's reason annotation says
    refusal: Final[str]  # kept-local, over-budget: why it is not burst
    deny: Final[bool]
    notes: Final[Mapping[str, str] | None]  # annotations beside the decision and reason (None: none)
    warnings: Final[tuple[str, ...]]  # kept-local, over-budget: what kubectl shows
    reservation_id: Final[str]  # local, remote: the pod's reservation annotation ("": none)
    burst: Final[BurstTerms | None]  # remote, reinvoked: the burst's terms (a gang's included)
    limit_warning: Final[str]  # remote, reinvoked: why the namespace's default walltime was not used
    remote_gpus: Final[int]  # remote, reinvoked: what the burst counts against its namespace's budget
    gang: Final[GangTerms | None]  # a gang's pod that has a rank in it
    effects: Final[Effects]
    burst_notes: Final[Mapping[str, str] | None]  # remote: annotations beside the burst (why it did not wait)

    def __init__(
        self,
        route: Route,
        decision: Decision,
        reason: str,
        refusal: str = "",
        deny: bool = False,
        *,
        notes: Mapping[str, str] | None = None,
        warnings: tuple[str, ...] = (),
        reservation_id: str = "",
        burst: BurstTerms | None = None,
        limit_warning: str = "",
        remote_gpus: int = 0,
        gang: GangTerms | None = None,
        effects: Effects = NO_EFFECTS,
        burst_notes: Mapping[str, str] | None = None,
    ) -> None:
        self.route = route
        self.decision = decision
        self.reason = reason
        self.refusal = refusal
        self.deny = deny
        self.notes = notes
        self.warnings = warnings
        self.reservation_id = reservation_id
        self.burst = burst
        self.limit_warning = limit_warning
        self.remote_gpus = remote_gpus
        self.gang = gang
        self.effects = effects
        self.burst_notes = burst_notes


def _kept(reason: str) -> tuple[str, ...]:
    return (f"nimbix-burst: kept local, not burst: {reason}",)


def build(
    needs: PodNeeds,
    placed: Choice,
    terms: Terms | NotBurst | None,
    refusal: BudgetRefusal | None,
    *,
    gang: GangPart | None,
    over_budget: OverBudget,
    budgeted: bool,
    uid: str,
    dry_run: bool,
    reinvoked: bool,
    wait: Wait | NoWait | None = None,
) -> Verdict:
    """The verdict of what the steps found: `placed`; `terms` (None when the pod does not burst);
    `refusal`, the budget's (None: it allows the burst, or was not asked). `budgeted`: the namespace
    has a budget, so a pod's burst is reserved against it; `uid`: the admission's, the pod's
    reservation id; `reinvoked`: decided remote before (its burst counted then); `wait`: whether a
    pod that would burst waits for a local node first (webhook.waiting; None: not asked)."""
    if gang is not None:
        if isinstance(wait, Wait) and gang.terms is not None and placed.decision.kind == "remote":
            # The gang would burst and waits first: nothing reserved, nothing recorded of its decision.
            return _waiting(placed.decision, wait, effects=NO_EFFECTS, dry_run=dry_run, gang=gang)
        verdict = _gang_verdict(needs, placed, terms, refusal, gang=gang, over_budget=over_budget, dry_run=dry_run)
        return _noted(verdict, wait)
    decision, moves = placed.decision, placed.moves
    if decision.kind == "local":
        if dry_run:
            effects = Effects(moves=moves) if moves else NO_EFFECTS
        else:
            held = LocalReservation(uid, decision.node, needs.requests, needs.placement, needs.namespace)
            effects = Effects(moves=moves, local=(held,))
        return Verdict("local", decision, decision.reason, reservation_id=uid, effects=effects)
    effects = Effects(moves=moves, capped=decision.capped)
    if isinstance(terms, NotBurst):
        reason = f"{decision.reason}; not burst: {terms.reason}"
        warnings = terms.warnings or _kept(terms.reason)
        return Verdict(
            "kept-local", decision, reason, terms.reason, notes=terms.notes, warnings=warnings, effects=effects
        )
    if terms is None:
        raise AssertionError("a burst is decided with its terms")
    if refusal is not None:
        reason = f"{decision.reason}; not burst: {refusal.reason}"
        deny = over_budget == "deny" and refusal.may_deny
        warnings = (f"nimbix-burst: kept local by the burst budget: {refusal.reason}",)
        notes = {ANNOTATION_BUDGET: refusal.reason}
        return Verdict(
            "over-budget", decision, reason, refusal.reason, deny, notes=notes, warnings=warnings, effects=effects
        )
    if isinstance(wait, Wait):
        return _waiting(decision, wait, effects=effects, dry_run=dry_run)
    counted = budgeted and not reinvoked and not dry_run
    cost, worst = terms.burst.cost_per_hour, terms.burst.worst_case
    remote = (RemoteReservation(uid, needs.namespace, terms.remote_gpus, cost, worst),) if counted else ()
    verdict = Verdict(
        "reinvoked" if reinvoked else "remote",
        decision,
        decision.reason,
        reservation_id=uid if counted else "",
        burst=terms.burst,
        limit_warning=terms.limit_warning,
        remote_gpus=terms.remote_gpus,
        effects=Effects(moves=moves, remote=remote, capped=decision.capped),
    )
    return _noted(verdict, wait)


def _waiting(
    decision: Decision, wait: Wait, *, effects: Effects, dry_run: bool, gang: GangPart | None = None
) -> Verdict:
    """A pod that would burst kept local to wait for a node until its deadline (the controller
    bursts it then); nothing is reserved, its Job's deadline is remembered (not for a dry run, nor for
    a gang's pod: its deadline is the Job's creation + the setting, the same at each of its pods). A
    gang's pod carries its gang's annotations, so the controller replaces the gang as one."""
    why = wait.reason()
    notes = {contract.ANNOTATION_BURST_DEADLINE: format_deadline(wait.deadline)}
    if gang is not None:
        notes = {**gang.notes, **notes}
    remembered = effects if dry_run or not wait.key else dataclasses.replace(effects, wait=(wait.key, wait.deadline))
    return Verdict(
        "kept-local",
        decision,
        f"{decision.reason}; {why}",
        why,
        notes=notes,
        warnings=(f"nimbix-burst: kept local for now: {why}",),
        gang=gang.terms if gang is not None else None,
        effects=remembered,
    )


def _noted(verdict: Verdict, wait: Wait | NoWait | None) -> Verdict:
    """A burst pod that asked to wait and may not: why, on its burst-after-ignored annotation."""
    if verdict.route != "remote" or not isinstance(wait, NoWait) or not wait.reason:
        return verdict
    return dataclasses.replace(verdict, burst_notes={contract.ANNOTATION_BURST_AFTER_IGNORED: wait.reason})


def _gang_verdict(
    needs: PodNeeds,
    placed: Choice,
    terms: Terms | NotBurst | None,
    refusal: BudgetRefusal | None,
    *,
    gang: GangPart,
    over_budget: OverBudget,
    dry_run: bool,
) -> Verdict:
    """A gang's pod: the first decides for all (a reservation per rank, and a record of the decision,
    or a marker of a gang kept local or refused); a later one takes its rank's reservation."""
    decision, moves, ranks = placed.decision, placed.moves, gang.terms
    if gang.kind in ("kept", "denied") or ranks is None:
        route: Route = "over-budget" if gang.kind == "denied" else "kept-local"
        warnings = _kept(gang.reason)
        return Verdict(
            route, decision, gang.reason, deny=gang.kind == "denied", notes=gang.notes, warnings=warnings, gang=ranks
        )
    uid, rank, size, namespace = ranks.uid, ranks.rank, ranks.size, needs.namespace
    opened, taken = open_id(uid, rank), taken_id(uid, rank)
    first = gang.kind is None
    if placed.waits:
        why = decision.reason
        return Verdict(
            "kept-local", decision, why, notes=gang.notes, warnings=_kept(why), gang=ranks, effects=Effects(moves=moves)
        )
    if decision.kind == "local":
        if first:
            local = tuple(
                LocalReservation(
                    taken if each == rank else open_id(uid, each), node, needs.requests, needs.placement, namespace
                )
                for each, node in enumerate(placed.nodes)
            )
            record = GangRecord("local", decision.reason, size, gang.expires_at)
            effects = Effects(uid, local=local, record=record)
        else:
            held = LocalReservation(taken, decision.node, needs.requests, needs.placement, namespace)
            effects = Effects(moves=moves, release=(opened,), local=(held,))
        if dry_run:
            effects = Effects(moves=moves)
        reservation = "" if dry_run else taken
        return Verdict(
            "local",
            decision,
            decision.reason,
            notes=gang.notes,
            reservation_id=reservation,
            gang=ranks,
            effects=effects,
        )
    kind: GangKind = "kept"
    stop, note = "", ""  # why it is not burst; the budget's words when it is the budget's doing
    if isinstance(terms, NotBurst):
        stop = terms.reason
    elif refusal is not None:
        stop = note = refusal.reason
        kind = "denied" if over_budget == "deny" and refusal.may_deny else "kept"
    if stop:
        why = f"{decision.reason}; not burst: {stop}"
        marker = RemoteReservation(marker_id(uid, kind), namespace, 0)
        record = GangRecord(kind, why, size, gang.expires_at)
        effects = Effects(uid, remote=(marker,), record=record) if first else NO_EFFECTS
        return Verdict(
            "over-budget" if note else "kept-local",
            decision,
            why,
            stop,
            deny=kind == "denied",
            notes={**gang.notes, ANNOTATION_BUDGET: note} if note else gang.notes,
            warnings=_kept(why),
            gang=ranks,
            effects=NO_EFFECTS if dry_run else effects,
        )
    if not isinstance(terms, Terms):
        raise AssertionError("a burst is decided with its terms")
    # Rank 0 submits the gang's one job of `size` nodes: its reservation, then its pod, carry the whole
    # gang's GPUs and the job's cost (terms.burst's), so they stay counted as long as that pod (and its
    # job), whichever ranks ever appear; the other ranks count nothing.
    whole = terms.remote_gpus * size
    cost, worst = terms.burst.cost_per_hour, terms.burst.worst_case
    carried = whole if rank == GANG_SUBMITTING_RANK else 0
    if first:
        remote = tuple(
            _rank_count(
                taken if each == rank else open_id(uid, each), namespace, rank=each, gpus=whole, cost=cost, worst=worst
            )
            for each in range(size)
        )
        effects = Effects(uid, remote=remote, record=GangRecord("remote", decision.reason, size, gang.expires_at))
    else:
        effects = Effects(
            release=(opened,), remote=(_rank_count(taken, namespace, rank=rank, gpus=whole, cost=cost, worst=worst),)
        )
    return Verdict(
        "remote",
        decision,
        decision.reason,
        notes=gang.notes,
        reservation_id="" if dry_run else taken,
        burst=terms.burst,
        limit_warning=terms.limit_warning,
        remote_gpus=carried,
        gang=ranks,
        effects=NO_EFFECTS if dry_run else effects,
    )


def _rank_count(
    reservation_id: str, namespace: str, *, rank: int, gpus: int, cost: float, worst: float
) -> RemoteReservation:
    """A remote gang rank's reservation: the gang's GPUs and cost on the rank that submits its job, 0 on the others."""
    if rank == GANG_SUBMITTING_RANK:
        return RemoteReservation(reservation_id, namespace, gpus, cost, worst)
    return RemoteReservation(reservation_id, namespace, 0)
