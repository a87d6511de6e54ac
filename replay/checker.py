"""The independent wrong-burst detector: a slow, plain reference for "could a node host this pod
at that moment?", evaluated over the history the replay recorded (pure).

The reference, recomputed from scratch for every question (no incremental bookkeeping to get
wrong):

  free(node) = allocatable - sum of requests of non-terminal pods bound to the node
  claims     = unbound non-terminal pods that request GPUs, plus pods decided "local" whose
               creation the watch has not shown yet; each is placed best-fit (fewest free GPUs
               that still fit, in the order they were first seen) and takes what it needs
  fits(pod)  = some single schedulable node the pod tolerates and whose labels match its
               nodeSelector and required node affinity has free - claims >= the pod's request,
               for every resource checked

Timing. The webhook decides from its own watch, the reference from the replay's; the two can be
a few events apart, and a GPU freed a millisecond before an admission is a race, not a wrong
decision. So a decision is judged over its whole window, from `race_window` seconds before it
started until it finished: a burst is *wrong* only if the pod fits at every moment of the
window (claims counted); a keep-local decision is *unprovidable* only if it fits at no moment.
The unguarded count (fits when the decision finished, claims ignored) is kept as an upper bound.

A webhook that logs the resourceVersions its view held when it decided (pods, nodes) is judged from
the state it saw, whichever watch was behind:
- the webhook's: when the replay's watch had already shown a newer object of a kind before the
  window would open, the window opens just before that object instead (a burst on a view that
  lagged the cluster, a GPU freed a second ago and not yet seen, is then a race);
- the replay's: when the replay's watch showed the newest object the webhook's view held only
  after the decision finished, the window closes then instead (a busy replay process reads its
  watch late; what the webhook saw is still judged).
A local decision the webhook made after the one judged (its log gives the order) is no claim on
it, however early the replay saw it. A decision the view itself got wrong is still wrong.
`Verdict.view_lag` and `watch_lag` say by how much the window was widened each way.
"""

from __future__ import annotations

import bisect
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


def _covers(room: Mapping[str, int], need: Mapping[str, int], resources: Sequence[str]) -> bool:
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
        _covers(room, requests, resources) and eligible(state.nodes[name], placement) for name, room in free.items()
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
            and _covers(room, need, resources)
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
            if index < floor or not _covers(room[name], need, self._resources):
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
            [name for name, room in free.items() if _covers(room, need, resources) and eligible(state.nodes[name], p)],
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
            if not (_covers(room, requests, resources) and eligible(state.nodes[name], placement)):
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


@dataclass(frozen=True, slots=True)
class Window:
    """Does a pod fit at every moment from `start` to `end`? (or, with expect_fit False: never?)"""

    ident: int
    start: float
    end: float
    requests: Mapping[str, int]
    placement: Placement
    exclude: str  # the pod itself
    expect_fit: bool
    sequence: int | None = None  # the decision's place in the webhook's order, when known


@dataclass(frozen=True, slots=True)
class WindowAnswer:
    throughout: bool  # the reference answered `expect_fit` at every moment of the window
    fits_at_start: bool
    fits_at_end_ignoring_claims: bool
    exact: bool = True  # every answer inside the window was exact (see Answer.exact)


def evaluate(
    history: Sequence[Observation],
    local_decisions: Sequence[Decision],
    windows: Sequence[Window],
    *,
    resources: Sequence[str],
) -> dict[int, WindowAnswer]:
    """Replays the history in time order and answers each window from the states inside it.

    Everything stamped at or before a moment is applied first; a local decision claims its GPUs
    from the moment its CREATE was sent. A window is re-checked after every change inside it
    until its answer first differs from `expect_fit` (then it is settled: not throughout).
    """
    timeline: list[tuple[float, int, int, Observation | Decision | Window]] = []
    timeline += [(o.at, 0, i, o) for i, o in enumerate(history)]
    timeline += [(d.started, 1, i, d) for i, d in enumerate(local_decisions)]
    timeline += [(w.start, 2, i, w) for i, w in enumerate(windows)]
    timeline += [(w.end, 3, i, w) for i, w in enumerate(windows)]
    timeline.sort(key=lambda item: item[:3])
    state = ReferenceState()
    open_windows: dict[int, Window] = {}
    at_start: dict[int, bool] = {}
    answers: dict[int, WindowAnswer] = {}
    cache: dict[int, tuple[Usage, list[str]]] = {}  # state version -> usage (one entry)
    inexact: set[int] = set()  # windows where a greedy answer stood in for the search

    def check(window: Window) -> Answer:
        if state.version not in cache:
            cache.clear()
            used = used_per_node(state, resources)
            cache[state.version] = (used, nodes_with_free_gpus(state, used))
        used, gpu_free = cache[state.version]
        result = answer(
            state,
            window.requests,
            window.placement,
            resources=resources,
            exclude=window.exclude,
            used=used,
            gpu_free_nodes=gpu_free,
            sequence=window.sequence,
        )
        if not result.exact:
            inexact.add(window.ident)
        return result

    for _, rank, _, item in timeline:
        if isinstance(item, Observation | Decision):
            before = state.version
            if isinstance(item, Observation):
                state.apply(item)
            else:
                state.decided_local(item)
            if state.version == before:
                continue
            for ident, window in list(open_windows.items()):
                if check(window).fits != window.expect_fit:
                    del open_windows[ident]
        elif rank == 2:
            at_start[item.ident] = check(item).fits
            if at_start[item.ident] == item.expect_fit:
                open_windows[item.ident] = item
        else:
            last = check(item)
            held = open_windows.pop(item.ident, None) is not None and last.fits == item.expect_fit
            answers[item.ident] = WindowAnswer(
                held, at_start[item.ident], last.fits_ignoring_claims, exact=item.ident not in inexact
            )
    return answers


