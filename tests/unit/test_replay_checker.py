"""The replay's pure core: the independent wrong-burst checker above all (hand-built histories
whose right answers are known), then CSV parsing, planning, accounting and the report table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from replay import accounting, checker, export, plan, reference, report, trace
from replay.accounting import PodOutcome, RunRecord
from replay.history import (
    GPU,
    AdmissionView,
    Decision,
    NodeSeen,
    Observation,
    Placement,
    PodSeen,
    Requirement,
    Toleration,
    parse_node,
    parse_pod,
)
from replay.run import parse_admission_latencies, parse_admission_views

MODEL = "nimbix-burst.io/gpu-model"

# -- builders for hand-made histories -------------------------------------------------------------


def node(
    name: str,
    gpus: int,
    *,
    at: float = 0.0,
    cpu: int = 64_000,
    memory: int = 256_000,
    model: str = "G2",
    taints: tuple[tuple[str, str, str], ...] = (),
    unschedulable: bool = False,
    version: int = 0,
) -> Observation:
    seen = NodeSeen(
        name=name,
        labels={MODEL: model},
        allocatable={GPU: gpus, "cpu": cpu, "memory": memory, "pods": 110},
        taints=taints,
        unschedulable=unschedulable,
    )
    return Observation(at, "node", name, node=seen, version=version)


def pod(
    key: str,
    *,
    at: float,
    gpus: int = 1,
    on: str = "",
    cpu: int = 1000,
    memory: int = 1000,
    terminal: bool = False,
    placement: Placement | None = None,
    version: int = 0,
) -> Observation:
    seen = PodSeen(
        key=key,
        node=on,
        requests={GPU: gpus, "cpu": cpu, "memory": memory} if gpus else {"cpu": cpu, "memory": memory},
        terminal=terminal,
        placement=placement or Placement(),
    )
    return Observation(at, "pod", key, pod=seen, version=version)


def gone(key: str, *, at: float, version: int = 0) -> Observation:
    return Observation(at, "pod-deleted", key, version=version)


def burst(
    key: str,
    *,
    at: float,
    gpus: int = 1,
    cpu: int = 1000,
    placement: Placement | None = None,
    view: tuple[int, int] | None = None,
    order: int = 0,
) -> Decision:
    """A remote decision taking 10 ms; `view`: the (pods, nodes) resourceVersions the webhook saw,
    `order`: its place in the webhook's order."""
    requests = {GPU: gpus, "cpu": cpu, "memory": 1000}
    return Decision(key, "remote", at, at + 0.01, requests, placement or Placement(), _view(view, order))


def keep(key: str, *, at: float, gpus: int = 1, view: tuple[int, int] | None = None, order: int = 0) -> Decision:
    requests = {GPU: gpus, "cpu": 1000, "memory": 1000}
    return Decision(key, "local", at, at + 0.01, requests, Placement(), _view(view, order))


def _view(view: tuple[int, int] | None, order: int) -> AdmissionView | None:
    return None if view is None else AdmissionView(view[0], view[1], order)


def models(*names: str) -> Placement:
    return Placement(terms=((Requirement(MODEL, "In", names),),))


@dataclass(frozen=True)
class Case:
    history: Sequence[Observation]
    decisions: Sequence[Decision]
    wrong: frozenset[str] = frozenset()  # keys of wrong bursts
    unprovidable: frozenset[str] = frozenset()  # keys kept local that no node could host
    resources: tuple[str, ...] = reference.GPU_ONLY
    race_window: float = 0.25
    notes: Mapping[str, str] = field(default_factory=dict)


def wrong(*keys: str) -> frozenset[str]:
    return frozenset(keys)


