"""A gang's decision as a table: plain data in (the pod's facts, the admission's Snapshot, the gang's
GangSnapshot, all built by hand), a Verdict with its effects out. The expected kinds, reasons and
effects are written from the rules (the first pod decides for all: local only when every pod fits at
once, else remote, the whole gang within its namespace's budget; later pods follow the book, the
handed-over reservations, the pods; a dry run has no effects), never by calling the code under test.
Reservation ids are the contract's: gang.<uid>.<rank> (open), gang.<uid>.<rank>.pod (taken),
gang.<uid>.<kind> (marker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from jarvice.gpubudget import NamespaceBudget
from tests.support.cluster_views import GPU, Node, view_of
from tests.unit.webhook.builders import container
from webhook.budget import OverBudget
from webhook.burst import BurstAsk
from webhook.decision import decide
from webhook.gangs import GangKind, GangMember, GangRecord, GangSnapshot, RankHolds, SeenGang
from webhook.rewrite_terms import RewritePolicy
from webhook.types import Hold, LocalReservation, Placement, PodNeeds, RemoteReservation, Snapshot
from webhook.verdict import Effects, Verdict

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
CLUSTER = "prod-0123456789ab"
NO_IDENTITY = "the kube-system namespace is not in the webhook's cache, so the cluster's identity is unknown"
UID = "job-1"
NOW, TTL = 1000.0, 60.0
NOTHING = SeenGang(None, frozenset())
PLACEMENT = Placement()
REQUESTS = {GPU: 2}


def job(rank: int | None = 0, size: int | None = 2) -> GangMember:
    return GangMember(UID, "job", "train", size, rank)


def group(size: int = 2) -> GangMember:
    return GangMember(UID, "pod-group", "ddp", size, None)


def local(reservation_id: str, node: str) -> LocalReservation:
    return LocalReservation(reservation_id, node, REQUESTS, PLACEMENT, "ns")


def remote(reservation_id: str, gpus: int = 2) -> RemoteReservation:
    return RemoteReservation(reservation_id, "ns", gpus)


def record(kind: GangKind, reason: str, size: int = 2) -> GangRecord:
    return GangRecord(kind=kind, reason=reason, size=size, expires_at=NOW + TTL)


@dataclass(frozen=True)
class Case:
    name: str
    member: GangMember = field(default_factory=job)
    nodes: tuple[Node, ...] = (Node("a", 2), Node("b", 2))
    # the gang as the cache knows it
    record: GangRecord | None = None
    marked: GangKind | None = None
    ranks: dict[int, RankHolds] = field(default_factory=dict)
    seen: SeenGang = NOTHING
    # the admission's facts
    cluster_unknown: str = ""
    budget: NamespaceBudget | None = None
    in_use: int = 0
    local_refusal: str = ""
    over_budget: OverBudget = "local"
    dry_run: bool = False
    # expected
    kind: GangKind = "remote"
    reason: tuple[str, ...] = ()  # fragments
    node: str = ""
    reservation_id: str = ""
    budget_note: str = ""  # a fragment
    effects: Effects = field(default_factory=Effects)
    rank: int | None = 0  # the rank in the annotations (None: no gang terms)


FITS = "all 2 pods of Indexed Job train fit at once (2 x 2 nvidia.com/gpu) on a, b"
NO_FIT = "Indexed Job train needs 2 x 2 nvidia.com/gpu at once; only 1 of its 2 pods fit on the nodes now"
SMALL = (Node("a", 2), Node("b", 1))

CASES = (
    Case("size-unknown", member=job(1, None), kind="kept", reason=("not in the webhook's cache yet",), rank=None),
    Case(
        "first-pod-fits-local",
        kind="local",
        reason=(FITS,),
        node="a",
        reservation_id=f"gang.{UID}.0.pod",
        effects=Effects(
            UID, local=(local(f"gang.{UID}.0.pod", "a"), local(f"gang.{UID}.1", "b")), record=record("local", FITS)
        ),
    ),
    Case(
        "first-pod-no-fit-remote",
        nodes=SMALL,
        reason=(NO_FIT,),
        reservation_id=f"gang.{UID}.0.pod",
        effects=Effects(
            UID, remote=(remote(f"gang.{UID}.0.pod", 4), remote(f"gang.{UID}.1", 0)), record=record("remote", NO_FIT)
        ),
    ),
    Case(
        "first-pod-of-a-pod-group-takes-rank-0",
        member=group(),
        nodes=SMALL,
        reason=("pod group ddp needs 2 x 2",),
        reservation_id=f"gang.{UID}.0.pod",
        effects=Effects(
            UID,
            remote=(remote(f"gang.{UID}.0.pod", 4), remote(f"gang.{UID}.1", 0)),
            record=record(
                "remote", "pod group ddp needs 2 x 2 nvidia.com/gpu at once; only 1 of its 2 pods fit on the nodes now"
            ),
        ),
    ),
    Case(
        "no-identity-keeps-the-gang-local",
        nodes=SMALL,
        cluster_unknown=NO_IDENTITY,
        kind="kept",
        reason=(NO_FIT, "not burst: the kube-system namespace"),
        effects=Effects(
            UID, remote=(remote(f"gang.{UID}.kept", 0),), record=record("kept", f"{NO_FIT}; not burst: {NO_IDENTITY}")
        ),
    ),
    Case(
        "over-budget-kept",
        nodes=SMALL,
        budget=NamespaceBudget(limit=4),
        in_use=2,
        kind="kept",
        reason=("this pod needs 4", "(the whole gang of 2 pods)"),
        budget_note="2 of 4 remote GPUs in use in namespace ns; this pod needs 4 (the whole gang of 2 pods)",
        effects=Effects(
            UID,
            remote=(remote(f"gang.{UID}.kept", 0),),
            record=record(
                "kept",
                f"{NO_FIT}; not burst: 2 of 4 remote GPUs in use in namespace ns; this pod needs 4"
                " (the whole gang of 2 pods)",
            ),
        ),
    ),
    Case(
        "over-budget-denied",
        nodes=SMALL,
        budget=NamespaceBudget(limit=3),
        over_budget="deny",
        kind="denied",
        reason=("this pod needs 4",),
        budget_note="(the whole gang of 2 pods)",
        effects=Effects(
            UID,
            remote=(remote(f"gang.{UID}.denied", 0),),
            record=record(
                "denied",
                f"{NO_FIT}; not burst: 0 of 3 remote GPUs in use in namespace ns; this pod needs"
                " 4 (the whole gang of 2 pods)",
            ),
        ),
    ),
    Case(
        "no-leader-with-a-budget-keeps-the-gang-local",
        budget=NamespaceBudget(limit=10),
        local_refusal="no leader answered",
        over_budget="deny",  # a failover is not the user's doing: never refused for it
        kind="kept",
        reason=("fit (2 x 2 nvidia.com/gpu), but no leader answered",),
        budget_note="no leader answered, so no burst can be counted against the budget of namespace ns",
        effects=Effects(
            UID,
            remote=(remote(f"gang.{UID}.kept", 0),),
            record=record(
                "kept",
                "all 2 pods of Indexed Job train fit (2 x 2 nvidia.com/gpu), but no leader answered; not burst: no"
                " leader answered, so no burst can be counted against the budget of namespace ns",
            ),
        ),
    ),
    Case(
        "follower-from-the-book-remote",
        member=job(1),
        record=record("remote", "decided"),
        reason=("Indexed Job train (2 pods) is remote, as decided at its first pod: decided",),
        reservation_id=f"gang.{UID}.1.pod",
        effects=Effects(release=(f"gang.{UID}.1",), remote=(remote(f"gang.{UID}.1.pod", 0),)),
        rank=1,
    ),
    Case(
        "follower-from-the-book-refused",
        member=job(1),
        record=record("denied", "over budget"),
        kind="denied",
        reason=("is refused, as decided at its first pod: over budget",),
        rank=1,
    ),
    Case(
        "follower-from-handed-over-reservations-local",
        member=job(1),
        ranks={1: RankHolds(Hold(local=True, node="b"), None)},
        kind="local",
        reason=("is local, as decided at its first pod: recorded by the previous leader",),
        node="b",
        reservation_id=f"gang.{UID}.1.pod",
        effects=Effects(release=(f"gang.{UID}.1",), local=(local(f"gang.{UID}.1.pod", "b"),)),
        rank=1,
    ),
    Case(
        "follower-from-a-handed-over-marker",
        member=job(1),
        marked="kept",
        kind="kept",
        reason=("is kept local, as decided at its first pod: recorded by the previous leader",),
        rank=1,
    ),
    Case(
        "follower-from-its-pods-after-a-restart",
        member=job(1),
        seen=SeenGang("remote", frozenset({0})),
        reason=("is remote, as decided at its first pod: as its pods already running or waiting were decided",),
        reservation_id=f"gang.{UID}.1.pod",
        effects=Effects(release=(f"gang.{UID}.1",), remote=(remote(f"gang.{UID}.1.pod", 0),)),
        rank=1,
    ),
    Case(
        "pod-group-follower-takes-the-rank-no-pod-holds",
        member=group(3),
        record=record("remote", "decided", size=3),
        seen=SeenGang("remote", frozenset({0})),
        ranks={1: RankHolds(None, Hold(local=False))},
        reason=("pod group ddp (3 pods) is remote",),
        reservation_id=f"gang.{UID}.2.pod",
        effects=Effects(release=(f"gang.{UID}.2",), remote=(remote(f"gang.{UID}.2.pod", 0),)),
        rank=2,
    ),
    Case(
        "extra-pod-beyond-the-size",
        member=group(),
        record=record("remote", "decided"),
        seen=SeenGang("remote", frozenset({0, 1})),
        kind="kept",
        reason=("all 2 ranks of pod group ddp are held by live pods; this extra pod is kept local",),
        rank=None,
    ),
    Case(
        "follower-remote-without-identity-is-kept",
        member=job(1),
        record=record("remote", "decided"),
        cluster_unknown=NO_IDENTITY,
        kind="kept",
        reason=("not burst: the kube-system namespace",),
        rank=1,
    ),
    Case(
        "follow-local-lapsed-fits",
        member=job(1),
        nodes=(Node("a", 2),),
        record=record("local", "fits"),
        kind="local",
        node="a",
        reservation_id=f"gang.{UID}.1.pod",
        effects=Effects(release=(f"gang.{UID}.1",), local=(local(f"gang.{UID}.1.pod", "a"),)),
        rank=1,
    ),
    Case(
        "follow-local-lapsed-no-room",
        member=job(1),
        nodes=(Node("a", 1),),
        record=record("local", "fits"),
        kind="kept",
        reason=("this pod waits for local GPUs (needs 2 nvidia.com/gpu",),
        rank=1,
    ),
    Case(
        "dry-run-first-pod-local",
        dry_run=True,
        kind="local",
        reason=(FITS,),
        node="a",
    ),
    Case("dry-run-first-pod-remote", nodes=SMALL, dry_run=True, reason=(NO_FIT,)),
    Case(
        "dry-run-follower-local",
        member=job(1),
        ranks={1: RankHolds(Hold(local=True, node="b"), None)},
        dry_run=True,
        kind="local",
        node="b",
        rank=1,
    ),
)


SPEC = {"containers": [container(gpus=2)]}
NEEDS = PodNeeds(gpus={GPU: 2}, requests=REQUESTS, placement=PLACEMENT, namespace="ns")


def facts(*, local_refusal: str = "", over_budget: OverBudget = "local", dry_run: bool = False) -> dict[str, Any]:
    """The pod's facts besides its needs, as decide() takes them."""
    return {
        "active_deadline": None,
        "default_walltime_seconds": POLICY.default_walltime_seconds,
        "local_refusal": local_refusal,
        "over_budget": over_budget,
        "pod": BurstAsk(spec=SPEC, annotations={}, policy=POLICY, bursting=("app",)),
        "uid": "admission-uid",  # a gang's reservations are the rank's, never the admission's
        "dry_run": dry_run,
    }


