"""What to run and where: settings in, a LocalPlan or RemotePlan out. Pure.

Also the pure pieces of the remote path that need no network: the job label, machine selection
over a /jarvice/machines catalogue, the submit body, and GPU visibility for the local warning.
"""

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from entrypoint.model import Machine, SubmitBody
from entrypoint.settings import (
    MAX_JOB_LABEL,
    Command,
    PodIdentity,
    Settings,
    ShellCommand,
    Tuning,
)

JOB_LABEL_PREFIX: Final = "k8s-"
# Without NUM_CPUS/NUM_GPUS the job needs at least one core and no GPU.
DEFAULT_REMOTE_CPUS: Final = 1
DEFAULT_REMOTE_GPUS: Final = 0
_LABEL_HASH_CHARS: Final = 8
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
    walltime: str | None
    geometry: str | None
    arch: str | None
    num_gpus: int
    num_cpus: int
    tuning: Tuning


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


def _shorten_label(text: str) -> str:
    label = JOB_LABEL_PREFIX + text
    if len(label) <= MAX_JOB_LABEL:
        return label
    digest = hashlib.sha256(text.encode()).hexdigest()[:_LABEL_HASH_CHARS]
    keep = MAX_JOB_LABEL - len(JOB_LABEL_PREFIX) - 1 - _LABEL_HASH_CHARS
    return f"{JOB_LABEL_PREFIX}{text[:keep]}-{digest}"


def build_job_label(pod: PodIdentity) -> str:
    """A stable per-pod key: `k8s-<uid>`, else `k8s-<namespace>/<name>`, else `k8s-<hostname>`.

    Kept within 50 characters (older JARVICE releases) by truncating and appending a hash.
    """
    if pod.uid:
        return _shorten_label(pod.uid)
    if pod.namespace and pod.name:
        return _shorten_label(f"{pod.namespace}/{pod.name}")
    return _shorten_label(pod.hostname or "unknown-host")


def build_plan(settings: Settings) -> Plan:
    if settings.remote is None:
        return LocalPlan(argv=build_local_argv(settings.command), num_gpus=settings.num_gpus)
    remote = settings.remote
    return RemotePlan(
        shell_command=build_shell_command(settings.command),
        job_label=build_job_label(settings.pod),
        app_name=remote.app_name,
        app_command=remote.app_command,
        command_parameter=remote.command_parameter,
        machine=remote.machine,
        nodes=remote.nodes,
        vault=remote.vault,
        walltime=remote.walltime,
        geometry=remote.geometry,
        arch=remote.arch,
        num_gpus=DEFAULT_REMOTE_GPUS if settings.num_gpus is None else settings.num_gpus,
        num_cpus=DEFAULT_REMOTE_CPUS if settings.num_cpus is None else settings.num_cpus,
        tuning=remote.tuning,
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


def _size_key(machine: Machine) -> tuple[int, int, int, float, str]:
    # "Smallest": fewest GPUs (never burn GPUs the job did not ask for), then fewest cores, then
    # least RAM, then cheapest; the name makes the order total, hence deterministic.
    return (machine.gpus, machine.cores, machine.ram_gb, machine.price, machine.name)


def _fits_nodes(machine: Machine, nodes: int) -> bool:
    return machine.scale_min <= nodes <= machine.scale_max


def _describe(machine: Machine) -> str:
    return f"{machine.name} ({machine.gpus} GPU, {machine.cores} cores, {machine.ram_gb} GB)"


def choose_machine(
    machines: Mapping[str, Machine], *, gpus: int, cpus: int, nodes: int = 1, arch: str | None = None
) -> MachineChoice | NoMachineFits:
    """The smallest machine with at least `gpus` GPUs and `cpus` cores (per node)."""
    candidates = [
        m
        for m in machines.values()
        if m.gpus >= gpus
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
    """JARVICE_MACHINE must exist; a pin smaller than the request is honoured with a warning."""
    machine = machines.get(name)
    if machine is None:
        known = ", ".join(sorted(machines)[:20])
        return NoMachineFits(reason=f"JARVICE_MACHINE {name!r} is not in /jarvice/machines (known: {known})")
    short = []
    if machine.gpus < gpus:
        short.append(f"{machine.gpus} GPU(s) < NUM_GPUS={gpus}")
    if machine.cores < cpus:
        short.append(f"{machine.cores} core(s) < NUM_CPUS={cpus}")
    if not _fits_nodes(machine, nodes):
        short.append(f"scales {machine.scale_min}..{machine.scale_max} nodes, JARVICE_NODES={nodes}")
    return MachineChoice(
        machine=name,
        reason=f"pinned by JARVICE_MACHINE: {_describe(machine)}",
        warning=("pinned machine is smaller than requested: " + "; ".join(short)) if short else None,
    )


def select_machine(plan: RemotePlan, machines: Mapping[str, Machine]) -> MachineChoice | NoMachineFits:
    if plan.machine is not None:
        return check_pinned_machine(
            machines, name=plan.machine, gpus=plan.num_gpus, cpus=plan.num_cpus, nodes=plan.nodes
        )
    return choose_machine(machines, gpus=plan.num_gpus, cpus=plan.num_cpus, nodes=plan.nodes, arch=plan.arch)


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
    if plan.walltime is not None:
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
