"""The gateway's options: flags with environment defaults, every problem said at once (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kubeplumbing.options import Option, OptionValues, SettingsError, build_parser

DEFAULT_AUDIENCE: Final = "nimbix-burst-gateway"
DEFAULT_CONTROLLER_AUDIENCE: Final = "nimbix-burst-gateway-controller"
OPTIONS: Final[tuple[Option, ...]] = (
    ("--host", "GATEWAY_HOST", "0.0.0.0", "address to listen on"),  # noqa: S104 - a pod listens on all
    ("--port", "GATEWAY_PORT", "8443", "HTTPS port"),
    ("--tls-dir", "GATEWAY_TLS_DIR", "/tls", "directory with tls.crt and tls.key (cert-manager's Secret)"),
    ("--tls-reload-seconds", "GATEWAY_TLS_RELOAD_SECONDS", "60", "how often the certificate files are re-read"),
    ("--accounts-file", "GATEWAY_ACCOUNTS_FILE", "/accounts/accounts.json", "the JARVICE accounts (a Secret)"),
    ("--audience", "GATEWAY_AUDIENCE", DEFAULT_AUDIENCE, "the audience burst pods' projected tokens carry"),
    (
        "--controller-audience",
        "GATEWAY_CONTROLLER_AUDIENCE",
        DEFAULT_CONTROLLER_AUDIENCE,
        "the audience of the controller's projected token (its routes only)",
    ),
    (
        "--controller-service-account",
        "GATEWAY_CONTROLLER_SERVICE_ACCOUNT",
        "nimbix-burst-controller",
        "the controller's ServiceAccount in the add-on's namespace: the only caller of /controller/",
    ),
    ("--namespace", "POD_NAMESPACE", "nimbix-burst", "the add-on's namespace (the ledger ConfigMap lives there)"),
    ("--kubeconfig", "KUBECONFIG", "", "kubeconfig file; empty: in-cluster"),
    ("--pending-seconds", "GATEWAY_PENDING_SECONDS", "180", "how long a submit counts before JARVICE lists its job"),
    ("--sftp-port", "GATEWAY_SFTP_PORT", "0", "the vault SFTP endpoint's port (e.g. 2222); 0: not served"),
    (
        "--ssh-host-key-file",
        "GATEWAY_SSH_HOST_KEY_FILE",
        "/ssh/ssh_host_key",
        "the SFTP endpoint's SSH host key (a Secret; every replica serves the same key)",
    ),
    ("--log-level", "LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"),
)


@dataclass(frozen=True, slots=True)
class Settings:
    host: str
    port: int
    tls_dir: Path
    tls_reload_seconds: float
    accounts_file: Path
    audience: str
    controller_audience: str
    controller_service_account: str
    namespace: str
    kubeconfig: str
    pending_seconds: float
    log_level: str
    sftp_port: int = 0
    ssh_host_key_file: Path = Path("/ssh/ssh_host_key")


def _sftp_port(raw: str, problems: list[str]) -> int:
    if raw.strip().isdigit() and 0 <= int(raw) < 65536:
        return int(raw)
    problems.append(f"--sftp-port: must be a port number, or 0 for no SFTP endpoint, got {raw!r}")
    return 0


def parse_settings(argv: Sequence[str], env: Mapping[str, str]) -> Settings:
    parser = build_parser(OPTIONS, env, prog="nimbix-burst-gateway", description="The add-on's JARVICE gateway")
    values = OptionValues(vars(parser.parse_args(list(argv))))
    settings = Settings(
        host=str(values.raw["host"]),
        port=values.port(),
        tls_dir=Path(values.raw["tls_dir"]),
        tls_reload_seconds=values.number("tls_reload_seconds", minimum=1),
        accounts_file=Path(values.raw["accounts_file"]),
        audience=str(values.raw["audience"]).strip(),
        controller_audience=str(values.raw["controller_audience"]).strip(),
        controller_service_account=str(values.raw["controller_service_account"]).strip(),
        namespace=str(values.raw["namespace"]).strip(),
        kubeconfig=str(values.raw["kubeconfig"]),
        pending_seconds=values.number("pending_seconds", minimum=10),
        log_level=values.log_level(),
        sftp_port=_sftp_port(str(values.raw["sftp_port"]), values.problems),
        ssh_host_key_file=Path(values.raw["ssh_host_key_file"]),
    )
    if not settings.audience:
        values.problems.append("--audience: must not be empty")
    if not settings.controller_audience or settings.controller_audience == settings.audience:
        values.problems.append("--controller-audience: must be set, and differ from --audience (burst pods' tokens)")
    if not settings.controller_service_account:
        values.problems.append("--controller-service-account: must not be empty")
    if not settings.namespace:
        values.problems.append("--namespace: must not be empty")
    if values.problems:
        raise SettingsError(values.problems, program="gateway")
    return settings
