"""What-if: the GPU-hours and money a move home of running bursts would have saved (pure).

A burst pod that keeps the checkpoint contract (docs/checkpoints.md) and opts in may move back to local
GPUs that free while its JARVICE job runs: asked for a checkpoint, it stops remotely and resumes here.
This module replays that decision over what a replay recorded, under stated assumptions:

- **Which pods checkpoint**: a share of the lone burst GPU pods (a gang is one multi-node job and does
  not move), chosen by a hash of the pod's key, so the same share picks the same pods in every run.
- **When a move is made**: at the first moment after the burst at which one node has the pod's GPUs free
  and keeps them free, after the moves already made, from then until the pod would end here (the rest
  of its run plus one checkpoint interval of work done again). So a move never takes GPUs a pod the
  replay ran locally needed: it saves money, it does not shift the bill to a later burst. GPUs alone are
  counted (CPU, memory and a GPU model constraint are not): an upper bound on where it fits.
- **What it saves**: the remote job stops `move_seconds` after the GPUs freed (the checkpoint asked for,
  written and copied back); the rest of its run is GPU-hours not paid on Nimbix. A move is made only if
  that is worth more than `min_saving`, as the product's `come-home-min-saving` decides.
- **What it costs here**: at most one interval of work done again (the move's own checkpoint makes it
  none; one interval is the bound when only the last periodic checkpoint is there).
- Only what the replay observed counts: a pod still running at its last observation is counted until
  then (a lower bound on its saving), and a move needs the GPUs free until then.
"""

from __future__ import annotations

import bisect
import math
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from replay.accounting import RunRecord, run_title
from replay.gangs import membership
from replay.history import GPU, Observation

SECONDS_PER_HOUR = 3600.0
_HASH_SPACE = 2**32

# A node's free GPUs over trace time: (moment, free from then on), sorted by moment.
FreeSeries = Sequence[tuple[float, int]]


@dataclass(frozen=True, slots=True)
class Assumptions:
    share: float  # of lone burst GPU pods that keep the checkpoint contract (0..1)
    interval_seconds: float  # how often they checkpoint (trace seconds): work done again at most
    move_seconds: float  # GPUs free -> remote job stopped (checkpoint asked, written, copied back)
    min_saving: float  # a move must save more than this much money
    price_per_gpu_hour: float


@dataclass(frozen=True, slots=True)
class RemoteRun:
    """A lone burst pod's life on Nimbix, in trace seconds."""

    key: str
    gpus: int
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Move:
    key: str
    node: str
    gpus: int
    at: float  # when the GPUs were free and the move began (trace seconds)
    gpu_hours_saved: float  # remote GPU-hours not paid
    money_saved: float
    gpu_hours_redone: float  # at most: one interval of its GPUs


@dataclass(frozen=True, slots=True)
class ComeHomeWhatIf:
    assumptions: Assumptions
    remote_runs: int  # lone burst GPU pods
    remote_gpu_hours: float  # what they ran on Nimbix
    checkpointing: int  # of them, those that keep the contract (the share)
    freed_before_end: int  # ... on whose GPU count one node had free GPUs before it ended
    moves: tuple[Move, ...]

    @property
    def gpu_hours_saved(self) -> float:
        return sum(m.gpu_hours_saved for m in self.moves)

    @property
    def money_saved(self) -> float:
        return sum(m.money_saved for m in self.moves)

    @property
    def gpu_hours_redone(self) -> float:
        return sum(m.gpu_hours_redone for m in self.moves)

    def as_dict(self) -> dict[str, float | int]:
        a = self.assumptions
        return {
            "checkpointing_share": a.share,
            "checkpoint_interval_seconds": a.interval_seconds,
            "move_seconds": a.move_seconds,
            "min_saving": a.min_saving,
            "price_per_gpu_hour": a.price_per_gpu_hour,
            "remote_runs": self.remote_runs,
            "remote_gpu_hours": round(self.remote_gpu_hours, 3),
            "checkpointing": self.checkpointing,
            "freed_before_end": self.freed_before_end,
            "moves": len(self.moves),
            "gpu_hours_saved": round(self.gpu_hours_saved, 3),
            "money_saved": round(self.money_saved, 2),
            "gpu_hours_redone_at_most": round(self.gpu_hours_redone, 3),
        }


