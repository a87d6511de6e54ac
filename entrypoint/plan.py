"""What to run and where: settings in, a LocalPlan or RemotePlan out. Pure.

Also the pure pieces of the remote path that need no network: machine selection over a
/jarvice/machines catalogue, the submit body, and GPU visibility for the local warning.
"""

import dataclasses
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from entrypoint.gang import Gang, build_gang_command
from entrypoint.remote_settings import Tuning
from entrypoint.settings import Command, Settings, ShellCommand
from jarvice import contract
from jarvice.labels import build_job_label
from jarvice.model import Machine, SubmitBody

# Without NUM_CPUS/NUM_GPUS the job needs at least one core and no GPU.
DEFAULT_REMOTE_CPUS: Final = 1
DEFAULT_REMOTE_GPUS: Final = 0
_DEVICE_LIST_RE: Final = re.compile(r"^[\w.:-]+(,[\w.:-]+)*$")


@dataclass(frozen=True, slots=True)
class LocalPlan:
    argv: tuple[str, ...]
    num_gpus: int | None


@dataclass(frozen=True, slots=True)
class RemotePlan:
    shell_command: str
    job_label: str
    app_name: str
    app_command: str
    command_parameter: str
    machine: str | None
    nodes: int
    vault: str | None
    walltime: str
    geometry: str | None
    arch: str | None
    num_gpus: int
    num_cpus: int
    tuning: Tuning
    counted_gpus: int | None = None  # what the namespace's budget counted (None: no check)
    allowed_machines: tuple[str, ...] | None = None  # what the pod's GPU model allows (None: any machine)
    max_price: float | None = None  # the dearest mc_price the namespace's cost caps allow (None: any)
    # The gang this pod is a rank of (None: a pod on its own): rank 0 submits one job of `nodes` =
    # the gang's size under the gang's label, the other ranks follow that job.
    gang: Gang | None = None
    preferred_machines: tuple[str, ...] | None = None  # the machines to use, in order (None: cheapest first)
    memory_gb: int | None = None  # the container's memory request in GiB (None: any RAM will do)
    max_remote_queue_seconds: int = contract.DEFAULT_MAX_REMOTE_QUEUE_SECONDS  # 0: a queued job never moves

    @property
    def counted_nodes(self) -> int:
        """The nodes the webhook priced this burst for: a gang's size, else one (JARVICE_NODES is the
        pod's own to write, so it never raises what was counted)."""
        return self.gang.size if self.gang is not None else 1


Plan = LocalPlan | RemotePlan


def build_shell_command(command: Command) -> str:
    """The command as one shell string: APP_COMMAND_ARGS verbatim, or the argv shell-quoted."""
    if isinstance(command, ShellCommand):
        return command.text
    return shlex.join(command.argv)


def build_local_argv(command: Command) -> tuple[str, ...]:
    if isinstance(command, ShellCommand):
        return ("bash", "-c", command.text)
    return command.argv


def build_plan(settings: Settings, *, attempt: int = 1) -> Plan:
    if settings.remote is None:
        return LocalPlan(argv=build_local_argv(settings.command), num_gpus=settings.num_gpus)
    remote = settings.remote
    gang = remote.gang
    shell_command = build_shell_command(settings.command)
    pod = settings.pod
    if gang is not None:
        # One job for the whole gang: the gang's UID stands for the pod's, and no container part.
        pod = dataclasses.replace(pod, uid=gang.uid, container="")
        shell_command = build_gang_command(shell_command, gang)
    return RemotePlan(
        shell_command=shell_command,
        job_label=build_job_label(pod, attempt=attempt),
        app_name=remote.app_name,
        app_command=remote.app_command,
        command_parameter=remote.command_parameter,
        machine=remote.machine,
        nodes=remote.nodes if gang is None else gang.size,
        vault=remote.vault,
        walltime=remote.walltime,
        geometry=remote.geometry,
        arch=remote.arch,
        num_gpus=DEFAULT_REMOTE_GPUS if settings.num_gpus is None else settings.num_gpus,
        num_cpus=DEFAULT_REMOTE_CPUS if settings.num_cpus is None else settings.num_cpus,
        tuning=remote.tuning,
        counted_gpus=remote.counted_gpus,
        allowed_machines=remote.allowed_machines,
        max_price=remote.max_price,
        gang=gang,
        preferred_machines=remote.preferred_machines,
        memory_gb=remote.memory_gb,
        max_remote_queue_seconds=remote.max_remote_queue_seconds,
    )


