"""Where the vault is and what bounds the copy-back, from the environment: the vault's SFTP address and
host key, whether the work directory is kept, the pod's grace period, and the credential files that are
never staged. Pure; a value the runner cannot use raises `entrypoint.staging.StagingError`.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from entrypoint.staging import StagingError
from jarvice import contract

ENV_VAULT_SFTP: Final = contract.ENV_VAULT_SFTP  # host[:port]; default: JARVICE_API_URL's host, port 22
ENV_VAULT_KNOWN_HOSTS: Final = contract.ENV_VAULT_KNOWN_HOSTS  # a known_hosts file for the vault's host key
ENV_VAULT_HOST_KEY: Final = contract.ENV_VAULT_HOST_KEY  # or the host key itself (the gateway's, from the webhook)
_HOST_KEY_RE: Final = re.compile(r"^[a-z0-9@.-]+ [A-Za-z0-9+/]+={0,2}$")
ENV_KEEP_VAULT_DIR: Final = "NIMBIX_BURST_KEEP_VAULT_DIR"  # 1: keep the per-job directory after the copy-back
DEFAULT_SFTP_PORT: Final = 22


@dataclass(frozen=True, slots=True)
class VaultSettings:
    host: str
    port: int
    known_hosts: str | None
    keep_job_dir: bool
    host_key: str | None = None  # the vault's public key ("ssh-ed25519 AAAA..."): checked instead of the file

    def known_hosts_line(self) -> str | None:
        """The host key as a known_hosts line for this address; None without one."""
        if self.host_key is None:
            return None
        where = self.host if self.port == DEFAULT_SFTP_PORT else f"[{self.host}]:{self.port}"
        return f"{where} {self.host_key}\n"


# After a signal, the copy-back stops this long before the pod's grace period ends: the runner still
# says how it ended (its log, the termination message) before the kubelet's SIGKILL.
GRACE_MARGIN_SECONDS: Final = 5.0
# A grace period longer than a week is no pod's (a typo): refused rather than waited for.
MAX_GRACE_SECONDS: Final = 7 * 24 * 3600


def parse_grace_seconds(env: Mapping[str, str]) -> int:
    """The pod's grace period (NIMBIX_BURST_GRACE_SECONDS, set by the webhook); the least a burst pod
    gets when unset. Raises StagingError naming the variable."""
    raw = env.get(contract.ENV_GRACE_SECONDS, "").strip()
    if not raw:
        return contract.MIN_TERMINATION_GRACE_SECONDS
    if not raw.isdigit() or not 0 < int(raw) <= MAX_GRACE_SECONDS:
        raise StagingError(f"{contract.ENV_GRACE_SECONDS} must be the pod's grace period in whole seconds, got {raw!r}")
    return int(raw)


def copy_back_seconds(grace_seconds: int) -> float:
    """How long after a signal the copy-back may run: the pod's grace period less a margin."""
    return max(0.0, grace_seconds - GRACE_MARGIN_SECONDS)


def parse_vault_settings(env: Mapping[str, str], *, api_host: str) -> VaultSettings:
    """The vault's SFTP address and options; raises StagingError naming the variable to fix."""
    raw = env.get(ENV_VAULT_SFTP, "").strip()
    host, port = api_host, DEFAULT_SFTP_PORT
    if raw:
        head, colon, tail = raw.rpartition(":")
        if colon and tail.isdigit() and not head.endswith(":"):
            host, port = head.strip("[]"), int(tail)
        else:
            host = raw.strip("[]")
        if not host or not 0 < port < 65536:
            raise StagingError(f"{ENV_VAULT_SFTP} must be host or host:port, got {raw!r}")
    if not host:
        raise StagingError(f"the vault's host is unknown: set {ENV_VAULT_SFTP}")
    known_hosts = env.get(ENV_VAULT_KNOWN_HOSTS, "").strip() or None
    if known_hosts is not None and not known_hosts.startswith("/"):
        raise StagingError(f"{ENV_VAULT_KNOWN_HOSTS} must be an absolute path, got {known_hosts!r}")
    keep = env.get(ENV_KEEP_VAULT_DIR, "").strip()
    if keep not in ("", "0", "1"):
        raise StagingError(f"{ENV_KEEP_VAULT_DIR} must be 0 or 1, got {keep!r}")
    host_key = " ".join(env.get(ENV_VAULT_HOST_KEY, "").split()[:2]) or None
    if host_key is not None and not _HOST_KEY_RE.match(host_key):
        raise StagingError(
            f"{ENV_VAULT_HOST_KEY} must be a public host key ('ssh-ed25519 AAAA...'), got {host_key[:40]!r}"
        )
    return VaultSettings(host=host, port=port, known_hosts=known_hosts, keep_job_dir=keep == "1", host_key=host_key)


# The runner's credential files (entrypoint.remote_settings.ENV_USERNAME_FILE, ENV_APIKEY_FILE): never
# staged, even under a staged directory (the API key is also the vault's SFTP password).
CREDENTIAL_FILE_VARIABLES: Final = ("JARVICE_USERNAME_FILE", "JARVICE_APIKEY_FILE")


def credential_files(env: Mapping[str, str]) -> frozenset[str]:
    return frozenset(value.strip() for name in CREDENTIAL_FILE_VARIABLES if (value := env.get(name, "")).strip())
