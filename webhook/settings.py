"""Webhook settings: CLI flags with environment defaults, validated once at start.

Every problem is collected and reported together, so one restart fixes them all.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs

from jarvice import contract
from kubeplumbing import options
from kubeplumbing.leadership import LeaseTiming
from kubeplumbing.options import Option, OptionValues
from kubeplumbing.options import build_parser as build_option_parser
from webhook import gpu_models, walltime
from webhook.budget import OVER_BUDGET_ACTIONS, OverBudget
from webhook.resources import QuantityError, parse_quantity
from webhook.rewrite_terms import RewritePolicy

DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu")
# controller-runtime allows 7 MiB (two 3 MB objects + overhead); a little more costs nothing.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# A label key: an optional DNS-subdomain prefix and '/', then a name (Kubernetes validation).
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_ANY_UUID = "00000000-0000-0000-0000-000000000000"  # checks a cluster name alone with contract.cluster_identity


class SettingsError(options.SettingsError):
    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(problems, program="webhook")


@dataclass(frozen=True, slots=True)
class LeaderElection:
    """Several replicas: one decides (the Lease holder), the others forward to it."""

    lease_namespace: str
    lease_name: str
    identity: str  # this replica's name in the Lease (the pod name)
    advertise_url: str  # where the others reach this replica (https://<pod IP>:<port>)
    peer_server_name: str  # the name the serving certificate is valid for (the Service DNS name)
    peer_ca_file: Path
    timing: LeaseTiming
    wait_seconds: float  # how long a review waits for a leader before it gets no local promise


@dataclass(frozen=True, slots=True)
class Settings:
    host: str
    port: int
    tls_dir: Path
    tls_reload_seconds: float
    kubeconfig: str  # "" -> in-cluster configuration
    max_body_bytes: int
    watch_stale_seconds: float
    reservation_ttl_seconds: float
    max_reservations: int
    max_reservations_per_namespace: int
    scheduler_names: tuple[str, ...]
    log_level: str
    policy: RewritePolicy
    leader_election: LeaderElection | None = None  # None: a single replica decides alone
    drain_seconds: float = 5.0  # how long the preStop hook (/drain) keeps a stopping replica serving
    # CA bundle for client certificates: when set, /mutate answers only clients whose certificate it
    # signed (the API server, configured through its AdmissionConfiguration). None: any TLS client.
    client_ca_file: Path | None = None
    # A pod that would burst past its namespace's budget: left local (waits for GPUs) or denied.
    over_budget: OverBudget = "local"
    # Where the controller's spend record is read ("": nowhere, so namespaces with cost caps never burst).
    spend_namespace: str = ""
    spend_poll_seconds: float = 5.0
    spend_max_age_seconds: float = 300.0
    # How long an Indexed Job's pod waits for its Job to reach the watch cache (its size decides the gang).
    job_wait_seconds: float = 2.0

    @property
    def gpu_resources(self) -> tuple[str, ...]:
        return self.policy.gpu_resources


OPTIONS: tuple[Option, ...] = (
    ("--host", "WEBHOOK_HOST", "0.0.0.0", "address to listen on"),  # noqa: S104 - a pod listens on all
    ("--port", "WEBHOOK_PORT", "8443", "HTTPS port"),
    ("--tls-dir", "WEBHOOK_TLS_DIR", "/etc/nimbix-burst/tls", "directory holding tls.crt and tls.key"),
    ("--tls-reload-seconds", "WEBHOOK_TLS_RELOAD_SECONDS", "30", "how often to check the certificate files"),
    ("--client-ca-file", "WEBHOOK_CLIENT_CA_FILE", "", "CA bundle; /mutate then requires a client cert it signed"),
    ("--kubeconfig", "KUBECONFIG", "", "kubeconfig path; empty means in-cluster configuration"),
    ("--gpu-resources", "WEBHOOK_GPU_RESOURCES", ",".join(DEFAULT_GPU_RESOURCES), "GPU resource names"),
    ("--remote-cpu", "WEBHOOK_REMOTE_CPU", "100m", "CPU request/limit of a burst pod's runner"),
    ("--remote-memory", "WEBHOOK_REMOTE_MEMORY", "128Mi", "memory request/limit of a burst pod's runner"),
    ("--staging-cpu-limit", "WEBHOOK_STAGING_CPU_LIMIT", "2", "CPU limit of a runner that stages data"),
    ("--strip-node-selector-keys", "WEBHOOK_STRIP_NODE_SELECTOR_KEYS", "", "nodeSelector keys removed on burst"),
    ("--strip-toleration-keys", "WEBHOOK_STRIP_TOLERATION_KEYS", "", "toleration keys removed on burst"),
    ("--strip-runtime-classes", "WEBHOOK_STRIP_RUNTIME_CLASSES", "", "runtimeClassName values removed on burst"),
    ("--max-body-bytes", "WEBHOOK_MAX_BODY_BYTES", str(DEFAULT_MAX_BODY_BYTES), "largest AdmissionReview"),
    ("--watch-stale-seconds", "WEBHOOK_WATCH_STALE_SECONDS", "60", "not ready after the watch is broken this long"),
    (
        "--job-wait-seconds",
        "WEBHOOK_JOB_WAIT_SECONDS",
        "2",
        "how long an Indexed Job's pod waits for its Job to reach the watch cache",
    ),
    ("--reservation-ttl-seconds", "WEBHOOK_RESERVATION_TTL_SECONDS", "15", "how long a local admission holds GPUs"),
    # A reservation lives until the watch shows its pod (well under a second normally), so only reviews
    # that no pod follows (forged, or a flood) pile up; these bound how many GPUs they can hold.
    ("--max-reservations", "WEBHOOK_MAX_RESERVATIONS", "256", "local admissions awaiting their pod, in total"),
    (
        "--max-reservations-per-namespace",
        "WEBHOOK_MAX_RESERVATIONS_PER_NAMESPACE",
        "64",
        "local admissions awaiting their pod, per namespace",
    ),
    ("--scheduler-names", "WEBHOOK_SCHEDULER_NAMES", "default-scheduler", "schedulers whose pending pods claim GPUs"),
    ("--over-budget", "WEBHOOK_OVER_BUDGET", "local", "past a namespace's burst budget: local (wait) or deny"),
    # The same name the controller is given: both make the cluster identity from it (contract.cluster_identity).
    ("--cluster-name", "NIMBIX_BURST_CLUSTER_NAME", "", "readable prefix of the cluster identity in job labels"),
    # What a burst pod needs to reach JARVICE, written by the webhook (docs/install.md, "What a burst pod needs").
    (
        "--credentials-secret",
        "WEBHOOK_CREDENTIALS_SECRET",
        contract.DEFAULT_CREDENTIALS_SECRET,
        "Secret in each namespace mounted into burst containers ('' for none)",
    ),
    ("--jarvice-api-url", "WEBHOOK_JARVICE_API_URL", "", "JARVICE_API_URL for burst containers that set none"),
    ("--default-app", "WEBHOOK_DEFAULT_APP", "", "APP_NAME for bursts whose namespace names no jarvice-app"),
    # The add-on's JARVICE gateway (docs/money-safety.md#who-holds-the-key): set, burst pods carry no key.
    ("--gateway-url", "WEBHOOK_GATEWAY_URL", "", "the JARVICE gateway's URL ('' for none: the namespace Secret)"),
    ("--gateway-audience", "WEBHOOK_GATEWAY_AUDIENCE", "nimbix-burst-gateway", "audience of burst pods' tokens"),
    ("--gateway-ca-file", "WEBHOOK_GATEWAY_CA_FILE", "", "CA (PEM) that signed the gateway's certificate"),
    ("--gateway-sftp", "WEBHOOK_GATEWAY_SFTP", "", "the gateway's SFTP endpoint, host:port ('' for none)"),
    ("--gateway-ssh-host-key", "WEBHOOK_GATEWAY_SSH_HOST_KEY", "", "its SSH host key: 'ssh-ed25519 AAAA...'"),
    (
        "--default-walltime",
        "WEBHOOK_DEFAULT_WALLTIME",
        walltime.DEFAULT_WALLTIME,
        "burst job time limit without a deadline",
    ),
    # GPU models (docs/gpu-models.md): the node label a pod selects its model by, and the mapping of
    # its values to JARVICE machine types (deploy/gpu-models.yaml, mounted from a ConfigMap).
    (
        "--gpu-model-label",
        "WEBHOOK_GPU_MODEL_LABEL",
        gpu_models.DEFAULT_MODEL_LABEL,
        "node label naming the GPU model",
    ),
    ("--gpu-models-file", "WEBHOOK_GPU_MODELS_FILE", "", "YAML map: GPU model -> JARVICE machine types"),
    ("--log-level", "WEBHOOK_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"),
    ("--drain-seconds", "WEBHOOK_DRAIN_SECONDS", "5", "how long /drain (the preStop hook) serves on, closing"),
    # Replicas (docs/install.md, "Two replicas, one promise"); identity and address come from the downward API.
    ("--leader-election", "WEBHOOK_LEADER_ELECTION", "false", "true: the Lease holder decides, others forward"),
    ("--lease-name", "WEBHOOK_LEASE_NAME", "nimbix-burst-webhook-leader", "the Lease the replicas elect through"),
    ("--lease-namespace", "POD_NAMESPACE", "", "namespace of the Lease (the webhook's own)"),
    ("--pod-name", "POD_NAME", "", "this replica's identity in the Lease"),
    ("--pod-ip", "POD_IP", "", "this replica's address; the advertised URL is https://<pod-ip>:<port>"),
    ("--advertise-url", "WEBHOOK_ADVERTISE_URL", "", "where other replicas reach this one (overrides --pod-ip)"),
    ("--peer-server-name", "WEBHOOK_PEER_SERVER_NAME", "", "DNS name the serving certificate is valid for"),
    ("--peer-ca-file", "WEBHOOK_PEER_CA_FILE", "", "CA that signed the serving certificate (default <tls-dir>/ca.crt)"),
    ("--lease-duration-seconds", "WEBHOOK_LEASE_DURATION_SECONDS", "8", "takeover delay after a leader dies"),
    ("--lease-renew-deadline-seconds", "WEBHOOK_LEASE_RENEW_DEADLINE_SECONDS", "5", "leader stops if not renewed"),
    # The controller's spend record (docs/money-safety.md): what JARVICE holds, and the machines' prices.
    (
        "--spend-namespace",
        "WEBHOOK_SPEND_NAMESPACE",
        "",
        "namespace of the ConfigMap nimbix-burst-spend (default: the webhook's own, POD_NAMESPACE)",
    ),
    ("--spend-poll-seconds", "WEBHOOK_SPEND_POLL_SECONDS", "5", "how often the spend record is read"),
    (
        "--spend-max-age-seconds",
        "WEBHOOK_SPEND_MAX_AGE_SECONDS",
        "300",
        "an older spend record stops bursts in namespaces with cost caps",
    ),
    ("--lease-retry-seconds", "WEBHOOK_LEASE_RETRY_SECONDS", "0.5", "Lease read/renew interval"),
    ("--leader-wait-seconds", "WEBHOOK_LEADER_WAIT_SECONDS", "3", "how long a review waits for a leader"),
)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    return build_option_parser(OPTIONS, env, prog="python -m webhook", description="nimbix-burst admission webhook")


def _csv(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def parse_settings(argv: Sequence[str], env: Mapping[str, str], *, check_files: bool = True) -> Settings:
    values = OptionValues(vars(build_parser(env).parse_args(list(argv))))
    raw, problems, number = values.raw, values.problems, values.number
    port = values.port()
    gpu_resources = _csv(raw["gpu_resources"])
    if not gpu_resources:
        problems.append("--gpu-resources: give at least one resource name, e.g. nvidia.com/gpu")
    for name in gpu_resources:
        if not _RESOURCE_NAME.match(name):
            problems.append(f"--gpu-resources: {name!r} is not a valid resource name")
    for key in ("remote_cpu", "remote_memory", "staging_cpu_limit"):
        try:
            if parse_quantity(raw[key]) <= 0:
                problems.append(f"--{key.replace('_', '-')}: must be positive")
        except QuantityError as exc:
            problems.append(f"--{key.replace('_', '-')}: {exc} (examples: 100m, 128Mi)")
    with contextlib.suppress(QuantityError):
        if parse_quantity(raw["staging_cpu_limit"]) < parse_quantity(raw["remote_cpu"]):
            problems.append("--staging-cpu-limit: must be at least --remote-cpu (a limit below the request is invalid)")
    max_reservations = int(number("max_reservations", minimum=1, integer=True))
    max_per_namespace = int(number("max_reservations_per_namespace", minimum=1, integer=True))
    if max_per_namespace > max_reservations:
        problems.append(
            f"--max-reservations-per-namespace: {max_per_namespace} exceeds --max-reservations {max_reservations}"
        )
    scheduler_names = _csv(raw["scheduler_names"])
    if not scheduler_names:
        problems.append("--scheduler-names: give at least one scheduler name, e.g. default-scheduler")
    over_budget: OverBudget = "local"
    if raw["over_budget"] == "deny":
        over_budget = "deny"
    elif raw["over_budget"] != "local":
        problems.append(f"--over-budget: {raw['over_budget']!r} is not one of {', '.join(OVER_BUDGET_ACTIONS)}")
    cluster_name = str(raw["cluster_name"]).strip()
    try:
        contract.cluster_identity(_ANY_UUID, cluster_name)
    except ValueError as exc:
        problems.append(f"--cluster-name: {exc} (the same name as the controller's, or empty)")
    default_walltime = walltime.parse_walltime(str(raw["default_walltime"]))
    if default_walltime is None:
        problems.append(
            f"--default-walltime: {raw['default_walltime']!r} is not HH:MM:SS (at most 99999:59:59, not zero),"
            f" e.g. {walltime.DEFAULT_WALLTIME}"
        )
    log_level = values.log_level()
    tls_dir = Path(raw["tls_dir"])
    if check_files:
        for filename in ("tls.crt", "tls.key"):
            if not (tls_dir / filename).is_file():
                problems.append(
                    f"--tls-dir: {tls_dir / filename} does not exist (mount the serving certificate Secret)"
                )
    client_ca_file = Path(raw["client_ca_file"]) if raw["client_ca_file"].strip() else None
    if check_files and client_ca_file is not None and not client_ca_file.is_file():
        problems.append(
            f"--client-ca-file: {client_ca_file} does not exist (mount the CA that signed the API server's "
            "webhook client certificate, or leave it empty to accept any client)"
        )
    leader_election = _leader_election(values, port=port, tls_dir=tls_dir)
    if check_files and leader_election is not None and not leader_election.peer_ca_file.is_file():
        problems.append(
            f"--peer-ca-file: {leader_election.peer_ca_file} does not exist (the CA that signed the serving "
            "certificate, which replicas trust when they forward to the leader: ca.crt in the serving "
            "certificate's Secret, as cert-manager writes it, or the file the Helm chart mounts from "
            "tls.caBundle)"
        )
    model_label = str(raw["gpu_model_label"]).strip()
    if len(model_label) > 316 or not _LABEL_KEY.match(model_label):  # 253 + "/" + 63 at most
        problems.append(f"--gpu-model-label: {model_label!r} is not a label key, e.g. {gpu_models.DEFAULT_MODEL_LABEL}")
    models = _load_gpu_models(str(raw["gpu_models_file"]).strip(), problems)
    gateway_url = str(raw["gateway_url"]).strip()
    gateway_ca = _gateway_ca(gateway_url, str(raw["gateway_ca_file"]).strip(), problems, check_files=check_files)
    gateway_sftp, gateway_host_key = _gateway_sftp(
        gateway_url, str(raw["gateway_sftp"]).strip(), str(raw["gateway_ssh_host_key"]).strip(), problems
    )
    settings = Settings(
        host=raw["host"],
        port=port,
        tls_dir=tls_dir,
        tls_reload_seconds=number("tls_reload_seconds", minimum=0.1),
        kubeconfig=raw["kubeconfig"],
        max_body_bytes=int(number("max_body_bytes", minimum=4096, integer=True)),
        watch_stale_seconds=number("watch_stale_seconds", minimum=1),
        reservation_ttl_seconds=number("reservation_ttl_seconds", minimum=1),
        max_reservations=max_reservations,
        max_reservations_per_namespace=max_per_namespace,
        scheduler_names=scheduler_names,
        log_level=log_level,
        policy=RewritePolicy(
            gpu_resources=gpu_resources,
            remote_cpu=raw["remote_cpu"],
            remote_memory=raw["remote_memory"],
            staging_cpu_limit=raw["staging_cpu_limit"],
            strip_node_selector_keys=frozenset(_csv(raw["strip_node_selector_keys"])),
            strip_toleration_keys=frozenset(_csv(raw["strip_toleration_keys"])),
            strip_runtime_classes=frozenset(_csv(raw["strip_runtime_classes"])),
            cluster_name=cluster_name,
            default_walltime_seconds=default_walltime or 0,
            gpu_model_label=model_label,
            gpu_model_map=models,
            credentials_secret=str(raw["credentials_secret"]).strip(),
            jarvice_api_url=str(raw["jarvice_api_url"]).strip(),
            default_app=str(raw["default_app"]).strip(),
            gateway_url=gateway_url,
            gateway_audience=str(raw["gateway_audience"]).strip(),
            gateway_ca=gateway_ca,
            gateway_sftp=gateway_sftp,
            gateway_ssh_host_key=gateway_host_key,
        ),
        leader_election=leader_election,
        client_ca_file=client_ca_file,
        over_budget=over_budget,
        drain_seconds=number("drain_seconds", minimum=0),
        spend_namespace=str(raw["spend_namespace"]).strip() or str(raw["lease_namespace"]).strip(),
        spend_poll_seconds=number("spend_poll_seconds", minimum=0.5),
        spend_max_age_seconds=number("spend_max_age_seconds", minimum=10),
        job_wait_seconds=number("job_wait_seconds", minimum=0),
    )
    if problems:
        raise SettingsError(problems)
    return settings


_SSH_HOST_KEY = re.compile(r"^[a-z0-9@.-]+ [A-Za-z0-9+/]+={0,2}$")
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$")


def _gateway_sftp(url: str, address: str, host_key: str, problems: list[str]) -> tuple[str, str]:
    """The gateway's SFTP endpoint and host key, both or neither, and only with --gateway-url."""
    host_key = " ".join(host_key.split()[:2])
    if not address and not host_key:
        return "", ""
    if not url:
        problems.append("--gateway-sftp: needs --gateway-url (pods stage through the gateway they submit through)")
    match = _HOST_PORT.match(address)
    if not match or not 0 < int(match.group(2)) < 65536:
        problems.append(
            f"--gateway-sftp: {address!r} must be host:port, e.g. nimbix-burst-gateway.nimbix-burst.svc:2222"
        )
    if not _SSH_HOST_KEY.match(host_key):
        problems.append(
            "--gateway-ssh-host-key: must be the gateway's public SSH host key, e.g. 'ssh-ed25519 AAAA...'"
            f" (its Secret's ssh_host_key.pub), got {host_key[:40]!r}"
        )
    return address, host_key