# --- machine selection -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MachineChoice:
    machine: str
    reason: str
    warning: str | None = None


@dataclass(frozen=True, slots=True)
class NoMachineFits:
    reason: str


def known_price(price: float | None) -> float:
    """A price to order by: an unknown one after every known one."""
    return math.inf if price is None else price


def _size_key(machine: Machine) -> tuple[int, int, int, float, str]:
    # "Smallest": fewest GPUs (never burn GPUs the job did not ask for), then fewest cores, then
    # least RAM, then cheapest; the name makes the order total, hence deterministic.
    return (machine.gpus, machine.cores, machine.ram_gb, known_price(machine.price), machine.name)


def _fits_nodes(machine: Machine, nodes: int) -> bool:
    return machine.scale_min <= nodes <= machine.scale_max


def _describe(machine: Machine) -> str:
    return f"{machine.name} ({machine.gpus} GPU, {machine.cores} cores, {machine.ram_gb} GB)"


def choose_machine(
    machines: Mapping[str, Machine], *, gpus: int, cpus: int, nodes: int = 1, arch: str | None = None
) -> MachineChoice | NoMachineFits:
    """The smallest machine with at least `gpus` GPUs and `cpus` cores on each of `nodes` nodes
    (a multi-node job's further nodes have `mc_slave_gpus` GPUs, which may differ)."""
    candidates = [
        m
        for m in machines.values()
        if m.fewest_gpus_per_node(nodes) >= gpus
        and m.cores >= cpus
        and _fits_nodes(m, nodes)
        and (arch is None or m.arch.lower() == arch.lower())
    ]
    wanted = f"{gpus} GPU(s), {cpus} core(s), {nodes} node(s)" + (f", arch {arch}" if arch else "")
    if not candidates:
        largest = max(machines.values(), key=_size_key, default=None)
        largest_text = f"; largest available is {_describe(largest)}" if largest else "; the catalogue is empty"
        return NoMachineFits(reason=f"no machine among {len(machines)} offers {wanted}{largest_text}")
    best = min(candidates, key=_size_key)
    return MachineChoice(
        machine=best.name,
        reason=f"smallest of {len(candidates)} machine(s) with {wanted}: {_describe(best)}",
    )


def check_pinned_machine(
    machines: Mapping[str, Machine], *, name: str, gpus: int, cpus: int, nodes: int = 1
) -> MachineChoice | NoMachineFits:
    """JARVICE_MACHINE must exist and scale to `nodes` (JARVICE would refuse another count, and the
    job was counted for the nodes asked); a pin smaller than the request is honoured with a warning."""
    machine = machines.get(name)
    if machine is None:
        known = ", ".join(sorted(machines)[:20])
        return NoMachineFits(reason=f"JARVICE_MACHINE {name!r} is not in /jarvice/machines (known: {known})")
    if not _fits_nodes(machine, nodes):
        return NoMachineFits(
            reason=f"JARVICE_MACHINE {name!r} scales {machine.scale_min}..{machine.scale_max} node(s),"
            f" JARVICE_NODES={nodes}: pin a machine that runs on {nodes} node(s), or ask for fewer"
        )
    short = []
    if machine.fewest_gpus_per_node(nodes) < gpus:
        per_node = " per node" if nodes > 1 else ""
        short.append(f"{machine.fewest_gpus_per_node(nodes)} GPU(s){per_node} < NUM_GPUS={gpus}")
    if machine.cores < cpus:
        short.append(f"{machine.cores} core(s) < NUM_CPUS={cpus}")
    return MachineChoice(
        machine=name,
        reason=f"pinned by JARVICE_MACHINE: {_describe(machine)}",
        warning=("pinned machine is smaller than requested: " + "; ".join(short)) if short else None,
    )


def restrict_machines(
    machines: Mapping[str, Machine], *, allowed: tuple[str, ...] | None, pinned: str | None = None
) -> Mapping[str, Machine] | NoMachineFits:
    """The catalogue narrowed to the machine types the pod's GPU model allows (all of it for None),
    or why nothing is left: a pinned JARVICE_MACHINE outside them, or none of them offered."""
    if allowed is None:
        return machines
    listed = ", ".join(allowed)
    if pinned is not None and pinned not in allowed:
        return NoMachineFits(
            reason=f"JARVICE_MACHINE {pinned!r} does not carry the pod's GPU model"
            f" ({contract.ENV_ALLOWED_MACHINES}: {listed}): pin one of those, or unset it"
        )
    offered = {name: machine for name, machine in machines.items() if name in allowed}
    if not offered:
        return NoMachineFits(
            reason=f"none of the machines with the pod's GPU model ({contract.ENV_ALLOWED_MACHINES}: {listed}) is in"
            " /jarvice/machines: fix the webhook's GPU model mapping (--gpu-models-file)"
        )
    return offered


