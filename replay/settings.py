"""Command-line options of `python -m replay` (pure: argv in, a frozen Settings out)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubeplumbing.spendrecord import parse_cost_cap
from replay.accounting import POLICIES, Policy
from replay.come_home import Assumptions
from replay.objects import DEFAULT_MODEL_LABEL
from webhook.waiting import DurationError, parse_duration

# The Alibaba openb trace ships with the checkout (data/alibaba-gpu-2023, public data with its README),
# so `make replay` runs wherever the repository is cloned.
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "alibaba-gpu-2023"
DEFAULT_NODES = DATA_DIR / "openb_node_list_all_node.csv"
DEFAULT_PODS = DATA_DIR / "openb_pod_list_default.csv"
# The densest 2,000-pod stretch of openb_pod_list_default.csv: pods 6137..8136 arrive within
# 5.4 days (the trace's first 250 pods alone take 117 days), with 21 multi-GPU pods.
DEFAULT_START_INDEX = 6137
DEFAULT_COUNT = 2000
# 5.4 trace days in about two wall minutes per policy: the three policies plus building the
# cluster fit in ten minutes on two cores. One wall second is 4,000 trace seconds (67 minutes).
DEFAULT_COMPRESSION = 4000.0
# The background leaves this many of the 6,212 GPUs to the trace: about the trace's median
# concurrent demand in the default slice (49 GPUs), so its busy hours overflow.
DEFAULT_FREE_GPUS = 48
# An assumption for the cost estimate, not a Nimbix price list: pass your own rate.
DEFAULT_PRICE = 2.50
DEFAULT_MAX_WALL_SECONDS = 570.0
# A local pod not bound this long after its CREATE (wall seconds) counts as stranded. The
# kube-scheduler's retry backoff tops out at 10 s, so a pod that waits longer is not just unlucky.
DEFAULT_STRANDED_TIMEOUT = 10.0
# A burst is wrong only if the pod fit this long (wall seconds) before the decision as well as
# when it was made: the webhook's watch may legitimately be a few events behind the replay's.
DEFAULT_RACE_WINDOW = 0.25
# The what-if of moving running bursts home (replay.come_home): assumptions, stated in the report.
DEFAULT_COME_HOME_SHARE = 0.5  # of lone burst pods that keep the checkpoint contract
DEFAULT_COME_HOME_INTERVAL = "15m"  # how often they checkpoint (trace time)
DEFAULT_COME_HOME_MOVE_SECONDS = 60.0  # GPUs free -> remote job stopped (checkpoint asked, written, copied back)


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Settings:
    nodes: Path
    pods: Path
    start_index: int
    count: int
    compression: float
    policies: tuple[Policy, ...]
    price_per_gpu_hour: float
    out: Path
    max_wall_seconds: float
    free_gpus: int | None  # None: no background
    background_gpus_only: bool
    seed: int
    model_label: str
    stranded_timeout: float
    race_window: float
    save_history: bool = False  # write <out>/history-<policy>.jsonl.gz after each policy
    # The webhook policy once per setting (trace seconds; 0: today's, at once); (): once, no setting.
    burst_after: tuple[float, ...] = ()
    # The webhook policy once per cap (and burst-after setting): its namespace's max-cost-per-hour; None: no cap.
    cost_caps: tuple[float | None, ...] = ()
    gangs: bool = True  # a multi-pod trace job replayed as one gang (replay.gangs); False: pod by pod
    # The checkout whose `webhook` package runs (e.g. devplatform.compiled_core's directory, what the
    # image ships); None: this one's .py files.
    webhook_tree: Path | None = None
    come_home: Assumptions | None = None  # the what-if's assumptions (None: the defaults above)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m replay",
        description="What-if replay of a GPU cluster trace through kube-apiserver, kube-scheduler and the webhook.",
    )
    p.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="nodes CSV (default: the openb trace)")
    p.add_argument("--pods", type=Path, default=DEFAULT_PODS, help="pods CSV (default: openb_pod_list_default.csv)")
    p.add_argument("--start-index", type=int, default=DEFAULT_START_INDEX, help="first pod (0-based, creation order)")
    p.add_argument("--count", type=int, default=DEFAULT_COUNT, help="consecutive pods to replay")
    p.add_argument("--compression", type=float, default=DEFAULT_COMPRESSION, help="trace seconds per wall second")
    p.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated, from {', '.join(POLICIES)}")
    p.add_argument("--price-per-gpu-hour", type=float, default=DEFAULT_PRICE, help="USD; an assumption")
    p.add_argument("--out", type=Path, default=Path("replay/out"), help="report directory")
    p.add_argument(
        "--max-wall-seconds",
        type=float,
        default=None,
        help=f"whole-run budget (default {DEFAULT_MAX_WALL_SECONDS:g} for three runs, in proportion for more)",
    )
    p.add_argument("--free-gpus", type=int, default=DEFAULT_FREE_GPUS, help="GPUs the background leaves free")
    p.add_argument("--no-background", action="store_true", help="no background load (a complete history)")
    p.add_argument("--background-gpus-only", action="store_true", help="background holds GPUs only, no CPU or memory")
    p.add_argument("--seed", type=int, default=7, help="seed for where the background leaves GPUs free")
    p.add_argument("--gpu-model-label", default=DEFAULT_MODEL_LABEL, help="node label holding the GPU model")
    p.add_argument("--stranded-timeout", type=float, default=DEFAULT_STRANDED_TIMEOUT, help="wall seconds")
    p.add_argument("--race-window", type=float, default=DEFAULT_RACE_WINDOW, help="wall seconds (see replay/README.md)")
    p.add_argument(
        "--burst-after",
        default="",
        help="comma-separated trace durations such as 0,5m,30m: the webhook policy runs once per value, its"
        " GPU pods owned by Jobs and waiting that long for a local node before they burst (docs/replay.md)",
    )
    p.add_argument(
        "--max-cost-per-hour",
        default="",
        help="comma-separated caps such as none,10,40 (the account's price unit per hour; none: no cap): the webhook"
        " policy runs once per cap (and burst-after setting) with its namespace annotated"
        " nimbix-burst.io/max-cost-per-hour, priced by the JARVICE emulator's machines (docs/replay.md)",
    )
    p.add_argument(
        "--no-gangs",
        action="store_true",
        help="replay every pod alone (default: a multi-pod trace job is a gang, a Kueue pod group)",
    )
    p.add_argument(
        "--webhook-tree",
        type=Path,
        default=None,
        help="run the webhook from this directory (e.g. the one `python -m devplatform.compiled_core` prints: the"
        " decision core compiled as the image ships it); default: this checkout's .py files",
    )
    p.add_argument(
        "--come-home-share",
        type=float,
        default=DEFAULT_COME_HOME_SHARE,
        help="what-if: the share (0..1) of lone burst pods that checkpoint and may move home while running",
    )
    p.add_argument(
        "--come-home-interval",
        default=DEFAULT_COME_HOME_INTERVAL,
        help="what-if: how often those pods checkpoint (trace time, e.g. 15m): the work a move may do again",
    )
    p.add_argument(
        "--come-home-move-seconds",
        type=float,
        default=DEFAULT_COME_HOME_MOVE_SECONDS,
        help="what-if: seconds from local GPUs free to the remote job stopped (checkpoint written, copied back)",
    )
    p.add_argument(
        "--come-home-min-saving",
        type=float,
        default=0.0,
        help="what-if: a move is made only if it saves more than this (as nimbix-burst.io/come-home-min-saving)",
    )
    p.add_argument(
        "--save-history",
        action="store_true",
        help="write each policy's recorded run to OUT/history-<policy>.jsonl.gz (for python -m replay.explain)",
    )
    return p


def parse_settings(argv: Sequence[str]) -> Settings:
    args = build_parser().parse_args(list(argv))
    problems = []
    policies = tuple(p.strip() for p in str(args.policies).split(",") if p.strip())
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        problems.append(
            f"--policies: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(POLICIES)}"
        )
    if args.compression <= 0:
        problems.append("--compression must be positive")
    if args.count < 1:
        problems.append("--count must be at least 1")
    if args.start_index < 0:
        problems.append("--start-index must be at least 0")
    if args.free_gpus < 0:
        problems.append("--free-gpus must be at least 0 (use --no-background for none)")
    if args.max_wall_seconds is not None and args.max_wall_seconds <= 0:
        problems.append("--max-wall-seconds must be positive")
    burst_after: list[float] = []
    for text in filter(None, (part.strip() for part in str(args.burst_after).split(","))):
        try:
            burst_after.append(parse_duration(text))
        except DurationError as exc:
            problems.append(f"--burst-after: {exc}")
    if burst_after and "webhook" not in policies:
        problems.append("--burst-after needs the webhook policy (--policies ...,webhook)")
    if len(set(burst_after)) != len(burst_after):
        problems.append("--burst-after: each value once")
    caps = _parse_caps(str(args.max_cost_per_hour), problems)
    if caps and "webhook" not in policies:
        problems.append("--max-cost-per-hour needs the webhook policy (--policies ...,webhook)")
    if args.webhook_tree is not None and not (args.webhook_tree / "webhook" / "__main__.py").is_file():
        problems.append(f"--webhook-tree: {args.webhook_tree} holds no webhook package (webhook/__main__.py)")
    come_home = _come_home(args, problems)
    if problems:
        raise SettingsError("; ".join(problems))
    webhook_runs = max(len(burst_after), 1) * max(len(caps), 1)
    runs = len(policies) + (webhook_runs - 1 if "webhook" in policies else 0)
    max_wall = args.max_wall_seconds or DEFAULT_MAX_WALL_SECONDS * max(runs, 3) / 3
    return Settings(
        nodes=args.nodes,
        pods=args.pods,
        start_index=args.start_index,
        count=args.count,
        compression=args.compression,
        policies=tuple(p for p in POLICIES if p in policies),  # always in the same order
        price_per_gpu_hour=args.price_per_gpu_hour,
        out=args.out,
        max_wall_seconds=max_wall,
        free_gpus=None if args.no_background else args.free_gpus,
        background_gpus_only=args.background_gpus_only,
        seed=args.seed,
        model_label=args.gpu_model_label,
        stranded_timeout=args.stranded_timeout,
        race_window=args.race_window,
        save_history=args.save_history,
        burst_after=tuple(burst_after),
        cost_caps=tuple(caps),
        gangs=not args.no_gangs,
        webhook_tree=args.webhook_tree,
        come_home=come_home,
    )


def _come_home(args: argparse.Namespace, problems: list[str]) -> Assumptions:
    """The what-if's assumptions; a value out of range is a problem."""
    if not 0.0 <= args.come_home_share <= 1.0:
        problems.append("--come-home-share must be between 0 and 1 (the share of burst pods that checkpoint)")
    interval = 0.0
    try:
        interval = parse_duration(str(args.come_home_interval))
    except DurationError as exc:
        problems.append(f"--come-home-interval: {exc}")
    if interval <= 0 and not any(p.startswith("--come-home-interval") for p in problems):
        problems.append("--come-home-interval must be more than 0 (how often the pods checkpoint, e.g. 15m)")
    if args.come_home_move_seconds < 0:
        problems.append("--come-home-move-seconds must be 0 or more")
    if args.come_home_min_saving < 0:
        problems.append("--come-home-min-saving must be 0 or more")
    return Assumptions(
        share=args.come_home_share,
        interval_seconds=interval,
        move_seconds=args.come_home_move_seconds,
        min_saving=args.come_home_min_saving,
        price_per_gpu_hour=args.price_per_gpu_hour,
    )


def _parse_caps(text: str, problems: list[str]) -> list[float | None]:
    """`none,10,40` -> [None, 10.0, 40.0]; a value the webhook would not read as a cap is a problem."""
    caps: list[float | None] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part.lower() == "none":
            caps.append(None)
            continue
        cap = parse_cost_cap(part)
        if cap.invalid is not None:
            problems.append(f"--max-cost-per-hour: {part!r} is not a number >= 0 (or none)")
            continue
        caps.append(cap.limit)
    if len(set(caps)) != len(caps):
        problems.append("--max-cost-per-hour: each value once")
    return caps
