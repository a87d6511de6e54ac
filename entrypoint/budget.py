"""The namespace's GPU budget, as the runner sees it: the machine it chose must not hold more GPUs
than the webhook counted for this container. Pure.

The webhook counts a burst container's GPU request against its namespace's budget and tells the
runner the count (NIMBIX_BURST_COUNTED_GPUS). The machine comes from NUM_GPUS, JARVICE_NODES and
JARVICE_MACHINE, which a user can set to anything: a 1-GPU pod with NUM_GPUS=8 and JARVICE_NODES=2
would hold 16 GPUs. Such a job is refused before anything is submitted.

A gang's job (`entrypoint.gang`) is held to the GPUs counted for the whole gang, over all its nodes:
the master's `mc_gpus` plus `mc_slave_gpus` for each further node.
"""

from dataclasses import dataclass

from jarvice import contract
from jarvice.model import Machine


@dataclass(frozen=True, slots=True)
class OverBudget:
    reason: str  # the numbers, and how to fix it


def check_gpu_budget(machine: Machine, *, nodes: int, counted_gpus: int | None) -> OverBudget | None:
    """None when the job fits what was counted (or nothing was counted: no check); else why not."""
    if counted_gpus is None:
        return None
    held = machine.gpus_on(nodes)
    if held <= counted_gpus:
        return None
    if machine.slave_gpus is None or machine.slave_gpus == machine.gpus or nodes == 1:
        holding = f"{machine.gpus} GPU(s) x {nodes} node(s) = {held} GPU(s)"
    else:
        holding = f"{machine.gpus} GPU(s) + {machine.slave_gpus} x {nodes - 1} further node(s) = {held} GPU(s)"
    return OverBudget(
        reason=(
            f"machine {machine.name} has {holding}, but the"
            f" namespace's budget counted {counted_gpus} for this container ({contract.ENV_COUNTED_GPUS}):"
            f" ask for {held} GPU(s) in the container's resources (nvidia.com/gpu), or lower"
            f" {contract.ENV_NUM_GPUS}, JARVICE_NODES or JARVICE_MACHINE"
        )
    )
