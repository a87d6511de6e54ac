"""`python -m replay.come_home_report --history FILE`: the what-if of moving running bursts home, again, on a
history `--save-history` wrote, under other assumptions (replay.come_home), without replaying anything."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from replay import come_home, record_file
from replay.settings import (
    DEFAULT_COME_HOME_INTERVAL,
    DEFAULT_COME_HOME_MOVE_SECONDS,
    DEFAULT_COME_HOME_SHARE,
    DEFAULT_PRICE,
)
from webhook.waiting import DurationError, parse_duration


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m replay.come_home_report", description=__doc__)
    p.add_argument("--history", type=Path, required=True, help="a history-<policy>.jsonl.gz of --save-history")
    p.add_argument("--share", type=float, default=DEFAULT_COME_HOME_SHARE, help="of lone burst pods (0..1)")
    p.add_argument("--interval", default=DEFAULT_COME_HOME_INTERVAL, help="how often they checkpoint (trace time)")
    p.add_argument("--move-seconds", type=float, default=DEFAULT_COME_HOME_MOVE_SECONDS)
    p.add_argument("--min-saving", type=float, default=0.0)
    p.add_argument("--price-per-gpu-hour", type=float, default=DEFAULT_PRICE)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(list(argv))
    try:
        interval = parse_duration(args.interval)
    except DurationError as exc:
        p.error(f"--interval: {exc}")
    if not 0.0 <= args.share <= 1.0 or interval <= 0 or args.move_seconds < 0 or args.min_saving < 0:
        p.error("--share is 0..1; --interval more than 0; --move-seconds and --min-saving 0 or more")
    try:
        saved = record_file.decode(args.history.read_bytes())
    except (OSError, record_file.RecordFileError) as exc:
        p.error(f"--history: {exc}")
    assumptions = come_home.Assumptions(
        args.share, interval, args.move_seconds, args.min_saving, args.price_per_gpu_hour
    )
    result = come_home.what_if_of_run(saved.record, assumptions)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print("\n".join(come_home.describe(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
