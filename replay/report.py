"""The report: a JSON document, a Markdown/terminal table and a PNG timeline.

`build_document` and `build_table` are pure; `write_png` and `write_files` do the I/O
(matplotlib with the Agg backend: no display needed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from replay.accounting import Distribution, PolicySummary, format_cap, format_trace_duration

HOUR = 3600.0


def _hours(seconds: float) -> str:
    if seconds < HOUR:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / HOUR:.1f} h"


def _dist_hours(d: Distribution) -> str:
    if not d.count:
        return "-"
    return f"p50 {_hours(d.p50)}, p90 {_hours(d.p90)}, max {_hours(d.max)}"


def _dist_ms(d: Distribution) -> str:
    if not d.count:
        return "-"
    return f"p50 {d.p50:.1f}, p99 {d.p99:.1f}, max {d.max:.1f} (n={d.count})"


def _percent(part: int, whole: int) -> str:
    return f"{part} ({100.0 * part / whole:.1f} %)" if whole else str(part)


def _gangs(s: PolicySummary) -> str:
    g = s.gangs
    return f"{g.burst} of {g.gangs} / {g.split}" if g.gangs else "-"


def _gang_hours(s: PolicySummary) -> str:
    return f"{s.gangs.gpu_hours:,.1f} / {s.gang_cost:,.0f}" if s.gangs.gangs else "-"


def _gangs_fitting(s: PolicySummary) -> str:
    return str(s.gangs_fitting) if s.gangs.gangs and s.policy == "webhook" else "-"


def _cap(s: PolicySummary) -> str:
    if s.policy != "webhook":
        return "-"
    return "none" if s.cost_cap is None else format_cap(s.cost_cap)


def _held_by_cap(s: PolicySummary) -> str:
    """Pods the cap kept local: how many, how many then waited Pending for GPUs, their p95 wait."""
    if s.cost_cap is None:
        return "-"
    c = s.caps
    wait = f", p95 {_hours(c.held_waits.p95)}" if c.held_waits.count else ""
    return f"{c.held} (Pending {c.held_pending}{wait})"


def _machine_cost(s: PolicySummary) -> str:
    return "-" if s.cost_cap is None else f"{s.caps.machine_cost:,.0f}"


def _view_lag(s: PolicySummary) -> str:
    """Of the decisions logged with the webhook's view: those whose view was older than the race
    window allows, and those whose view the replay's own watch showed only later (each judged from
    that view); "-" without a webhook that logs its view."""
    if not s.views_known:
        return "-"
    return (
        f"behind {s.views_lagging} (max {s.view_lag_max_seconds:.2f} s), "
        f"ahead {s.watch_lagging} (max {s.watch_lag_max_seconds:.2f} s) of {s.views_known}"
    )


Row = tuple[str, Callable[[PolicySummary], str]]

ROWS: tuple[Row, ...] = (
    ("GPU pods replayed (+ CPU pods)", lambda s: f"{s.gpu_pods} (+{s.cpu_pods})"),
    ("pods burst to Nimbix", lambda s: _percent(s.burst, s.gpu_pods)),
    ("GPU-hours sent to Nimbix", lambda s: f"{s.remote_gpu_hours:,.1f}"),
    ("cost estimate (USD)", lambda s: f"{s.remote_cost:,.0f}"),
    ("gangs (multi-pod trace jobs): burst / split", _gangs),
    ("  their GPU-hours to Nimbix (as jobs) / cost (USD)", _gang_hours),
    ("  burst though all their pods fit at once (claims ignored)", _gangs_fitting),
    ("max-cost-per-hour (namespace cap)", _cap),
    ("  cost at the counted machine prices", _machine_cost),
    ("  kept local by the cap (Pending, their wait)", _held_by_cap),
    ("  kept local for want of a spend record", lambda s: "-" if s.cost_cap is None else str(s.caps.no_record)),
    ("peak / mean local GPUs in use", lambda s: f"{s.local_gpus_peak:.0f} / {s.local_gpus_mean:.1f}"),
    ("peak Nimbix GPUs in use", lambda s: f"{s.remote_gpus_peak:.0f}"),
    ("peak GPU pods waiting unbound", lambda s: f"{s.waiting_peak:.0f}"),
    ("pods ever Pending for GPUs", lambda s: _percent(s.pending_for_gpus, s.gpu_pods)),
    ("  how long (trace time)", lambda s: _dist_hours(s.pending_trace_seconds)),
    ("  still Pending at the end", lambda s: str(s.still_pending_at_end)),
    (
        "  ... no node had the GPUs / GPUs+CPU+memory",
        lambda s: f"{s.pending_unprovidable} / {s.pending_unprovidable_all}",
    ),
    (
        "kept local, no node had GPUs / GPUs+CPU+mem",
        lambda s: f"{s.unprovidable_local} / {s.unprovidable_local_all}",
    ),
    ("creation -> burst delay (trace time)", lambda s: _dist_hours(s.burst_delay_trace_seconds)),
    ("wrong bursts (GPU+CPU+memory fit)", lambda s: _percent(s.wrong_bursts, s.burst)),
    ("  by GPUs alone / unguarded upper bound", lambda s: f"{s.wrong_bursts_gpu_only} / {s.wrong_bursts_upper_bound}"),
    ("  webhook's view vs the replay's watch", _view_lag),
    ("  judged by greedy claims (search too long)", lambda s: str(s.judged_inexactly)),
    ("stranded (kept local, not bound in time)", lambda s: str(s.stranded)),
    ("webhook admission latency ms", lambda s: _dist_ms(s.admission_latency_ms)),
    ("pod CREATE latency ms (client)", lambda s: _dist_ms(s.create_latency_ms)),
    ("replay wall time", lambda s: f"{s.replay_wall_seconds:.0f} s (max lag {s.max_lag_seconds:.2f} s)"),
)


def build_table(summaries: Sequence[PolicySummary]) -> str:
    """A Markdown table, one column per policy (also readable in a terminal)."""
    header = ["", *(s.title for s in summaries)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for title, cell in ROWS:
        lines.append("| " + " | ".join([title, *(cell(s) for s in summaries)]) + " |")
    return "\n".join(lines)


def _summary_dict(summary: PolicySummary) -> dict[str, Any]:
    data = asdict(summary)
    data["title"] = summary.title
    return data


def build_document(
    summaries: Sequence[PolicySummary], *, config: Mapping[str, Any], setup: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "config": dict(config),
        "setup": dict(setup),
        "policies": {s.key: _summary_dict(s) for s in summaries},
    }


def build_markdown(table: str, *, config: Mapping[str, Any], setup: Mapping[str, Any], notes: Sequence[str]) -> str:
    lines = [
        "# What-if replay",
        "",
        f"Trace: `{config['pods']}` pods {config['start_index']}..{config['start_index'] + config['count'] - 1} "
        f"on `{config['nodes']}` ({setup['nodes']} nodes, {setup['total_gpus']} GPUs), "
        f"compression {config['compression']:g}x, background leaves {setup['free_gpus']} GPUs free, "
        f"price {config['price_per_gpu_hour']:.2f} USD per GPU-hour (an assumption).",
        "",
        f"Setup: {setup.get('node_creation_seconds', '?')} s to create the nodes, "
        f"{setup.get('background_pods', 0)} background pods, {setup.get('preload_pods', 0)} pods preloaded; "
        f"whole run {setup.get('total_wall_seconds', '?')} s of wall time.",
        "",
        table,
        "",
        *(f"- {note}" for note in notes),
        "",
    ]
    return "\n".join(lines)


def write_png(path: Path, summaries: Sequence[PolicySummary], *, free_gpus: int, trace_start: float) -> None:
    import matplotlib  # noqa: PLC0415 - heavy; only needed here

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    figure, (local_axis, waiting_axis, remote_axis) = pyplot.subplots(3, 1, figsize=(11, 9), sharex=True)
    for s in summaries:
        for axis, series in (
            (local_axis, s.local_timeline),
            (waiting_axis, s.waiting_timeline),
            (remote_axis, s.remote_timeline),
        ):
            if series:
                xs = [(t - trace_start) / HOUR for t, _ in series]
                axis.step(xs, [v for _, v in series], where="post", label=s.title)
    local_axis.axhline(free_gpus, color="grey", linestyle="--", linewidth=1, label="GPUs left by the background")
    local_axis.set_ylabel("local GPUs allocated\n(replayed pods)")
    local_axis.legend(loc="upper left", fontsize=8)
    local_axis.grid(alpha=0.3)
    waiting_axis.set_ylabel("GPU pods waiting\n(unbound)")
    waiting_axis.legend(loc="upper left", fontsize=8)
    waiting_axis.grid(alpha=0.3)
    remote_axis.set_ylabel("Nimbix GPUs in use")
    remote_axis.set_xlabel("trace time since the slice start (hours)")
    remote_axis.legend(loc="upper left", fontsize=8)
    remote_axis.grid(alpha=0.3)
    figure.suptitle("What-if replay: GPU allocation over (trace) time")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


TRADEOFF_HEADER = (
    "burst-after",
    "max-cost-per-hour",
    "pods burst",
    "gangs burst",
    "GPU-hours to Nimbix",
    "cost (USD)",
    "cost at machine prices",
    "kept local by the cap",
    "pods ever Pending for GPUs",
    "their wait p50 / p95 / max (trace)",
    "p95 wait, every GPU pod",
    "wrong bursts",
    "stranded",
)


def _tradeoff_row(s: PolicySummary) -> list[str]:
    wait = s.pending_trace_seconds
    waited = f"{_hours(wait.p50)} / {_hours(wait.p95)} / {_hours(wait.max)}" if wait.count else "-"
    return [
        format_trace_duration(s.burst_after or 0.0),
        _cap(s),
        _percent(s.burst, s.gpu_pods),
        _gangs(s),
        f"{s.remote_gpu_hours:,.1f}",
        f"{s.remote_cost:,.0f}",
        _machine_cost(s),
        _held_by_cap(s),
        _percent(s.pending_for_gpus, s.gpu_pods),
        waited,
        _hours(s.waited_trace_seconds.p95),
        str(s.wrong_bursts),
        str(s.stranded),
    ]


def build_tradeoff_table(summaries: Sequence[PolicySummary]) -> str:
    """The (burst-after, cost cap) settings side by side: what each sends to Nimbix, and how long pods
    wait for it. Gangs: burst of replayed / split (a split gang would be the webhook's fault)."""
    lines = ["| " + " | ".join(TRADEOFF_HEADER) + " |", "|" + "---|" * len(TRADEOFF_HEADER)]
    lines += ["| " + " | ".join(_tradeoff_row(s)) + " |" for s in summaries]
    return "\n".join(lines)


def group_by_cap(summaries: Sequence[PolicySummary]) -> dict[float | None, list[PolicySummary]]:
    """The runs per cost cap (no cap first), each in burst-after order."""
    groups: dict[float | None, list[PolicySummary]] = {}
    for s in sorted(summaries, key=lambda s: (s.cost_cap is not None, s.cost_cap or 0.0, s.burst_after or 0.0)):
        groups.setdefault(s.cost_cap, []).append(s)
    return groups


def write_tradeoff_png(path: Path, summaries: Sequence[PolicySummary]) -> None:
    """Cost sent to Nimbix against the p95 wait for local GPUs, a point per (burst-after, cost cap) setting."""
    import matplotlib  # noqa: PLC0415 - heavy; only needed here

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    figure, axis = pyplot.subplots(figsize=(6, 4.5))
    # A line per cost cap, through its burst-after settings: the lines compare caps, the points waits.
    for cap, series in group_by_cap(summaries).items():
        xs = [s.waited_trace_seconds.p95 / 60 for s in series]
        ys = [s.remote_cost for s in series]
        shown = "no cost cap" if cap is None else f"max-cost-per-hour {format_cap(cap)}"
        axis.plot(xs, ys, marker="o", linestyle=":", label=shown)
        for x, y, s in zip(xs, ys, series, strict=True):
            label = f"burst-after {format_trace_duration(s.burst_after or 0.0)}"
            axis.annotate(label, (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
    if any(s.cost_cap is not None for s in summaries):
        axis.legend(loc="upper right", fontsize=8)
    axis.set_xlabel("p95 wait for GPUs over every GPU pod (trace minutes; 0 for a pod never Pending)")
    axis.set_ylabel("cost sent to Nimbix (USD)")
    axis.grid(alpha=0.3)
    figure.suptitle("What-if replay: burst-after and cost caps, cost against waiting")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


def write_files(out_dir: Path, *, document: Mapping[str, Any], markdown: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    (out_dir / "report.md").write_text(markdown)
