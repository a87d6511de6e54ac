"""Runner settings: a Mapping of environment variables in, one typed `Settings` value out. Pure.

Only `entrypoint.__main__` reads `os.environ`; it hands the mapping (and a file reader for the
`*_FILE` credential variants) to `parse_settings`. Every problem is collected, so a misconfigured
pod gets one message listing all of them, before anything is submitted. What a remote run needs besides
(JARVICE, the app, the machine, the timing knobs) is read by `entrypoint.remote_settings`.
"""

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from entrypoint.env_reading import Problems, nonblank, parse_int, stripped
from entrypoint.remote_settings import ReadFile, RemoteSettings, parse_remote
from jarvice import contract
from jarvice.labels import PodIdentity
from jarvice.model import Mode

# Variable names (the shared ones live in `jarvice.contract`; the remote run's in `entrypoint.remote_settings`).
ENV_COMMAND_ARGS: Final = "APP_COMMAND_ARGS"
ENV_POD_UID: Final = contract.ENV_POD_UID
ENV_POD_NAMESPACE: Final = contract.ENV_POD_NAMESPACE
ENV_POD_NAME: Final = contract.ENV_POD_NAME
ENV_LOG_LEVEL: Final = "LOG_LEVEL"

LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
DEFAULT_LOG_LEVEL: Final = "WARNING"

_MILLICORES_RE: Final = re.compile(r"^(\d+)m$")
# A container name is a DNS-1123 label (Kubernetes validation).
_CONTAINER_NAME_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class ShellCommand:
    """APP_COMMAND_ARGS: a shell string, run with `bash -c`."""

    text: str


@dataclass(frozen=True, slots=True)
class ArgvCommand:
    """The entrypoint's own arguments, used when APP_COMMAND_ARGS is unset."""

    argv: tuple[str, ...]


Command = ShellCommand | ArgvCommand


@dataclass(frozen=True, slots=True)
class Settings:
    mode: Mode
    command: Command
    num_gpus: int | None
    num_cpus: int | None
    pod: PodIdentity
    log_level: str
    remote: RemoteSettings | None
    # NIMBIX_BURST_STATE_DIR: where this container's restart state lives (checked to be a writable
    # directory by the shell, which may touch the file system); None = restarts cannot be told apart.
    state_dir: str | None = None
    # NIMBIX_BURST_TERMINATION_LOG: where the remote runner writes its termination message.
    termination_log: str = contract.DEFAULT_TERMINATION_LOG
    # NIMBIX_BURST_POD_ANNOTATIONS_FILE: the pod's annotations (the webhook mounts them), where the runner
    # sees the controller's move-home mark; None: no move home is asked.
    pod_annotations_file: str | None = None


