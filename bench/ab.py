"""Side-by-side A/B of two webhook trees: both served at once from one fake API server, saturation
rounds alternating between them, server CPU per review from /proc.

    python -m bench.ab --a ../old-checkout --b . [--rounds 6] [--cluster synthetic:5000] [--b-arg=--log-level=WARNING]

Whole-bench figures move 10-20 % between runs on a shared VM, more than most single changes; two
webhooks measured in alternating rounds of the same minutes see the same machine. Each round runs
the local then the remote request case on both, the order flipping every round; the verdict is the
median over rounds of B/A within a round. A tree is any checkout of this repository (a git worktree
of an older commit, say); its webhook runs as `python -m webhook` from that directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import fake_apiserver, http_load
from devplatform import compiled_core
from devplatform.cluster import addons, processes

REPO_ROOT = Path(__file__).resolve().parent.parent
CASES = (http_load.LOCAL, http_load.REMOTE_CAPACITY)
SETTLE_SECONDS = 3.0  # after /readyz: let the initial list's garbage go before the first round


@dataclass(frozen=True, slots=True)
class Variant:
    name: str  # "A" or "B"
    webhook: addons.WebhookProcess


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median over rounds of b/a within the round."""
    return statistics.median(y / x for x, y in zip(a, b, strict=True))


def measure(run_dir: Path, variants: Sequence[Variant], rounds: int, seconds: float) -> dict[str, Any]:
    plan = http_load.LoadPlan(rates=(), seconds=0, connections=8, saturation_seconds=seconds)
    cpu: dict[tuple[str, str], list[float]] = {(v.name, c.name): [] for v in variants for c in CASES}
    rps: dict[tuple[str, str], list[float]] = {key: [] for key in cpu}
    for number in range(rounds):
        for case in CASES:
            body = http_load.write_body(run_dir, case, "ab")
            for variant in variants if number % 2 == 0 else tuple(reversed(variants)):
                hook = variant.webhook
                ca = hook.tls_dir / "ca.crt"
                load = http_load.run_loadgen_measured(hook.url + "/mutate", ca, body, plan, hook.process.pid)
                cpu[(variant.name, case.name)].append(float(load["server_cpu_us_per_request"]))
                rps[(variant.name, case.name)].append(float(load["saturation"]["throughput_rps"]))
    result: dict[str, Any] = {}
    for case in CASES:
        a, b = cpu[("A", case.name)], cpu[("B", case.name)]
        result[case.name] = {
            "a_cpu_us_per_review": a,
            "b_cpu_us_per_review": b,
            "a_rps": rps[("A", case.name)],
            "b_rps": rps[("B", case.name)],
            "b_over_a_paired": round(paired_ratio(a, b), 3),
        }
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    run_dir = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    port = processes.free_port()
    fake_argv = [sys.executable, "-m", "bench.fake_apiserver", "--cluster", args.cluster, "--port", str(port)]
    fake = processes.start_process("fake-apiserver", fake_argv, log_path=run_dir / "fake-apiserver.log", cwd=REPO_ROOT)
    variants: list[Variant] = []
    try:
        http_load.wait_http(f"http://127.0.0.1:{port}/healthz", fake, timeout=http_load.SERVER_READY_TIMEOUT_SECONDS)
        kubeconfig = run_dir / "fake.kubeconfig"
        kubeconfig.write_text(json.dumps(fake_apiserver.build_kubeconfig(port)))
        for name, tree, extra in (("A", args.a, args.a_arg), ("B", args.b, args.b_arg)):
            # --compiled: each tree's decision core compiled by its own compile-core.sh, as its image would.
            code = compiled_core.build(Path(tree)) if args.compiled else Path(tree).resolve()
            hook = addons.start_webhook(run_dir / name, kubeconfig=kubeconfig, args=extra, wait=False, cwd=code)
            variants.append(Variant(name, hook))
        for variant in variants:
            addons.wait_ready(variant.webhook, timeout=http_load.WEBHOOK_READY_TIMEOUT_SECONDS)
        time.sleep(args.settle_seconds)
        return measure(run_dir, variants, args.rounds, args.seconds)
    finally:
        for variant in variants:
            addons.stop_webhook(variant.webhook)
        processes.stop_process(fake)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="tree of webhook A (a checkout of this repository)")
    parser.add_argument("--b", required=True, help="tree of webhook B")
    parser.add_argument("--a-arg", action="append", default=[], help="extra webhook argument for A (repeatable)")
    parser.add_argument("--b-arg", action="append", default=[], help="extra webhook argument for B (repeatable)")
    parser.add_argument("--cluster", default="synthetic:5000", help="fake API server cluster (bench.clusters)")
    parser.add_argument("--compiled", action="store_true", help="run both trees with their core compiled (mypyc)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.5, help="saturation seconds per variant per round")
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=SETTLE_SECONDS,
        help="wait after both are ready, before the first round (the initial list's garbage goes)",
    )
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "out" / "ab"), help="logs and bodies")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds < 1:
        print("--rounds: must be at least 1", file=sys.stderr)
        return 2
    for tree in (args.a, args.b):
        if not (Path(tree) / "webhook" / "__main__.py").is_file():
            print(f"{tree}: not a checkout of nimbix-burst (no webhook/__main__.py)", file=sys.stderr)
            return 2
        if args.compiled and not (Path(tree) / compiled_core.SCRIPT).is_file():
            print(f"{tree}: no {compiled_core.SCRIPT} to compile with (--compiled)", file=sys.stderr)
            return 2
    result = run(args)
    print(json.dumps(result, indent=1))
    for case, figures in result.items():
        a, b = figures["a_cpu_us_per_review"], figures["b_cpu_us_per_review"]
        print(
            f"{case}: A {statistics.median(a):.0f} us/review, B {statistics.median(b):.0f} us/review,"
            f" B/A paired {figures['b_over_a_paired']}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
