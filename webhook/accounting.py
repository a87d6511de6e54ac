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
(or hold nothing if none does); a node that appears or grows takes claims that had no node.
Claims are guesses, so they also move to make room: when no node fits a new pod as they sit,
make_room moves the claims off a node that could host it to other nodes that fit them (never a
claim on a nominated node), and the pod stays local.

Every change of what a node holds re-files it in the free-count buckets of the ClusterView.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from webhook.fitting import NO_FIT, ClusterView, FitResult, covers, find_fit
from webhook.scheduling import placement_allows
from webhook.types import CPU_MILLI, MEMORY_BYTES, STANDARD_RESOURCES, Placement, PodInfo, Requests

# make_room gives up after trying this many nodes: it runs only when no node fits, and a cluster
# with a backlog of pending pods has claims on every node with room; a few tries find the room
# that moving one or two claims makes, without making a remote decision linear in pending pods.
MAKE_ROOM_NODE_CAP = 16


@dataclass(frozen=True, slots=True)
class Claim:
    node: str  # "" when no node could take it: such a claim holds nothing
    requests: Requests
    placement: Placement  # kept so the claim can move when the scheduler fills its node
    expires_at: float | None  # reservations expire; claims of watched pods do not
    pinned: bool = False  # on the pod's nominated node: the scheduler chose it, it stays while the node exists


def add_amounts(target: dict[str, int], amounts: Requests, sign: int) -> None:
    for resource, count in amounts.items():
        value = target.get(resource, 0) + sign * count
        if value:
            target[resource] = value
        else:
            target.pop(resource, None)


