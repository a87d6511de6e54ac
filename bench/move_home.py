"""Moving a running burst job home, timed in rounds, and what a move of that length saves on the replay's slice.

    python -m bench.move_home [--rounds 5] [--history FILE] [--share 0.5]

One real control plane, the real node (tainted, as the e2e tier's), cert-manager and the add-on installed as a
user installs it, the JARVICE emulator with its vault on the node's gateway; the controller with homecoming on,
looked at every 2 s. Each round (tests/support/move_home.py, the move tests/e2e/test_move_home.py checks), in a
fresh namespace: a plain pod holds the node's GPUs, docs/checkpoints.md's Job with the example trainer bursts,
the holder is deleted once the remote job has run a while, and the move is timed from that delete: the JARVICE
job ended COMPLETED, the replacement's first local step; and the steps run twice are counted.

Then the replay's what-if (replay.come_home) on the default slice's saved history (`--history`, or a fresh
`python -m replay --policies webhook --save-history`) with the move taking the rounds' median "GPUs free ->
first local step", beside the 60 s it assumed before. Prints the table, the what-if, and one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import replay_admission
from devplatform import certmanager, demo
from devplatform.cluster import addons, controlplane, install, node, nodeconfig
from replay import come_home, record_file
from replay.settings import (
    DEFAULT_COME_HOME_INTERVAL,
    DEFAULT_COME_HOME_MOVE_SECONDS,
    DEFAULT_COME_HOME_SHARE,
    DEFAULT_PRICE,
)
from tests.support import move_home
from tests.support.installed_controller import configure_controller, gateway_pays_with, turn_homecoming_on
from webhook.waiting import parse_duration

REPO_ROOT = Path(__file__).resolve().parent.parent
# As short as honest: a step of half a second, a checkpoint every 10 steps (5 s), 20 s of remote run before
# the GPUs free; the rest runs at home. 60 s of steps in all: with 30 s a slow round's remote job finished
# before the move was asked for. The e2e module runs 120 steps of 1 s, 40 s remote.
TRAINER = move_home.TrainerSettings(steps=120, seconds_per_step=0.5, checkpoint_every=10, run_remotely_seconds=20.0)
DEFAULT_ROUNDS = 5
HOMECOMING_SECONDS = 2  # how often the controller looks for a burst pod to move
REAL_NODE_CLAIM_WAIT_SECONDS = 1800.0  # another session may hold the machine's one real node
NAMESPACE_GONE_SECONDS = 120
HISTORY_FILE = "history-webhook.jsonl.gz"


def log(message: str) -> None:
    print(f"[bench.move_home] {message}", file=sys.stderr, flush=True)


# ----- pure: a round's row, the spread over rounds --------------------------------------------------------


def round_row(moved: move_home.MoveRound) -> dict[str, Any]:
    remote = move_home.parse_steps(moved.remote_log)
    return {
        "remote_status": moved.remote_status,
        "completed_s": round(moved.completed_after_s, 2),
        "first_local_step_s": round(moved.first_local_step_after_s, 2),
        "remote_steps": max(remote, default=0),
        "resumed_from": move_home.parse_resumed(moved.local_log),
        "steps_repeated": move_home.steps_repeated(moved.remote_log, moved.local_log),
    }


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """Median and range (min..max) of the rounds' values; None with none."""
    if not values:
        return None
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
        "n": len(values),
    }


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every figure over the rounds that moved (their job ended COMPLETED); the others are counted as failed."""
    moved = [r for r in rows if r.get("remote_status") == "COMPLETED"]
    repeated = [float(r["steps_repeated"]) for r in moved if r.get("steps_repeated") is not None]
    return {
        "rounds": len(rows),
        "failed": len(rows) - len(moved),
        "completed_s": spread([float(r["completed_s"]) for r in moved]),
        "first_local_step_s": spread([float(r["first_local_step_s"]) for r in moved]),
        "steps_repeated": spread(repeated),
    }


def _cell(figure: Mapping[str, float] | None, unit: str) -> str:
    if figure is None:
        return "n/a"
    return f"**{figure['median']:g}{unit}** ({figure['min']:g}..{figure['max']:g})"


def _round_line(number: int, row: Mapping[str, Any]) -> str:
    if row.get("remote_status") != "COMPLETED":
        return (
            f"| {number} | {row.get('remote_status')}: {str(row.get('error', ''))[:200].replace('|', '/')!r} | | | | |"
        )
    return (
        f"| {number} | {row['completed_s']} s | {row['first_local_step_s']} s | {row['remote_steps']}"
        f" | {row['resumed_from']} | {row['steps_repeated']} |"
    )


def render(result: Mapping[str, Any]) -> str:
    """The benchmark's table and the what-if's, as Markdown."""
    summary, trainer = result["summary"], result["trainer"]
    lines = [
        f"### A running job moving home ({result['date']})",
        "",
        f"{summary['rounds']} rounds ({summary['failed']} failed) on the real node, the add-on installed, the JARVICE"
        f" emulator: the example trainer, {trainer['steps']} steps of {trainer['seconds_per_step']:g} s, a checkpoint"
        f" every {trainer['checkpoint_every']} steps, the GPUs freed {trainer['run_remotely_seconds']:g} s after"
        f" the remote job started; the controller looks every {HOMECOMING_SECONDS} s. Median (min..max):",
        "",
        "| From the GPUs freeing to | Measured |",
        "|---|---|",
        f"| the JARVICE job ended `COMPLETED` | {_cell(summary['completed_s'], ' s')} |",
        f"| the replacement's first local step | {_cell(summary['first_local_step_s'], ' s')} |",
        f"| steps run twice (remote, then again at home) | {_cell(summary['steps_repeated'], '')} |",
        "",
        "| Round | COMPLETED after | first local step after | remote steps | resumed from | steps run twice |",
        "|---|---|---|---|---|---|",
        *(_round_line(i, r) for i, r in enumerate(result["rounds"], 1)),
    ]
    what_ifs = result.get("what_if") or []
    if what_ifs:
        lines += [
            "",
            f"The replay's what-if on the default slice, {what_ifs[0]['checkpointing_share']:.0%} of lone burst pods"
            f" checkpointing every {what_ifs[0]['checkpoint_interval_seconds'] / 60:g} min, at"
            f" {what_ifs[0]['price_per_gpu_hour']:g} USD per GPU-hour:",
            "",
            "| move (GPUs free -> first local step) | moved home | GPU-hours not paid on Nimbix | USD"
            " | redone, at most |",
            "|---|---|---|---|---|",
            *(
                f"| {w['label']}: {w['move_seconds']:g} s | {w['moves']} of {w['checkpointing']} |"
                f" {w['gpu_hours_saved']:.1f} ({w['gpu_hours_saved'] / (w['remote_gpu_hours'] or 1):.1%}) |"
                f" {w['money_saved']:.0f} | {w['gpu_hours_redone_at_most']:.1f} GPU-hours |"
                for w in what_ifs
            ),
        ]
    return "\n".join(lines) + "\n"


# ----- the what-if on a saved history ----------------------------------------------------------------------


def what_if_rows(history: Path, moves: Sequence[tuple[str, float]], *, share: float) -> list[dict[str, Any]]:
    """replay.come_home on `history` for each (label, move seconds), the other assumptions the defaults."""
    saved = record_file.decode(history.read_bytes())
    rows = []
    for label, seconds in moves:
        assumptions = come_home.Assumptions(
            share, parse_duration(DEFAULT_COME_HOME_INTERVAL), seconds, 0.0, DEFAULT_PRICE
        )
        rows.append({"label": label, **come_home.what_if_of_run(saved.record, assumptions).as_dict()})
    return rows


def replay_history(out: Path) -> Path:
    """The default slice replayed once with the webhook policy, its history saved (3-5 minutes here)."""
    replay_admission.run_replay(
        [sys.executable, "-m", "replay", "--policies", "webhook", "--save-history", "--out", str(out)]
    )
    return out / HISTORY_FILE


# ----- the rounds on the real node -------------------------------------------------------------------------


def _fresh_namespace(plane: controlplane.ControlPlane, name: str) -> None:
    plane.kubectl("create", "namespace", name)
    demo.wait_for(
        lambda: plane.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
        what=f"the default ServiceAccount of {name}",
        timeout=30,
    )


def _remove_namespace(plane: controlplane.ControlPlane, name: str) -> None:
    # Waited for: its pods must have let the node's GPUs go before the next round's holder wants them all.
    plane.kubectl("delete", "namespace", name, "--wait=true", f"--timeout={NAMESPACE_GONE_SECONDS}s", check=False)


def run_rounds(run_dir: Path, *, rounds: int, trainer: move_home.TrainerSettings) -> list[dict[str, Any]]:
    """The stack up (every process started here is stopped here, by PID), then `rounds` moves."""
    plane = controlplane.ControlPlane(run_dir / "controlplane", bin_dir=controlplane.ensure_binaries())
    plane.start()
    real: node.RealNode | None = None
    cert_manager: certmanager.CertManager | None = None
    emulator: addons.EmulatorProcess | None = None
    try:
        settings = nodeconfig.NodeSettings(register_taints=(nodeconfig.REAL_NODE_TAINT,))
        real = node.RealNode(
            run_dir / "real-node", control_plane=plane, settings=settings, image_archives=node.build_image_archives()
        )
        log("starting the real node")
        real.start(claim_wait_seconds=REAL_NODE_CLAIM_WAIT_SECONDS)
        log("installing cert-manager and the add-on")
        cert_manager = certmanager.install(plane, bin_dir=certmanager.ensure_binaries())
        install.install_addon(plane, real)
        emulator = demo.start_emulator_for_node(run_dir / "emulator", real, vaults=True)
        gateway_pays_with(plane, emulator)
        configure_controller(plane, emulator, replicas=install.REPLICAS)
        turn_homecoming_on(plane, every_seconds=HOMECOMING_SECONDS, replicas=install.REPLICAS)
        rows: list[dict[str, Any]] = []
        for number in range(1, rounds + 1):
            namespace = f"bench-move-{number}"
            _fresh_namespace(plane, namespace)
            try:
                with move_home.workspace(plane, namespace):
                    moved = move_home.move_home_once(plane, real, emulator, namespace, trainer)
                row = round_row(moved)
            except (AssertionError, TimeoutError) as exc:
                row = {"remote_status": "failed", "error": str(exc)[:2000]}
            finally:
                _remove_namespace(plane, namespace)
            log(f"round {number}/{rounds}: {json.dumps(row)}")
            rows.append(row)
        return rows
    finally:
        if emulator is not None:
            addons.stop_jarvice_emulator(emulator)
        if real is not None:
            real.stop()
        if cert_manager is not None:
            certmanager.stop(cert_manager)
        plane.stop()


def measure(
    run_dir: Path,
    *,
    rounds: int,
    history: Path | None,
    share: float = DEFAULT_COME_HOME_SHARE,
    trainer: move_home.TrainerSettings = TRAINER,
) -> dict[str, Any]:
    """The rounds, then the what-if at their median (and at the old assumption, for comparison)."""
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = run_rounds(run_dir, rounds=rounds, trainer=trainer)
    summary = summarize(rows)
    result: dict[str, Any] = {
        "date": date,
        "trainer": {
            "steps": trainer.steps,
            "seconds_per_step": trainer.seconds_per_step,
            "checkpoint_every": trainer.checkpoint_every,
            "run_remotely_seconds": trainer.run_remotely_seconds,
        },
        "rounds": rows,
        "summary": summary,
        "what_if": [],
    }
    measured = summary["first_local_step_s"]
    if measured is not None:
        if history is not None and not history.exists():
            log(f"no history at {history}: replaying the slice")
        source = history if history is not None and history.exists() else replay_history(run_dir / "replay")
        moves = [
            ("measured median", float(measured["median"])),
            ("slowest round", float(measured["max"])),
            ("assumed before", DEFAULT_COME_HOME_MOVE_SECONDS),
        ]
        result["what_if"] = what_if_rows(source, moves, share=share)
        result["history"] = str(source)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.move_home", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--history", type=Path, help="a saved history-webhook.jsonl.gz (else the replay runs)")
    parser.add_argument("--share", type=float, default=DEFAULT_COME_HOME_SHARE, help="of lone burst pods (0..1)")
    options = parser.parse_args(argv)
    if options.rounds < 1 or not 0.0 <= options.share <= 1.0:
        parser.error("--rounds is 1 or more; --share is 0..1")
    # Kept (git-ignored): the control plane's, the node's and the add-on's logs, for a round that failed.
    run_dir = REPO_ROOT / "bench" / "out" / time.strftime("%Y%m%d-%H%M%S-move-home", time.gmtime())
    run_dir.mkdir(parents=True)
    log(f"run directory {run_dir}")
    result = measure(run_dir, rounds=options.rounds, history=options.history, share=options.share)
    print(render(result))
    print(json.dumps(result))
    return 0 if result["summary"]["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
