"""The reference of the wrong-burst detector (replay/checker.py): a slow, plain answer to "could a
node host this pod at this moment?", recomputed from scratch for every question from the history the
replay recorded (pure; no incremental bookkeeping to get wrong):

  free(node) = allocatable - sum of requests of non-terminal pods bound to the node
  claims     = unbound non-terminal pods that request GPUs, plus pods decided "local" whose
               creation the watch has not shown yet; each is placed best-fit (fewest free GPUs
               that still fit, in the order they were first seen) and takes what it needs
  fits(pod)  = some single schedulable node the pod tolerates and whose labels match its
               nodeSelector and required node affinity has free - claims >= the pod's request,
               for every resource checked
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from replay.history import GPU, Decision, NodeSeen, Observation, Placement, PodSeen, Requirement, Toleration

GPU_ONLY: tuple[str, ...] = (GPU,)
ALL_RESOURCES: tuple[str, ...] = (GPU, "cpu", "memory")


def tolerated(taint: tuple[str, str, str], tolerations: Iterable[Toleration]) -> bool:
    key, value, effect = taint
    for t in tolerations:
        if t.effect and t.effect != effect:
            continue
        if t.operator == "Exists" and (not t.key or t.key == key):
            return True
        if t.operator == "Equal" and t.key == key and t.value == value:
            return True
    return False


def requirement_holds(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    if requirement.operator == "In":
        return labels.get(requirement.key) in requirement.values
    if requirement.operator == "NotIn":
        return labels.get(requirement.key) not in requirement.values
    if requirement.operator == "Exists":
        return requirement.key in labels
    if requirement.operator == "DoesNotExist":
        return requirement.key not in labels
    return False


def eligible(node: NodeSeen, placement: Placement) -> bool:
    """May the scheduler put a pod with this placement on this node at all (resources aside)?"""
    if node.unschedulable:
        return False
    if not all(tolerated(taint, placement.tolerations) for taint in node.taints):
        return False
    if any(node.labels.get(k) != v for k, v in placement.node_selector.items()):
        return False
    if placement.terms is None:
        return True
    # Terms are ORed; an empty term matches nothing.
    return any(term and all(requirement_holds(r, node.labels) for r in term) for term in placement.terms)


class ReferenceState:
    """Nodes and pods as the replay's watch showed them, plus local decisions not yet seen.

    `version` changes whenever something that holds or offers capacity changes (not, say, a
    pod's status message), so answers can be reused while it stays the same.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, NodeSeen] = {}
        self.pods: dict[str, PodSeen] = {}  # insertion order = first seen
        self.unseen_local: dict[str, Decision] = {}
        self.version = 0

    def apply(self, observation: Observation) -> None:
        name = observation.name
        if observation.kind == "node" and observation.node is not None:
            self.version += self.nodes.get(name) != observation.node
            self.nodes[name] = observation.node
        elif observation.kind == "node-deleted":
            self.version += self.nodes.pop(name, None) is not None
        elif observation.kind == "pod" and observation.pod is not None:
            old = self.pods.get(name)
            self.version += old is None or _holding(old) != _holding(observation.pod) or name in self.unseen_local
            self.pods[name] = observation.pod
            self.unseen_local.pop(name, None)
        elif observation.kind == "pod-deleted":
            self.version += name in self.pods or name in self.unseen_local
            self.pods.pop(name, None)
            self.unseen_local.pop(name, None)

    def decided_local(self, decision: Decision) -> None:
        if decision.key not in self.pods:
            self.unseen_local[decision.key] = decision
            self.version += 1


def _holding(pod: PodSeen) -> tuple[object, ...]:
    return (pod.node, pod.terminal, pod.requests, pod.placement)


Usage = dict[str, dict[str, int]]


def used_per_node(state: ReferenceState, resources: Sequence[str]) -> Usage:
    """Requests of the non-terminal pods bound to each node, per resource (GPUs always)."""
    counted = tuple(dict.fromkeys((GPU, *resources)))
    used: Usage = {}
    for pod in state.pods.values():
        if pod.terminal or not pod.node:
            continue
        node_used = used.setdefault(pod.node, {})
        for r in counted:
            node_used[r] = node_used.get(r, 0) + pod.requests.get(r, 0)
    return used


def nodes_with_free_gpus(state: ReferenceState, used: Usage) -> list[str]:
    return [name for name, node in state.nodes.items() if node.allocatable.get(GPU, 0) > used.get(name, {}).get(GPU, 0)]


def free_capacity(
    state: ReferenceState,
    resources: Sequence[str],
    *,
    exclude: str = "",
    min_gpus: int = 0,
    used: Usage | None = None,
    gpu_free_nodes: Sequence[str] | None = None,
) -> dict[str, dict[str, int]]:
    """allocatable - requests of the non-terminal pods bound to each node, per resource; only
    nodes with at least `min_gpus` free GPUs. `exclude`: a pod not to count (the one judged).
    `used` and `gpu_free_nodes` may be passed in when already computed for this state."""
    used = used_per_node(state, resources) if used is None else used
    mine = state.pods.get(exclude)
    own_node = mine.node if mine is not None and mine.node and not mine.terminal else ""
    names: Sequence[str] = list(state.nodes)
    if min_gpus > 0:
        names = nodes_with_free_gpus(state, used) if gpu_free_nodes is None else gpu_free_nodes
        if own_node and own_node not in names and own_node in state.nodes:
            names = [*names, own_node]  # free once the judged pod itself is not counted
    free = {}
    for name in names:
        node = state.nodes[name]
        node_used = used.get(name, {})
        own = mine.requests if name == own_node and mine is not None else {}
        if node.allocatable.get(GPU, 0) - node_used.get(GPU, 0) + own.get(GPU, 0) < min_gpus:
            continue
        free[name] = {r: node.allocatable.get(r, 0) - node_used.get(r, 0) + own.get(r, 0) for r in resources}
    return free


def _decided_before(claim: Decision, sequence: int | None) -> bool:
    """Whether the webhook decided `claim` before the decision at `sequence` (unknown order: yes)."""
    return sequence is None or claim.view is None or claim.view.sequence < sequence


@dataclass(frozen=True, slots=True)
class Claim:
    key: str
    requests: Mapping[str, int]
    placement: Placement
    decision: Decision | None  # the local decision not yet seen; None: an unbound pod the watch shows


def list_claims(state: ReferenceState, exclude: str, *, sequence: int | None = None) -> list[Claim]:
    """Unbound GPU pods, and local decisions not yet seen that the webhook made before the decision
    at `sequence` (one it made later cannot have weighed on it)."""
    found = [
        Claim(key, pod.requests, pod.placement, None)
        for key, pod in state.pods.items()
        if key != exclude and not pod.node and not pod.terminal and pod.requests.get(GPU, 0) > 0
    ]
    found += [
        Claim(key, d.requests, d.placement, d)
        for key, d in state.unseen_local.items()
        if key != exclude and _decided_before(d, sequence)
    ]
    return found


def _claims(
    state: ReferenceState, exclude: str, *, sequence: int | None = None
) -> list[tuple[Mapping[str, int], Placement]]:
    return [(c.requests, c.placement) for c in list_claims(state, exclude, sequence=sequence)]


def covers(room: Mapping[str, int], need: Mapping[str, int], resources: Sequence[str]) -> bool:
    """Whether `room` holds `need` in every one of `resources`."""
    return all(room[r] >= need.get(r, 0) for r in resources)


@dataclass(frozen=True, slots=True)
class Answer:
    fits: bool  # claims counted
    fits_ignoring_claims: bool
    exact: bool = True  # False: the claims' search ran too long and greedy best-fit answered


def _host_exists(
    state: ReferenceState,
    free: Mapping[str, Mapping[str, int]],
    requests: Mapping[str, int],
    placement: Placement,
    resources: Sequence[str],
) -> bool:
    return any(
        covers(room, requests, resources) and eligible(state.nodes[name], placement) for name, room in free.items()
    )


def _place_claims(
    state: ReferenceState,
    free: dict[str, dict[str, int]],
    resources: Sequence[str],
    claims: Sequence[tuple[Mapping[str, int], Placement]],
) -> int:
    """Greedy: each claim, in the order first seen, on the node with the fewest free GPUs that holds
    it (it takes what it needs from `free`). Returns how many found a node."""
    placed = 0
    for need, claim_placement in claims:
        candidates = [
            name
            for name, room in free.items()
            if room[GPU] >= need.get(GPU, 0)
            and covers(room, need, resources)
            and eligible(state.nodes[name], claim_placement)
        ]
        if candidates:
            best = min(candidates, key=lambda name: (free[name][GPU], name))
            for r in resources:
                free[best][r] -= need.get(r, 0)
            placed += 1
    return placed


# The exact search below gives up after this many steps and keeps the greedy answer (counted in
# `Answer.exact`): a replay's windows see a handful of claims on a handful of nodes.
SEARCH_STEPS = 5_000


class _Packing:
    """Can `target` of the claims be placed together in `room`? An exhaustive search (claims with
    the fewest nodes first; identical claims take nodes in order, so no arrangement is tried twice;
    a state already found short is not searched again)."""

    def __init__(self, claims: Sequence[tuple[Mapping[str, int], list[str]]], resources: Sequence[str]) -> None:
        self._claims = sorted(claims, key=lambda c: (len(c[1]), sorted(c[0].items()), c[1]))
        self._resources = resources
        self._nodes = sorted({name for _, nodes in claims for name in nodes})
        self.steps = 0

    def can_place(self, room: dict[str, dict[str, int]], target: int) -> bool:
        self._short: set[tuple[object, ...]] = set()
        return self._search(0, room, placed=0, target=target, floor=0)

    def _search(self, i: int, room: dict[str, dict[str, int]], *, placed: int, target: int, floor: int) -> bool:
        if placed >= target:
            return True
        if placed + len(self._claims) - i < target:
            return False
        key = (i, placed, floor, *(room[n][r] for n in self._nodes for r in self._resources))
        if key in self._short:
            return False
        self.steps += 1
        if self.steps > SEARCH_STEPS:
            raise _SearchTooLong
        need, nodes = self._claims[i]
        same_as_next = i + 1 < len(self._claims) and self._claims[i + 1] == self._claims[i]
        for index, name in enumerate(nodes):
            if index < floor or not covers(room[name], need, self._resources):
                continue
            for r in self._resources:
                room[name][r] -= need.get(r, 0)
            done = self._search(i + 1, room, placed=placed + 1, target=target, floor=index if same_as_next else 0)
            for r in self._resources:
                room[name][r] += need.get(r, 0)
            if done:
                return True
        # This claim left out; an identical next one may then not take an earlier node than it could have.
        if self._search(i + 1, room, placed=placed, target=target, floor=0):
            return True
        self._short.add(key)
        return False


class _SearchTooLong(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Pod:
    requests: Mapping[str, int]
    placement: Placement


def _fits_beside_claims(
    state: ReferenceState,
    free: Mapping[str, Mapping[str, int]],
    pod: Pod,
    resources: Sequence[str],
    claims: Sequence[tuple[Mapping[str, int], Placement]],
) -> tuple[bool, bool]:
    """Could a node host the pod while the claims still get all the room they can use: does some
    arrangement place the pod and as many claims as any arrangement without it? (A claim no
    arrangement can place, say for want of CPU, holds nothing.) Greedy best-fit first, which settles
    most questions; an exact search when it does not (greedy can strand a claim that fits elsewhere).
    Returns (fits, exact): not exact when the search ran too long and greedy answered."""
    requests, placement = pod.requests, pod.placement
    greedy_room = {name: dict(room) for name, room in free.items()}
    greedy_placed = _place_claims(state, greedy_room, resources, claims)
    if greedy_placed == len(claims) and _host_exists(state, greedy_room, requests, placement, resources):
        return True, True
    usable = [
        (
            need,
            [name for name, room in free.items() if covers(room, need, resources) and eligible(state.nodes[name], p)],
        )
        for need, p in claims
    ]
    usable = [(need, nodes) for need, nodes in usable if nodes]
    claim_nodes = {name for _, nodes in usable for name in nodes}
    capacity = {r: sum(free[name][r] for name in claim_nodes) for r in resources}
    needs = [need for need, _ in usable]
    packing = _Packing(usable, resources)
    try:
        most = greedy_placed
        for target in range(min(len(usable), _count_bound(needs, capacity, resources)), greedy_placed, -1):
            if packing.can_place({name: dict(room) for name, room in free.items()}, target):
                most = target
                break
        for name, room in free.items():
            if not (covers(room, requests, resources) and eligible(state.nodes[name], placement)):
                continue
            if name not in claim_nodes:
                return True, True  # no claim can use this node: the pod takes nothing from them
            left = {r: capacity[r] - requests.get(r, 0) for r in resources}
            if _count_bound(needs, left, resources) < most:
                continue
            trial = {n: dict(r) for n, r in free.items()}
            for r in resources:
                trial[name][r] -= requests.get(r, 0)
            if packing.can_place(trial, most):
                return True, True
        return False, True
    except _SearchTooLong:
        return _host_exists(state, greedy_room, requests, placement, resources), False


def _count_bound(needs: Sequence[Mapping[str, int]], capacity: Mapping[str, int], resources: Sequence[str]) -> int:
    """At most how many of `needs` fit together in `capacity` summed over nodes: per resource, the
    smallest needs first (a bound, not an arrangement; it spares the search most hopeless targets)."""
    bound = len(needs)
    for r in resources:
        total, count = 0, 0
        for amount in sorted(need.get(r, 0) for need in needs):
            total += amount
            if total > capacity[r]:
                break
            count += 1
        bound = min(bound, count)
    return bound


def answer(
    state: ReferenceState,
    requests: Mapping[str, int],
    placement: Placement,
    *,
    resources: Sequence[str],
    exclude: str,
    used: Usage | None = None,
    gpu_free_nodes: Sequence[str] | None = None,
    sequence: int | None = None,
) -> Answer:
    """Could some single node host a pod with these requests now? `exclude` is the pod itself;
    `sequence`: the decision's place in the webhook's order (later local decisions claim nothing)."""
    resources = tuple(dict.fromkeys((GPU, *resources)))  # claims are placed by GPUs: always counted
    # Every claim asks for a GPU, and so does every pod judged here: nodes without a free GPU can
    # host none of them, so they are left out (the checker's only shortcut).
    min_gpus = 1 if requests.get(GPU, 0) > 0 else 0
    free = free_capacity(state, resources, exclude=exclude, min_gpus=min_gpus, used=used, gpu_free_nodes=gpu_free_nodes)
    ignoring_claims = _host_exists(state, free, requests, placement, resources)
    if not ignoring_claims:
        return Answer(fits=False, fits_ignoring_claims=False)
    claims = _claims(state, exclude, sequence=sequence)
    fits, exact = _fits_beside_claims(state, free, Pod(requests, placement), resources, claims)
    return Answer(fits=fits, fits_ignoring_claims=True, exact=exact)