class ViewClock:
    """When the replay's watch showed objects relative to a view's resourceVersion, per kind: the
    observations' times in resourceVersion order (the API server's order), with suffix minima and
    prefix maxima."""

    def __init__(self, history: Sequence[Observation]) -> None:
        self._kinds: dict[str, tuple[list[int], list[float], list[float]]] = {}
        for kind in ("pod", "node"):
            seen = sorted((o.version, o.at) for o in history if o.version > 0 and o.kind.startswith(kind))
            earliest = [at for _, at in seen]
            for i in range(len(earliest) - 2, -1, -1):
                earliest[i] = min(earliest[i], earliest[i + 1])
            latest = [at for _, at in seen]
            for i in range(1, len(latest)):
                latest[i] = max(latest[i], latest[i - 1])
            self._kinds[kind] = ([v for v, _ in seen], earliest, latest)

    def first_newer(self, kind: str, version: int) -> float | None:
        """The first moment the replay saw an object of `kind` newer than `version` (None: never)."""
        versions, earliest, _ = self._kinds[kind]
        i = bisect.bisect_right(versions, version)
        return earliest[i] if i < len(versions) else None

    def caught_up(self, kind: str, version: int) -> float | None:
        """The moment the replay had seen every object of `kind` up to `version` (None: none of them)."""
        versions, _, latest = self._kinds[kind]
        i = bisect.bisect_right(versions, version)
        return latest[i - 1] if i > 0 else None


# A window widened to a lagging view opens this long before the first object the view had not seen.
VIEW_EPSILON = 1e-6


def _views(decision: Decision) -> list[tuple[str, int]]:
    if decision.view is None:
        return []
    return [(kind, v) for kind, v in (("pod", decision.view.pods), ("node", decision.view.nodes)) if v > 0]


def window_start(decision: Decision, clock: ViewClock, *, race_window: float) -> float:
    """`race_window` before the decision started, or earlier: just before the replay's watch showed
    the first object newer than what the webhook's view held (see the module docstring)."""
    start = decision.started - race_window
    for kind, version in _views(decision):
        newer = clock.first_newer(kind, version)
        if newer is not None and newer - VIEW_EPSILON < start:
            start = newer - VIEW_EPSILON
    return start


def window_end(decision: Decision, clock: ViewClock) -> float:
    """When the decision finished, or later: when the replay's watch had shown all the webhook saw."""
    end = decision.finished
    for kind, version in _views(decision):
        caught_up = clock.caught_up(kind, version)
        if caught_up is not None and caught_up > end:
            end = caught_up
    return end


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    contradicted_throughout: bool  # the reference disagreed with the decision at every moment
    fits_at_start: bool  # when the window opened, claims counted
    fits_at_end_ignoring_claims: bool
    view_lag: float = 0.0  # how much earlier than race_window the window opened: the webhook's lag
    watch_lag: float = 0.0  # how much later than the decision's end it closed: the replay watch's lag
    exact: bool = True  # False: somewhere in the window greedy best-fit answered for the search

    @property
    def wrong_burst(self) -> bool:
        """Burst although some node could host it throughout the decision (claims counted)."""
        return self.decision.kind == "remote" and self.contradicted_throughout

    @property
    def wrong_burst_upper_bound(self) -> bool:
        return self.decision.kind == "remote" and self.fits_at_end_ignoring_claims

    @property
    def unprovidable_local(self) -> bool:
        """Kept local although no node could host it at any moment of the decision."""
        return self.decision.kind == "local" and self.contradicted_throughout


def judge(
    history: Sequence[Observation],
    decisions: Sequence[Decision],
    *,
    race_window: float,
    resources: Sequence[str] = GPU_ONLY,
) -> list[Verdict]:
    """One verdict per decision, judged over [window_start, finished]."""
    clock = ViewClock(history)
    starts = [window_start(d, clock, race_window=race_window) for d in decisions]
    ends = [window_end(d, clock) for d in decisions]
    windows = [
        Window(
            i,
            starts[i],
            ends[i],
            d.requests,
            d.placement,
            d.key,
            expect_fit=d.kind == "remote",
            sequence=d.view.sequence if d.view is not None else None,
        )
        for i, d in enumerate(decisions)
    ]
    local = [d for d in decisions if d.kind == "local"]
    answers = evaluate(history, local, windows, resources=resources)
    return [
        Verdict(
            decision=d,
            contradicted_throughout=answers[i].throughout,
            fits_at_start=answers[i].fits_at_start,
            fits_at_end_ignoring_claims=answers[i].fits_at_end_ignoring_claims,
            view_lag=d.started - race_window - starts[i],
            watch_lag=ends[i] - d.finished,
            exact=answers[i].exact,
        )
        for i, d in enumerate(decisions)
    ]