def within_price(
    machines: Mapping[str, Machine], max_price: float | None, *, nodes: int = 1, counted_nodes: int = 1
) -> Mapping[str, Machine]:
    """The machines a burst counted against cost caps may use for a job of `nodes` nodes: none whose
    price x nodes exceeds what the burst was counted at (the ceiling per node-hour x the nodes it was
    counted for; a tiny tolerance for the decimals the price travelled in), and none without a price."""
    if max_price is None:
        return machines
    counted = max_price * counted_nodes + 1e-6
    return {
        name: machine
        for name, machine in machines.items()
        if (cost := machine.price_for(nodes)) is not None and cost <= counted
    }


def select_machine(plan: RemotePlan, machines: Mapping[str, Machine]) -> MachineChoice | NoMachineFits:
    catalogue = restrict_machines(machines, allowed=plan.allowed_machines, pinned=plan.machine)
    if isinstance(catalogue, NoMachineFits):
        return catalogue
    if plan.machine is not None:
        return check_pinned_machine(
            catalogue, name=plan.machine, gpus=plan.num_gpus, cpus=plan.num_cpus, nodes=plan.nodes
        )
    choice = choose_machine(catalogue, gpus=plan.num_gpus, cpus=plan.num_cpus, nodes=plan.nodes, arch=plan.arch)
    if plan.allowed_machines is None:
        return choice
    among = f" among the machines with the pod's GPU model ({', '.join(sorted(catalogue))})"
    if isinstance(choice, NoMachineFits):
        return NoMachineFits(reason=choice.reason + among)
    return MachineChoice(machine=choice.machine, reason=choice.reason + among, warning=choice.warning)


# --- submit body -------------------------------------------------------------------------------


def build_submit_body(plan: RemotePlan, *, machine: str) -> SubmitBody:
    """The /jarvice/submit body minus credentials (the adapter adds `user` when sending).

    The command travels as a JSON string value in application.parameters, so quotes, backslashes,
    newlines, `$` and non-ASCII text arrive exactly as given.
    """
    body: SubmitBody = {
        "app": plan.app_name,
        "staging": False,
        "checkedout": False,
        "application": {
            "command": plan.app_command,
            "parameters": {plan.command_parameter: plan.shell_command},
        },
        "machine": {"type": machine, "nodes": plan.nodes},
        "job_label": plan.job_label,
    }
    if plan.geometry is not None:
        body["application"]["geometry"] = plan.geometry
    body["application"]["walltime"] = plan.walltime
    if plan.vault is not None:
        body["vault"] = {"name": plan.vault, "readonly": False, "force": False}
    return body


# --- GPU visibility (local mode) ---------------------------------------------------------------


def count_visible_gpus(*, nvidia_smi_output: str | None, env: Mapping[str, str]) -> int | None:
    """GPUs this container can see, or None when it cannot be told.

    `nvidia-smi -L` output wins (one "GPU n: ..." line per device). Otherwise
    NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES: a comma-separated list counts its entries;
    "none"/"void"/"" and CUDA's "-1" mean zero; "all" cannot be counted without nvidia-smi.
    Neither variable set (and no nvidia-smi) means no GPU is exposed to the container.
    """
    if nvidia_smi_output is not None:
        return sum(1 for line in nvidia_smi_output.splitlines() if line.startswith("GPU "))
    for name in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = env.get(name)
        if value is None:
            continue
        text = value.strip().lower()
        if text in ("", "none", "void", "-1", "nodevfiles"):
            return 0
        if text == "all":
            return None
        if _DEVICE_LIST_RE.match(text):
            return len(text.split(","))
        return None
    return 0


def build_gpu_warning(*, requested: int | None, visible: int | None) -> str | None:
    if requested is None or requested <= 0 or visible is None or visible >= requested:
        return None
    return f"NUM_GPUS={requested} but only {visible} GPU(s) are visible to this container; running anyway"
