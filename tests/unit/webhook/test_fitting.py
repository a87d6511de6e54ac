"""The fit search as a table: a ClusterView built by hand from plain data (no cache, no watch),
the pod's requests and placement in, the best-fit node and the counts that explain it out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.support.cluster_views import GPU, Node, view_of
from webhook.fitting import CANDIDATE_CAP, best_partial_fit, find_fit
from webhook.scheduling import eligibility
from webhook.types import CPU_MILLI, Placement, Requests, Taint, Toleration

CORDON = Toleration(key="node.kubernetes.io/unschedulable", operator="Exists", value="", effect="")
SPOT = Taint(key="spot", value="true", effect="NoSchedule")


@dataclass(frozen=True)
class Case:
    name: str
    nodes: tuple[Node, ...]
    requests: Requests
    placement: Placement = field(default_factory=Placement)
    node: str | None = None  # the best fit expected
    candidates: int = 0
    excluded: int = 0
    short: int = 0


CASES = [
    Case("fewest free that fit", (Node("a", 8), Node("b", 4, used=1), Node("c", 2)), {GPU: 3}, node="b", candidates=2),
    Case("nothing has enough", (Node("a", 2), Node("b", 4, used=3)), {GPU: 3}),
    Case(
        "taint rules out the best",
        (Node("a", 4, taints=(SPOT,)), Node("b", 8)),
        {GPU: 4},
        node="b",
        candidates=1,
        excluded=1,
    ),
    Case(
        "short of cpu",
        (Node("a", 4, used_cpu=7500), Node("b", 8)),
        {GPU: 4, CPU_MILLI: 1000},
        node="b",
        candidates=1,
        short=1,
    ),
    Case(
        "selector narrows",
        (Node("a", 4, labels={"model": "T4"}), Node("b", 2, labels={"model": "V100"})),
        {GPU: 2},
        Placement(node_selector={"model": "T4"}),
        node="a",
        candidates=1,
    ),
    Case("nodeName pins", (Node("a", 2), Node("b", 8)), {GPU: 1}, Placement(node_name="b"), node="b", candidates=1),
    Case("cordoned needs its toleration", (Node("a", 8, cordoned=True),), {GPU: 1}),
    Case(
        "cordoned with its toleration",
        (Node("a", 8, cordoned=True),),
        {GPU: 1},
        Placement(tolerations=(CORDON,)),
        node="a",
        candidates=1,
    ),
    Case(
        "candidates capped",
        tuple(Node(f"n{i}", 4) for i in range(CANDIDATE_CAP + 5)),
        {GPU: 1},
        node="n0",
        candidates=CANDIDATE_CAP,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_find_fit(case: Case) -> None:
    fit = find_fit(view_of(*case.nodes), case.requests, eligibility(case.placement))
    assert (fit.node.name if fit.node else None) == case.node
    assert (fit.candidates, fit.excluded_by_placement, fit.short_of_compute) == (
        case.candidates,
        case.excluded,
        case.short,
    )


def test_find_fit_excludes_a_node() -> None:
    fit = find_fit(view_of(Node("a", 2), Node("b", 4)), {GPU: 2}, eligibility(Placement()), exclude="a")
    assert fit.node is not None and fit.node.name == "b"


@pytest.mark.parametrize(
    ("nodes", "placement", "expected"),
    [
        ((Node("a", 8, used=7), Node("b", 4, used=1)), Placement(), ("b", 3)),
        ((Node("a", 8, taints=(SPOT,)), Node("b", 4, used=1)), Placement(), ("b", 3)),
        ((Node("a", 8, taints=(SPOT,)),), Placement(), None),
        ((Node("a", 2), Node("b", 8, cordoned=True)), Placement(tolerations=(CORDON,)), ("b", 8)),
    ],
)
def test_best_partial_fit(nodes: tuple[Node, ...], placement: Placement, expected: tuple[str, int] | None) -> None:
    best = best_partial_fit(view_of(*nodes), GPU, eligibility(placement))
    assert (None if best is None else (best[0].name, best[1])) == expected