def _gateway_ca(url: str, path: str, problems: list[str], *, check_files: bool) -> str:
    """The gateway CA's PEM text, given to burst pods to trust the gateway ("" without a gateway)."""
    if not url:
        return ""
    if not url.startswith("https://"):
        problems.append(f"--gateway-url: {url!r} must be an https:// URL (the pods' tokens travel to it)")
    if not path or not check_files:
        return ""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        problems.append(f"--gateway-ca-file: cannot read {path}: {exc.strerror} (mount ca.crt of the gateway's Secret)")
        return ""
    if "-----BEGIN CERTIFICATE-----" not in text:
        problems.append(f"--gateway-ca-file: {path} holds no PEM certificate")
    return text.strip()


def _load_gpu_models(path: str, problems: list[str]) -> gpu_models.ModelMap | None:
    """The mapping from `path` (YAML; JSON is YAML too), None when no file is configured: a pod that
    selects a GPU model is then never burst. Problems say what to fix in the file."""
    if not path:
        return None
    flag = "--gpu-models-file"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{flag}: cannot read {path}: {exc} (mount the nimbix-burst-gpu-models ConfigMap there)")
        return None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problems.append(f"{flag}: {path} is not YAML: {exc}".replace("\n", " "))
        return None
    try:
        return gpu_models.parse_model_map(document, source=f"{flag} {path}")
    except gpu_models.ModelMapError as exc:
        problems.extend(exc.problems)
        return None


