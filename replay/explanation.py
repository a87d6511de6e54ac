"""Why the checker judged one decision as it did: the state it judged, rebuilt from a saved history
(pure; `python -m replay.explain` prints it).

For the decision's window (checker.window_start .. window_end), at both ends: the checker's answers
counting GPUs only and all resources, the nodes in question (allocatable, bound pods, used, free) and
the claims (unbound GPU pods, local decisions not yet seen that the webhook made before this one);
then every observation inside the window that touches those nodes, claims or the pod itself. The
states are built exactly as checker.evaluate builds them: at one moment, observations first, then
local decisions, each in time order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from replay import accounting, checker, reference
from replay.history import CPU, GPU, MEMORY, AdmissionView, Decision, Observation, Placement
from replay.record_file import SavedRun
from replay.reference import ReferenceState

RESOURCES = (GPU, CPU, MEMORY)
# Without --node: this many nodes at most, the rest counted. Enough to see the best fits; a window
# often has dozens of nodes with a free GPU that the pod's CPU or memory rules out.
DEFAULT_NODES = 5
# The webhook's reason names the node it chose: "... best fit <node>" or "best node <node> has ...".
_NAMED_NODE = re.compile(r"best (?:fit|node) ([^\s;,()]+)")


class ExplainError(ValueError):
    """The pod or node asked about is not in the history; the message lists what is."""


@dataclass(frozen=True, slots=True)
class BoundPod:
    key: str
    requests: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    eligible: bool  # the pod's placement (selector, affinity, taints) allows this node at all
    allocatable: Mapping[str, int]
    pods: tuple[BoundPod, ...]  # non-terminal pods bound to it
    used: Mapping[str, int]
    free: Mapping[str, int]  # ignoring claims


@dataclass(frozen=True, slots=True)
class ClaimRow:
    key: str
    requests: Mapping[str, int]
    source: str  # "unbound pod" or "local decision not yet seen"
    sequence: int | None  # its place in the webhook's order, when its log gave one
    could_use: tuple[str, ...]  # nodes with room for it (all resources, other claims ignored), best fit first


@dataclass(frozen=True, slots=True)
class Moment:
    label: str
    at: float  # seconds relative to the decision's start
    gpu_only: reference.Answer
    all_resources: reference.Answer
    nodes: tuple[NodeRow, ...]
    claims: tuple[ClaimRow, ...]


@dataclass(frozen=True, slots=True)
class Event:
    at: float  # seconds relative to the decision's start
    kind: str  # an observation kind, or "decided-local"
    name: str
    version: int
    node: str = ""  # a pod's node ("" unbound)
    requests: Mapping[str, int] | None = None
    terminal: bool = False


@dataclass(frozen=True, slots=True)
class Explanation:
    policy: str
    key: str
    kind: str  # "local" or "remote"
    requests: Mapping[str, int]
    placement: Placement
    reason: str  # the webhook's reason annotation ("" when none)
    finished: float  # relative to the start
    window_start: float
    window_end: float
    view: AdmissionView | None
    race_window: float
    # The checker's verdicts over the whole window: the reference disagreed with the decision at
    # every moment (a wrong burst, or kept local without a fit).
    contradicted_gpu_only: bool
    contradicted_all_resources: bool
    moments: tuple[Moment, ...]
    events: tuple[Event, ...]
    nodes_left_out: int  # candidates beyond DEFAULT_NODES
    other_decisions: int  # further decisions for the same pod (on-failure: kept local, then burst)


def find_decision(saved: SavedRun, decisions: Sequence[Decision], pod: str) -> tuple[Decision, int]:
    """The pod's last decision among the run's `decisions` (its burst, for the on-failure controller)
    and how many others it had. `pod` is namespace/name, or a name in the run's namespace."""
    record = saved.record
    key = pod if "/" in pod else f"{record.namespace}/{pod}"
    mine = [d for d in decisions if d.key == key]
    if not mine:
        examples = ", ".join(d.key.split("/", 1)[-1] for d in decisions[:3]) or "none"
        raise ExplainError(
            f"no decision for {key} in this {record.policy} history ({len(decisions)} GPU pods decided, "
            f"e.g. {examples}); name a GPU pod of the report's examples"
        )
    return mine[-1], len(mine) - 1


