"""The decision (pure): where a pod goes, from plain data.

decide() reads what a pod needs and the Snapshot the cache hands an admission (the cluster's view,
the reservation caps, the namespace's burst budget and default walltime, the cluster's identity)
and returns a Verdict: local on a node, burst (with its terms), or kept local for a reason that is
not the pod's doing. It says what the cache then applies, once: the claim moves that make room, and
the reservation.

Its first step, choose(), is the placement: local iff some single node can host the pod's whole
request. The pod's placement rules are applied once (scheduling.eligibility) and the fit search
(fitting) works over them, making room by moving claims of pods not bound yet when no node fits as
they sit (fitting.search_room): moves change where claims sit, never what they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from entrypoint import contract
from webhook import budget, data_volumes, gpu_models, mutation, walltime
from webhook.fitting import CANDIDATE_CAP, find_fit, search_room
from webhook.gangs import GangTerms, parse_terms
from webhook.reasons import describe_need, explain_no_fit
from webhook.scheduling import eligibility
from webhook.types import ClaimMove, ClusterView, Decision, GpuCounts, Placement, PodNeeds, Requests, Snapshot


@dataclass(frozen=True, slots=True)
class Choice:
    decision: Decision
    # Claims of pods not bound yet to move, in order, to make room (see fitting.plan_room): the cache
    # applies them whatever the decision (a capped one included), as make_room moved them in place.
    moves: tuple[ClaimMove, ...] = ()


def choose(requests: Requests, placement: Placement, view: ClusterView, *, reservation_refusal: str = "") -> Choice:
    """The placement, from plain data: `requests`, the pod's GPU counts plus everything else it takes
    from a node (cpu, memory, pods, ...: see model.pod_compute), which must fit on the same node;
    `view`, the cluster as the cache holds it; `reservation_refusal`, why no reservation may be made
    now ("" when one may: see reservations.reservation_refusal)."""
    gpus = {r: n for r, n in requests.items() if r in view.gpu_resources}
    if not gpus:
        return Choice(Decision(kind="skipped", reason="pod requests no GPU"))
    eligible = eligibility(placement)
    fit = find_fit(view, requests, eligible)
    moves: tuple[ClaimMove, ...] = ()
    moved = ""
    if fit.node is None:
        found = search_room(view, requests, eligible, missed=fit)
        fit, moves = found.fit, found.moves
        if fit.node is None:
            reason = explain_no_fit(
                gpus,
                node_name=placement.node_name,
                primary=found.primary,
                advertised=found.advertised,
                partial=found.partial,
                fit=fit,
                unschedulable_gpu_nodes=view.unschedulable_gpu_nodes,
                claimed=found.claimed,
            )
            return Choice(Decision(kind="remote", reason=reason), moves)
        moved = " (claims of pods not bound yet moved to other nodes)"
    if reservation_refusal:
        # Local without a reservation could promise these GPUs twice and leave the pod Pending;
        # bursting keeps the promise that a pod left local finds its GPUs.
        reason = f"needs {describe_need(gpus)}; {reservation_refusal}"
        return Choice(Decision(kind="remote", reason=reason, capped=True), moves)
    shown = f"{fit.candidates}+" if fit.candidates >= CANDIDATE_CAP else str(fit.candidates)
    decision = Decision(
        kind="local",
        reason=f"{shown} candidate node(s) can host {describe_need(gpus)}; best fit {fit.node.name}{moved}",
        node=fit.node.name,
        candidates=fit.candidates,
    )
    return Choice(decision, moves)


Route = Literal["local", "remote", "kept-local", "over-budget", "reinvoked"]
# The decision of a pod that carries one already (see decide's `reinvoked`).
ALREADY_REMOTE = Decision(kind="remote", reason="already decided: remote")
NO_MOVES: tuple[ClaimMove, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """Where a pod goes and what the cache applies for it (ClusterCache.apply).

    route: local (reserved on decision.node); remote (burst with `cluster` and `limit`); kept-local
    (would burst but may not, for `refusal`, not the pod's doing); over-budget (would burst past its
    namespace's budget: `refusal`; left local, or refused when `deny`); reinvoked (decided remote
    before: no new decision, the burst's terms for GPUs added since)."""

    route: Route
    decision: Decision
    moves: tuple[ClaimMove, ...] = ()  # claim moves that made room (see Choice), applied whatever the route
    refusal: str = ""
    deny: bool = False
    cluster: str = ""  # remote, reinvoked: the cluster's identity, on every job it submits ("": unknown)
    limit: walltime.Walltime | None = None  # remote, reinvoked: the jobs' time limit
    limit_warning: str = ""  # remote: why the namespace's default walltime was not used ("": it was, or none)
    remote_gpus: int = 0  # remote: what the burst counts against its namespace's budget
    counted: bool = False  # remote: the namespace has a budget, so the burst's GPUs are reserved against it
    notes: Mapping[str, str] | None = None  # kept-local: annotations beside the decision and reason
    warnings: tuple[str, ...] = ()  # kept-local: what kubectl shows ((): one naming the refusal)
    # remote: per burst container (name, stage-in, stage-out) (webhook.data_volumes); the pod's GPU
    # model constraint ("" when none) and the machine types it allows (webhook.gpu_models)
    staging: tuple[tuple[str, str, str], ...] = ()
    gpu_model: str = ""
    allowed_machines: tuple[str, ...] = ()
    gang: GangTerms | None = None  # reinvoked: the gang terms the pod carries (webhook.gangs.parse_terms)


@dataclass(frozen=True, slots=True)
class BurstAsk:
    """What of the pod a burst must honour beyond its GPUs: its data (volumes, staging annotations)
    and its GPU model (the policy's model label and map name the machines that have it)."""

    spec: Mapping[str, Any]
    annotations: Mapping[str, Any]
    policy: mutation.RewritePolicy


def decide(
    needs: PodNeeds,
    snapshot: Snapshot,
    *,
    active_deadline: object,
    default_walltime_seconds: int,
    local_refusal: str = "",
    over_budget: budget.OverBudget = "local",
    reinvoked: bool = False,
    pod: BurstAsk | None = None,
) -> Verdict:
    """The whole decision for one pod. `active_deadline`: its spec.activeDeadlineSeconds as received
    (see walltime.decide_walltime); `default_walltime_seconds`: the webhook's --default-walltime.
    `local_refusal`: why no local promise may be made now (no leader among the replicas); a pod
    that would stay local bursts instead, with that reason. `over_budget`: what happens to a pod
    that would burst past its namespace's burst budget (left local, or denied). `reinvoked`: the
    pod was decided remote before (a reinvocation, or a copy of a burst pod): it is never decided
    twice, only given the terms of its burst again. `pod`: what a burst must honour besides GPUs
    (None: no data to stage, no GPU model)."""
    need = remote_gpus(needs.gpus)
    namespace = needs.namespace
    model: gpu_models.ModelConstraint | None = None
    machines: gpu_models.AllowedMachines | gpu_models.NoMachineOffers | None = None
    staging: tuple[tuple[str, str, str], ...] = ()
    if reinvoked:
        decision, moves = ALREADY_REMOTE, NO_MOVES
    else:
        choice = choose(
            needs.requests, needs.placement, snapshot.view, reservation_refusal=snapshot.reservation_refusal
        )
        decision, moves = choice.decision, choice.moves
        if decision.kind == "local" and local_refusal:
            decision = Decision(kind="remote", reason=f"{decision.reason}, but {local_refusal}")
        if decision.kind == "local":
            return Verdict("local", decision, moves)
        if pod is not None:
            model = gpu_models.parse_constraint(needs.placement, label=pod.policy.gpu_model_label)
            machines = gpu_models.resolve(model, pod.policy.gpu_model_map) if model is not None else None
            if isinstance(machines, gpu_models.NoMachineOffers):
                # Bursting would run it on a GPU it did not ask for: it waits here for a node with its model.
                notes = {contract.ANNOTATION_GPU_MODEL: machines.reason}
                return Verdict("kept-local", decision, moves, refusal=machines.reason, notes=notes)
        if snapshot.cluster_unknown:
            return Verdict("kept-local", decision, moves, refusal=snapshot.cluster_unknown)
        if pod is not None:
            bursting = mutation.burst_container_names(pod.spec, policy=pod.policy)
            data = data_volumes.plan_data(pod.spec, pod.annotations, burst_containers=bursting)
            if isinstance(data, data_volumes.DataRefusal):
                notes = {contract.ANNOTATION_DATA_NOT_STAGED: data.volumes} if data.volumes else {}
                return Verdict("kept-local", decision, moves, refusal=data.reason, notes=notes, warnings=data.warnings)
            staging = tuple((c.container, c.env_value("in"), c.env_value("out")) for c in data.staging)
        refusal = budget.over_budget(snapshot.budget, namespace=namespace, in_use=snapshot.remote_in_use, need=need)
        action = over_budget
        if not refusal and local_refusal and snapshot.budget is not None:
            # Only the leader counts remote reservations: without one, the budget cannot be held.
            refusal = f"{local_refusal}, so no burst can be counted against the budget of namespace {namespace}"
            action = "local"  # a failover is not the user's doing: never refuse the pod for it
        if refusal:
            return Verdict("over-budget", decision, moves, refusal=refusal, deny=action == "deny")
    limit, limit_warning = walltime.decide_walltime(
        active_deadline,
        namespace=namespace,
        namespace_default=snapshot.default_walltime,
        webhook_default=default_walltime_seconds,
    )
    return Verdict(
        "reinvoked" if reinvoked else "remote",
        decision,
        moves,
        cluster=snapshot.cluster,
        limit=limit,
        limit_warning=limit_warning,
        remote_gpus=need,
        counted=snapshot.budget is not None and not reinvoked,
        staging=staging,
        gpu_model=gpu_models.describe_constraint(model) if model is not None else "",
        allowed_machines=machines.machines if isinstance(machines, gpu_models.AllowedMachines) else (),
        gang=parse_terms(pod.annotations) if reinvoked and pod is not None else None,
    )


def remote_gpus(gpus: GpuCounts) -> int:
    """What a burst pod counts against its namespace's budget: its effective GPU request (the one the
    decision used), summed over GPU resources. Never less than what its JARVICE jobs use."""
    return sum(gpus.values())