CASES = {
    "free-gpu-burst-is-wrong": Case(
        [node("a", 4), pod("bg/x", at=0, gpus=2, on="a")], [burst("r/p", at=10)], wrong=wrong("r/p")
    ),
    "full-node-burst-is-right": Case([node("a", 2), pod("bg/x", at=0, gpus=2, on="a")], [burst("r/p", at=10)]),
    "needs-one-node-fragmentation-is-right": Case([node("a", 2), node("b", 2)], [burst("r/p", at=10, gpus=4)]),
    "enough-on-one-node-is-wrong": Case([node("a", 2), node("b", 4)], [burst("r/p", at=10, gpus=4)], wrong("r/p")),
    "freed-inside-race-window-is-a-race": Case(
        [node("a", 1), pod("bg/x", at=0, on="a"), gone("bg/x", at=9.9)], [burst("r/p", at=10)]
    ),
    "freed-long-before-is-wrong": Case(
        [node("a", 1), pod("bg/x", at=0, on="a"), gone("bg/x", at=5)], [burst("r/p", at=10)], wrong("r/p")
    ),
    "taken-during-the-decision-is-a-race": Case([node("a", 1), pod("bg/x", at=10.005, on="a")], [burst("r/p", at=10)]),
    "busy-in-the-middle-of-the-window-is-a-race": Case(
        [node("a", 1), pod("bg/x", at=9.9, on="a"), gone("bg/x", at=10.005)], [burst("r/p", at=10)]
    ),
    "unbound-gpu-pod-claims-the-free-gpu": Case([node("a", 1), pod("r/waiting", at=1)], [burst("r/p", at=10)]),
    "local-decision-not-yet-seen-claims": Case([node("a", 1)], [keep("r/first", at=9.995), burst("r/p", at=10)]),
    "claims-go-best-fit-leaving-the-big-node": Case(
        [node("a", 1), node("b", 4), pod("r/waiting", at=1)], [burst("r/p", at=10, gpus=2)], wrong("r/p")
    ),
    "terminal-pod-frees-its-gpu": Case(
        [node("a", 1), pod("bg/x", at=0, on="a"), pod("bg/x", at=1, on="a", terminal=True)],
        [burst("r/p", at=10)],
        wrong("r/p"),
    ),
    "gpu-free-only-on-another-model": Case(
        [node("a", 1, model="T4"), node("b", 1, model="V100")],
        [burst("r/p", at=10, placement=models("G2"))],
    ),
    "gpu-free-on-an-allowed-model": Case(
        [node("a", 1, model="T4"), node("b", 1, model="V100")],
        [burst("r/p", at=10, placement=models("G2", "V100"))],
        wrong("r/p"),
    ),
    "untolerated-taint": Case([node("a", 1, taints=(("gpu", "yes", "NoSchedule"),))], [burst("r/p", at=10)]),
    "tolerated-taint": Case(
        [node("a", 1, taints=(("gpu", "yes", "NoSchedule"),))],
        [burst("r/p", at=10, placement=Placement(tolerations=(Toleration("gpu", "Exists", "", ""),)))],
        wrong("r/p"),
    ),
    "cordoned-node": Case([node("a", 1, unschedulable=True)], [burst("r/p", at=10)]),
    "node-deleted-before": Case([node("a", 1), Observation(5, "node-deleted", "a")], [burst("r/p", at=10)]),
    "gpu-free-but-cpu-full-by-gpus-alone": Case(
        [node("a", 1, cpu=4000)], [burst("r/p", at=10, cpu=8000)], wrong("r/p"), resources=reference.GPU_ONLY
    ),
    "gpu-free-but-cpu-full-counting-cpu": Case(
        [node("a", 1, cpu=4000)], [burst("r/p", at=10, cpu=8000)], resources=reference.ALL_RESOURCES
    ),
    "cpu-stuck-claim-holds-nothing-counting-cpu": Case(
        [node("a", 1, cpu=4000), pod("r/big", at=1, cpu=8000)],
        [burst("r/p", at=10, cpu=2000)],
        wrong("r/p"),
        resources=reference.ALL_RESOURCES,
    ),
    "cpu-stuck-claim-holds-the-gpu-by-gpus-alone": Case(
        [node("a", 1, cpu=4000), pod("r/big", at=1, cpu=8000)], [burst("r/p", at=10, cpu=2000)]
    ),
    # Claims are placed the best way they can be, not first come best fit: greedy would put the small
    # claim on x (fewest free GPUs, then by name), strand the big one and free y for the pod.
    "greedy-would-strand-a-claim-that-fits-elsewhere": Case(
        [node("x", 1, cpu=20_000), node("y", 1, cpu=4000), pod("r/a", at=1, cpu=2000), pod("r/b", at=2, cpu=10_000)],
        [burst("r/p", at=10, cpu=1000)],
        resources=reference.ALL_RESOURCES,
    ),
    "a-claim-could-move-to-leave-room-for-the-pod": Case(
        [node("x", 1, cpu=20_000), node("y", 1, cpu=4000), pod("r/a", at=1, cpu=2000)],
        [burst("r/p", at=10, cpu=10_000)],
        wrong("r/p"),
        resources=reference.ALL_RESOURCES,
    ),
    "local-with-a-free-gpu-is-fine": Case([node("a", 1)], [keep("r/p", at=10)]),
    "local-without-any-gpu-is-unprovidable": Case(
        [node("a", 1), pod("bg/x", at=0, on="a")], [keep("r/p", at=10)], unprovidable=wrong("r/p")
    ),
    "local-pod-bound-during-its-decision-is-not-counted-against-itself": Case(
        [node("a", 1), pod("r/p", at=10.005, on="a")], [keep("r/p", at=10)]
    ),
    "local-freed-during-the-window-was-providable": Case(
        [node("a", 1), pod("bg/x", at=0, on="a"), gone("bg/x", at=10.005)], [keep("r/p", at=10)]
    ),
    # The webhook's view (the resourceVersions it logged): a window opens at the state it decided on.
    "freed-long-before-but-not-yet-seen-is-a-race": Case(
        [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), gone("bg/x", at=5, version=3)],
        [burst("r/p", at=10, view=(2, 1))],
    ),
    "freed-long-before-and-seen-is-wrong": Case(
        [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), gone("bg/x", at=5, version=3)],
        [burst("r/p", at=10, view=(3, 1))],
        wrong("r/p"),
    ),
    "a-lagging-view-does-not-excuse-a-fit-it-held": Case(
        [node("a", 4, version=1), pod("bg/x", at=0, gpus=2, on="a", version=2), pod("bg/y", at=5, on="a", version=3)],
        [burst("r/p", at=10, view=(2, 1))],
        wrong("r/p"),
    ),
    "a-node-not-yet-seen-is-a-race": Case(
        [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), node("b", 1, at=5, version=3)],
        [burst("r/p", at=10, view=(2, 1))],
    ),
    "an-old-node-version-is-no-lag": Case(
        [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), gone("bg/x", at=5, version=9)],
        [burst("r/p", at=10, view=(9, 1))],
        wrong("r/p"),
    ),
    "kept-local-on-a-view-that-still-had-the-gpu-was-providable": Case(
        [node("a", 1, version=1), pod("bg/x", at=5, on="a", version=3)],
        [keep("r/p", at=10, view=(2, 1))],
    ),
    "a-freed-gpu-the-replay-saw-late-was-providable": Case(
        [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), gone("bg/x", at=11, version=3)],
        [keep("r/p", at=10, view=(3, 1))],
    ),
    "the-same-without-a-view-is-unprovidable": Case(
        [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), gone("bg/x", at=11, version=3)],
        [keep("r/p", at=10)],
        unprovidable=wrong("r/p"),
    ),
    "a-gpu-taken-that-the-replay-saw-late-is-a-race": Case(
        [node("a", 1, version=1), pod("bg/x", at=11, on="a", version=3)],
        [burst("r/p", at=10, view=(3, 1))],
    ),
    "a-local-decision-made-later-claims-nothing": Case(
        [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), gone("bg/x", at=5, version=3)],
        [keep("r/later", at=9.5, view=(3, 1), order=2), keep("r/p", at=10, view=(3, 1), order=1)],
    ),
    "a-local-decision-made-earlier-claims": Case(
        [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), gone("bg/x", at=5, version=3)],
        [keep("r/earlier", at=9.5, view=(3, 1), order=1), keep("r/p", at=10, view=(3, 1), order=2)],
        unprovidable=wrong("r/p"),
    ),
    "several-decisions-judged-independently": Case(
        [node("a", 1), node("b", 2), pod("bg/x", at=0, gpus=2, on="b")],
        [burst("r/p1", at=10), burst("r/p2", at=10, gpus=2), keep("r/p3", at=20, gpus=2)],
        wrong("r/p1"),
        unprovidable=wrong("r/p3"),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_checker_finds_exactly_the_wrong_decisions(case: Case) -> None:
    verdicts = checker.judge(case.history, case.decisions, race_window=case.race_window, resources=case.resources)
    assert {v.decision.key for v in verdicts if v.wrong_burst} == case.wrong
    assert {v.decision.key for v in verdicts if v.unprovidable_local} == case.unprovidable


def test_view_lag_is_reported() -> None:
    history = [node("a", 1, version=1), pod("bg/x", at=0, on="a", version=2), gone("bg/x", at=5, version=3)]
    lagging, current = checker.judge(
        history, [burst("r/p", at=10, view=(2, 1)), burst("r/q", at=10, view=(3, 1))], race_window=0.25
    )
    assert lagging.view_lag == pytest.approx(4.75, abs=1e-3)
    assert current.view_lag == 0.0
    (late,) = checker.judge(history, [burst("r/p", at=4, view=(3, 1))], race_window=0.25)
    assert late.watch_lag == pytest.approx(0.99, abs=1e-3)


def test_upper_bound_ignores_claims_and_races() -> None:
    history = [node("a", 1), pod("bg/x", at=0, on="a"), gone("bg/x", at=9.99), pod("r/waiting", at=1)]
    (verdict,) = checker.judge(history, [burst("r/p", at=10)], race_window=0.25)
    assert not verdict.wrong_burst
    assert verdict.wrong_burst_upper_bound


@pytest.mark.parametrize(
    ("requirement", "labels", "holds"),
    [
        pytest.param(Requirement("m", "In", ("a", "b")), {"m": "b"}, True, id="in"),
        pytest.param(Requirement("m", "In", ("a",)), {}, False, id="in-missing"),
        pytest.param(Requirement("m", "NotIn", ("a",)), {}, True, id="notin-missing"),
        pytest.param(Requirement("m", "NotIn", ("a",)), {"m": "a"}, False, id="notin"),
        pytest.param(Requirement("m", "Exists"), {"m": ""}, True, id="exists"),
        pytest.param(Requirement("m", "DoesNotExist"), {"m": ""}, False, id="does-not-exist"),
        pytest.param(Requirement("m", "Gt", ("1",)), {"m": "2"}, False, id="unsupported-matches-nothing"),
    ],
)
def test_node_affinity_requirements(requirement: Requirement, labels: dict[str, str], holds: bool) -> None:
    assert reference.requirement_holds(requirement, labels) is holds


def test_empty_affinity_term_matches_nothing() -> None:
    seen = node("a", 1).node
    assert seen is not None
    assert not reference.eligible(seen, Placement(terms=((),)))
    assert reference.eligible(seen, Placement(terms=((), (Requirement(MODEL, "Exists"),))))


# -- parsing the API server's JSON (history) ---------------------------------------------------------


def test_parse_pod_and_node_json() -> None:
    raw_pod = {
        "metadata": {"namespace": "r", "name": "p", "annotations": {"nimbix-burst.io/decision": "local"}},
        "spec": {
            "nodeName": "a",
            "containers": [
                {"resources": {"limits": {GPU: "2"}, "requests": {"cpu": "1500m", "memory": "2Gi"}}},
                {"resources": {"requests": {"cpu": "1"}}},
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": MODEL, "operator": "In", "values": ["T4"]}]}
                        ]
                    }
                }
            },
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}],
        },
    }
    seen = parse_pod(raw_pod)
    assert seen.key == "r/p"
    assert seen.node == "a"
    assert seen.requests == {GPU: 2, "cpu": 2500, "memory": 2048}
    assert seen.placement == models("T4")
    assert seen.unschedulable_message == "m"
    assert seen.decision == "local"
    raw_node = {
        "metadata": {"name": "a", "labels": {MODEL: "T4"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}, {"key": "soft", "effect": "PreferNoSchedule"}]},
        "status": {"allocatable": {GPU: "4", "cpu": "96", "memory": "512Gi", "pods": "110"}},
    }
    parsed = parse_node(raw_node)
    assert parsed.allocatable == {GPU: 4, "cpu": 96_000, "memory": 524_288, "pods": 110}
    assert parsed.taints == (("k", "", "NoSchedule"),)