def state_at(history: Sequence[Observation], local: Sequence[Decision], moment: float) -> ReferenceState:
    """The reference state at `moment`, as checker.evaluate has it when a window opens or closes there."""
    items: list[tuple[float, int, int, Observation | Decision]] = [
        (o.at, 0, i, o) for i, o in enumerate(history) if o.at <= moment
    ]
    items += [(d.started, 1, i, d) for i, d in enumerate(local) if d.started <= moment]
    items.sort(key=lambda item: item[:3])
    state = ReferenceState()
    for _, _, _, item in items:
        if isinstance(item, Observation):
            state.apply(item)
        else:
            state.decided_local(item)
    return state


def named_node(reason: str) -> str:
    """The node the webhook's reason names as its choice ("" when it names none)."""
    match = _NAMED_NODE.search(reason)
    return match.group(1) if match else ""


def _free(state: ReferenceState, exclude: str) -> dict[str, dict[str, int]]:
    return reference.free_capacity(state, RESOURCES, exclude=exclude, min_gpus=1)


def pick_nodes(states: Sequence[ReferenceState], decision: Decision, *, named: str) -> tuple[list[str], int]:
    """The node the webhook named, then the nodes the pod may use with a free GPU at either moment
    (claims ignored): those with room for all it asks first, then fewest free GPUs. At most
    DEFAULT_NODES; the second value counts the rest."""
    best: dict[str, tuple[bool, int]] = {}
    for state in states:
        for name, room in _free(state, decision.key).items():
            if not reference.eligible(state.nodes[name], decision.placement):
                continue
            rank = (not reference.covers(room, decision.requests, RESOURCES), room[GPU])
            best[name] = min(best.get(name, rank), rank)
    ordered = sorted(best, key=lambda name: (*best[name], name))
    if named and any(named in state.nodes for state in states):
        ordered = [named, *(name for name in ordered if name != named)]
    return ordered[:DEFAULT_NODES], max(len(ordered) - DEFAULT_NODES, 0)


def node_row(state: ReferenceState, name: str, placement: Placement) -> NodeRow | None:
    node = state.nodes.get(name)
    if node is None:
        return None
    pods = tuple(
        BoundPod(key, pod.requests) for key, pod in state.pods.items() if pod.node == name and not pod.terminal
    )
    used = {r: sum(p.requests.get(r, 0) for p in pods) for r in RESOURCES}
    return NodeRow(
        name=name,
        eligible=reference.eligible(node, placement),
        allocatable={r: node.allocatable.get(r, 0) for r in RESOURCES},
        pods=pods,
        used=used,
        free={r: node.allocatable.get(r, 0) - used[r] for r in RESOURCES},
    )


def claim_rows(
    state: ReferenceState, decision: Decision, *, views: Mapping[str, AdmissionView]
) -> tuple[ClaimRow, ...]:
    sequence = decision.view.sequence if decision.view is not None else None
    free = _free(state, decision.key)
    rows = []
    for claim in reference.list_claims(state, decision.key, sequence=sequence):
        usable = [
            name
            for name, room in free.items()
            if reference.covers(room, claim.requests, RESOURCES)
            and reference.eligible(state.nodes[name], claim.placement)
        ]
        view = views.get(claim.key)
        rows.append(
            ClaimRow(
                key=claim.key,
                requests=claim.requests,
                source="unbound pod" if claim.decision is None else "local decision not yet seen",
                sequence=view.sequence if view is not None else None,
                could_use=tuple(sorted(usable, key=lambda name: (free[name][GPU], name))),
            )
        )
    return tuple(rows)


def _moment(
    label: str, state: ReferenceState, decision: Decision, *, at: float, nodes: Sequence[str], saved: SavedRun
) -> Moment:
    sequence = decision.view.sequence if decision.view is not None else None
    answers = [
        reference.answer(
            state, decision.requests, decision.placement, resources=resources, exclude=decision.key, sequence=sequence
        )
        for resources in (reference.GPU_ONLY, reference.ALL_RESOURCES)
    ]
    rows = [node_row(state, name, decision.placement) for name in nodes]
    return Moment(
        label=label,
        at=at - decision.started,
        gpu_only=answers[0],
        all_resources=answers[1],
        nodes=tuple(row for row in rows if row is not None),
        claims=claim_rows(state, decision, views=saved.record.views),
    )


