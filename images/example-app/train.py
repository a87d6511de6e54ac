"""The example app: a stand-in training program that keeps the checkpoint contract (docs/checkpoints.md).

python train.py --steps 120 [--seconds-per-step 1] [--checkpoint-dir DIR] [--checkpoint-every 10]
                [--keep 3] [--exit-code 0]

It runs `--steps` steps of `--seconds-per-step` each and prints `step N/M loss=L` after each. With a
checkpoint directory (`--checkpoint-dir`, else $CHECKPOINT_DIR) it:

- resumes from the newest complete checkpoint there (`resumed from step N`), so a step is never run
  twice unless it came after the last checkpoint;
- writes a checkpoint every `--checkpoint-every` steps, atomically (a temporary file, fsync, rename), so a
  half-written one is never read back, and keeps the newest `--keep`;
- on SIGUSR1 finishes the step it is in, writes a checkpoint and exits 0: the product asks this of a job
  it moves, and restarts it elsewhere from that checkpoint;
- on SIGTERM does the same and exits 143.

Plain Python, no ML framework: the product moves the program, whatever it computes. `--epochs` and
`--seconds-per-epoch` are the older names of `--steps` and `--seconds-per-step`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

CHECKPOINT_NAME = re.compile(r"step-(\d{1,12})\.json")
LOSS_DECAY = 0.97  # the loss after a step: the loss before it times this


@dataclass(frozen=True)
class State:
    """What a checkpoint holds: the steps done and what they computed."""

    step: int
    loss: float


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.json"


def read_checkpoint(path: Path) -> State | None:
    """The state a checkpoint file holds; None when it is not a complete checkpoint of its step."""
    match = CHECKPOINT_NAME.fullmatch(path.name)
    if match is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # half written by something that did not rename, or unreadable
    if not isinstance(data, dict) or data.get("step") != int(match.group(1)):
        return None
    loss = data.get("loss")
    if not isinstance(loss, float):
        return None
    return State(step=data["step"], loss=loss)


def newest_checkpoint(directory: Path) -> State | None:
    """The complete checkpoint with the highest step in `directory` (None: none, or no directory)."""
    try:
        paths = sorted(directory.iterdir())
    except FileNotFoundError:
        return None
    states = [state for state in map(read_checkpoint, paths) if state is not None]
    return max(states, key=lambda state: state.step, default=None)


def write_checkpoint(directory: Path, state: State, keep: int) -> Path:
    """Write `state` atomically (temporary file, fsync, rename, fsync of the directory); keep the newest
    `keep` checkpoints."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / checkpoint_name(state.step)
    temporary = directory / f".{final.name}.{os.getpid()}.tmp"
    with temporary.open("w", encoding="utf-8") as handle:
        json.dump({"step": state.step, "loss": state.loss}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, final)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    complete = sorted(p for p in directory.iterdir() if read_checkpoint(p) is not None)
    for old in complete[:-keep]:
        old.unlink(missing_ok=True)
    return final


class Requests:
    """The signals received, acted on at the next step boundary (a step is never cut in half)."""

    def __init__(self) -> None:
        self.signal = 0

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signal = self.signal or signum


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A checkpointing stand-in trainer (docs/checkpoints.md).")
    parser.add_argument("--steps", "--epochs", type=int, default=3, help="steps to train in all")
    parser.add_argument("--seconds-per-step", "--seconds-per-epoch", type=float, default=1.0)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", ""))
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--keep", type=int, default=3, help="checkpoints kept (the newest)")
    parser.add_argument("--exit-code", type=int, default=0, help="exit code after the last step")
    args = parser.parse_args(argv)
    for name in ("steps", "checkpoint_every", "keep"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.seconds_per_step < 0:
        parser.error("--seconds-per-step must be 0 or more")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    directory = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    requests = Requests()
    signal.signal(signal.SIGUSR1, requests.on_signal)
    signal.signal(signal.SIGTERM, requests.on_signal)
    state = State(step=0, loss=1.0)
    if directory is not None:
        resumed = newest_checkpoint(directory)
        if resumed is not None:
            state = resumed
            say(f"resumed from step {state.step} ({directory / checkpoint_name(state.step)})")
        else:
            say(f"no checkpoint in {directory}: starting at step 1")
    while state.step < args.steps:
        if requests.signal:
            break
        time.sleep(args.seconds_per_step)
        state = State(step=state.step + 1, loss=state.loss * LOSS_DECAY)
        say(f"step {state.step}/{args.steps} loss={state.loss:.6f}")
        if directory is not None and (state.step % args.checkpoint_every == 0 or requests.signal):
            write_checkpoint(directory, state, args.keep)
            say(f"checkpoint written at step {state.step}")
    if requests.signal:
        name = signal.Signals(requests.signal).name
        if directory is not None and newest_checkpoint(directory) != state:
            write_checkpoint(directory, state, args.keep)
            say(f"checkpoint written at step {state.step}")
        kept = "with its checkpoint" if directory is not None else "without a checkpoint (no --checkpoint-dir)"
        if requests.signal == signal.SIGUSR1:
            say(f"{name}: stopped after step {state.step} {kept}; exiting 0 to be resumed")
            return 0
        say(f"{name}: stopped after step {state.step} {kept}")
        return 128 + requests.signal
    say("training done")
    return int(args.exit_code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
