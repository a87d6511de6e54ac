"""`make bench`: every issue 6 measurement side by side in one run, then the report.

    python -m bench [--quick] [--skip-http] [--skip-real-cluster] [--skip-in-process] [--skip-staging]

Phases (each prints progress; every server is started and stopped by PID, loopback only):
  1. decision cost in-process vs cluster size        (fresh subprocess)
  2. cache scale: initial sync of 5k nodes / 150k pods (fresh subprocesses: today's watcher path, the old one)
     and requests a second through a serving-certificate rotation (bench.tls_rotation)
  3. HTTPS load: limit server, then the webhook on synthetic clusters and the Alibaba cluster
  4. real control plane: 1k nodes / 10k pods -> webhook sync time, naive baseline, pod CREATE
  5. staging: stage-in and copy-back vs OpenSSH's sftp on a loopback sshd (bench.staging)
  6. the webhook's admission time under the what-if replay's default slice (bench.replay_admission)
  7. a running burst job moving home on the real node, in rounds, and the what-if's GPU-hours moved home at
     the measured move on the replay's slice (bench.move_home)
Writes bench/results.json, bench/results.md and bench/results.png; logs go to bench/out/<run>/.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import http_load, move_home, realcluster, replay_admission, report, staging
from devplatform import compiled_core
from devplatform.cluster import processes

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
SUBPROCESS_TIMEOUT_SECONDS = 300.0


def banner(text: str, started: float) -> None:
    print(f"\n[{time.monotonic() - started:6.1f}s] == {text}", file=sys.stderr, flush=True)


def run_json_subprocess(*args: str, webhook_tree: Path = REPO_ROOT) -> Any:
    """`python -m <args>` in a fresh process; its last stdout line is JSON. Progress passes through.
    The webhook's packages come from `webhook_tree` (`python -m` puts its working directory first),
    the rest of the checkout from PYTHONPATH."""
    completed = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=webhook_tree,
        stdout=subprocess.PIPE,
        stderr=None,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_SECONDS,
        env=processes.build_child_environment({**os.environ, "PYTHONPATH": str(REPO_ROOT)}),
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"python -m {' '.join(args)} exited with {completed.returncode}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def build_meta() -> dict[str, Any]:
    return {
        "timestamp": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "aiohttp": metadata.version("aiohttp"),
        "kubernetes_client": metadata.version("kubernetes"),
        "platform": platform.platform(),
        "loadavg_before": _loadavg(),
        "units": "field suffixes: _ms milliseconds, _us microseconds, _s seconds, _mb MiB (VmRSS/VmHWM), _rps req/s",
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="nimbix-burst webhook benchmarks (issue 6)")
    parser.add_argument("--quick", action="store_true", help="smaller clusters and shorter phases (a smoke run)")
    parser.add_argument("--skip-in-process", action="store_true", help="skip decision cost and cache scale")
    parser.add_argument("--skip-http", action="store_true", help="skip the HTTPS load phase")
    parser.add_argument("--skip-real-cluster", action="store_true", help="skip the control-plane phase")
    parser.add_argument("--skip-staging", action="store_true", help="skip the staging phase (vs OpenSSH sftp)")
    parser.add_argument(
        "--skip-replay", action="store_true", help="skip the admission time under the what-if replay's slice"
    )
    parser.add_argument(
        "--skip-move-home",
        action="store_true",
        help="skip moving a running burst job home on the real node (needs root, the real node free)",
    )
    parser.add_argument(
        "--http-clusters",
        default="",
        help="comma-separated clusters of the HTTPS load phase (default: synthetic:100,synthetic:1000,"
        "synthetic:5000,alibaba; --quick: synthetic:100,alibaba); synthetic:5000 is the one the CPU per review"
        " target reads",
    )
    parser.add_argument("--out", type=Path, default=BENCH_DIR, help="where results.{json,md,png} go")
    parser.add_argument(
        "--interpreted",
        action="store_true",
        help="run the webhook's .py files, not its decision core compiled with mypyc as the image ships it",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    run_dir = BENCH_DIR / "out" / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"meta": build_meta(), "phases_s": {}}
    print(f"bench: run directory {run_dir} ({'quick' if args.quick else 'full'} run)", file=sys.stderr)
    # What ships: the image runs the decision core compiled (images/webhook/compile-core.sh).
    tree = REPO_ROOT if args.interpreted else compiled_core.build(REPO_ROOT)
    results["meta"]["webhook_core"] = "interpreted" if args.interpreted else "compiled (mypyc)"

    @contextlib.contextmanager
    def phase(name: str, title: str) -> Iterator[None]:
        banner(title, started)
        phase_started = time.monotonic()
        yield
        results["phases_s"][name] = round(time.monotonic() - phase_started, 1)

    if not args.skip_in_process:
        with phase("decisions", "decision cost in-process vs cluster size"):
            sizes = "100,1000" if args.quick else "100,1000,5000,10000"
            results["decisions"] = run_json_subprocess(
                "bench.inprocess", "decisions", "--sizes", sizes, webhook_tree=tree
            )
        with phase("cache_scale", "cache scale: initial sync through CacheSync.apply_list"):
            cluster = "synthetic:1000" if args.quick else "synthetic:5000"
            results["cache_scale"] = {
                mode: run_json_subprocess(
                    "bench.inprocess", "cache-scale", "--cluster", cluster, *flags, webhook_tree=tree
                )
                for mode, flags in (("watcher", ()), ("held", ("--held",)))
            }

        with phase("tls_rotation", "requests a second through a serving-certificate rotation"):
            results["tls_rotation"] = run_json_subprocess(
                "bench.tls_rotation", "--seconds", "2" if args.quick else "6", webhook_tree=tree
            )

    if not args.skip_http:
        with phase("http", "HTTPS load: limit server and the real webhook process"):
            clusters = [c.strip() for c in args.http_clusters.split(",") if c.strip()]
            run_http(args.quick, run_dir, results, tree, clusters=clusters)

    if not args.skip_real_cluster:
        with phase("real_cluster", "real control plane: sync time, naive baseline, pod CREATE latency"):
            results["real_cluster"] = realcluster.run(
                run_dir / "real",
                nodes=200 if args.quick else 1000,
                pods_per_node=10,
                naive_model_runs=1,
                naive_raw_runs=2 if args.quick else 3,
                create_rounds=2 if args.quick else 8,
                creates_per_round=10 if args.quick else 25,
                webhook_tree=tree,
            )

    if not args.skip_replay:
        with phase("replay", "the webhook's admission time under the what-if replay's default slice"):
            results["replay_admission"] = replay_admission.run(run_dir, webhook_tree=tree, quick=args.quick)

    if not args.skip_move_home:
        with phase("move_home", "a running burst job moving home on the real node, and the GPU-hours moved home"):
            saved = replay_admission.history_path(run_dir)  # the replay phase's, if it ran
            results["move_home"] = move_home.measure(
                run_dir / "move_home",
                rounds=1 if args.quick else move_home.DEFAULT_ROUNDS,
                history=saved if saved.exists() else None,
            )

    staging_table = ""
    if not args.skip_staging:
        with phase("staging", "staging: stage-in and copy-back vs OpenSSH sftp on a loopback sshd"):
            when, measures = staging.run(list(staging.LOOPBACK_CASES), quick=args.quick)
            results["staging"] = {"date": when, "measures": [dataclasses.asdict(m) for m in measures]}
            staging_table = staging.render(when, measures)
            (run_dir / "staging.md").write_text(staging_table)

    results["meta"]["loadavg_after"] = _loadavg()
    results["meta"]["duration_s"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    markdown = report.write_all(results, args.out)
    banner(f"done; wrote {args.out / 'results.json'}, results.md, results.png", started)
    print(markdown)
    print(staging_table)
    return 0


def run_http(
    quick: bool, run_dir: Path, results: dict[str, Any], webhook_tree: Path, *, clusters: Sequence[str] = ()
) -> None:
    plan = http_load.LoadPlan(
        rates=(250.0, 500.0, 1000.0),
        seconds=1.0 if quick else 2.0,
        connections=8,
        saturation_seconds=1.5 if quick else 3.0,
    )
    targets = list(clusters) or (
        ["synthetic:100", "alibaba"] if quick else ["synthetic:100", "synthetic:1000", "synthetic:5000", "alibaba"]
    )
    results["http"] = http_load.run(
        run_dir / "http",
        clusters_to_run=targets,
        plan=plan,
        # The extra runs are made only on a cluster of the phase.
        log_level_variant=_among("" if quick else "synthetic:1000", targets),
        profile_cluster=_among("synthetic:100" if quick else "synthetic:5000", targets),
        watch_cost_cluster=_among("synthetic:100" if quick else "synthetic:1000", targets),
        go_client_cluster=_among("synthetic:100" if quick else "synthetic:5000", targets),
        webhook_tree=webhook_tree,
    )


def _among(cluster: str, clusters: Sequence[str]) -> str:
    return cluster if cluster in clusters else ""


if __name__ == "__main__":
    sys.exit(main())
