"""The replay's what-if of moving running bursts home: the pure accounting, as tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay import come_home, come_home_report, record_file, trace
from replay.accounting import PodOutcome, RunRecord
from replay.come_home import Assumptions, RemoteRun, what_if
from replay.gangs import Gang
from replay.history import GPU, NodeSeen, Observation, Placement, PodSeen
from replay.settings import SettingsError, parse_settings
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

HOUR = 3600.0
BASE = Assumptions(share=1.0, interval_seconds=600, move_seconds=60, min_saving=0.0, price_per_gpu_hour=2.5)


def run(key: str, *, gpus: int = 1, start: float = 0.0, end: float = 10 * HOUR) -> RemoteRun:
    return RemoteRun(key=key, gpus=gpus, start=start, end=end)


@pytest.mark.parametrize(
    ("case", "runs", "free", "assumptions", "expected"),
    [
        # (moves as (key, node, at), GPU-hours saved, money saved, freed before end)
        ("no GPU ever frees", [run("a")], {"n1": [(0.0, 0)]}, BASE, ([], 0.0, 0.0, 0)),
        (
            "one GPU frees an hour in and stays free: the rest of the run, less the move, is saved",
            [run("a")],
            {"n1": [(0.0, 0), (HOUR, 1)]},
            BASE,
            ([("a", "n1", HOUR)], (9 * HOUR - 60) / HOUR, 2.5 * (9 * HOUR - 60) / HOUR, 1),
        ),
        (
            "GPUs free for a while only: a local pod takes them back before the moved pod would end",
            [run("a")],
            {"n1": [(0.0, 0), (HOUR, 1), (2 * HOUR, 0)]},
            BASE,
            ([], 0.0, 0.0, 1),
        ),
        (
            "freed until just after the end plus one interval: the move fits",
            [run("a")],
            {"n1": [(0.0, 0), (HOUR, 1), (10 * HOUR + 600, 0)]},
            BASE,
            ([("a", "n1", HOUR)], (9 * HOUR - 60) / HOUR, 2.5 * (9 * HOUR - 60) / HOUR, 1),
        ),
        (
            "freed until the end but not the interval of work done again: no move",
            [run("a")],
            {"n1": [(0.0, 0), (HOUR, 1), (10 * HOUR + 599, 0)]},
            BASE,
            ([], 0.0, 0.0, 1),
        ),
        (
            "two pods, one GPU freed: the oldest burst moves, the other stays",
            [run("b", start=10.0), run("a", start=5.0)],
            {"n1": [(0.0, 0), (HOUR, 1)]},
            BASE,
            ([("a", "n1", HOUR)], (9 * HOUR - 60) / HOUR, 2.5 * (9 * HOUR - 60) / HOUR, 2),
        ),
        (
            "the second pod moves once the first would have ended here",
            [run("a", start=5.0, end=3 * HOUR), run("b", start=10.0)],
            {"n1": [(0.0, 0), (HOUR, 1)]},
            BASE,
            (
                [("a", "n1", HOUR), ("b", "n1", 3 * HOUR + 600)],
                (2 * HOUR - 60) / HOUR + (7 * HOUR - 660) / HOUR,
                2.5 * ((2 * HOUR - 60) / HOUR + (7 * HOUR - 660) / HOUR),
                2,
            ),
        ),
        (
            "two GPUs wanted, one free on each of two nodes: a pod runs on one node",
            [run("a", gpus=2)],
            {"n1": [(0.0, 0), (HOUR, 1)], "n2": [(0.0, 0), (HOUR, 1)]},
            BASE,
            ([], 0.0, 0.0, 0),
        ),
        (
            "two GPUs on one node: both GPUs' hours are saved",
            [run("a", gpus=2)],
            {"n1": [(0.0, 1), (HOUR, 2)]},
            BASE,
            ([("a", "n1", HOUR)], 2 * (9 * HOUR - 60) / HOUR, 5 * (9 * HOUR - 60) / HOUR, 1),
        ),
        (
            "not worth it: the saving is under come-home-min-saving",
            [run("a")],
            {"n1": [(0.0, 0), (HOUR, 1)]},
            Assumptions(1.0, 600, 60, min_saving=23.0, price_per_gpu_hour=2.5),
            ([], 0.0, 0.0, 1),
        ),
        (
            "freed too late: the job would end before the move is done",
            [run("a", end=HOUR + 30)],
            {"n1": [(0.0, 0), (HOUR, 1)]},
            BASE,
            ([], 0.0, 0.0, 1),
        ),
        (
            "no pod checkpoints: nothing moves",
            [run("a")],
            {"n1": [(0.0, 0), (HOUR, 1)]},
            Assumptions(0.0, 600, 60, 0.0, 2.5),
            ([], 0.0, 0.0, 0),
        ),
        (
            "GPUs already free when it burst (CPU or a GPU model kept it off them) do not free later",
            [run("a", start=HOUR)],
            {"n1": [(0.0, 1)]},
            BASE,
            ([], 0.0, 0.0, 1),
        ),
    ],
)
def test_what_if(
    case: str,
    runs: list[RemoteRun],
    free: dict[str, list[tuple[float, int]]],
    assumptions: Assumptions,
    expected: tuple[list[tuple[str, str, float]], float, float, int],
) -> None:
    moves, hours, money, freed = expected
    result = what_if(runs, free, assumptions, observed_until=20 * HOUR)
    assert [(m.key, m.node, m.at) for m in result.moves] == moves, case
    assert result.gpu_hours_saved == pytest.approx(hours), case
    assert result.money_saved == pytest.approx(money), case
    assert result.freed_before_end == freed, case
    assert result.checkpointing == (len(runs) if assumptions.share else 0)
    assert result.gpu_hours_redone == pytest.approx(sum(m.gpus for m in result.moves) * 600 / HOUR)


def test_only_what_was_observed_counts() -> None:
    """A pod still running at the replay's last observation saves only until then, and its move needs
    the GPUs free until then."""
    result = what_if([run("a", end=100 * HOUR)], {"n1": [(0.0, 0), (HOUR, 1)]}, BASE, observed_until=5 * HOUR)
    assert [m.gpu_hours_saved for m in result.moves] == [pytest.approx((4 * HOUR - 60) / HOUR)]
    assert result.remote_gpu_hours == pytest.approx(5.0)


def test_the_share_is_stable_and_about_what_was_asked() -> None:
    keys = [f"replay/openb-pod-{i:04d}" for i in range(10000)]
    chosen = [k for k in keys if come_home.keeps_contract(k, 0.3)]
    assert 2800 < len(chosen) < 3200
    assert chosen == [k for k in keys if come_home.keeps_contract(k, 0.3)]
    assert set(chosen) <= {k for k in keys if come_home.keeps_contract(k, 0.5)}  # a larger share adds pods
    assert not any(come_home.keeps_contract(k, 0.0) for k in keys)
    assert all(come_home.keeps_contract(k, 1.0) for k in keys)


def _node(name: str, gpus: int) -> NodeSeen:
    return NodeSeen(name, {}, {GPU: gpus}, (), False)


def _pod(key: str, node: str, gpus: int, *, terminal: bool = False) -> PodSeen:
    return PodSeen(key, node, {GPU: gpus}, terminal, Placement())


def test_free_series_counts_every_namespace_on_each_node() -> None:
    history = [
        Observation(1.0, "node", "n1", node=_node("n1", 8)),
        Observation(1.0, "node", "n2", node=_node("n2", 1)),
        Observation(2.0, "pod", "bg/holder", pod=_pod("bg/holder", "n1", 7)),  # the background
        Observation(3.0, "pod", "r/a", pod=_pod("r/a", "", 1)),  # unbound: holds nothing
        Observation(4.0, "pod", "r/a", pod=_pod("r/a", "n1", 1)),
        Observation(5.0, "pod", "r/b", pod=_pod("r/b", "n2", 1)),
        Observation(6.0, "pod", "r/a", pod=_pod("r/a", "n1", 1, terminal=True)),
        Observation(7.0, "pod-deleted", "r/b"),
    ]
    series = come_home.free_series(history, trace_time=lambda wall: wall * 10)
    assert series == {"n1": [(10.0, 8), (20.0, 1), (40.0, 0), (60.0, 1)], "n2": [(10.0, 1), (50.0, 0), (70.0, 1)]}


def test_remote_runs_are_the_lone_burst_gpu_pods() -> None:
    def row(name: str, gpus: int, deletion: float | None) -> trace.PodRow:
        return trace.PodRow(0, name, 1000, 1000, gpus, 1000 * gpus, (), "", "", 0.0, deletion, None)

    pods = [
        PodOutcome("a", "r/a", row("a", 2, 7200.0), 1000.0, 1000.5, decision="remote"),
        PodOutcome("b", "r/b", row("b", 1, None), 1000.0, 1001.0, decision="remote"),
        PodOutcome("c", "r/c", row("c", 1, 7200.0), 1000.0, 1000.5, decision="local"),
        PodOutcome("d", "r/d", row("d", 0, 7200.0), 1000.0, 1000.5, decision="remote"),
        PodOutcome("g", "r/g", row("g", 1, 7200.0), 1000.0, 1000.5, decision="remote"),
    ]
    record = RunRecord(
        policy="webhook",
        namespace="r",
        compression=100,
        trace_start=0,
        trace_end=3000,
        wall_start=1000.0,
        wall_end=1030.0,
        replay_wall_seconds=30,
        pods=pods,
        history=[],
        create_latencies_ms=[],
        admission_latencies_ms=[],
        max_lag_seconds=0,
        truncated=False,
        gangs=(Gang(name="job-g", members=("g", "h")),),
    )
    assert come_home.remote_runs(record) == [
        RemoteRun("r/a", 2, 50.0, 7200.0),
        RemoteRun("r/b", 1, 100.0, float("inf")),
    ]
    result = come_home.what_if_of_run(record, BASE)
    assert (result.remote_runs, result.moves, result.remote_gpu_hours) == (
        2,
        (),
        pytest.approx((2 * 2950 + 2900) / HOUR),
    )


def test_the_assumptions_are_flags_with_stated_defaults() -> None:
    settings = parse_settings([])
    assert settings.come_home == Assumptions(0.5, 900.0, 60.0, 0.0, 2.5)
    flags = "--come-home-share 0.2 --come-home-interval 30m --come-home-move-seconds 90 --come-home-min-saving 5"
    given = parse_settings([*flags.split(), "--price-per-gpu-hour", "3"])
    assert given.come_home == Assumptions(0.2, 1800.0, 90.0, 5.0, 3.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--come-home-share", "1.5"], "--come-home-share must be between 0 and 1"),
        (["--come-home-interval", "often"], "--come-home-interval: 'often' is not a duration"),
        (["--come-home-interval", "0"], "--come-home-interval must be more than 0"),
        (["--come-home-move-seconds", "-1"], "--come-home-move-seconds must be 0 or more"),
        (["--come-home-min-saving", "-2"], "--come-home-min-saving must be 0 or more"),
    ],
)
def test_bad_assumptions_say_what_to_fix(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(argv)
    assert message in str(caught.value)


def test_the_what_if_runs_again_on_a_saved_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One 1-GPU burst for 10 trace hours; the node's only other pod ends an hour in: the move saves the rest."""

    def row(name: str, deletion: float) -> trace.PodRow:
        return trace.PodRow(0, name, 1000, 1000, 1, 1000, (), "", "", 0.0, deletion, None)

    history = [
        Observation(1000.0, "node", "n1", node=_node("n1", 1)),
        Observation(1000.0, "pod", "r/local", pod=_pod("r/local", "n1", 1)),
        Observation(1036.0, "pod-deleted", "r/local"),
    ]
    record = RunRecord(
        policy="webhook",
        namespace="r",
        compression=100,
        trace_start=0,
        trace_end=36000,
        wall_start=1000.0,
        wall_end=1400.0,
        replay_wall_seconds=400,
        pods=[PodOutcome("a", "r/a", row("a", 36000.0), 1000.0, 1000.0, decision="remote")],
        history=history,
        create_latencies_ms=[],
        admission_latencies_ms=[],
        max_lag_seconds=0,
        truncated=False,
    )
    path = tmp_path / "history-webhook.jsonl.gz"
    path.write_bytes(record_file.encode(record_file.SavedRun(record, model_label="m", race_window=0.25)))
    assert come_home_report.main(["--history", str(path), "--share", "1", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["moves"], figures["gpu_hours_saved"]) == (1, round((9 * HOUR - 60) / HOUR, 3))
    assert come_home_report.main(["--history", str(path), "--share", "1"]) == 0
    assert "moved home 1: 9.0 GPU-hours (89.8%) and 22 not paid on Nimbix" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        come_home_report.main(["--history", str(tmp_path / "absent.jsonl.gz")])
    assert "--history:" in capsys.readouterr().err