class ClaimLedger:
    """Used and claimed amounts per node, the claims themselves, and the free-count index."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self._claims: dict[str, Claim] = {}
        self._claims_on: dict[str, dict[str, None]] = {}  # node -> claim ids placed there
        self._unplaced: dict[str, None] = {}  # claim ids no node could take, oldest first

    @property
    def claims(self) -> Mapping[str, Claim]:
        """Claim id ("pod:<uid>" or "res:<reservation id>") -> where it sits and what it holds."""
        return self._claims

    def free(self, node_name: str) -> dict[str, int]:
        node = self.view.nodes.get(node_name)
        if node is None:
            return {}
        return {r: self.view.free_amount(node_name, r, total) for r, total in node.allocatable.items()}

    # ----- what pods hold ------------------------------------------------------------------------

    def take_holding(self, pod: PodInfo, *, claims_gpus: bool) -> None:
        if pod.terminal:
            return
        view = self.view
        if pod.node_name:
            add_amounts(view.used.setdefault(pod.node_name, {}), pod.requests, 1)
            if view.holds_gpus(pod.requests):  # other resources leave the GPU buckets as they are
                self.reindex(pod.node_name)
            self.rehome_claims(pod.node_name)
            return
        if not claims_gpus or not view.holds_gpus(pod.requests):
            return  # an unbound pod without GPUs (a burst pod) claims nothing
        claim_id = "pod:" + pod.uid
        if pod.nominated_node in view.nodes:
            self.add_claim(claim_id, Claim(pod.nominated_node, pod.requests, pod.placement, None, pinned=True))
            return
        fit = find_fit(view, pod.requests, pod.placement)
        node = fit.node.name if fit.node is not None else ""
        self.add_claim(claim_id, Claim(node=node, requests=pod.requests, placement=pod.placement, expires_at=None))

    def drop_holding(self, pod: PodInfo) -> None:
        if pod.terminal:
            return
        if pod.node_name:
            add_amounts(self.view.used.setdefault(pod.node_name, {}), pod.requests, -1)
            if self.view.holds_gpus(pod.requests):
                self.reindex(pod.node_name)
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
            if node is not None and placement_allows(claim.placement, node):
                if not self._overcommitted(node_name):
                    continue
                fit = find_fit(self.view, claim.requests, claim.placement, exclude=node_name)
                if fit.node is None:
                    continue  # nowhere else fits: the deficit stays visible where it is
            else:
                fit = find_fit(self.view, claim.requests, claim.placement, exclude=node_name)
            new_node = fit.node.name if fit.node is not None else ""
            self.add_claim(claim_id, replace(claim, node=new_node, pinned=False))

    def place_unplaced(self, node_name: str) -> None:
        """A node appeared or changed: claims no node could take may fit there now."""
        node = self.view.nodes[node_name]
        for claim_id in list(self._unplaced):
            claim = self._claims[claim_id]
            if placement_allows(claim.placement, node) and covers(self.view, node_name, claim.requests):
                self.add_claim(claim_id, replace(claim, node=node_name))

    def _overcommitted(self, node_name: str) -> bool:
        node = self.view.nodes[node_name]
        for resource, total in node.allocatable.items():
            if self.view.free_amount(node_name, resource, total) < 0:
                return True
        return False

    # ----- the free-count index ------------------------------------------------------------------

    def reindex(self, name: str) -> None:
        view = self.view
        node = view.nodes.get(name)
        allocatable = node.allocatable if node is not None and node.schedulable else {}
        for resource in view.gpu_resources:
            buckets = view.buckets[resource]
            old = view.bucket_of.pop((resource, name), None)
            if old is not None:
                bucket = buckets[old]
                del bucket[name]
                if not bucket:
                    # Drop it: a dict keeps the slots of deleted keys until it next grows, and
                    # iterating one that every node passed through (the all-free bucket during the
                    # initial sync) walks all of them, making each decision linear in cluster size.
                    del buckets[old]
            if resource in allocatable:
                key = max(view.free_amount(name, resource, allocatable[resource]), 0)
                buckets.setdefault(key, {})[name] = None
                view.bucket_of[(resource, name)] = key

    # ----- making room ---------------------------------------------------------------------------

    def make_room(self, requests: Requests, placement: Placement) -> FitResult:
        """When no node fits `requests` as the claims sit now (find_fit found none): a node that
        would, once the claims on it move to other nodes that fit them, with those claims moved.

        A claim is a guess at where the scheduler will put a pod not bound yet (or one just admitted):
        placed best-fit when it appeared and kept there, it could block the only node able to host a
        newcomer after a tighter node freed up, and the webhook burst a pod that had a node (the
        replay's openb-pod-5858 and openb-pod-4640). Claims on a nominated node stay (the scheduler
        chose it). Moves change where claims sit, never what they hold; nothing moves unless the whole
        request then fits. Returns no node when none can be made room on."""
        view = self.view
        primary = view.primary(requests)
        tried = 0
        for node_name, claim_ids in list(self._claims_on.items()):
            node = view.nodes.get(node_name)
            if node is None or primary not in node.allocatable or not placement_allows(placement, node):
                continue
            movable = [claim_id for claim_id in claim_ids if not self._claims[claim_id].pinned]
            if not movable or not self._covers_without(node_name, requests, movable):
                continue
            if self._move_claims_off(node_name, movable, requests):
                return FitResult(node, 1, 0, 0, view.free_amount(node_name, primary, node.allocatable[primary]))
            tried += 1
            if tried >= MAKE_ROOM_NODE_CAP:
                break
        return NO_FIT

    def _covers_without(self, node_name: str, requests: Requests, claim_ids: Iterable[str]) -> bool:
        """Whether `requests` would fit on the node if the claims `claim_ids` held nothing there."""
        released: dict[str, int] = {}
        for claim_id in claim_ids:
            add_amounts(released, self._claims[claim_id].requests, 1)
        allocatable = self.view.nodes[node_name].allocatable
        for resource, amount in requests.items():
            total = allocatable.get(resource)
            if total is None:
                if resource in STANDARD_RESOURCES:
                    continue
                return False
            if self.view.free_amount(node_name, resource, total) + released.get(resource, 0) < amount:
                return False
        return True

    def _move_claims_off(self, node_name: str, claim_ids: Sequence[str], requests: Requests) -> bool:
        """Move claims off the node, biggest first, each to its best fit elsewhere, until `requests`
        fits there; if it never does, put every moved claim back and return False."""
        moved: list[tuple[str, Claim]] = []
        for claim_id in sorted(claim_ids, key=lambda c: _size(self._claims[c].requests), reverse=True):
            if covers(self.view, node_name, requests):
                break
            claim = self._claims[claim_id]
            fit = find_fit(self.view, claim.requests, claim.placement, exclude=node_name)
            if fit.node is not None:
                moved.append((claim_id, claim))
                self.add_claim(claim_id, replace(claim, node=fit.node.name))
        if covers(self.view, node_name, requests):
            return True
        for claim_id, claim in reversed(moved):
            self.add_claim(claim_id, claim)
        return False


def _size(requests: Requests) -> tuple[int, int, int]:
    """GPUs (any resource), CPU, memory: the order make_room moves claims in, biggest first."""
    gpus = 0
    for resource, amount in requests.items():
        if resource not in STANDARD_RESOURCES:
            gpus += amount
    return gpus, requests.get(CPU_MILLI, 0), requests.get(MEMORY_BYTES, 0)
