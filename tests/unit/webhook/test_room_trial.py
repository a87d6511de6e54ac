"""The making-room Trial as a table: what it reads after each hold is what a full copy of the view,
re-filed the way the cache re-files (fitting.refile), reads; and it copies none of the per-node index.

The copy is the oracle: the order of equally free nodes decides ties, so a node the trial re-filed
must read as if it had left its bucket and joined the end of its new one."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from tests.support.cluster_views import GPU, Node, view_of
from webhook.fitting import add_amounts, best_partial_fit, find_fit, refile
from webhook.room import Trial
from webhook.scheduling import eligibility
from webhook.types import CPU_MILLI, ClusterView, Placement, Requests

ZONE = "zone"


@dataclass(frozen=True)
class Case:
    name: str
    nodes: tuple[Node, ...]
    holds: tuple[tuple[str, int], ...]  # (node, GPUs) held one after the other
    asks: tuple[int, ...] = (1, 2, 3, 4)  # GPUs of the pods whose fit is compared after each hold


CASES = [
    Case(
        "a held node leaves its bucket for the end of a lower one",
        (Node("a", 4), Node("b", 2), Node("c", 2), Node("d", 4)),
        (("a", 2), ("d", 1)),
    ),
    Case("held back to its first bucket: last in it now", (Node("a", 4), Node("b", 4), Node("c", 4)), (("a", 1),)),
    Case(
        "held twice, then emptied: out of every bucket that fits",
        (Node("a", 3), Node("b", 1), Node("c", 3)),
        (("a", 1), ("a", 2), ("c", 1)),
    ),
    Case(
        "pinned pods (fewer candidates than bucket members) see the re-filed counts",
        tuple(Node(f"n{i}", 4, labels={ZONE: "x" if i < 2 else "y"}) for i in range(6)),
        (("n0", 3), ("n1", 1), ("n4", 2)),
    ),
    Case("cordoned nodes stay out of the buckets", (Node("a", 4, cordoned=True), Node("b", 4)), (("a", 1), ("b", 2))),
]


def _oracle_hold(view: ClusterView, node: str, requests: Requests) -> None:
    """What a full copy does: its claimed amounts changed, the node re-filed as the cache does."""
    add_amounts(view.claimed.setdefault(node, {}), requests, 1)
    refile(view, node)


def _reads(view: ClusterView, asks: tuple[int, ...]) -> list[object]:
    reads: list[object] = []
    for gpus in asks:
        for placement in (Placement(), Placement(node_selector={ZONE: "x"})):
            eligible = eligibility(placement)
            fit = find_fit(view, {GPU: gpus, CPU_MILLI: 100}, eligible)
            reads.append((gpus, placement.node_selector, fit.node and fit.node.name, fit.candidates, fit.best_free))
            partial = best_partial_fit(view, GPU, eligible)
            reads.append(partial and (partial[0].name, partial[1]))
    return reads


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_trial_reads_as_a_full_copy_re_filed(case: Case) -> None:
    shared = view_of(*case.nodes)
    before = copy.deepcopy((shared.buckets, shared.bucket_of, shared.claimed))
    oracle = view_of(*case.nodes)  # built again, not deep-copied: the compiled NodeInfo is not copyable
    trial = Trial(shared)
    for node, gpus in case.holds:
        trial.hold(node, {GPU: gpus})
        _oracle_hold(oracle, node, {GPU: gpus})
        assert _reads(trial.view, case.asks) == _reads(oracle, case.asks)
    # The shared view is never written.
    assert (shared.buckets, shared.bucket_of, shared.claimed) == before


def test_a_trial_copies_no_per_node_index() -> None:
    shared = view_of(*(Node(f"n{i}", 8, used=i % 8) for i in range(64)))
    trial = Trial(shared)
    trial.hold("n3", {GPU: 2})
    # The buckets and their index are read through, not copied (a copy cost ~100 ns a node).
    assert trial.view.buckets is shared.buckets
    assert trial.view.bucket_of is shared.bucket_of
    assert trial.view.refiled == {GPU: {"n3": 3}}
