"""The whole decision as a table: plain data in (what a pod needs, a Snapshot built by hand: the
cluster's view, the reservation caps, the namespace's budget and default walltime, the cluster's
identity), a Verdict with its effects out. The expected routes, reasons and terms are written from the rules (local
iff a node fits; no identity, no burst; a budget is never exceeded; the walltime's sources in
order), never by calling the code under test."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from jarvice.gpubudget import NamespaceBudget
from tests.support.cluster_views import GPU, Node, view_of
from webhook.budget import OverBudget
from webhook.decision import decide
from webhook.types import Placement, PodNeeds, RemoteReservation, Snapshot
from webhook.verdict import Route

CLUSTER = "prod-0123456789ab"
NO_IDENTITY = "the kube-system namespace is not in the webhook's cache, so the cluster's identity is unknown"
DAY = 24 * 3600


@dataclass(frozen=True)
class Case:
    name: str
    gpus: int
    nodes: tuple[Node, ...] = (Node("a", 4),)
    placement: Placement = field(default_factory=Placement)
    reservation_refusal: str = ""
    budget: NamespaceBudget | None = None
    in_use: int = 0
    cluster_unknown: str = ""
    default_walltime: str | None = None
    active_deadline: int | None = None
    local_refusal: str = ""
    over_budget: OverBudget = "local"
    reinvoked: bool = False
    # expected
    route: Route = "remote"
    node: str = ""
    reason: tuple[str, ...] = ()  # fragments of the decision's reason
    refusal: str = ""  # a fragment of the verdict's refusal
    deny: bool = False
    capped: bool = False
    limit: int | None = None  # seconds, for a remote or reinvoked verdict
    limit_warning: str = ""  # a fragment
    counted: bool = False


CASES = (
    Case("fits", 2, (Node("a", 4), Node("b", 2)), route="local", node="b", reason=("best fit b",)),
    Case("no-node-fits", 8, route="remote", reason=("needs 8 nvidia.com/gpu", "best node a has 4 free"), limit=DAY),
    Case(
        "fits-but-no-leader",
        1,
        local_refusal="no leader answered",
        reason=("best fit a", "but no leader answered"),
        limit=DAY,
    ),
    Case(
        "fits-but-reservation-cap",
        1,
        reservation_refusal="256 local admissions await their pods (cap 256)",
        reason=("needs 1 nvidia.com/gpu; 256 local admissions",),
        capped=True,
        limit=DAY,
    ),
    Case("no-identity", 8, cluster_unknown=NO_IDENTITY, route="kept-local", refusal="identity is unknown"),
    Case(
        "over-budget-stays",
        8,
        budget=NamespaceBudget(limit=10),
        in_use=4,
        route="over-budget",
        refusal="4 of 10 remote GPUs in use in namespace ns; this pod needs 8",
    ),
    Case(
        "over-budget-denied",
        8,
        budget=NamespaceBudget(limit=10),
        in_use=4,
        over_budget="deny",
        route="over-budget",
        refusal="this pod needs 8",
        deny=True,
    ),
    Case(
        "invalid-budget",
        8,
        budget=NamespaceBudget(limit=0, invalid="lots"),
        route="over-budget",
        refusal="'lots', not a whole number",
    ),
    Case(
        "no-leader-cannot-count-the-budget",
        1,
        budget=NamespaceBudget(limit=10),
        local_refusal="no leader answered",
        over_budget="deny",  # a failover is not the user's doing: never refused for it
        route="over-budget",
        refusal="no leader answered, so no burst can be counted against the budget of namespace ns",
    ),
    Case("within-budget", 8, budget=NamespaceBudget(limit=10), in_use=2, limit=DAY, counted=True),
    Case("deadline-rounded-up", 8, active_deadline=90, limit=120),
    Case("namespace-default", 8, default_walltime="02:00:00", limit=7200),
    Case("namespace-default-unusable", 8, default_walltime="2h", limit=DAY, limit_warning="'2h' of namespace ns"),
    Case("reinvoked", 1, reinvoked=True, route="reinvoked", reason=("already decided: remote",), limit=DAY),
)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_decide(case: Case) -> None:
    needs = PodNeeds(gpus={GPU: case.gpus}, requests={GPU: case.gpus}, placement=case.placement, namespace="ns")
    snapshot = Snapshot(
        view=view_of(*case.nodes),
        reservation_refusal=case.reservation_refusal,
        budget=case.budget,
        remote_in_use=case.in_use,
        cluster="" if case.cluster_unknown else CLUSTER,
        cluster_unknown=case.cluster_unknown,
        default_walltime=case.default_walltime,
    )
    verdict = decide(
        needs,
        snapshot,
        active_deadline=case.active_deadline,
        default_walltime_seconds=DAY,
        local_refusal=case.local_refusal,
        over_budget=case.over_budget,
        reinvoked=case.reinvoked,
        uid="uid-1",
    )
    assert verdict.route == case.route
    assert verdict.decision.kind == ("local" if case.route == "local" else "remote")
    assert verdict.decision.node == case.node
    for fragment in case.reason:
        assert fragment in verdict.decision.reason
    assert case.refusal in verdict.refusal and bool(verdict.refusal) == bool(case.refusal)
    assert verdict.deny is case.deny
    assert verdict.decision.capped is case.capped
    assert verdict.effects.moves == ()  # no claims in these clusters: nothing to move
    if case.limit is None:
        assert verdict.burst is None
    else:
        assert verdict.burst is not None and verdict.burst.limit.seconds == case.limit
        assert verdict.burst.cluster == CLUSTER
    assert case.limit_warning in verdict.limit_warning and bool(verdict.limit_warning) == bool(case.limit_warning)
    # Counted: the burst's GPUs are reserved against the namespace's budget, under the admission's UID.
    counted = (RemoteReservation("uid-1", "ns", case.gpus),) if case.counted else ()
    assert verdict.effects.remote == counted
    # What a burst counts against its namespace's budget: its GPUs, on every remote verdict.
    assert verdict.remote_gpus == (case.gpus if case.route in ("remote", "reinvoked") else 0)