def keeps_contract(key: str, share: float) -> bool:
    """Whether the pod `key` is among the `share` that checkpoint: a stable hash, not a random draw."""
    return zlib.crc32(key.encode("utf-8")) < share * _HASH_SPACE


def free_at(series: FreeSeries, moment: float) -> int:
    """A node's free GPUs at `moment` (0 before its first entry)."""
    i = bisect.bisect_right(series, moment, key=lambda entry: entry[0]) - 1
    return series[i][1] if i >= 0 else 0


def _free_range(series: FreeSeries, start: float, stop: float) -> tuple[int, int]:
    """The fewest and the most GPUs free on a node at a moment of [start, stop)."""
    least = most = free_at(series, start)
    i = bisect.bisect_right(series, start, key=lambda entry: entry[0])
    while i < len(series) and series[i][0] < stop:
        least, most = min(least, series[i][1]), max(most, series[i][1])
        i += 1
    return least, most


def _taken(holds: Sequence[tuple[float, float, int]], start: float, stop: float) -> int:
    """The most GPUs earlier moves hold on a node at one moment of [start, stop): (from, to, GPUs) each."""
    moments = [start] + [h[0] for h in holds if start < h[0] < stop]
    return max((sum(g for a, b, g in holds if a <= m < b) for m in moments), default=0)


def what_if(
    runs: Sequence[RemoteRun], free: Mapping[str, FreeSeries], assumptions: Assumptions, *, observed_until: float
) -> ComeHomeWhatIf:
    """The moves home the assumptions allow, oldest burst first (the product moves one pod at a time, the
    oldest first), each holding its GPUs from the moment it is decided until it would end here."""
    a = assumptions
    holds: dict[str, list[tuple[float, float, int]]] = {name: [] for name in free}
    chosen = sorted((r for r in runs if keeps_contract(r.key, a.share)), key=lambda r: (r.start, r.key))
    moves: list[Move] = []
    freed = 0
    for run in chosen:
        end = min(run.end, observed_until)
        freed += any(_free_range(series, run.start, end)[1] >= run.gpus for series in free.values())
        found = [
            (at, name)
            for name in sorted(free)
            if (at := _earliest_move(free[name], holds[name], run, a, end=end, observed_until=observed_until))
            is not None
        ]
        if not found:
            continue
        at, node = min(found)
        saved_hours = run.gpus * (end - at - a.move_seconds) / SECONDS_PER_HOUR
        holds[node].append((at, min(end + a.interval_seconds, observed_until), run.gpus))
        moves.append(
            Move(
                key=run.key,
                node=node,
                gpus=run.gpus,
                at=at,
                gpu_hours_saved=saved_hours,
                money_saved=saved_hours * a.price_per_gpu_hour,
                gpu_hours_redone=run.gpus * a.interval_seconds / SECONDS_PER_HOUR,
            )
        )
    return ComeHomeWhatIf(
        assumptions=a,
        remote_runs=len(runs),
        remote_gpu_hours=sum(r.gpus * max(0.0, min(r.end, observed_until) - r.start) for r in runs) / SECONDS_PER_HOUR,
        checkpointing=len(chosen),
        freed_before_end=freed,
        moves=tuple(moves),
    )


def _earliest_move(
    series: FreeSeries,
    holds: Sequence[tuple[float, float, int]],
    run: RemoteRun,
    a: Assumptions,
    *,
    end: float,
    observed_until: float,
) -> float | None:
    """The first moment after the burst at which the node's free GPUs, less what earlier moves hold, are
    the pod's and stay so until it would end here; None when there is none, or none worth the move."""
    later = bisect.bisect_right(series, run.start, key=lambda entry: entry[0])
    moments = sorted(
        {t for t, count in series[later:] if count >= run.gpus} | {b for _, b, _ in holds if b > run.start}
    )
    for at in moments:
        saved_hours = run.gpus * (end - at - a.move_seconds) / SECONDS_PER_HOUR
        if saved_hours <= 0 or saved_hours * a.price_per_gpu_hour <= a.min_saving:
            return None  # a later move saves less still
        until = min(end + a.interval_seconds, observed_until)
        if _free_range(series, at, until)[0] - _taken(holds, at, until) >= run.gpus:
            return at
    return None


