"""Controller settings: CLI flags with environment defaults, validated once at start (pure).

JARVICE credentials come only from the environment (`JARVICE_USERNAME`, `JARVICE_APIKEY`, or
their `*_FILE` variants pointing at a mounted Secret), never from flags: a flag would show the
key in `ps` and in the pod spec. Files are read through an injected reader, so this module does
no I/O of its own.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from jarvice import contract
from jarvice.redaction import Secret
from kubeplumbing import options
from kubeplumbing.leadership import LeaseTiming
from kubeplumbing.options import BOOLEANS, Option, OptionValues
from kubeplumbing.options import build_parser as build_option_parser

DEFAULT_API_URL = "https://cloud.nimbix.net/api"
ReapMode = Literal["auto", "true", "false"]
# Any UUID: --cluster-name is checked by the rule that makes the identity, before the real UID is read.
_EXAMPLE_UID = "00000000-0000-0000-0000-000000000000"


class SettingsError(options.SettingsError):
    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(problems, program="controller")


@dataclass(frozen=True, slots=True)
class Credentials:
    api_url: str
    username: str
    apikey: Secret


@dataclass(frozen=True, slots=True)
class Settings:
    host: str
    port: int
    kubeconfig: str  # "" -> in-cluster configuration
    log_level: str
    identity: str  # this replica's name in the Lease (the pod name)
    lease_namespace: str
    lease_name: str
    lease_timing: LeaseTiming
    watch_stale_seconds: float
    reburst: bool
    stranded_seconds: float
    reburst_cap: int
    scan_seconds: float
    reap_orphans: bool
    reap_disabled_reason: str  # why the reaper is off ("" when on)
    orphan_interval_seconds: float
    orphan_grace_seconds: float
    orphan_dry_run: bool
    credentials: Credentials | None
    # Part of the cluster identity job labels carry (contract.cluster_identity); the webhook must be
    # given the same value, or the reaper would never recognize this cluster's jobs.
    cluster_name: str = ""
    # The Events and annotations of burst pods' JARVICE jobs (controller.recording).
    job_events: bool = False
    job_events_disabled_reason: str = ""
    job_events_interval_seconds: float = 15.0
    cost_refresh_seconds: float = 300.0
    machines_refresh_seconds: float = 3600.0
    # The spend record (controller.spendkeeping): how often JARVICE's jobs are counted, and how old
    # an unchanged record may grow before it is written again (its age tells readers it is current).
    spend_interval_seconds: float = 15.0
    spend_refresh_seconds: float = 60.0
    # Burst pods whose jobs are still queued come home when a local node can run them (controller.homecoming).
    homecoming: bool = False
    homecoming_seconds: float = 10.0
    # The add-on's JARVICE gateway (controller.stopping): every account's live jobs, and their stop, through
    # it ("" when the controller has no gateway: only its own credentials' jobs are seen).
    gateway_url: str = ""
    gateway_ca_file: str = ""
    gateway_token_file: str = ""


OPTIONS: tuple[Option, ...] = (
    ("--host", "CONTROLLER_HOST", "0.0.0.0", "address of the /metrics, /healthz, /readyz port"),  # noqa: S104
    ("--port", "CONTROLLER_PORT", "8080", "HTTP port for /metrics, /healthz, /readyz"),
    ("--kubeconfig", "KUBECONFIG", "", "kubeconfig path; empty means in-cluster configuration"),
    ("--log-level", "CONTROLLER_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"),
    ("--pod-name", "POD_NAME", "", "this replica's identity in the Lease (downward API)"),
    ("--lease-namespace", "POD_NAMESPACE", "", "namespace of the Lease (the controller's own)"),
    ("--lease-name", "CONTROLLER_LEASE_NAME", "nimbix-burst-controller-leader", "the Lease the replicas elect through"),
    ("--lease-duration-seconds", "CONTROLLER_LEASE_DURATION_SECONDS", "15", "takeover delay after a leader dies"),
    ("--lease-renew-deadline-seconds", "CONTROLLER_LEASE_RENEW_DEADLINE_SECONDS", "10", "leader stops if not renewed"),
    ("--lease-retry-seconds", "CONTROLLER_LEASE_RETRY_SECONDS", "2", "Lease read/renew interval"),
    ("--watch-stale-seconds", "CONTROLLER_WATCH_STALE_SECONDS", "60", "not ready after the pod watch broke this long"),
    ("--reburst", "CONTROLLER_REBURST", "true", "false turns re-bursting of stranded pods off"),
    ("--stranded-seconds", "CONTROLLER_STRANDED_SECONDS", "120", "how long a local pod may stay unschedulable"),
    ("--reburst-cap", "CONTROLLER_REBURST_CAP", "3", "re-bursts per owner (Job) at most"),
    ("--scan-seconds", "CONTROLLER_SCAN_SECONDS", "5", "how often stranded pods are looked for"),
    ("--reap-orphans", "CONTROLLER_REAP_ORPHANS", "auto", "auto (on when credentials are given), true or false"),
    ("--orphan-interval-seconds", "CONTROLLER_ORPHAN_INTERVAL_SECONDS", "60", "how often JARVICE jobs are listed"),
    ("--orphan-grace-seconds", "CONTROLLER_ORPHAN_GRACE_SECONDS", "120", "orphaned this long before terminate"),
    ("--orphan-dry-run", "CONTROLLER_ORPHAN_DRY_RUN", "false", "true: log and count orphans, terminate nothing"),
    ("--jarvice-api-url", "JARVICE_API_URL", DEFAULT_API_URL, "JARVICE API base URL"),
    ("--cluster-name", "NIMBIX_BURST_CLUSTER_NAME", "", "names this cluster in job labels; the webhook's must match"),
    ("--job-events", "CONTROLLER_JOB_EVENTS", "auto", "burst jobs as Events: auto, true or false"),
    ("--job-events-interval-seconds", "CONTROLLER_JOB_EVENTS_INTERVAL_SECONDS", "15", "how often jobs are looked at"),
    ("--cost-refresh-seconds", "CONTROLLER_COST_REFRESH_SECONDS", "300", "running jobs' cost re-annotated"),
    ("--machines-refresh-seconds", "CONTROLLER_MACHINES_REFRESH_SECONDS", "3600", "machine prices cached"),
    ("--spend-interval-seconds", "CONTROLLER_SPEND_INTERVAL_SECONDS", "15", "how often spend is counted"),
    ("--spend-refresh-seconds", "CONTROLLER_SPEND_REFRESH_SECONDS", "60", "an unchanged spend record rewritten"),
    ("--homecoming", "CONTROLLER_HOMECOMING", "true", "false: burst pods whose jobs are queued never come home"),
    ("--homecoming-seconds", "CONTROLLER_HOMECOMING_SECONDS", "10", "how often queued burst jobs are looked at"),
    ("--gateway-url", "CONTROLLER_GATEWAY_URL", "", "the JARVICE gateway (https): stops what nothing accounts for"),
    ("--gateway-ca-file", "CONTROLLER_GATEWAY_CA_FILE", "", "the CA that signed the gateway's certificate"),
    (
        "--gateway-token-file",
        "CONTROLLER_GATEWAY_TOKEN_FILE",
        "",
        "the projected token of the gateway's controller audience",
    ),
)


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    return build_option_parser(
        OPTIONS,
        env,
        prog="python -m controller",
        description="nimbix-burst controller. JARVICE credentials: env JARVICE_USERNAME[_FILE], JARVICE_APIKEY[_FILE]",
    )


def _credential(
    env: Mapping[str, str], name: str, *, read_file: Callable[[str], str], problems: list[str], missing: list[str]
) -> str:
    """The value of `name`, or of the file `name_FILE` points at. A file that does not exist is
    an absent credential (the Deployment mounts the Secret as optional), noted in `missing`."""
    direct, path = env.get(name, "").strip(), env.get(f"{name}_FILE", "").strip()
    if direct and path:
        problems.append(f"{name} and {name}_FILE are both set; set one")
        return ""
    if not path:
        return direct
    try:
        return read_file(path).strip()
    except FileNotFoundError:
        missing.append(path)
        return ""
    except OSError as exc:
        problems.append(f"{name}_FILE: cannot read {path} ({type(exc).__name__})")
        return ""


def _switch(flag: str, value: str, *, credentials: bool, absent: str, problems: list[str]) -> tuple[bool, str]:
    """An auto/true/false feature that needs JARVICE credentials: (on, why off)."""
    mode = value.strip().lower()
    if mode == "auto":
        return credentials, "" if credentials else f"no JARVICE credentials{absent}"
    if mode not in BOOLEANS:
        problems.append(f"{flag}: {value!r} is not auto, true or false")
        return False, ""
    if BOOLEANS[mode] and not credentials:
        problems.append(
            f"{flag} true needs JARVICE credentials: JARVICE_USERNAME[_FILE] and JARVICE_APIKEY[_FILE]{absent}"
        )
        return False, ""
    return BOOLEANS[mode], "" if BOOLEANS[mode] else f"{flag} false"


def parse_settings(argv: Sequence[str], env: Mapping[str, str], *, read_file: Callable[[str], str]) -> Settings:
    values = OptionValues(vars(build_parser(env).parse_args(list(argv))))
    raw, problems, number = values.raw, values.problems, values.number
    port = values.port()
    log_level = values.log_level()
    for key, flag, var in (
        ("pod_name", "--pod-name", "POD_NAME"),
        ("lease_namespace", "--lease-namespace", "POD_NAMESPACE"),
    ):
        if not str(raw[key]).strip():
            problems.append(f"{flag} (env {var}) is required: the replicas elect a leader through a Lease")
    # The defaults stand in when the given timing is refused: the problem is raised below anyway.
    timing = values.lease_timing() or LeaseTiming(duration=15, renew_deadline=10, retry=2)
    missing: list[str] = []
    username = _credential(env, "JARVICE_USERNAME", read_file=read_file, problems=problems, missing=missing)
    apikey = _credential(env, "JARVICE_APIKEY", read_file=read_file, problems=problems, missing=missing)
    absent = f" ({', '.join(missing)} not found: is the Secret there?)" if missing else ""
    api_url = str(raw["jarvice_api_url"]).strip()
    if not api_url.startswith(("https://", "http://")):
        problems.append(f"--jarvice-api-url: {api_url!r} is not an http(s) URL")
    credentials = (
        Credentials(api_url=api_url, username=username, apikey=Secret(apikey)) if username and apikey else None
    )
    mode = str(raw["reap_orphans"]).strip().lower()
    reap, reap_off = False, ""
    if mode == "auto":
        reap = credentials is not None
        reap_off = "" if reap else f"no JARVICE credentials (JARVICE_USERNAME[_FILE], JARVICE_APIKEY[_FILE]){absent}"
    elif mode in BOOLEANS:
        reap = BOOLEANS[mode]
        reap_off = "" if reap else "--reap-orphans false"
        if reap and credentials is None:
            problems.append(
                "--reap-orphans true needs JARVICE credentials: JARVICE_USERNAME[_FILE] and JARVICE_APIKEY[_FILE]"
                + absent
            )
    else:
        problems.append(f"--reap-orphans: {raw['reap_orphans']!r} is not auto, true or false")
    if (username or apikey) and credentials is None:
        problems.append("JARVICE credentials incomplete: set both JARVICE_USERNAME[_FILE] and JARVICE_APIKEY[_FILE]")
    job_events, job_events_off = _switch(
        "--job-events", str(raw["job_events"]), credentials=credentials is not None, absent=absent, problems=problems
    )
    reburst = values.boolean("reburst")
    cluster_name = str(raw["cluster_name"]).strip()
    try:
        contract.cluster_identity(_EXAMPLE_UID, cluster_name)
    except ValueError as exc:  # the message says what a name may be
        problems.append(f"--cluster-name (env NIMBIX_BURST_CLUSTER_NAME): {exc}")
    settings = Settings(
        host=str(raw["host"]),
        port=port,
        kubeconfig=str(raw["kubeconfig"]),
        log_level=log_level,
        identity=str(raw["pod_name"]).strip(),
        lease_namespace=str(raw["lease_namespace"]).strip(),
        lease_name=str(raw["lease_name"]).strip(),
        lease_timing=timing,
        watch_stale_seconds=number("watch_stale_seconds", minimum=1),
        reburst=reburst,
        stranded_seconds=number("stranded_seconds", minimum=1),
        reburst_cap=int(number("reburst_cap", minimum=0, integer=True)),
        scan_seconds=number("scan_seconds", minimum=0.1),
        reap_orphans=reap,
        reap_disabled_reason=reap_off,
        orphan_interval_seconds=number("orphan_interval_seconds", minimum=1),
        orphan_grace_seconds=number("orphan_grace_seconds", minimum=0),
        orphan_dry_run=values.boolean("orphan_dry_run"),
        credentials=credentials,
        cluster_name=cluster_name,
        job_events=job_events,
        job_events_disabled_reason=job_events_off,
        job_events_interval_seconds=number("job_events_interval_seconds", minimum=1),
        cost_refresh_seconds=number("cost_refresh_seconds", minimum=0),
        machines_refresh_seconds=number("machines_refresh_seconds", minimum=60),
        spend_interval_seconds=number("spend_interval_seconds", minimum=1),
        spend_refresh_seconds=number("spend_refresh_seconds", minimum=1),
        homecoming=values.boolean("homecoming") and credentials is not None,
        homecoming_seconds=number("homecoming_seconds", minimum=1),
    )
    gateway_url = str(raw["gateway_url"]).strip().rstrip("/")
    gateway_ca, gateway_token = str(raw["gateway_ca_file"]).strip(), str(raw["gateway_token_file"]).strip()
    if gateway_url:
        if not gateway_url.startswith("https://"):
            problems.append(f"--gateway-url (env CONTROLLER_GATEWAY_URL): {gateway_url!r} is not an https URL")
        if not gateway_ca or not gateway_token:
            problems.append(
                "--gateway-url needs --gateway-ca-file and --gateway-token-file (env CONTROLLER_GATEWAY_CA_FILE,"
                " CONTROLLER_GATEWAY_TOKEN_FILE): the gateway's CA and the controller's projected token"
            )
    if problems:
        raise SettingsError(problems)
    return replace(settings, gateway_url=gateway_url, gateway_ca_file=gateway_ca, gateway_token_file=gateway_token)
