"""Plain PyTorch keeping the nimbix-burst checkpoint contract (docs/checkpoints.md).

The three parts: resume from the newest complete checkpoint at start; write checkpoints atomically
(a temporary file, then a rename); on SIGUSR1, finish the step, write one and exit 0.

    python train_pytorch.py --steps 1000 --checkpoint-every 100   # CHECKPOINT_DIR=/workspace/ckpt
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import torch
from torch import nn

asked_to_stop: list[int] = []  # signals received; acted on between steps


def save(directory: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    temporary = directory / f".step-{step:08d}.pt.tmp"
    torch.save(state, temporary)
    os.replace(temporary, directory / f"step-{step:08d}.pt")  # complete, or not there at all
    for old in sorted(directory.glob("step-*.pt"))[:-3]:  # keep the newest three
        old.unlink()


def newest(directory: Path) -> dict[str, object] | None:
    done = sorted(directory.glob("step-*.pt"))  # never the .tmp of a write cut short
    return torch.load(done[-1], weights_only=True) if done else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", "/workspace/ckpt"))
    args = parser.parse_args()
    directory = Path(args.checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGUSR1, lambda signum, _frame: asked_to_stop.append(signum))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    checkpoint = newest(directory)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        step = int(checkpoint["step"])
        print(f"resumed from step {step}", flush=True)

    while step < args.steps:
        generator = torch.Generator().manual_seed(step)  # the data of a step depends on the step alone
        inputs = torch.randn(64, 32, generator=generator)
        loss = nn.functional.mse_loss(model(inputs), inputs.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        print(f"step {step}/{args.steps} loss={loss.item():.6f}", flush=True)
        if step % args.checkpoint_every == 0 or asked_to_stop:
            save(directory, step, model, optimizer)
        if asked_to_stop:
            print(f"SIGUSR1: checkpoint written at step {step}; exiting 0 to be resumed", flush=True)
            return 0
    print("training done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