# --- from a replay's record ----------------------------------------------------------------------


def free_series(
    history: Iterable[Observation], *, trace_time: Callable[[float], float]
) -> dict[str, list[tuple[float, int]]]:
    """Each node's free GPUs over trace time: its allocatable GPUs less those of the bound, running pods of
    every namespace (the background's holders too), as the replay's watch saw them."""
    allocatable: dict[str, int] = {}
    held: dict[str, tuple[str, int]] = {}  # pod key -> (node, GPUs)
    used: dict[str, int] = {}
    series: dict[str, list[tuple[float, int]]] = {}

    def note(node: str, at: float) -> None:
        entry = (at, allocatable.get(node, 0) - used.get(node, 0))
        points = series.setdefault(node, [])
        if points and points[-1][0] == at:
            points[-1] = entry
        elif not points or points[-1][1] != entry[1]:
            points.append(entry)

    for o in history:
        at = trace_time(o.at)
        if o.kind == "node" and o.node is not None:
            allocatable[o.name] = o.node.allocatable.get(GPU, 0)
            note(o.name, at)
            continue
        if o.kind not in ("pod", "pod-deleted"):
            continue
        now = ("", 0)
        if o.kind == "pod" and o.pod is not None and o.pod.node and not o.pod.terminal:
            now = (o.pod.node, o.pod.requests.get(GPU, 0))
        before = held.get(o.name, ("", 0))
        if now == before:
            continue
        held[o.name] = now
        for node, delta in ((before[0], -before[1]), (now[0], now[1])):
            if node and delta:
                used[node] = used.get(node, 0) + delta
                note(node, at)
    return series


def remote_runs(run: RunRecord) -> list[RemoteRun]:
    """The lone burst GPU pods of a run (a gang's pods are one multi-node job: they do not move)."""
    in_gangs = membership(run.gangs)
    runs = []
    for pod in run.pods:
        if not pod.burst or pod.row.gpus == 0 or pod.name in in_gangs or pod.create_error:
            continue
        moment = pod.burst_done if pod.burst_done is not None else pod.create_done
        if moment is None:
            continue
        start = run.trace_time(moment)
        end = pod.row.deletion if pod.row.deletion is not None else math.inf
        if end > start:
            runs.append(RemoteRun(key=pod.key, gpus=pod.row.gpus, start=start, end=end))
    return runs


def what_if_of_run(run: RunRecord, assumptions: Assumptions) -> ComeHomeWhatIf:
    observed_until = run.trace_time(run.wall_end)
    return what_if(
        remote_runs(run),
        free_series(run.history, trace_time=run.trace_time),
        assumptions,
        observed_until=observed_until,
    )


def describe(result: ComeHomeWhatIf) -> list[str]:
    """The report's lines for one run (see docs/replay.md, "Moving running bursts home")."""
    a = result.assumptions
    share = f"{a.share:.0%} of lone burst pods checkpoint every {a.interval_seconds / 60:g} min"
    saved_share = result.gpu_hours_saved / result.remote_gpu_hours if result.remote_gpu_hours else 0.0
    return [
        f"Moving running bursts home ({share}; a move takes {a.move_seconds:g} s; made only if it saves more than"
        f" {a.min_saving:g} at {a.price_per_gpu_hour:.2f} per GPU-hour):",
        f"  lone burst GPU pods {result.remote_runs} ({result.remote_gpu_hours:.1f} GPU-hours on Nimbix);"
        f" checkpointing {result.checkpointing}; local GPUs freed before they ended {result.freed_before_end}",
        f"  moved home {len(result.moves)}: {result.gpu_hours_saved:.1f} GPU-hours ({saved_share:.1%}) and"
        f" {result.money_saved:,.0f} not paid on Nimbix; work done again at most {result.gpu_hours_redone:.1f}"
        " GPU-hours",
    ]


def what_ifs(runs: Sequence[RunRecord], assumptions: Assumptions) -> list[tuple[str, ComeHomeWhatIf]]:
    """The what-if of every webhook run, by its title."""
    return [
        (run_title(run.policy, run.burst_after, run.cost_cap), what_if_of_run(run, assumptions))
        for run in runs
        if run.policy == "webhook"
    ]
