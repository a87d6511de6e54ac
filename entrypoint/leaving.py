"""A local pod leaving with its checkpoint (pure): preempted, drained or deleted, it takes its work along.

A pod that keeps the checkpoint contract (it names `nimbix-burst.io/checkpoint-dir`, docs/checkpoints.md)
and runs here is stopped like any pod: the kubelet sends SIGTERM, and SIGKILL when its grace period is
over. Its runner turns the first SIGTERM into the contract's request, SIGUSR1: the program writes a
checkpoint into the directory and exits 0. The runner then exits as a stopped pod does (143): an exit 0
would count as the Job's success with the work not done. A preemption or an eviction (a drain) marks the
pod `DisruptionTarget`, which the Job's podFailurePolicy ignores (webhook/job_policy.py): the Job creates
the replacement, counting no failure, and it resumes from that checkpoint wherever the webhook decides
it (on Nimbix when the GPUs went to the preemptor, through the staged checkpoint directory).

Not the move's 81, which the policy ignores whatever stopped the pod: the kubelet also sends SIGTERM for
a failed liveness probe, and a pod killed that way would be replaced for free, forever. Whether a stop
is free is the API server's to say (the condition), never the pod's.

A program that has not exited when little of the grace period is left gets SIGTERM after all ("stop
now"), so it may still stop before the kubelet's SIGKILL; a second SIGTERM is passed on at once.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from entrypoint.homeward import CHECKPOINT_SIGNAL, names_checkpoints
from jarvice import contract
from jarvice.exitcodes import EXIT_OK, EXIT_TERMINATED

STOP_SIGNAL: Final = int(signal.SIGTERM)
# What the API server gives a pod that sets no terminationGracePeriodSeconds.
DEFAULT_GRACE_SECONDS: Final = 30
# What the kubelet gives a container between SIGTERM and SIGKILL however short the grace period (0 too).
KUBELET_MINIMUM_GRACE_SECONDS: Final = 2
# terminationGracePeriodSeconds is an int64: at most 19 digits.
MAX_GRACE_DIGITS: Final = 19
# The part of the grace period kept for the program to stop on SIGTERM, when the checkpoint has not come.
STOP_MARGIN_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class LeavePlan:
    """How the runner of a checkpointing local pod stops: `grace_seconds`, the pod's grace period."""

    grace_seconds: int

    @property
    def stop_after(self) -> float:
        """Seconds after the first SIGTERM when a program that has not exited is told to stop now:
        the grace period less a margin, and at least half of it for the checkpoint."""
        return max(self.grace_seconds / 2, self.grace_seconds - STOP_MARGIN_SECONDS)


@dataclass(frozen=True, slots=True)
class Forward:
    """What the runner sends its program for a signal it got, and whether a checkpoint is now asked."""

    signum: int
    asked: bool


def plan_leave(annotations: dict[str, str], env: Mapping[str, str]) -> tuple[LeavePlan | None, str]:
    """The leave plan of a pod whose annotations (the file the webhook mounts) name a checkpoint
    directory, with its grace period from the env the webhook sets; None for any other pod. The text:
    a warning when the grace period cannot be read (the default is used)."""
    if not names_checkpoints(annotations):
        return None, ""
    raw = env.get(contract.ENV_GRACE_SECONDS, "").strip()
    if not raw:
        return LeavePlan(DEFAULT_GRACE_SECONDS), ""
    if raw.isascii() and raw.isdigit() and len(raw) <= MAX_GRACE_DIGITS:
        return LeavePlan(max(int(raw), KUBELET_MINIMUM_GRACE_SECONDS)), ""
    warning = (
        f"{contract.ENV_GRACE_SECONDS}={raw[:40]!r} is not a whole number of seconds; the checkpoint is asked"
        f" for as if the grace period were {DEFAULT_GRACE_SECONDS} s (unset it: the webhook writes it)"
    )
    return LeavePlan(DEFAULT_GRACE_SECONDS), warning


def forward(signum: int, *, plan: LeavePlan | None, asked: bool) -> Forward:
    """The first SIGTERM of a checkpointing pod asks for a checkpoint; every other signal goes on as it came."""
    if plan is not None and signum == STOP_SIGNAL and not asked:
        return Forward(CHECKPOINT_SIGNAL, True)
    return Forward(signum, asked)


def final_exit(code: int, *, asked: bool) -> int:
    """The runner's exit: a stopped pod's when the program, asked for a checkpoint, exited 0; else `code`."""
    return EXIT_TERMINATED if asked and code == EXIT_OK else code
