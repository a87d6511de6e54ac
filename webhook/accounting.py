"""The accounting of what nodes hold: used by bound pods, claimed by pods not bound yet (pure state).

Per node and per resource (GPUs, cpu, memory, ephemeral-storage, pods, any extended resource):
  free     = allocatable - used - claimed
  used     effective requests of non-terminal pods bound to the node (terminating ones count; every
           such pod takes one of the node's `pods`), as kube-scheduler's NodeResourcesFit counts them
  claimed  what pods not bound yet will take: unbound GPU pods the scheduler is trying to place
           (placed on their nominated node, else best-fit) and reservations for pods this webhook
           just admitted as local but the watch has not shown yet (see webhook.reservations)

Claims follow the cluster: when a node is deleted, loses allocatable, becomes ineligible for a
claim, or is filled by a pod the scheduler bound there, its claims move to another node that fits
(or hold nothing if none does, or stay over-committing a filled node when no other node fits);
room that frees anywhere later (a pod gone, a claim released, a node that appears or grows) goes
first to those claims (settle): the scheduler will place their pods there, so it is not free.
Claims are guesses, so they also move to make room for a new pod no node fits as they sit: the
decision plans the moves (room.plan_room), the ledger applies them (move_claims).

Every change of what a node holds re-files it in the free-count buckets of the ClusterView.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from webhook.fitting import add_amounts, covers, find_fit, free_amount, holds_gpus, refile
from webhook.scheduling import eligibility
from webhook.types import Claim, ClaimMove, ClusterView, PodInfo


class ClaimLedger:
    """Used and claimed amounts per node, the claims themselves, and the free-count index."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self._claims = view.claims
        self._claims_on = view.claims_on
        self._unplaced: dict[str, None] = {}  # claim ids no node could take, oldest first
        self._strained: dict[str, None] = {}  # nodes over-committed by claims nothing else could take
        self._freed: dict[str, None] = {}  # nodes where room freed since the last settle()

    @property
    def claims(self) -> Mapping[str, Claim]:
        """Claim id ("pod:<uid>" or "res:<reservation id>") -> where it sits and what it holds."""
        return self._claims

    def free(self, node_name: str) -> dict[str, int]:
        node = self.view.nodes.get(node_name)
        if node is None:
            return {}
        return {r: free_amount(self.view, node_name, r, total) for r, total in node.allocatable.items()}

    # ----- what pods hold ------------------------------------------------------------------------

    def take_holding(self, pod: PodInfo, *, claims_gpus: bool) -> None:
        if pod.terminal:
            return
        view = self.view
        if pod.node_name:
            add_amounts(view.used.setdefault(pod.node_name, {}), pod.requests, 1)
            if holds_gpus(view, pod.requests):  # other resources leave the GPU buckets as they are
                self.reindex(pod.node_name)
            self.rehome_claims(pod.node_name)
            return
        if not claims_gpus or not holds_gpus(view, pod.requests):
            return  # an unbound pod without GPUs (a burst pod) claims nothing
        claim_id = "pod:" + pod.uid
        eligible = eligibility(pod.placement)
        if pod.nominated_node in view.nodes:
            self.add_claim(claim_id, Claim(pod.nominated_node, pod.requests, eligible, None, pinned=True))
            return
        fit = find_fit(view, pod.requests, eligible)
        node = fit.node.name if fit.node is not None else ""
        self.add_claim(claim_id, Claim(node=node, requests=pod.requests, eligibility=eligible, expires_at=None))

    def drop_holding(self, pod: PodInfo) -> None:
        if pod.terminal:
            return
        if pod.node_name:
            add_amounts(self.view.used.setdefault(pod.node_name, {}), pod.requests, -1)
            if holds_gpus(self.view, pod.requests):
                self.reindex(pod.node_name)
            self._freed[pod.node_name] = None
        else:
            self.remove_claim("pod:" + pod.uid)

    # ----- claims --------------------------------------------------------------------------------

    def add_claim(self, claim_id: str, claim: Claim) -> None:
        self.remove_claim(claim_id)
        self._claims[claim_id] = claim
        if claim.node:
            add_amounts(self.view.claimed.setdefault(claim.node, {}), claim.requests, 1)
            add_amounts(self.view.claimed_total, claim.requests, 1)
            self._claims_on.setdefault(claim.node, {})[claim_id] = None
            self.reindex(claim.node)
        else:
            self._unplaced[claim_id] = None

    def remove_claim(self, claim_id: str) -> None:
        claim = self._claims.pop(claim_id, None)
        if claim is None:
            return
        if claim.node:
            add_amounts(self.view.claimed.setdefault(claim.node, {}), claim.requests, -1)
            add_amounts(self.view.claimed_total, claim.requests, -1)
            on_node = self._claims_on[claim.node]
            del on_node[claim_id]
            if not on_node:
                del self._claims_on[claim.node]
            self.reindex(claim.node)
            self._freed[claim.node] = None
        else:
            del self._unplaced[claim_id]

    def rehome_claims(self, node_name: str) -> None:
        """Move the claims on `node_name` that it can no longer honour: the node is gone, no longer
        admits the pod (cordoned, tainted, relabelled, not ready), or is over-committed (a drop in
        allocatable, or the scheduler bound another pod there). Left in place, the node's deficit
        would be hidden (the index clamps at zero) while the claims' real destinations showed
        phantom free capacity."""
        node = self.view.nodes.get(node_name)
        for claim_id in list(self._claims_on.get(node_name, ())):
            claim = self._claims[claim_id]
            if node is not None and claim.pinned:
                continue  # the scheduler nominated this node (it may preempt there): the claim stays
            if node is not None and claim.eligibility.allows(node):
                if not self._overcommitted(node_name):
                    continue
                fit = find_fit(self.view, claim.requests, claim.eligibility, exclude=node_name)
                if fit.node is None:
                    self._strained[node_name] = None  # settle() moves it when room frees elsewhere
                    continue  # nowhere else fits: the deficit stays visible where it is
            else:
                fit = find_fit(self.view, claim.requests, claim.eligibility, exclude=node_name)
            new_node = fit.node.name if fit.node is not None else ""
            self.add_claim(claim_id, replace(claim, node=new_node, pinned=False))

    def node_changed(self, node_name: str) -> None:
        """A node appeared or changed: it may have room for claims that had none (see settle)."""
        self._freed[node_name] = None

    def _place_unplaced(self, node_name: str) -> None:
        """Claims no node could take, onto `node_name` where they fit."""
        node = self.view.nodes[node_name]
        for claim_id in list(self._unplaced):
            claim = self._claims[claim_id]
            if claim.eligibility.allows(node) and covers(self.view, node_name, claim.requests):
                self.add_claim(claim_id, replace(claim, node=node_name))

    def settle(self) -> None:
        """Give the room freed since the last call to the claims that have none: first those no node
        could take, then those over-committing a node the scheduler filled (oldest first). Without
        it a freed GPU looked free to a newcomer while a pending pod was about to take it."""
        while self._freed:
            node_name = next(iter(self._freed))
            del self._freed[node_name]
            if node_name not in self.view.nodes:
                continue
            if self._unplaced:
                self._place_unplaced(node_name)
            if self._strained:
                self._relieve_strained(node_name)

    def _relieve_strained(self, target: str) -> None:
        """Move claims off over-committed nodes to `target`, where they fit, until each is relieved."""
        node = self.view.nodes[target]
        for strained in list(self._strained):
            if strained == target:
                continue
            if strained not in self.view.nodes or not self._overcommitted(strained):
                del self._strained[strained]
                continue
            for claim_id in list(self._claims_on.get(strained, ())):
                claim = self._claims[claim_id]
                if claim.pinned or not claim.eligibility.allows(node) or not covers(self.view, target, claim.requests):
                    continue
                self.add_claim(claim_id, replace(claim, node=target))
                if not self._overcommitted(strained):
                    del self._strained[strained]
                    break

    def _overcommitted(self, node_name: str) -> bool:
        node = self.view.nodes[node_name]
        for resource, total in node.allocatable.items():
            if free_amount(self.view, node_name, resource, total) < 0:
                return True
        return False

    # ----- the free-count index ------------------------------------------------------------------

    def reindex(self, name: str) -> None:
        refile(self.view, name)

    # ----- making room ---------------------------------------------------------------------------

    def move_claims(self, moves: Sequence[ClaimMove]) -> None:
        """Apply claim moves a decision planned (see room.plan_room), in their order."""
        for claim_id, node in moves:
            self.add_claim(claim_id, replace(self._claims[claim_id], node=node))
