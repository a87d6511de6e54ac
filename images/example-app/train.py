"""A stand-in training job: prints progress, honours SIGTERM, exits with a chosen code.

python train.py --epochs 3 [--seconds-per-epoch 0.1] [--exit-code 0]
"""

import argparse
import signal
import sys
import time
from types import FrameType


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def on_sigterm(signum: int, _frame: FrameType | None) -> None:
    say("SIGTERM received: checkpoint saved, stopping")
    sys.exit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seconds-per-epoch", type=float, default=0.1)
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    loss = 1.0
    for epoch in range(1, args.epochs + 1):
        time.sleep(args.seconds_per_epoch)
        loss *= 0.5
        say(f"epoch {epoch}/{args.epochs} loss={loss:.4f}")
    say("training done")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