def window_events(
    history: Sequence[Observation],
    local: Sequence[Decision],
    decision: Decision,
    *,
    start: float,
    end: float,
    nodes: Sequence[str],
    pods: Sequence[str],
) -> tuple[Event, ...]:
    """Observations in (start, end] touching the nodes, the pods (the judged one, its claims, those
    bound to the nodes) or a pod on the nodes; local decisions made in it."""
    on_nodes, keys = set(nodes), {decision.key, *pods}
    events = []
    for o in history:
        if not start < o.at <= end:
            continue
        if o.kind.startswith("node") and o.name not in on_nodes:
            continue
        if o.kind.startswith("pod") and o.name not in keys and (o.pod is None or o.pod.node not in on_nodes):
            continue
        events.append(
            Event(
                at=o.at - decision.started,
                kind=o.kind,
                name=o.name,
                version=o.version,
                node=o.pod.node if o.pod is not None else "",
                requests=o.pod.requests if o.pod is not None else None,
                terminal=o.pod.terminal if o.pod is not None else False,
            )
        )
    events += [
        Event(at=d.started - decision.started, kind="decided-local", name=d.key, version=0, requests=d.requests)
        for d in local
        if start < d.started <= end and d.key != decision.key
    ]
    return tuple(sorted(events, key=lambda e: e.at))


def _contradicted(saved: SavedRun, local: Sequence[Decision], window: checker.Window, resources: Sequence[str]) -> bool:
    return checker.evaluate(saved.record.history, local, [window], resources=resources)[window.ident].throughout


def explain(saved: SavedRun, pod: str, *, nodes: Sequence[str] = ()) -> Explanation:
    """The explanation of `pod`'s decision; `nodes`: the nodes to show (default: see pick_nodes)."""
    record = saved.record
    decisions = accounting.build_decisions(record, model_label=saved.model_label)
    decision, others = find_decision(saved, decisions, pod)
    local = [d for d in decisions if d.kind == "local"]
    clock = checker.ViewClock(record.history)
    start = checker.window_start(decision, clock, race_window=saved.race_window)
    end = checker.window_end(decision, clock)
    states = (state_at(record.history, local, start), state_at(record.history, local, end))
    reason = next((p.reason for p in record.pods if p.key == decision.key), "")
    left_out = 0
    if nodes:
        unknown = [name for name in nodes if not any(name in state.nodes for state in states)]
        if unknown:
            sample = ", ".join(sorted(states[1].nodes)[:3])
            raise ExplainError(f"no node {', '.join(unknown)} in the window's states (nodes look like {sample})")
        shown = list(nodes)
    else:
        shown, left_out = pick_nodes(states, decision, named=named_node(reason))
    moments = (
        _moment("window start", states[0], decision, at=start, nodes=shown, saved=saved),
        _moment("window end", states[1], decision, at=end, nodes=shown, saved=saved),
    )
    bound = {p.key for m in moments for row in m.nodes for p in row.pods}
    claimed = {c.key for m in moments for c in m.claims}
    sequence = decision.view.sequence if decision.view is not None else None
    window = checker.Window(
        0, start, end, decision.requests, decision.placement, decision.key, decision.kind == "remote", sequence
    )
    return Explanation(
        policy=record.policy,
        key=decision.key,
        kind=decision.kind,
        requests=decision.requests,
        placement=decision.placement,
        reason=reason,
        finished=decision.finished - decision.started,
        window_start=start - decision.started,
        window_end=end - decision.started,
        view=decision.view,
        race_window=saved.race_window,
        contradicted_gpu_only=_contradicted(saved, local, window, reference.GPU_ONLY),
        contradicted_all_resources=_contradicted(saved, local, window, reference.ALL_RESOURCES),
        moments=moments,
        events=window_events(
            record.history, local, decision, start=start, end=end, nodes=shown, pods=sorted(bound | claimed)
        ),
        nodes_left_out=left_out,
        other_decisions=others,
    )
