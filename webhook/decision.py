"""The decision (pure): where a pod goes, from plain data, in one pass for a pod alone and a gang's pod.

decide() reads what a pod needs and asks, the Snapshot the cache hands an admission (the cluster's view,
the reservation caps, the namespace's burst budget and default walltime, the cluster's identity)
and, for a gang's pod, its gang's GangSnapshot; it takes the rules in the order they apply:
  1. a gang's pod is taken up in its gang (webhook.gang_decision): its rank, and the decision it
     follows when its gang was decided at an earlier pod;
  2. the placement (webhook.placement): local iff a node can host the pod (a gang's first pod: iff
     every pod of the gang fits at once);
  3. a pod that would burst gets its burst's terms, or why it may not burst (webhook.burst);
  4. its namespace's budget must hold the burst (webhook.budget): the pod's GPUs, or a gang's first
     pod's whole gang's (and again a remote gang's rank 0 whose reservation of the gang's GPUs lapsed:
     its runner submits the gang's job); and its caps in money (webhook.spending), at the burst's price;
  5. a pod that would burst, and asked to, waits for a local node first (webhook.waiting): a gang's
     first pod for the whole gang, which then decides nothing yet (each of its pods decides again);
  6. the verdict (webhook.verdict), with what the cache then applies, once.
"""

from __future__ import annotations

from webhook import budget, burst, gang_decision, placement, spending, waiting
from webhook import verdict as verdicts
from webhook.gangs import GangSnapshot, GangTerms
from webhook.types import PodNeeds, Snapshot


def decide(
    needs: PodNeeds,
    snapshot: Snapshot,
    gang: GangSnapshot | None = None,
    *,
    active_deadline: int | None,
    default_walltime_seconds: int,
    local_refusal: str = "",
    over_budget: budget.OverBudget = "local",
    reinvoked: bool = False,
    carried: GangTerms | None = None,
    pod: burst.BurstAsk | None = None,
    uid: str = "",
    dry_run: bool = False,
    wait: waiting.WaitAsk | None = None,
) -> verdicts.Verdict:
    """The whole decision for one pod (a gang's pod: `gang`). `needs`: the pod's GPUs, everything it
    takes from a node, its placement; `active_deadline`: its spec.activeDeadlineSeconds (None: none,
    or not an integer); `default_walltime_seconds`: the webhook's --default-walltime. `local_refusal`:
    why no local promise may be made now (no leader among the replicas): a pod that would stay local
    bursts instead, with that reason. `over_budget`: what happens to a pod that would burst past its
    namespace's budget (left local, or denied). `reinvoked`: decided remote before (a reinvocation,
    or a copy of a burst pod): never decided twice, only given the terms of its burst again, with the
    gang terms it carries (`carried`). `pod`: what a burst must honour besides GPUs (None: no data,
    no GPU model). `uid`: the admission's, the pod's reservation id; `dry_run`: decided the same,
    nothing reserved or remembered. `wait`: what a pod that would burst waits by first (None: it
    bursts at once; webhook.waiting)."""
    part = gang_decision.take_up(gang) if gang is not None else None
    placed = placement.place(needs, snapshot, gang=part, local_refusal=local_refusal, reinvoked=reinvoked)
    # A gang's pod bursts only as its gang does: the first decides it, a later one follows a remote gang.
    follows = part is not None and part.kind is not None
    bursts = placed.decision.kind == "remote" and not placed.waits and (part is None or part.kind in (None, "remote"))
    terms = None
    if bursts:
        terms = burst.settle(
            needs,
            snapshot,
            pod=pod,
            gang=part.terms if part is not None else carried,
            active_deadline=active_deadline,
            default_walltime_seconds=default_walltime_seconds,
            reinvoked=reinvoked,
        )
    refusal = None
    price: spending.Price | None = None
    # Counted now: a pod alone, a gang's first pod, or a remote gang's rank 0 whose count lapsed.
    counts = not follows or (part is not None and part.recount)
    if isinstance(terms, burst.Terms) and not reinvoked:
        size = part.terms.size if part is not None and part.terms is not None else 0
        if counts:
            refusal = budget.check(
                snapshot.budget,
                namespace=needs.namespace,
                in_use=snapshot.remote_in_use,
                need=terms.remote_gpus * (size or 1),
                gang_size=size,
                local_refusal=local_refusal,
            )
        if refusal is None and snapshot.cost_caps is not None:
            priced = _price(snapshot, terms, nodes=size or 1)
            if isinstance(priced, budget.BudgetRefusal):
                refusal = priced if counts else None  # a gang that burst keeps its ranks together
            else:
                price = priced
                if counts and (over := spending.over_caps(
                    snapshot.cost_caps, namespace=needs.namespace, in_use=snapshot.in_use, price=priced
                )):  # fmt: skip
                    refusal = budget.BudgetRefusal(over + (f" (the whole gang of {size} pods)" if size else ""), True)
        if price is not None and refusal is None:
            terms = burst.with_price(terms, price)
    waits = None
    if wait is not None and isinstance(terms, burst.Terms) and refusal is None and not reinvoked and not follows:
        since = gang.member.since if gang is not None else None  # an Indexed Job gang's: when the Job was created
        waits = waiting.decide(wait, gang=part is not None, gang_since=since)
    return verdicts.build(
        needs,
        placed,
        terms,
        refusal,
        gang=part,
        over_budget=over_budget,
        budgeted=snapshot.budget is not None or snapshot.cost_caps is not None,
        uid=uid,
        dry_run=dry_run,
        reinvoked=reinvoked,
        wait=waits,
    )


def _price(snapshot: Snapshot, terms: burst.Terms, *, nodes: int) -> spending.Price | budget.BudgetRefusal:
    """The burst's price from the spend record, or why it cannot be priced (never the user's doing:
    the pod is kept local, never refused, for it)."""
    if snapshot.spend_refusal or snapshot.machines is None:
        return budget.BudgetRefusal(snapshot.spend_refusal or "no spend record", may_deny=False)
    priced = spending.price_burst(
        snapshot.machines,
        gpus_per_node=terms.remote_gpus,
        nodes=nodes,
        walltime_seconds=terms.burst.limit.seconds,
        allowed=terms.burst.allowed_machines,
    )
    if isinstance(priced, str):
        return budget.BudgetRefusal(f"{priced}, so its cost cannot be counted against the namespace's caps", False)
    return priced
