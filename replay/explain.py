"""`python -m replay.explain --history DIR/history-webhook.jsonl.gz POD [--node NODE] [-o json]`:
the state the checker judged one decision from (replay/explanation.py computes it; this file reads
the history, renders and prints). replay/README.md, "Explaining one decision", says what each part means.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from replay import record_file, reference
from replay.explanation import ClaimRow, ExplainError, Explanation, Moment, NodeRow, explain
from replay.history import CPU, GPU, MEMORY, Placement

_VERDICTS = {
    ("remote", True): "WRONG BURST: a node could host it at every moment of the window",
    ("remote", False): "burst upheld: at some moment of the window no node could host it",
    ("local", True): "KEPT LOCAL WITHOUT A FIT: no node could host it at any moment of the window",
    ("local", False): "kept local upheld: at some moment of the window a node could host it",
}


def format_amounts(amounts: Mapping[str, int] | None) -> str:
    """GPUs, millicores and MiB, e.g. "1 gpu, 12000m cpu, 30000Mi"."""
    if amounts is None:
        return ""
    return f"{amounts.get(GPU, 0)} gpu, {amounts.get(CPU, 0)}m cpu, {amounts.get(MEMORY, 0)}Mi"


def format_placement(placement: Placement) -> str:
    parts = [f"{k}={v}" for k, v in placement.node_selector.items()]
    if placement.terms is not None:
        terms = (" and ".join(f"{r.key} {r.operator} {','.join(r.values)}" for r in term) for term in placement.terms)
        parts.append(" or ".join(terms))
    for t in placement.tolerations:
        parts.append(f"tolerates {t.key or '*'}{'=' + t.value if t.value else ''}:{t.effect or '*'}")
    return "; ".join(parts) or "any node"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _answer(label: str, answer: reference.Answer) -> str:
    exact = "" if answer.exact else " (greedy: the search ran too long)"
    return f"    {label}: fits {_yes(answer.fits)}, ignoring claims {_yes(answer.fits_ignoring_claims)}{exact}"


def _node_lines(row: NodeRow) -> list[str]:
    lines = [
        f"    node {row.name}{'' if row.eligible else ' (NOT eligible for the pod)'}: "
        f"allocatable {format_amounts(row.allocatable)}; used {format_amounts(row.used)}; "
        f"free {format_amounts(row.free)}"
    ]
    lines += [f"      bound {p.key}: {format_amounts(p.requests)}" for p in row.pods]
    return lines


def _claim_line(claim: ClaimRow) -> str:
    sequence = f", decided #{claim.sequence}" if claim.sequence is not None else ""
    room = ", ".join(claim.could_use[:5]) + (f" (+{len(claim.could_use) - 5})" if len(claim.could_use) > 5 else "")
    amounts = format_amounts(claim.requests)
    return f"    claim {claim.key} ({claim.source}{sequence}): {amounts}; room on: {room or 'none'}"


def _moment_lines(moment: Moment) -> list[str]:
    lines = [f"  at {moment.label} ({moment.at:+.3f} s):"]
    lines += [_answer("GPUs only", moment.gpu_only), _answer("GPUs, CPU, memory", moment.all_resources)]
    for row in moment.nodes:
        lines += _node_lines(row)
    lines += [_claim_line(c) for c in moment.claims] or ["    no claims"]
    return lines


def render_text(e: Explanation) -> list[str]:
    view = (
        f"pods resourceVersion {e.view.pods}, nodes {e.view.nodes}, decided #{e.view.sequence}"
        if e.view is not None
        else "not logged"
    )
    lines = [
        f"{e.key} ({e.policy}): decided {e.kind}, {format_amounts(e.requests)}; "
        f"placement: {format_placement(e.placement)}",
        f"  webhook's reason: {e.reason or '(none)'}",
        f"  webhook's view: {view}",
        f"  decision: 0 .. {e.finished:+.3f} s; judged over {e.window_start:+.3f} .. {e.window_end:+.3f} s "
        f"(race window {e.race_window:g} s)",
        f"  verdict, GPUs only: {_VERDICTS[e.kind, e.contradicted_gpu_only]}",
        f"  verdict, GPUs, CPU, memory: {_VERDICTS[e.kind, e.contradicted_all_resources]}",
    ]
    if e.other_decisions:
        lines.append(f"  ({e.other_decisions} earlier decision(s) for this pod not shown)")
    for moment in e.moments:
        lines += _moment_lines(moment)
    if e.nodes_left_out:
        lines.append(f"  ({e.nodes_left_out} more eligible nodes with a free GPU; name one with --node)")
    lines.append(f"  events inside the window touching these nodes and claims: {len(e.events)}")
    for ev in e.events:
        what = ev.kind
        if ev.kind == "pod":
            what += f" on {ev.node}" if ev.node else " unbound"
            what += " terminal" if ev.terminal else ""
        if ev.requests is not None:
            what += f", {format_amounts(ev.requests)}"
        version = f" rv {ev.version}" if ev.version else ""
        lines.append(f"    {ev.at:+.3f} s {ev.name}: {what}{version}")
    return lines


def render_json(e: Explanation) -> str:
    return json.dumps(dataclasses.asdict(e), indent=2, sort_keys=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m replay.explain",
        description="Show the state the replay's checker judged one decision from (see replay/README.md).",
    )
    p.add_argument("--history", type=Path, required=True, help="a history-<policy>.jsonl.gz of --save-history")
    p.add_argument("pod", help="the pod: name, or namespace/name")
    p.add_argument("--node", action="append", default=[], help="a node to show (repeatable; default: best fits)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        saved = record_file.decode(args.history.read_bytes())
        explanation = explain(saved, args.pod, nodes=args.node)
    except (OSError, record_file.RecordFileError, ExplainError) as error:
        sys.stderr.write(f"replay.explain: {error}\n")
        return 2
    text = render_json(explanation) if args.output == "json" else "\n".join(render_text(explanation))
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