class SettingsError(Exception):
    """Every problem found in the environment, in one exception."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("invalid settings: " + "; ".join(self.problems))


def parse_mode(value: str | None) -> Mode | None:
    """REMOTE: unset, empty or "0" => local; "1" => remote; anything else => None (invalid)."""
    if value is None or value.strip() in ("", "0"):
        return "local"
    if value.strip() == "1":
        return "remote"
    return None


def parse_cpus(raw: str) -> int | None:
    """CPU count as whole cores, rounding up: "2", "1.5" (=> 2), Kubernetes millicores "500m" (=> 1)."""
    text = raw.strip()
    match = _MILLICORES_RE.match(text)
    try:
        value = int(match.group(1)) / 1000 if match else float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return math.ceil(value)


def _parse_command(env: Mapping[str, str], argv: Sequence[str], problems: Problems) -> Command:
    text = env.get(ENV_COMMAND_ARGS)
    if text is not None and text.strip() != "":
        return ShellCommand(text)  # exactly as given: no stripping, the shell gets every byte
    if argv:
        return ArgvCommand(tuple(argv))
    problems.add(f"no command: set {ENV_COMMAND_ARGS} or pass the command as arguments")
    return ArgvCommand(())


def parse_settings(env: Mapping[str, str], *, argv: Sequence[str], read_file: ReadFile, hostname: str) -> Settings:
    """Settings from the environment; raises SettingsError listing every problem found."""
    problems = Problems()
    remote_raw = env.get(contract.ENV_REMOTE)
    mode = parse_mode(remote_raw)
    if mode is None:
        problems.add(f"{contract.ENV_REMOTE} must be unset, empty, 0 (local) or 1 (remote), got {remote_raw!r}")
    command = _parse_command(env, argv, problems)
    num_gpus = parse_int(env, contract.ENV_NUM_GPUS, problems, minimum=0)
    cpus_raw = nonblank(env, contract.ENV_NUM_CPUS)
    num_cpus = None if cpus_raw is None else parse_cpus(cpus_raw)
    if cpus_raw is not None and num_cpus is None:
        problems.add(
            f"{contract.ENV_NUM_CPUS} must be a non-negative number of cores (e.g. 4, 1.5, 500m), got {cpus_raw!r}"
        )
    # WARNING by default: `kubectl logs` of a pod shows the job's own output, and the runner speaks
    # only when something needs attention (LOG_LEVEL=INFO shows its progress too).
    log_level = (nonblank(env, ENV_LOG_LEVEL) or DEFAULT_LOG_LEVEL).strip().upper()
    if log_level not in LOG_LEVELS:
        problems.add(f"{ENV_LOG_LEVEL} must be one of {', '.join(LOG_LEVELS)}, got {env.get(ENV_LOG_LEVEL)!r}")
        log_level = DEFAULT_LOG_LEVEL
    remote = parse_remote(env, read_file=read_file, problems=problems) if mode == "remote" else None
    container = (nonblank(env, contract.ENV_CONTAINER_NAME) or "").strip()
    if container and not _CONTAINER_NAME_RE.match(container):
        problems.add(
            f"{contract.ENV_CONTAINER_NAME} must be a container name (lower-case DNS label), got {container!r}"
        )
    cluster = (nonblank(env, contract.ENV_CLUSTER) or "").strip()
    if cluster and not contract.is_cluster_identity(cluster):
        problems.add(
            f"{contract.ENV_CLUSTER} must be the cluster identity the nimbix-burst webhook sets (12 hex digits,"
            f" optionally after a lowercase name and '-', e.g. prod-0123456789ab), got {cluster!r}"
        )
    state_dir = stripped(nonblank(env, contract.ENV_STATE_DIR))
    if state_dir is not None and not state_dir.startswith("/"):
        problems.add(f"{contract.ENV_STATE_DIR} must be an absolute path, got {state_dir!r}")
    termination_log = stripped(nonblank(env, contract.ENV_TERMINATION_LOG)) or contract.DEFAULT_TERMINATION_LOG
    if not termination_log.startswith("/"):
        problems.add(f"{contract.ENV_TERMINATION_LOG} must be an absolute path, got {termination_log!r}")
    pod_annotations_file = stripped(nonblank(env, contract.ENV_POD_ANNOTATIONS_FILE))
    if pod_annotations_file is not None and not pod_annotations_file.startswith("/"):
        problems.add(f"{contract.ENV_POD_ANNOTATIONS_FILE} must be an absolute path, got {pod_annotations_file!r}")
    if problems.items:
        raise SettingsError(problems.items)
    assert mode is not None  # a None mode always adds a problem
    return Settings(
        mode=mode,
        command=command,
        num_gpus=num_gpus,
        num_cpus=num_cpus,
        pod=PodIdentity(
            uid=(nonblank(env, ENV_POD_UID) or "").strip(),
            namespace=(nonblank(env, ENV_POD_NAMESPACE) or "").strip(),
            name=(nonblank(env, ENV_POD_NAME) or "").strip(),
            hostname=hostname.strip(),
            container=container,
            cluster=cluster,
        ),
        log_level=log_level,
        remote=remote,
        state_dir=state_dir,
        termination_log=termination_log,
        pod_annotations_file=pod_annotations_file,
    )
