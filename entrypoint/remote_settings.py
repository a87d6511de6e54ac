"""The remote run's settings (REMOTE=1): JARVICE's address and credentials, the app, the machine and its
limits, and the runner's timing knobs, from the environment. Pure; `entrypoint.settings.parse_settings`
calls `parse_remote` and collects its problems with the rest.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from entrypoint import walltime
from entrypoint.env_reading import Problems, nonblank, parse_float, parse_int, stripped
from entrypoint.gang import DEFAULT_GANG_WAIT_SECONDS, ENV_GANG_WAIT_SECONDS, Gang, parse_gang
from jarvice import contract
from jarvice.redaction import Secret

# Variable names (the shared ones live in `jarvice.contract`).
ENV_API_URL: Final = contract.ENV_API_URL
ENV_USERNAME: Final = "JARVICE_USERNAME"
ENV_APIKEY: Final = "JARVICE_APIKEY"
ENV_USERNAME_FILE: Final = contract.ENV_USERNAME_FILE
ENV_APIKEY_FILE: Final = contract.ENV_APIKEY_FILE
# The original IBM entrypoint's names, accepted as fallbacks (reference §11).
ENV_LEGACY_USERNAME: Final = "USERNAME"
ENV_LEGACY_APIKEY: Final = "APIKEY"
ENV_APP_NAME: Final = contract.ENV_APP_NAME
ENV_APP_COMMAND: Final = "APP_COMMAND"
ENV_COMMAND_PARAMETER: Final = "JARVICE_COMMAND_PARAMETER"
ENV_MACHINE: Final = "JARVICE_MACHINE"
ENV_NODES: Final = "JARVICE_NODES"
ENV_VAULT: Final = "JARVICE_VAULT"
ENV_WALLTIME: Final = contract.ENV_WALLTIME
ENV_GEOMETRY: Final = "JARVICE_GEOMETRY"
ENV_ARCH: Final = "JARVICE_ARCH"
ENV_POLL_SECONDS: Final = "JARVICE_POLL_SECONDS"
ENV_CANCEL_GRACE_SECONDS: Final = "JARVICE_CANCEL_GRACE_SECONDS"
ENV_OUTAGE_SECONDS: Final = "JARVICE_OUTAGE_SECONDS"
ENV_TAIL_LINES: Final = "JARVICE_TAIL_LINES"
ENV_CONNECT_TIMEOUT: Final = "JARVICE_CONNECT_TIMEOUT"
ENV_READ_TIMEOUT: Final = "JARVICE_READ_TIMEOUT"
ENV_RETRY_BASE_SECONDS: Final = "JARVICE_RETRY_BASE_SECONDS"
ENV_RETRY_CAP_SECONDS: Final = "JARVICE_RETRY_CAP_SECONDS"
ENV_SUBMIT_RESOLVE_SECONDS: Final = "JARVICE_SUBMIT_RESOLVE_SECONDS"

# The current public API base URL (reference §1; jardoc changed it in 2021).
DEFAULT_API_URL: Final = "https://cloud.nimbix.net/api"
# The AppDef command key and parameter id of a "run a shell command" app: the reference's J12
# AppDef's `run` command executes `/bin/bash -l -c <parameters.command>`.
DEFAULT_APP_COMMAND: Final = "run"
DEFAULT_COMMAND_PARAMETER: Final = "command"
# Present in every portal-generated submit body; whether batch commands need it is UNCONFIRMED,
# so it is sent by default and can be dropped with JARVICE_GEOMETRY="".
DEFAULT_GEOMETRY: Final = "1280x720"
# Nimbix's own clients poll every 5 s (reference §9: J5 wait_for, J7 jobperf).
DEFAULT_POLL_SECONDS: Final = 5.0
# Kubernetes' default terminationGracePeriodSeconds is 30: 20 s of shutdown leaves room to
# terminate and still exit before the kubelet's SIGKILL.
DEFAULT_CANCEL_GRACE_SECONDS: Final = 20.0
# How long JARVICE may be unreachable (every retry failing) before the runner gives up.
DEFAULT_OUTAGE_SECONDS: Final = 300.0
# tail window per poll; 0 would fetch the whole output every time.
DEFAULT_TAIL_LINES: Final = 1000
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
# Nimbix's jobperf uses a 30 s timeout per call (reference §9).
DEFAULT_READ_TIMEOUT: Final = 30.0
DEFAULT_RETRY_BASE_SECONDS: Final = 1.0
DEFAULT_RETRY_CAP_SECONDS: Final = 30.0
# After a submit with an unknown outcome, how long to keep looking for the job it may have
# created before concluding it did not and submitting again.
DEFAULT_SUBMIT_RESOLVE_SECONDS: Final = 30.0
DEFAULT_NODES: Final = 1

_GEOMETRY_RE: Final = re.compile(r"^\d+x\d+$")


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    apikey: Secret
    source: str  # which variables they came from, for logs ("JARVICE_USERNAME/JARVICE_APIKEY_FILE")


@dataclass(frozen=True, slots=True)
class Tuning:
    """Timing knobs of the remote runner; the defaults suit production, tests shrink them."""

    poll_seconds: float = DEFAULT_POLL_SECONDS
    cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS
    tail_lines: int = DEFAULT_TAIL_LINES
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    retry_base_seconds: float = DEFAULT_RETRY_BASE_SECONDS
    retry_cap_seconds: float = DEFAULT_RETRY_CAP_SECONDS
    submit_resolve_seconds: float = DEFAULT_SUBMIT_RESOLVE_SECONDS
    gang_wait_seconds: float = DEFAULT_GANG_WAIT_SECONDS  # a following rank's wait for rank 0's job


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    api_url: str
    credentials: Credentials
    app_name: str
    app_command: str
    command_parameter: str
    machine: str | None
    nodes: int
    vault: str | None
    walltime: str  # JARVICE_WALLTIME, else the runner's default: no job bills without a limit
    geometry: str | None
    arch: str | None
    tuning: Tuning
    # NIMBIX_BURST_COUNTED_GPUS: what the namespace's budget counted for this container (None: the
    # webhook did not rewrite the pod, no check).
    counted_gpus: int | None = None
    # NIMBIX_BURST_ALLOWED_MACHINES: the machine types the pod's GPU model allows (None: any).
    allowed_machines: tuple[str, ...] | None = None
    gang: Gang | None = None  # NIMBIX_BURST_GANG_*: this pod is one rank of a gang's one job
    # NIMBIX_BURST_MAX_PRICE: the dearest mc_price per node-hour the namespace's cost caps counted
    # this burst at (None: no caps, no ceiling).
    max_price: float | None = None
    # NIMBIX_BURST_MACHINES: the machines to use, in order (None: every one that fits, cheapest first).
    preferred_machines: tuple[str, ...] | None = None
    # NIMBIX_BURST_MEMORY_GB: the container's memory request in GiB (None: any machine's RAM will do).
    memory_gb: int | None = None
    # NIMBIX_BURST_MAX_REMOTE_QUEUE: how long a job may stay queued before it moves to the next machine.
    max_remote_queue_seconds: int = contract.DEFAULT_MAX_REMOTE_QUEUE_SECONDS
    # NIMBIX_BURST_GATEWAY_CA: the CA (PEM) of the add-on's JARVICE gateway, trusted beside the system's.
    gateway_ca: str | None = None
    # The key is a file (JARVICE_APIKEY_FILE): re-read when it changes, as a projected token is refreshed.
    apikey_file: str | None = None


ReadFile = Callable[[str], str]


def _resolve_credential(
    env: Mapping[str, str],
    *,
    direct: str,
    file_var: str,
    legacy: str,
    read_file: ReadFile,
    problems: Problems,
) -> tuple[str | None, str]:
    """(value, source variable). Precedence: direct, then *_FILE, then the legacy name."""
    direct_value = nonblank(env, direct)
    file_path = nonblank(env, file_var)
    if direct_value is not None and file_path is not None:
        problems.add(f"set only one of {direct} and {file_var}")
        return None, direct
    if direct_value is not None:
        return direct_value.strip(), direct
    if file_path is not None:
        try:
            content = read_file(file_path).strip()
        except OSError as exc:
            problems.add(f"{file_var}: cannot read {file_path}: {exc.strerror or type(exc).__name__}")
            return None, file_var
        if not content:
            problems.add(f"{file_var}: {file_path} is empty")
            return None, file_var
        return content, file_var
    legacy_value = nonblank(env, legacy)
    if legacy_value is not None:
        return legacy_value.strip(), legacy
    problems.add(f"{direct} (or {file_var}, or {legacy}) is required when REMOTE=1")
    return None, direct


def _parse_api_url(env: Mapping[str, str], problems: Problems) -> str:
    raw = nonblank(env, ENV_API_URL)
    if raw is None:
        return DEFAULT_API_URL
    url = raw.strip().rstrip("/")
    if not url.startswith(("https://", "http://")) or len(url) <= len("https://"):
        problems.add(f"{ENV_API_URL} must be an http(s) URL, got {raw!r}")
        return DEFAULT_API_URL
    if "?" in url or "#" in url:
        problems.add(f"{ENV_API_URL} must not contain a query or fragment, got {raw!r}")
    return url


def _parse_tuning(env: Mapping[str, str], problems: Problems) -> Tuning:
    tail_lines = parse_int(env, ENV_TAIL_LINES, problems, minimum=0)
    tuning = Tuning(
        poll_seconds=parse_float(env, ENV_POLL_SECONDS, DEFAULT_POLL_SECONDS, problems),
        cancel_grace_seconds=parse_float(
            env, ENV_CANCEL_GRACE_SECONDS, DEFAULT_CANCEL_GRACE_SECONDS, problems, allow_zero=True
        ),
        outage_seconds=parse_float(env, ENV_OUTAGE_SECONDS, DEFAULT_OUTAGE_SECONDS, problems),
        tail_lines=DEFAULT_TAIL_LINES if tail_lines is None else tail_lines,
        connect_timeout=parse_float(env, ENV_CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, problems),
        read_timeout=parse_float(env, ENV_READ_TIMEOUT, DEFAULT_READ_TIMEOUT, problems),
        retry_base_seconds=parse_float(env, ENV_RETRY_BASE_SECONDS, DEFAULT_RETRY_BASE_SECONDS, problems),
        retry_cap_seconds=parse_float(env, ENV_RETRY_CAP_SECONDS, DEFAULT_RETRY_CAP_SECONDS, problems),
        submit_resolve_seconds=parse_float(
            env, ENV_SUBMIT_RESOLVE_SECONDS, DEFAULT_SUBMIT_RESOLVE_SECONDS, problems, allow_zero=True
        ),
        gang_wait_seconds=parse_float(env, ENV_GANG_WAIT_SECONDS, DEFAULT_GANG_WAIT_SECONDS, problems),
    )
    if tuning.retry_cap_seconds < tuning.retry_base_seconds:
        problems.add(f"{ENV_RETRY_CAP_SECONDS} must be >= {ENV_RETRY_BASE_SECONDS}")
    return tuning


def parse_remote(env: Mapping[str, str], *, read_file: ReadFile, problems: Problems) -> RemoteSettings:
    username, username_source = _resolve_credential(
        env,
        direct=ENV_USERNAME,
        file_var=ENV_USERNAME_FILE,
        legacy=ENV_LEGACY_USERNAME,
        read_file=read_file,
        problems=problems,
    )
    apikey, apikey_source = _resolve_credential(
        env,
        direct=ENV_APIKEY,
        file_var=ENV_APIKEY_FILE,
        legacy=ENV_LEGACY_APIKEY,
        read_file=read_file,
        problems=problems,
    )
    app_name = nonblank(env, ENV_APP_NAME)
    if app_name is None:
        problems.add(f"{ENV_APP_NAME} (the JARVICE application id) is required when REMOTE=1")
    walltime_raw = nonblank(env, ENV_WALLTIME)
    walltime_text = walltime.DEFAULT_WALLTIME if walltime_raw is None else walltime_raw.strip()
    walltime_seconds = walltime.parse_walltime_seconds(walltime_text)
    if walltime_seconds is None:
        problems.add(f"{ENV_WALLTIME} must look like HH:MM:SS, got {walltime_raw!r}")
    elif walltime_seconds == 0:
        problems.add(f"{ENV_WALLTIME} must be longer than 00:00:00, got {walltime_raw!r}")
    geometry_raw = env.get(ENV_GEOMETRY)
    geometry: str | None = DEFAULT_GEOMETRY if geometry_raw is None else (geometry_raw.strip() or None)
    if geometry is not None and not _GEOMETRY_RE.match(geometry):
        problems.add(f"{ENV_GEOMETRY} must look like WIDTHxHEIGHT (or be empty), got {geometry_raw!r}")
    nodes = parse_int(env, ENV_NODES, problems, minimum=1)
    gang, gang_problems = parse_gang(env, nodes=nodes)
    for problem in gang_problems:
        problems.add(problem)
    return RemoteSettings(
        api_url=_parse_api_url(env, problems),
        credentials=Credentials(
            username=username or "",
            apikey=Secret(apikey or ""),
            source=f"{username_source}/{apikey_source}",
        ),
        app_name=(app_name or "").strip(),
        app_command=(nonblank(env, ENV_APP_COMMAND) or DEFAULT_APP_COMMAND).strip(),
        command_parameter=(nonblank(env, ENV_COMMAND_PARAMETER) or DEFAULT_COMMAND_PARAMETER).strip(),
        machine=stripped(nonblank(env, ENV_MACHINE)),
        nodes=DEFAULT_NODES if nodes is None else nodes,
        vault=stripped(nonblank(env, ENV_VAULT)),
        walltime=walltime_text,
        geometry=geometry,
        arch=stripped(nonblank(env, ENV_ARCH)),
        tuning=_parse_tuning(env, problems),
        counted_gpus=parse_int(env, contract.ENV_COUNTED_GPUS, problems, minimum=0),
        allowed_machines=_parse_allowed_machines(env, problems),
        gang=gang,
        max_price=_parse_max_price(env, problems),
        preferred_machines=_parse_machine_order(env, problems),
        memory_gb=parse_int(env, contract.ENV_MEMORY_GB, problems, minimum=0),
        max_remote_queue_seconds=_parse_max_remote_queue(env, problems),
        gateway_ca=_parse_gateway_ca(env, problems),
        apikey_file=nonblank(env, ENV_APIKEY_FILE) if apikey_source == ENV_APIKEY_FILE else None,
    )


def _parse_gateway_ca(env: Mapping[str, str], problems: Problems) -> str | None:
    raw = nonblank(env, contract.ENV_GATEWAY_CA)
    if raw is None:
        return None
    if "-----BEGIN CERTIFICATE-----" not in raw:
        problems.add(f"{contract.ENV_GATEWAY_CA} must hold a PEM certificate (the gateway's CA), got {raw[:40]!r}")
        return None
    return raw.strip()


def _parse_max_price(env: Mapping[str, str], problems: Problems) -> float | None:
    raw = nonblank(env, contract.ENV_MAX_PRICE)
    if raw is None:
        return None
    text = raw.strip()
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not text or not (value >= 0) or value == float("inf"):
        problems.add(f"{contract.ENV_MAX_PRICE} must be a price per node-hour >= 0 (e.g. 3.2), got {raw!r}")
        return None
    return value


def _parse_machine_order(env: Mapping[str, str], problems: Problems) -> tuple[str, ...] | None:
    raw = nonblank(env, contract.ENV_MACHINES)
    if raw is None:
        return None
    try:
        return contract.parse_machine_order(raw)
    except ValueError as exc:
        problems.add(f"{contract.ENV_MACHINES}: {exc}")
        return None


def _parse_max_remote_queue(env: Mapping[str, str], problems: Problems) -> int:
    raw = nonblank(env, contract.ENV_MAX_REMOTE_QUEUE)
    if raw is None:
        return contract.DEFAULT_MAX_REMOTE_QUEUE_SECONDS
    try:
        return contract.parse_duration_seconds(raw)
    except ValueError as exc:
        problems.add(f"{contract.ENV_MAX_REMOTE_QUEUE}: {exc}")
        return contract.DEFAULT_MAX_REMOTE_QUEUE_SECONDS


def _parse_allowed_machines(env: Mapping[str, str], problems: Problems) -> tuple[str, ...] | None:
    raw = nonblank(env, contract.ENV_ALLOWED_MACHINES)
    if raw is None:
        return None
    try:
        return contract.parse_machine_list(raw)
    except ValueError as exc:
        problems.add(f"{contract.ENV_ALLOWED_MACHINES}: {exc}")
        return None