# -- the CSV format -----------------------------------------------------------------------------------

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,262144,8,G2\nn2,32000,262144,0,\n"
PODS_CSV = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    "b,1000,1024,1,460,,BE,Running,20,30,21\n"
    "a,2000,2048,8,1000,G2|V100M32,LS,Running,10,,10\n"
    "c,500,512,0,0,,BE,Pending,20,25,\n"
)


def test_parse_nodes_and_pods() -> None:
    nodes = trace.parse_nodes(NODES_CSV)
    assert [(n.name, n.gpus, n.model) for n in nodes] == [("n1", 8, "G2"), ("n2", 0, "")]
    pods = trace.parse_pods(PODS_CSV)
    assert [p.name for p in pods] == ["a", "b", "c"]  # creation order; ties keep file order
    assert [p.index for p in pods] == [0, 1, 2]
    a, b, c = pods
    assert (a.gpus, a.gpu_models, a.deletion) == (8, ("G2", "V100M32"), None)
    assert b.gpus == 1  # 460 milli-GPU -> one whole GPU
    assert (c.gpus, c.scheduled) == (0, None)
    assert a.duration(end=100) == 90
    assert trace.parse_pods(trace.format_pods(pods)) == pods
    assert trace.parse_nodes(trace.format_nodes(nodes)) == nodes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("name,cpu_milli\nx,1\n", "missing column(s) memory_mib", id="missing-column"),
        pytest.param(PODS_CSV.replace("b,1000", "b,lots"), "line 2: cpu_milli='lots'", id="not-a-number"),
        pytest.param(PODS_CSV.replace(",20,30,", ",20,10,"), "deletion_time 10 is before", id="time-travel"),
        pytest.param(
            PODS_CSV.replace("a,2000,2048,8,1000,G2|V100M32,LS,Running,10", "a,2000,2048,8,1000,,LS,Running,"),
            "creation_time is empty",
            id="no-creation",
        ),
    ],
)
def test_parse_pods_errors_name_line_and_column(text: str, message: str) -> None:
    with pytest.raises(trace.TraceError, match=message.replace("|", r"\|").replace("(", r"\(").replace(")", r"\)")):
        trace.parse_pods(text)