def _leader_election(values: OptionValues, *, port: int, tls_dir: Path) -> LeaderElection | None:
    if not values.boolean("leader_election", empty=False):
        return None
    raw, problems, number = values.raw, values.problems, values.number
    missing = [
        f"{flag} (env {var})"
        for key, flag, var in (
            ("lease_namespace", "--lease-namespace", "POD_NAMESPACE"),
            ("pod_name", "--pod-name", "POD_NAME"),
            ("peer_server_name", "--peer-server-name", "WEBHOOK_PEER_SERVER_NAME"),
        )
        if not str(raw[key]).strip()
    ]
    url = str(raw["advertise_url"]).strip() or (f"https://{raw['pod_ip'].strip()}:{port}" if raw["pod_ip"] else "")
    if not url:
        missing.append("--advertise-url or --pod-ip (env POD_IP from the downward API)")
    elif not url.startswith("https://"):
        problems.append(f"--advertise-url: {url!r} must be an https:// URL")
    if missing:
        problems.append("--leader-election true needs " + ", ".join(missing))
    timing = values.lease_timing()
    if timing is None:
        return None
    return LeaderElection(
        lease_namespace=raw["lease_namespace"].strip(),
        lease_name=raw["lease_name"].strip(),
        identity=raw["pod_name"].strip(),
        advertise_url=url,
        peer_server_name=raw["peer_server_name"].strip(),
        peer_ca_file=Path(raw["peer_ca_file"]) if raw["peer_ca_file"] else tls_dir / "ca.crt",
        timing=timing,
        wait_seconds=number("leader_wait_seconds", minimum=0.1),
    )