def kind_of(verdict: Verdict) -> GangKind:
    """The gang's words for a verdict's route: refused (denied), kept local (by its budget or not)."""
    if verdict.route in ("local", "remote"):
        return verdict.route
    return "denied" if verdict.deny else "kept"


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_decide_gang(case: Case) -> None:
    snapshot = Snapshot(
        view=view_of(*case.nodes),
        reservation_refusal="",
        budget=case.budget,
        remote_in_use=case.in_use,
        cluster="" if case.cluster_unknown else CLUSTER,
        cluster_unknown=case.cluster_unknown,
        default_walltime=None,
    )
    gang = GangSnapshot(case.member, case.record, case.marked, case.ranks, case.seen, now=NOW, ttl=TTL)
    given = facts(local_refusal=case.local_refusal, over_budget=case.over_budget, dry_run=case.dry_run)
    verdict = decide(NEEDS, snapshot, gang, **given)
    assert kind_of(verdict) == case.kind
    for fragment in case.reason:
        assert fragment in verdict.reason
    assert verdict.decision.node == case.node
    assert verdict.reservation_id == case.reservation_id
    notes = verdict.notes or {}
    budget_note = notes.get("nimbix-burst.io/budget", "")
    assert case.budget_note in budget_note and bool(budget_note) == bool(case.budget_note)
    assert verdict.effects == case.effects
    if case.rank is None:
        assert "nimbix-burst.io/gang-rank" not in notes or case.member.size is None
    else:
        assert notes["nimbix-burst.io/gang-rank"] == str(case.rank)
    if verdict.route == "remote":  # the burst carries the gang's terms, its cluster and walltime
        assert verdict.burst is not None and verdict.burst.gang == verdict.gang
        assert verdict.gang is not None and verdict.gang.rank == case.rank and verdict.gang.uid == UID
        assert verdict.burst.cluster == CLUSTER and verdict.burst.limit.seconds == 24 * 3600
        # rank 0 submits the gang's job of 2 nodes: it carries the whole gang's GPUs, the others none
        assert verdict.remote_gpus == (4 if case.rank == 0 else 0)


def test_a_size_unknown_pod_carries_its_gang_and_rank_and_nothing_else() -> None:
    snapshot = Snapshot(view_of(), "", None, 0, CLUSTER, cluster_unknown="", default_walltime=None)
    verdict = decide(NEEDS, snapshot, GangSnapshot(job(1, None), None, None, {}, NOTHING, now=NOW, ttl=TTL), **facts())
    assert verdict.notes == {"nimbix-burst.io/gang": UID, "nimbix-burst.io/gang-rank": "1"}
    assert verdict.effects == Effects()