# -- planning -----------------------------------------------------------------------------------------


def test_background_leaves_exactly_the_free_gpus() -> None:
    nodes = [trace.NodeRow(f"n{i}", 96_000, 393_216, 8, "G2") for i in range(20)] + [
        trace.NodeRow("cpu", 96_000, 393_216, 0, "")
    ]
    holders = plan.build_background(nodes, free_gpus=13, seed=1, cpu_per_gpu=10_000, memory_per_gpu=30_000)
    assert sum(h.gpus for h in holders) == 20 * 8 - 13
    assert all(h.node != "cpu" for h in holders)
    assert all(h.cpu_milli == min(96_000 * h.gpus // 8, h.gpus * 10_000) for h in holders)
    again = plan.build_background(nodes, free_gpus=13, seed=1, cpu_per_gpu=10_000, memory_per_gpu=30_000)
    assert again == holders  # seeded


def test_plan_preloads_running_pods_and_orders_events() -> None:
    nodes = trace.parse_nodes(NODES_CSV)
    pods = trace.parse_pods(PODS_CSV)
    built = plan.build_plan(nodes, pods, start_index=1, count=2, free_gpus=None, seed=1)
    assert built.preload == ("a",)  # running at t=20, never deleted
    assert built.pods["a"].node == "n1"
    assert built.replay == ("b", "c")
    assert (built.start, built.end) == (20, 20)
    assert [(e.kind, e.pod) for e in built.events] == [("create", "b"), ("create", "c")]  # deletions after the end


def test_events_put_deletions_first_but_never_before_their_creation() -> None:
    rows = trace.parse_pods(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
        "x,1,1,1,1000,0,5\ny,1,1,1,1000,5,5\nz,1,1,1,1000,5,9\n"
    )
    planned = [plan.PlannedPod(r, r.name, "replay") for r in rows]
    events = plan.build_events(planned, start=0, end=9)
    assert [(e.kind, e.pod) for e in events] == [
        ("create", "x"),
        ("delete", "x"),
        ("create", "y"),
        ("create", "z"),
        ("delete", "y"),
        ("delete", "z"),
    ]


# -- accounting ---------------------------------------------------------------------------------------


def test_distribution_and_percentiles() -> None:
    d = accounting.distribution([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (d.count, d.p50, d.p90, d.max, d.mean) == (5, 3.0, 5.0, 5.0, 3.0)
    assert accounting.distribution([]).count == 0


def test_step_series_sample_and_average() -> None:
    series = accounting.step_series([(0, 2), (10, -1), (10, 3), (20, -4)])
    assert series == [(0, 2), (10, 4), (20, 0)]
    assert accounting.sample(series, start=0, end=20, points=3) == [(0, 2), (10, 4), (20, 0)]
    assert accounting.time_average(series, start=0, end=20) == 3.0


def _row(name: str, *, gpus: int, creation: float, deletion: float | None) -> trace.PodRow:
    return trace.PodRow(0, name, 1000, 1000, gpus, 1000 * gpus, (), "", "", creation, deletion, None)


def test_summary_counts_bursts_pending_and_stranded() -> None:
    # compression 100: one wall second is 100 trace seconds. Trace starts at 0 = wall 1000.
    outcomes = [
        PodOutcome("p1", "r/p1", _row("p1", gpus=2, creation=0, deletion=7200), 1000.0, 1000.01, decision="remote"),
        PodOutcome("p2", "r/p2", _row("p2", gpus=1, creation=0, deletion=None), 1000.0, 1000.01, decision="local"),
        PodOutcome("p3", "r/p3", _row("p3", gpus=1, creation=100, deletion=None), 1001.0, 1001.01, decision="local"),
        PodOutcome("p4", "r/p4", _row("p4", gpus=0, creation=100, deletion=None), 1001.0, 1001.01),
    ]
    history = [
        pod("r/p2", at=1000.02),
        pod("r/p2", at=1000.03, on="a"),  # bound after 30 ms
        pod("r/p3", at=1001.02),
        Observation(
            1001.03,
            "pod",
            "r/p3",
            pod=PodSeen("r/p3", "", {GPU: 1}, False, Placement(), unschedulable_message="1 Insufficient " + GPU),
        ),
    ]
    run = RunRecord(
        policy="webhook",
        namespace="r",
        compression=100,
        trace_start=0,
        trace_end=3000,
        wall_start=1000.0,
        wall_end=1030.0,
        replay_wall_seconds=30,
        pods=outcomes,
        history=history,
        create_latencies_ms=[10, 10, 10, 10],
        admission_latencies_ms=[0.5],
        max_lag_seconds=0,
        truncated=False,
    )
    judgement = accounting.Judgement(
        bursts=1, wrong=0, wrong_gpu_only=0, wrong_upper_bound=1, unprovidable_local=["r/p3"], unprovidable_local_all=[]
    )
    s = accounting.summarize(run, judgement, price_per_gpu_hour=2.5, stranded_timeout=10)
    assert (s.gpu_pods, s.cpu_pods, s.burst) == (3, 1, 1)
    assert s.remote_gpu_hours == 4.0  # 2 GPUs x 2 h
    assert s.remote_cost == 10.0
    assert s.pending_for_gpus == 1
    assert s.still_pending_at_end == 1
    assert s.pending_trace_seconds.max == pytest.approx(2900.0)  # (1030 - 1001) s x 100
    assert s.pending_unprovidable == 1
    assert s.stranded == 1  # p3: never bound, observed 29 s > 10 s
    assert s.local_gpus_peak == 1


def test_admission_latencies_come_from_the_webhook_log() -> None:
    lines = [
        '{"message": "admission", "latency_ms": 0.5, "dry_run": false}',
        '{"message": "admission", "latency_ms": 9.0, "dry_run": true}',
        '{"message": "cache listed", "count": 3}',
        "not json at all, admission",
    ]
    assert parse_admission_latencies(lines) == [0.5]


def test_table_has_one_column_per_policy() -> None:
    empty = accounting.distribution([])
    summary = accounting.PolicySummary(
        "webhook", 10, 2, 0, 3, 30.0, 1.5, 3.75, 0, empty, 0, 0, 0, 0, 0, empty, 0, 0, 0, 0.0, 0, 5, 0, 8, 7.5, 2,
        empty, empty, 100.0, 0.1, False,
    )  # fmt: skip
    table = report.build_table([summary, summary])
    lines = table.splitlines()
    assert lines[0] == "|  | nimbix-burst webhook | nimbix-burst webhook |"
    assert "| pods burst to Nimbix | 3 (30.0 %) | 3 (30.0 %) |" in lines
    assert len(lines) == 2 + len(report.ROWS)


# -- the exporter's rows ------------------------------------------------------------------------------


def test_export_builds_rows_relative_to_the_oldest_pod() -> None:
    nodes = [
        {
            "metadata": {"name": "g1", "labels": {"nvidia.com/gpu.product": "A100"}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", GPU: "8"}},
        },
        {"metadata": {"name": "c1", "labels": {}}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}},
    ]
    pods: list[dict[str, Any]] = [
        {
            "metadata": {"namespace": "ml", "name": "train", "creationTimestamp": "2024-01-01T00:01:40Z"},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": "A100"},
                "containers": [{"resources": {"limits": {GPU: "2"}, "requests": {"cpu": "8", "memory": "32Gi"}}}],
            },
            "status": {
                "phase": "Running",
                "qosClass": "Burstable",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-01-01T00:01:45Z"}
                ],
            },
        },
        {
            "metadata": {
                "namespace": "web",
                "name": "old",
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "deletionTimestamp": "2024-01-01T00:10:00Z",
            },
            "spec": {"containers": [{"resources": {"requests": {"cpu": "500m"}}}]},
            "status": {"phase": "Running"},
        },
        {"metadata": {"namespace": "kube-system", "name": "dns", "creationTimestamp": "2023-01-01T00:00:00Z"}},
    ]
    node_rows, pod_rows = export.build_rows(
        nodes, pods, gpu_resource=GPU, model_label="nvidia.com/gpu.product", skip_namespaces=["kube-system"]
    )
    assert node_rows == [trace.NodeRow("g1", 64_000, 262_144, 8, "A100"), trace.NodeRow("c1", 16_000, 65_536, 0, "")]
    old, train = pod_rows
    assert (old.name, old.creation, old.deletion, old.gpus) == ("web/old", 0.0, 600.0, 0)
    assert (train.name, train.creation, train.scheduled, train.deletion) == ("ml/train", 100.0, 105.0, None)
    assert (train.num_gpu, train.gpu_milli, train.gpu_models, train.cpu_milli) == (2, 2000, ("A100",), 8000)
    # What the exporter writes, the replay reads back.
    assert trace.parse_pods(trace.format_pods(pod_rows))[1].gpu_models == ("A100",)


def test_admission_views_are_read_from_the_webhook_log() -> None:
    lines = [
        '{"message": "admission", "namespace": "r", "pod": "p", "dry_run": false, '
        '"view_pods_version": 12, "view_nodes_version": 3}',
        '{"message": "admission", "namespace": "r", "pod": "d", "dry_run": true, '
        '"view_pods_version": 13, "view_nodes_version": 3}',
        '{"message": "admission", "namespace": "r", "pod": "old", "dry_run": false}',
        '{"message": "other", "namespace": "r", "pod": "x", "view_pods_version": 1, "view_nodes_version": 1}',
        "not json view_pods_version",
    ]
    assert parse_admission_views(lines) == {"r/p": AdmissionView(12, 3, 0)}
