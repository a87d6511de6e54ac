"""The machines a remote job may run on, in the order they are tried, and when a job JARVICE keeps
queued moves to the next one. Pure.

The order (docs/runner.md#which-machine): the machines of /jarvice/machines that satisfy the job
(GPUs on each node, cores, RAM, node count, the pod's GPU model), cheapest for the job first (`mc_price`
x nodes), then the best fit (fewest GPUs, cores, RAM), then the name. Never one over what was
counted: with NIMBIX_BURST_COUNTED_GPUS a candidate holds at most that many GPUs, without it at most
what the best-fitting machine holds (a fallback is never a bigger machine than the first choice
would have been). A fallback keeps the CPU architecture of the first candidate when JARVICE_ARCH does
not name one (an image built for one does not run on the other). NIMBIX_BURST_MACHINES (a
namespace's `nimbix-burst.io/machines`) names the machines to use and their order; JARVICE_MACHINE
pins one, and must scale to the job's nodes. NIMBIX_BURST_MAX_PRICE (a namespace with cost caps)
leaves out every machine whose price x nodes is over what the burst was counted at (the ceiling x a
gang's size, or x 1), and every machine without a price.

The move (docs/runner.md#moving-a-queued-job): a job this runner submitted that is still queued
(SUBMITTED or SEQUENTIALLY QUEUED, never started) after NIMBIX_BURST_MAX_REMOTE_QUEUE is moved to
the next candidate; on the last one it keeps waiting.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from entrypoint import budget
from entrypoint.plan import (
    NoMachineFits,
    RemotePlan,
    check_pinned_machine,
    choose_machine,
    known_price,
    restrict_machines,
    within_price,
)
from jarvice import contract
from jarvice.model import STATUS_SEQUENTIALLY_QUEUED, STATUS_SUBMITTED, Machine

# The statuses of a job JARVICE has not started: only such a job moves (it has cost nothing yet).
QUEUED_STATUSES: Final = frozenset({STATUS_SUBMITTED, STATUS_SEQUENTIALLY_QUEUED})


@dataclass(frozen=True, slots=True)
class Candidates:
    machines: tuple[str, ...]  # in the order they are tried; never empty
    reason: str  # why these, in this order (for the log)
    warning: str | None = None  # a pinned machine smaller than the request
    over_budget: bool = False  # every machine that fits holds more GPUs than counted: the budget check refuses it


def _fits(machine: Machine, plan: RemotePlan) -> bool:
    """GPUs on each node, cores, RAM (a machine whose catalogue entry gives none is not held to it), nodes, arch."""
    nodes = plan.nodes
    return (
        machine.fewest_gpus_per_node(nodes) >= plan.num_gpus
        and machine.cores >= plan.num_cpus
        and (plan.memory_gb is None or machine.ram_gb == 0 or machine.ram_gb >= plan.memory_gb)
        and machine.scale_min <= nodes <= machine.scale_max
        and (plan.arch is None or machine.arch.lower() == plan.arch.lower())
    )


def _size_key(machine: Machine) -> tuple[int, int, int, float, str]:
    # The best fit: fewest GPUs (never burn GPUs the job did not ask for), cores, RAM, then price and name.
    return (machine.gpus, machine.cores, machine.ram_gb, known_price(machine.price), machine.name)


def _order_key(machine: Machine, nodes: int) -> tuple[float, int, int, int, str]:
    # Cheapest for the job first; among equal prices the best fit (never burn GPUs the job did not ask for).
    return (known_price(machine.price_for(nodes)), machine.gpus, machine.cores, machine.ram_gb, machine.name)


def _within(machine: Machine, *, nodes: int, cap: int | None) -> bool:
    if cap is None:
        return True
    return budget.check_gpu_budget(machine, nodes=nodes, counted_gpus=cap) is None


def order_candidates(plan: RemotePlan, machines: Mapping[str, Machine]) -> Candidates | NoMachineFits:
    """The machines to try for `plan`, in order (see the module docstring), or why none fits. Never
    one dearer than the namespace's cost caps counted the burst at (NIMBIX_BURST_MAX_PRICE), nor one
    without a price under that ceiling; when the ceiling is what leaves none, the reason says so."""
    affordable = within_price(machines, plan.max_price, nodes=plan.nodes, counted_nodes=plan.counted_nodes)
    if plan.max_price is not None and not affordable:
        counted = plan.max_price * plan.counted_nodes
        return NoMachineFits(
            reason=f"no machine with a price costs at most {counted:g} an hour for {plan.nodes} node(s) (mc_price x"
            f" nodes; {contract.ENV_MAX_PRICE}={plan.max_price:g} per node-hour x the {plan.counted_nodes} node(s)"
            " the namespace's cost caps counted this burst for)"
        )
    within = _order_within(plan, affordable)
    if plan.max_price is None or (isinstance(within, Candidates) and not within.over_budget):
        return within
    # Nothing usable under the ceiling. Without it: no machine either (that reason holds whatever the
    # ceiling, e.g. a pin outside its node range), or every one over the GPUs counted (so is `within`),
    # or one that fits: the ceiling is the reason.
    unbounded = _order_within(dataclasses.replace(plan, max_price=None), machines)
    if isinstance(unbounded, NoMachineFits):
        return unbounded
    if unbounded.over_budget:
        return within
    fitting = [machines[name] for name in unbounded.machines]
    return NoMachineFits(reason=_over_the_ceiling(plan, plan.max_price, fitting))


def _over_the_ceiling(plan: RemotePlan, max_price: float, fitting: list[Machine]) -> str:
    counted = max_price * plan.counted_nodes

    def priced(machine: Machine) -> str:
        cost = machine.price_for(plan.nodes)
        return f"{machine.name} (no price)" if cost is None else f"{machine.name} ({cost:g} an hour)"

    return (
        f"every machine that fits for {plan.nodes} node(s) costs more than the {counted:g} an hour the namespace's"
        f" cost caps counted this burst at ({contract.ENV_MAX_PRICE}={max_price:g} per node-hour x"
        f" {plan.counted_nodes} node(s)), or has no price (never taken under a ceiling):"
        f" {', '.join(priced(m) for m in fitting)}"
    )


def _order_within(plan: RemotePlan, catalogue_in: Mapping[str, Machine]) -> Candidates | NoMachineFits:
    catalogue = restrict_machines(catalogue_in, allowed=plan.allowed_machines, pinned=plan.machine)
    if isinstance(catalogue, NoMachineFits):
        return catalogue
    if plan.machine is not None:
        pinned = check_pinned_machine(
            catalogue, name=plan.machine, gpus=plan.num_gpus, cpus=plan.num_cpus, nodes=plan.nodes
        )
        if isinstance(pinned, NoMachineFits):
            return pinned
        return Candidates((pinned.machine,), pinned.reason, pinned.warning)
    fitting = [m for m in catalogue.values() if _fits(m, plan)]
    if not fitting:
        return _none_fits(plan, catalogue)
    first_fit = min(fitting, key=_size_key)
    if plan.arch is None:  # one architecture: an image built for one does not run on the other
        fitting = [m for m in fitting if m.arch.lower() == first_fit.arch.lower()]
    # Never more GPUs than were counted; without a count, never more than the best fit holds.
    cap = plan.counted_gpus if plan.counted_gpus is not None else first_fit.gpus_on(plan.nodes)
    within = [m for m in fitting if _within(m, nodes=plan.nodes, cap=cap)]
    if not within:
        # Every fitting machine is over the budget: the cheapest is returned, and the budget check refuses it.
        cheapest = min(fitting, key=lambda m: _order_key(m, plan.nodes))
        return Candidates(
            (cheapest.name,), f"cheapest of {len(fitting)} machine(s) that fit, all over the budget", over_budget=True
        )
    ordered = sorted(within, key=lambda m: _order_key(m, plan.nodes))
    memory = f", {plan.memory_gb} GiB RAM" if plan.memory_gb else ""
    wanted = f"{plan.num_gpus} GPU(s), {plan.num_cpus} core(s){memory}, {plan.nodes} node(s)"
    if plan.preferred_machines is not None:
        return _preferred(plan.preferred_machines, ordered, wanted=wanted)
    names = tuple(m.name for m in ordered)
    reason = (
        f"cheapest first of {len(names)} machine(s) with {wanted} (mc_price x {plan.nodes} node(s)): {', '.join(names)}"
    )
    if plan.allowed_machines is not None:
        reason += f" among the machines with the pod's GPU model ({', '.join(sorted(catalogue))})"
    return Candidates(names, reason)


def _none_fits(plan: RemotePlan, catalogue: Mapping[str, Machine]) -> NoMachineFits:
    """Why no machine fits: what was asked, and the largest machine there is (choose_machine's words)."""
    choice = choose_machine(catalogue, gpus=plan.num_gpus, cpus=plan.num_cpus, nodes=plan.nodes, arch=plan.arch)
    reason = choice.reason if isinstance(choice, NoMachineFits) else ""
    if not reason:  # only the RAM rules every machine out
        largest = max((m.ram_gb for m in catalogue.values()), default=0)
        reason = (
            f"no machine among {len(catalogue)} has {plan.memory_gb} GiB of RAM ({contract.ENV_MEMORY_GB},"
            f" the container's memory request); the most is {largest} GiB"
        )
    if plan.allowed_machines is None:
        return NoMachineFits(reason)
    return NoMachineFits(f"{reason} among the machines with the pod's GPU model ({', '.join(sorted(catalogue))})")


def _preferred(preferred: tuple[str, ...], ordered: list[Machine], *, wanted: str) -> Candidates | NoMachineFits:
    """The preference list's machines that are candidates, in its order."""
    usable = {m.name for m in ordered}
    names = tuple(name for name in preferred if name in usable)
    listed = ",".join(preferred)
    if not names:
        others = ", ".join(m.name for m in ordered)
        return NoMachineFits(
            f"none of {contract.ENV_MACHINES}={listed} offers {wanted} within the budget (machines that do: {others});"
            f" list one of those in the namespace's {contract.ANNOTATION_MACHINES}"
        )
    return Candidates(
        names, f"in the order {contract.ENV_MACHINES}={listed} gives, those with {wanted}: {', '.join(names)}"
    )


# --- the move ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stay:
    pass


@dataclass(frozen=True, slots=True)
class Move:
    to: str  # the next candidate
    reason: str


def decide_move(
    *,
    state: str,
    queued_seconds: float,
    max_queue_seconds: int,
    candidates: tuple[str, ...],
    current: int,
    gang: bool = False,
) -> Stay | Move:
    """Whether a job on `candidates[current]` that has been queued (by this runner's clock) for
    `queued_seconds` moves on. `max_queue_seconds` 0: never. A gang's job never moves: its other ranks
    follow the job by its label and would take its end for the gang's."""
    if gang or max_queue_seconds <= 0 or state.strip().upper() not in QUEUED_STATUSES:
        return Stay()
    if queued_seconds < max_queue_seconds or current + 1 >= len(candidates):
        return Stay()  # not yet, or the last candidate: it keeps waiting there
    here, there = candidates[current], candidates[current + 1]
    return Move(
        there,
        f"queued ({state}) on {here} for {queued_seconds:.0f} s, longer than {contract.ENV_MAX_REMOTE_QUEUE}"
        f"={max_queue_seconds} s: moving to {there}, candidate {current + 2} of {len(candidates)}",
    )
