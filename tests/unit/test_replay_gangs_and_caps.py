"""Gangs and cost caps in the replay: the trace's multi-pod jobs, their accounting, and what a cap keeps local."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from replay import accounting, gang_check, gangs, record_file, report
from replay.accounting import PodOutcome, RunRecord
from replay.gang_check import GangQuestion
from replay.gangs import Gang, GangOutcome
from replay.history import NodeSeen, Observation, Placement, PodSeen, Requirement
from replay.plan import build_plan
from replay.settings import parse_settings
from replay.trace import NodeRow, PodRow

HOUR = 3600.0
CAP_HIT = (
    "nimbix-burst.io/max-cost-per-hour of namespace replay-webhook-cap5 is 5.00: its live jobs and bursts cost"
    " 3.20 an hour, and this pod may cost 3.20 an hour more"
)
NO_RECORD = (
    "the controller's spend record is 400 s old (at most 300 s: is the controller running?), so no burst can be"
    " counted against the cost caps of namespace replay-webhook-cap5"
)


def _row(
    index: int,
    *,
    created: float = 0.0,
    deleted: float | None = HOUR,
    gpus: int = 1,
    cpu: int = 8000,
    memory: int = 16384,
    share: int = 1000,
    models: tuple[str, ...] = (),
) -> PodRow:
    return PodRow(index, f"p{index}", cpu, memory, gpus, share, models, "LS", "Running", created, deleted, created)


def _pairs(*rows: PodRow) -> list[tuple[str, PodRow]]:
    return [(row.name, row) for row in rows]


# -- the trace's multi-pod jobs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        pytest.param([_row(0), _row(1)], [("gang-p0", ("p0", "p1"))], id="same-second-same-requests"),
        pytest.param([_row(0), _row(1), _row(2)], [("gang-p0", ("p0", "p1", "p2"))], id="three"),
        pytest.param([_row(0), _row(1, created=1.0)], [], id="a-second-apart"),
        pytest.param([_row(0), _row(1, cpu=6000)], [], id="other-cpu"),
        pytest.param([_row(0), _row(1, memory=8192)], [], id="other-memory"),
        pytest.param([_row(0), _row(1, gpus=2)], [], id="other-gpus"),
        pytest.param([_row(0, share=460), _row(1, share=230)], [], id="other-gpu-share"),
        pytest.param([_row(0, models=("T4",)), _row(1, models=("P100",))], [], id="other-model"),
        pytest.param([_row(0, gpus=0, share=0), _row(1, gpus=0, share=0)], [], id="cpu-pods-are-no-gang"),
        pytest.param([_row(0)], [], id="alone"),
        pytest.param(
            [_row(0), _row(1, cpu=6000), _row(2), _row(3, cpu=6000), _row(4, created=9.0)],
            [("gang-p0", ("p0", "p2")), ("gang-p1", ("p1", "p3"))],
            id="two-jobs-interleaved",
        ),
        pytest.param([_row(0, deleted=10.0), _row(1, deleted=99.0)], [("gang-p0", ("p0", "p1"))], id="end-apart"),
    ],
)
def test_trace_jobs_of_several_pods_are_gangs(rows: list[PodRow], expected: list[tuple[str, tuple[str, ...]]]) -> None:
    assert [(g.name, g.members) for g in gangs.group_gangs(_pairs(*rows))] == expected


def test_a_gang_is_replayed_as_a_pod_group() -> None:
    labels, annotations = gangs.pod_group_marks(Gang("gang-p0", ("p0", "p1", "p2")))
    assert labels == {"kueue.x-k8s.io/pod-group-name": "gang-p0"}
    assert annotations == {"kueue.x-k8s.io/pod-group-total-count": "3"}


NODES = [NodeRow("n1", 64000, 262144, 8, "G2")]


@pytest.mark.parametrize(("argv", "expected"), [([], 1), (["--no-gangs"], 0)])
def test_the_plan_finds_the_gangs_unless_told_not_to(argv: list[str], expected: int) -> None:
    settings = parse_settings(argv)
    pods = [_row(0), _row(1, created=5.0), _row(2, created=5.0), _row(3, created=7.0)]
    plan = build_plan(NODES, pods, start_index=0, count=4, free_gpus=None, seed=1, gangs=settings.gangs)
    assert len(plan.gangs) == expected
    assert [g.members for g in plan.gangs] == [("p1", "p2")][:expected]


@pytest.mark.parametrize(
    ("rows", "end", "hours"),
    [
        pytest.param([_row(0), _row(1)], 10 * HOUR, 2.0, id="both-an-hour"),
        pytest.param([_row(0, deleted=HOUR), _row(1, deleted=3 * HOUR)], 10 * HOUR, 6.0, id="until-the-last-ends"),
        pytest.param([_row(0, gpus=4), _row(1, gpus=4, deleted=0.5 * HOUR)], 10 * HOUR, 8.0, id="all-gpus"),
        pytest.param([_row(0, deleted=None), _row(1)], 2 * HOUR, 4.0, id="never-deleted-counts-until-the-end"),
        pytest.param([_row(0, deleted=0.0), _row(1, deleted=0.0)], HOUR, 0.0, id="no-life"),
    ],
)
def test_a_burst_gang_is_one_job_until_its_last_pod_ends(rows: list[PodRow], end: float, hours: float) -> None:
    assert gangs.job_hours(rows, end=end) == pytest.approx(hours)


G = Gang("gang-p0", ("p0", "p1"))
ROWS = {"p0": _row(0), "p1": _row(1, deleted=2 * HOUR), "p2": _row(2)}


@pytest.mark.parametrize(
    ("burst", "expected"),
    [
        pytest.param({"p0": True, "p1": True}, GangOutcome(1, 1, 0, 4.0), id="burst-as-one"),
        pytest.param({"p0": False, "p1": False}, GangOutcome(1, 0, 0, 0.0), id="local-as-one"),
        pytest.param({"p0": True, "p1": False}, GangOutcome(1, 0, 1, 0.0), id="split"),
        pytest.param({"p0": True}, GangOutcome(1, 0, 0, 0.0), id="a-pod-not-created"),
        pytest.param({}, GangOutcome(0, 0, 0, 0.0), id="not-replayed"),
    ],
)
def test_what_became_of_the_gangs(burst: dict[str, bool], expected: GangOutcome) -> None:
    assert gangs.tally([G], burst, ROWS, end=10 * HOUR) == expected


def _outcome(row: PodRow, *, decision: str = "local", budget: str = "", cost: float = 0.0) -> PodOutcome:
    name = row.name
    return PodOutcome(name, f"ns/{name}", row, 1.0, 1.01, decision=decision, budget=budget, cost_per_hour=cost)


@pytest.mark.parametrize(
    ("pods", "gang_list", "hours"),
    [
        pytest.param([_outcome(_row(0), decision="remote")], [], 1.0, id="a-lone-burst"),
        pytest.param(
            [_outcome(_row(0), decision="remote"), _outcome(_row(1, deleted=3 * HOUR), decision="remote")],
            [],
            4.0,
            id="two-lone-bursts-pod-by-pod",
        ),
        pytest.param(
            [_outcome(_row(0), decision="remote"), _outcome(_row(1, deleted=3 * HOUR), decision="remote")],
            [G],
            6.0,
            id="a-gang-holds-both-nodes-until-its-last-pod-ends",
        ),
        pytest.param(
            [_outcome(_row(0), decision="remote"), _outcome(_row(1, deleted=3 * HOUR))],
            [G],
            1.0,
            id="a-split-gang-counts-its-burst-pod",
        ),
        pytest.param([_outcome(_row(0)), _outcome(_row(1))], [G], 0.0, id="a-local-gang"),
    ],
)
def test_gpu_hours_sent_to_nimbix(pods: list[PodOutcome], gang_list: list[Gang], hours: float) -> None:
    assert accounting.remote_gpu_hours(pods, gang_list, end=10 * HOUR) == pytest.approx(hours)


@pytest.mark.parametrize(
    ("pods", "gang_list", "cost"),
    [
        pytest.param([_outcome(_row(0), decision="remote", cost=3.2)], [], 3.2, id="a-lone-burst-its-life"),
        pytest.param([_outcome(_row(0), decision="remote")], [], 0.0, id="not-priced-without-a-cap"),
        pytest.param([_outcome(_row(0), cost=3.2)], [], 0.0, id="kept-local"),
        pytest.param(
            [
                _outcome(_row(0), decision="remote", cost=6.4),
                _outcome(_row(1, deleted=3 * HOUR), decision="remote", cost=0.0),
            ],
            [G],
            19.2,
            id="a-gang-rank-0-carries-the-job-until-its-last-pod-ends",
        ),
    ],
)
def test_cost_at_the_prices_the_webhook_counted(pods: list[PodOutcome], gang_list: list[Gang], cost: float) -> None:
    assert accounting.machine_cost(pods, gang_list, end=10 * HOUR) == pytest.approx(cost)


@pytest.mark.parametrize(
    ("budget", "by_cap", "no_record"),
    [
        (CAP_HIT, True, False),
        ("nimbix-burst.io/max-cost-per-month of namespace x is 10.00: ...", True, False),
        (NO_RECORD, False, True),
        ("nimbix-burst.io/max-remote-gpus of namespace x is 4: ...", False, False),
        ("", False, False),
    ],
)
def test_why_a_pod_was_kept_local(budget: str, by_cap: bool, no_record: bool) -> None:
    assert accounting.held_by_cost_cap(budget) is by_cap
    assert accounting.held_for_want_of_record(budget) is no_record


def _run(pods: list[PodOutcome], *, cap: float | None, gang_list: tuple[Gang, ...] = ()) -> RunRecord:
    return RunRecord(
        policy="webhook",
        namespace="ns",
        compression=4000.0,
        trace_start=0.0,
        trace_end=10 * HOUR,
        wall_start=0.0,
        wall_end=30.0,
        replay_wall_seconds=30.0,
        pods=pods,
        history=[],
        create_latencies_ms=[],
        admission_latencies_ms=[],
        max_lag_seconds=0.0,
        truncated=False,
        cost_cap=cap,
        gangs=gang_list,
    )


def _summarize(run: RunRecord) -> accounting.PolicySummary:
    judgement = accounting.Judgement(0, 0, 0, 0, [], [])
    return accounting.summarize(run, judgement, price_per_gpu_hour=2.5, stranded_timeout=10.0)


def test_a_capped_run_counts_what_the_cap_kept_local_and_the_cost_at_machine_prices() -> None:
    pods = [
        _outcome(_row(0), decision="remote", cost=6.4),
        _outcome(_row(1, deleted=3 * HOUR), decision="remote"),
        _outcome(_row(2, created=60.0, deleted=None), budget=CAP_HIT),
        _outcome(_row(3, created=60.0), budget=NO_RECORD),
        _outcome(_row(4, created=60.0)),
    ]
    summary = _summarize(_run(pods, cap=5.0, gang_list=(G,)))
    assert summary.title == "nimbix-burst webhook, max-cost-per-hour 5"
    assert summary.key == "webhook-cap5"
    assert summary.gangs == GangOutcome(gangs=1, burst=1, split=0, gpu_hours=6.0)
    assert summary.gang_cost == pytest.approx(6.0 * 2.5)
    assert summary.remote_gpu_hours == pytest.approx(6.0)
    assert (summary.caps.held, summary.caps.no_record) == (1, 1)
    assert summary.caps.machine_cost == pytest.approx(6.4 * 3)
    # Never Pending in this history (no watch), and never bound though it lived on: stranded.
    assert (summary.caps.held_pending, summary.caps.held_stranded) == (0, 1)


def _summary(**changes: Any) -> accounting.PolicySummary:
    empty = accounting.distribution([])
    fields: dict[str, Any] = {
        f.name: 0
        for f in dataclasses.fields(accounting.PolicySummary)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    fields |= {
        "policy": "webhook",
        "gpu_pods": 100,
        "burst": 10,
        "remote_gpu_hours": 20.0,
        "remote_cost": 50.0,
        "pending_trace_seconds": empty,
        "burst_delay_trace_seconds": empty,
        "admission_latency_ms": empty,
        "create_latency_ms": empty,
        "truncated": False,
        "burst_after": 0.0,
    }
    return accounting.PolicySummary(**(fields | changes))


def test_the_trade_off_table_shows_the_cap_and_the_gangs() -> None:
    capped = _summary(
        cost_cap=12.8,
        gangs=GangOutcome(gangs=25, burst=7, split=0, gpu_hours=9.5),
        caps=accounting.CapOutcome(
            held=40, held_pending=12, held_waits=accounting.distribution([600.0] * 11 + [7200.0]), machine_cost=64.0
        ),
    )
    table = report.build_tradeoff_table([_summary(), capped]).splitlines()
    assert table[2] == "| 0 | none | 10 (10.0 %) | - | 20.0 | 50 | - | - | 0 (0.0 %) | - | 0 min | 0 | 0 |"
    assert table[3] == (
        "| 0 | 12.8 | 10 (10.0 %) | 7 of 25 / 0 | 20.0 | 50 | 64 | 40 (Pending 12, p95 2.0 h) | 0 (0.0 %) | - | 0 min"
        " | 0 | 0 |"
    )


def test_the_report_rows_for_gangs_and_caps() -> None:
    capped = _summary(
        cost_cap=5.0, gangs=GangOutcome(2, 1, 0, 3.0), gang_cost=7.5, caps=accounting.CapOutcome(held=3, no_record=1)
    )
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in report.build_table([capped]).splitlines()[2:]]
    rows = {title: value for title, value in cells}
    assert rows["gangs (multi-pod trace jobs): burst / split"] == "1 of 2 / 0"
    assert rows["their GPU-hours to Nimbix (as jobs) / cost (USD)"] == "3.0 / 8"
    assert rows["max-cost-per-hour (namespace cap)"] == "5"
    assert rows["kept local by the cap (Pending, their wait)"] == "3 (Pending 0)"
    assert rows["kept local for want of a spend record"] == "1"


def test_the_history_file_keeps_what_the_webhook_said_of_money() -> None:
    pods = [_outcome(_row(0), decision="remote", cost=3.2), _outcome(_row(1), budget=CAP_HIT)]
    saved = record_file.SavedRun(_run(pods, cap=None), model_label="m", race_window=0.25)
    assert [(p.budget, p.cost_per_hour) for p in record_file.decode(record_file.encode(saved)).record.pods] == [
        ("", 3.2),
        (CAP_HIT, 0.0),
    ]


def test_a_history_file_from_before_the_caps_still_reads() -> None:
    saved = record_file.SavedRun(_run([_outcome(_row(0))], cap=None), model_label="m", race_window=0.25)
    lines = record_file.encode_lines(saved)
    older = []
    for line in lines:
        item = json.loads(line)
        if "pod" in item:
            del item["pod"]["budget"], item["pod"]["cost_per_hour"]
        older.append(json.dumps(item))
    pod = record_file.decode_lines(older).record.pods[0]
    assert (pod.budget, pod.cost_per_hour) == ("", 0.0)


# -- a burst gang judged as a gang ----------------------------------------------------------------------

GPU = "nvidia.com/gpu"
POD_NEED = {GPU: 1, "cpu": 8000, "memory": 16384}


def _node(name: str, *, gpus: int, cpu: int = 64000, memory: int = 262144, at: float = 0.0, **kw: Any) -> Observation:
    labels = kw.get("labels", {"m": "G2"})
    seen = NodeSeen(name, labels, {GPU: gpus, "cpu": cpu, "memory": memory}, (), kw.get("unschedulable", False))
    return Observation(at, "node", name, node=seen)


def _bound(name: str, node: str, *, gpus: int, at: float = 0.0) -> Observation:
    key = f"ns/{name}"
    seen = PodSeen(key, node, {GPU: gpus, "cpu": 1000, "memory": 1024}, False, Placement())
    return Observation(at, "pod", key, pod=seen)


@pytest.mark.parametrize(
    ("room", "need", "expected"),
    [
        ({GPU: 3, "cpu": 64000, "memory": 262144}, POD_NEED, 3),
        ({GPU: 8, "cpu": 20000, "memory": 262144}, POD_NEED, 2),  # CPU for two
        ({GPU: 8, "cpu": 64000, "memory": 20000}, POD_NEED, 1),  # memory for one
        ({GPU: 0, "cpu": 64000, "memory": 262144}, POD_NEED, 0),
        ({GPU: -1, "cpu": 64000, "memory": 262144}, POD_NEED, 0),  # overcommitted
    ],
)
def test_how_many_pods_a_node_holds(room: dict[str, int], need: dict[str, int], expected: int) -> None:
    assert gang_check.copies(room, need, ("nvidia.com/gpu", "cpu", "memory")) == expected


ANYWHERE = Placement()


def _question(size: int, *, at: float = 1.0, placement: Placement = ANYWHERE) -> GangQuestion:
    return GangQuestion(at=at, size=size, requests=POD_NEED, placement=placement)


G2_ONLY = Placement(terms=((Requirement("m", "In", ("G2",)),),))


@pytest.mark.parametrize(
    ("history", "question", "fits"),
    [
        pytest.param([_node("a", gpus=2)], _question(2), True, id="one-node-holds-both"),
        pytest.param([_node("a", gpus=1), _node("b", gpus=1)], _question(2), True, id="a-pod-on-each-node"),
        pytest.param([_node("a", gpus=1)], _question(2), False, id="room-for-one-pod-only"),
        pytest.param([_node("a", gpus=2), _bound("x", "a", gpus=1)], _question(2), False, id="a-gpu-taken"),
        pytest.param([_node("a", gpus=2, cpu=12000)], _question(2), False, id="cpu-for-one"),
        pytest.param([_node("a", gpus=2, unschedulable=True)], _question(2), False, id="cordoned"),
        pytest.param(
            [_node("a", gpus=1), _node("b", gpus=1, labels={"m": "T4"})],
            _question(2, placement=G2_ONLY),
            False,
            id="one-node-of-the-model",
        ),
        pytest.param([_node("a", gpus=1), _node("b", gpus=1, at=2.0)], _question(2), False, id="node-came-later"),
    ],
)
def test_a_gang_fits_when_all_its_pods_do_at_once(
    history: list[Observation], question: GangQuestion, fits: bool
) -> None:
    assert gang_check.judge_gangs(history, [question]) == [fits]


def test_gangs_are_judged_each_at_its_own_moment() -> None:
    history = [_node("a", gpus=2), _bound("x", "a", gpus=1, at=5.0)]
    assert gang_check.judge_gangs(history, [_question(2, at=6.0), _question(2, at=1.0)]) == [False, True]


def _burst(row: PodRow) -> PodOutcome:
    return PodOutcome(row.name, f"ns/{row.name}", row, 1.0, 1.01, decision="remote")


@pytest.mark.parametrize(
    ("nodes", "wrong", "gangs_fitting"),
    [
        # Each pod of the gang fits alone on the one free GPU, but not both: the gang's burst is right.
        pytest.param([_node("a", gpus=1)], 0, [], id="a-gang-that-did-not-fit-is-no-wrong-burst"),
        pytest.param([_node("a", gpus=2)], 0, ["gang-p0"], id="a-gang-that-fit-is-counted-as-a-gang"),
    ],
)
def test_a_gangs_pods_are_not_judged_one_by_one(nodes: list[Observation], wrong: int, gangs_fitting: list[str]) -> None:
    run = dataclasses.replace(_run([_burst(_row(0)), _burst(_row(1))], cap=None, gang_list=(G,)), history=nodes)
    judgement, _ = accounting.judge_run(run, model_label="m", race_window=0.25)
    assert (judgement.wrong, judgement.gangs_fitting) == (wrong, gangs_fitting)
    alone = dataclasses.replace(run, gangs=())  # the same pods judged one by one: each fit alone
    assert accounting.judge_run(alone, model_label="m", race_window=0.25)[0].wrong == 2


@pytest.mark.parametrize(
    "changes",
    [
        {"cost_cap": 20.0, "gangs": (G, Gang("gang-p5", ("p5", "p6", "p7"))), "burst_after": 300.0},
        {"cost_cap": None, "gangs": (), "burst_after": None},
    ],
)
def test_the_history_file_keeps_the_runs_setting_and_gangs(changes: dict[str, Any]) -> None:
    saved = record_file.SavedRun(dataclasses.replace(_run([], cap=None), **changes), model_label="m", race_window=0.25)
    assert record_file.decode(record_file.encode(saved)) == saved


def test_a_history_file_without_the_runs_setting_and_gangs_still_reads() -> None:
    saved = record_file.SavedRun(_run([], cap=7.0, gang_list=(G,)), model_label="m", race_window=0.25)
    header, *rest = record_file.encode_lines(saved)
    item = json.loads(header)
    for key in ("burst_after", "cost_cap", "gangs"):
        del item["run"][key]
    record = record_file.decode_lines([json.dumps(item), *rest]).record
    assert (record.burst_after, record.cost_cap, record.gangs) == (None, None, ())


def test_a_garbled_gang_is_named() -> None:
    saved = record_file.SavedRun(_run([], cap=None), model_label="m", race_window=0.25)
    header, *rest = record_file.encode_lines(saved)
    item = json.loads(header)
    item["run"]["gangs"] = ["gang-p0"]
    with pytest.raises(record_file.RecordFileError, match=r"garbled header .*a gang is str"):
        record_file.decode_lines([json.dumps(item), *rest])


def test_the_picture_draws_a_line_per_cap_through_its_settings() -> None:
    runs = [
        _summary(burst_after=300.0, cost_cap=20.0),
        _summary(burst_after=0.0),
        _summary(burst_after=0.0, cost_cap=20.0),
        _summary(burst_after=300.0),
        _summary(burst_after=0.0, cost_cap=5.0),
    ]
    groups = report.group_by_cap(runs)
    assert list(groups) == [None, 5.0, 20.0]
    assert [[s.burst_after for s in series] for series in groups.values()] == [[0.0, 300.0], [0.0], [0.0, 300.0]]


def test_the_burst_on_failure_controller_bursts_a_gangs_pods_alone_and_is_judged_so() -> None:
    run = dataclasses.replace(
        _run([_burst(_row(0)), _burst(_row(1))], cap=None, gang_list=(G,)), history=[_node("a", gpus=2)]
    )
    on_failure = dataclasses.replace(run, policy="on-failure")
    judgement, _ = accounting.judge_run(on_failure, model_label="m", race_window=0.25)
    assert (judgement.wrong, judgement.gangs_fitting) == (2, [])
    summary = _summarize(on_failure)
    cells = dict(
        [c.strip() for c in line.strip("|").split("|")] for line in report.build_table([summary]).splitlines()[2:]
    )
    assert (
        cells["max-cost-per-hour (namespace cap)"],
        cells["burst though all their pods fit at once (claims ignored)"],
    ) == ("-", "-")
