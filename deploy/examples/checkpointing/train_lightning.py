"""PyTorch Lightning keeping the nimbix-burst checkpoint contract (docs/checkpoints.md).

Lightning's SLURM convention, outside SLURM: SIGUSR1 asks for a checkpoint (`trainer.save_checkpoint`)
and a clean stop; `trainer.fit(..., ckpt_path="last")` resumes from the newest `last*.ckpt` in the
checkpoint directory, or starts fresh when there is none. Every save goes to a temporary file in that
directory, then is renamed into place: Lightning stages a save in the system's temporary directory and
moves it over, a copy (not a rename) when the checkpoint volume is another filesystem.

    python train_lightning.py --steps 1000 --checkpoint-every 100   # CHECKPOINT_DIR=/workspace/ckpt
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L  # noqa: N812 (Lightning's own spelling)
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _index: int) -> torch.Tensor:
        inputs, targets = batch
        return nn.functional.mse_loss(self.net(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class CheckpointContract(Callback):
    """Every `every` steps and on SIGUSR1, last.ckpt written whole; after SIGUSR1 the trainer stops."""

    def __init__(self, directory: Path, every: int) -> None:
        self.directory = directory
        self.every = every
        self.asked = False
        signal.signal(signal.SIGUSR1, self._ask)  # before fit: Lightning keeps a handler already set

    def _ask(self, _signum: int, _frame: FrameType | None) -> None:
        self.asked = True

    def on_train_batch_end(self, trainer: L.Trainer, _module: L.LightningModule, outputs: Any, *_: Any) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        print(f"step {trainer.global_step}/{trainer.max_steps} loss={float(loss):.6f}", flush=True)
        if self.asked or trainer.global_step % self.every == 0:
            temporary = self.directory / ".last.ckpt.tmp"  # not last*.ckpt: never taken for a checkpoint
            trainer.save_checkpoint(temporary)
            os.replace(temporary, self.directory / "last.ckpt")  # complete, or not there at all
        if self.asked:
            print(f"SIGUSR1: checkpoint written at step {trainer.global_step}; exiting 0 to be resumed", flush=True)
            trainer.should_stop = True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", "/workspace/ckpt"))
    args = parser.parse_args()
    directory = Path(args.checkpoint_dir)
    L.seed_everything(0)
    inputs = torch.randn(4096, 32)
    data = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=64, shuffle=True)
    directory.mkdir(parents=True, exist_ok=True)
    # Saves nothing itself (save_top_k=0): it tells ckpt_path="last" where last.ckpt is.
    where = ModelCheckpoint(dirpath=directory, save_top_k=0)
    trainer = L.Trainer(
        max_steps=args.steps,
        callbacks=[where, CheckpointContract(directory, args.checkpoint_every)],
        enable_progress_bar=False,
        logger=False,
    )
    trainer.fit(Regressor(), data, ckpt_path="last")
    print("training done" if trainer.global_step >= args.steps else "stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
