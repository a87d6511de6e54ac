"""The webhook's own admission time under the what-if replay's default slice (gangs on).

`make bench` runs `python -m replay --policies webhook` with the webhook the bench measures (its
decision core compiled, as the image ships it) on a control plane of its own, and reads the replay's
report: the latency every admission log line carries (body read to decision, the lock included), over
the slice's real (not dry-run) reviews. The replay itself is documented in replay/README.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devplatform.cluster import processes

REPO_ROOT = Path(__file__).resolve().parent.parent
# The replay's own budget for one policy is 190 s of wall time (570 s for three); with the control
# plane's start and the nodes' creation it takes 3-5 minutes on 2 cores.
REPLAY_TIMEOUT_SECONDS = 900.0
QUICK_COUNT = 300  # pods of the slice replayed by --quick (the default slice is 2,000)


def history_path(run_dir: Path) -> Path:
    """Where `run` leaves the replay's saved history (bench.move_home's what-if reads it)."""
    return run_dir / "replay" / "history-webhook.jsonl.gz"


def replay_argv(out: Path, *, webhook_tree: Path, quick: bool) -> list[str]:
    # The history is saved for the move-home phase's what-if (a few MB, a second or two).
    argv = [sys.executable, "-m", "replay", "--policies", "webhook", "--save-history", "--out", str(out)]
    argv += ["--webhook-tree", str(webhook_tree)]
    if quick:
        argv += ["--count", str(QUICK_COUNT)]
    return argv


def read_admission(report: Mapping[str, Any]) -> dict[str, Any]:
    """The webhook policy's admission latency (ms) and what the run decided, from report.json."""
    policies = report.get("policies")
    webhook = policies.get("webhook") if isinstance(policies, Mapping) else None
    if not isinstance(webhook, Mapping) or not isinstance(webhook.get("admission_latency_ms"), Mapping):
        raise ValueError("the replay's report.json has no webhook policy with admission_latency_ms")
    latency = webhook["admission_latency_ms"]
    config = report.get("config", {})
    return {
        "count": int(latency["count"]),
        "p50_ms": float(latency["p50"]),
        "p90_ms": float(latency["p90"]),
        "p99_ms": float(latency["p99"]),
        "max_ms": float(latency["max"]),
        "mean_ms": round(float(latency["mean"]), 3),
        "slice": {key: config.get(key) for key in ("start_index", "count", "compression", "gangs")},
    }


def run_replay(argv: list[str]) -> None:
    """`python -m replay` with `argv`, its progress on stderr as the bench's own; raises if it fails."""
    completed = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        stdout=sys.stderr,
        stderr=None,
        timeout=REPLAY_TIMEOUT_SECONDS,
        env=processes.build_child_environment(dict(os.environ)),
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"python -m replay exited with {completed.returncode}; its output is above")


def run(run_dir: Path, *, webhook_tree: Path, quick: bool) -> dict[str, Any]:
    out = run_dir / "replay"
    run_replay(replay_argv(out, webhook_tree=webhook_tree, quick=quick))
    return read_admission(json.loads((out / "report.json").read_text()))
