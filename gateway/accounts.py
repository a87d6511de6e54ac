"""The JARVICE accounts the add-on pays with, and the namespaces each pays for (pure).

Read from the gateway's Secret (`accounts.json`), written by the cluster admin:

    {"accounts": [
        {"name": "research", "username": "alice", "apikey": "...", "url": "https://cloud.nimbix.net/api",
         "namespaces": ["team-a", "team-b"]},
        {"name": "shared", "username": "bob", "apikey": "...", "namespaces": ["*"],
         "vault": {"address": "drop.jarvice.com:22", "host_key": "ssh-ed25519 AAAA..."}}]}

`vault` (optional) is where the gateway stages the namespaces' data (its SFTP endpoint): the vault's
`address` (host or host:port, port 22 unless told) and its `host_key` (the public key, as a
known_hosts line's key part: no key is trusted on first use). It logs in as `username` with `password`,
or with `private_key` (an OpenSSH or PEM private key); by default as the account's username with its
API key, as JARVICE's vaults take.

A namespace named by an account is paid by it; `"*"` pays for every namespace no account names. A
namespace named by two accounts, or two `"*"`, is refused: who pays must never be a guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jarvice.redaction import Secret

ANY_NAMESPACE: Final = "*"
DEFAULT_URL: Final = "https://cloud.nimbix.net/api"
DEFAULT_SFTP_PORT: Final = 22
VAULT_KEYS: Final = frozenset({"address", "host_key", "username", "password", "private_key"})
HOST_KEY_RE: Final = re.compile(
    r"^(ssh-[a-z0-9-]+|ecdsa-sha2-nistp(256|384|521)|sk-[a-z0-9@.-]+) [A-Za-z0-9+/]+={0,2}$"
)


class AccountsError(ValueError):
    """The accounts file is unusable; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class VaultAccess:
    """How the gateway reaches an account's vault over SFTP; `private_key` None: `password`."""

    host: str
    port: int
    host_key: str
    username: str
    password: Secret | None
    private_key: Secret | None

    def known_hosts_line(self) -> str:
        where = self.host if self.port == DEFAULT_SFTP_PORT else f"[{self.host}]:{self.port}"
        return f"{where} {self.host_key}\n"


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    username: str
    apikey: Secret
    url: str
    namespaces: tuple[str, ...]
    vault: VaultAccess | None = None


@dataclass(frozen=True, slots=True)
class Accounts:
    accounts: tuple[Account, ...]

    def for_namespace(self, namespace: str) -> Account | None:
        """The account that pays for `namespace`: the one naming it, else the `"*"` one, else None."""
        fallback = None
        for account in self.accounts:
            if namespace in account.namespaces:
                return account
            if ANY_NAMESPACE in account.namespaces:
                fallback = account
        return fallback


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise AccountsError(f"{where}: {key!r} must be a non-empty string")
    return value.strip()


def _namespaces(entry: Mapping[str, Any], where: str) -> tuple[str, ...]:
    value = entry.get("namespaces")
    if not isinstance(value, list) or not value or not all(isinstance(n, str) and n.strip() for n in value):
        raise AccountsError(f'{where}: "namespaces" must be a non-empty list of namespace names (or "*")')
    return tuple(n.strip() for n in value)


def _address(raw: object, where: str) -> tuple[str, int]:
    if not isinstance(raw, str) or not raw.strip():
        raise AccountsError(f"{where}: vault 'address' must be host or host:port")
    text = raw.strip()
    head, colon, tail = text.rpartition(":")
    host, port = (head, tail) if colon and not head.endswith(":") and "]" not in tail else (text, "")
    host = host.strip("[]")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise AccountsError(f"{where}: vault 'address' port must be 1 to 65535, got {raw!r}")
    if not host or any(c in host for c in " /@"):
        raise AccountsError(f"{where}: vault 'address' must be host or host:port, got {raw!r}")
    return host, int(port) if port else DEFAULT_SFTP_PORT


def _vault(raw: object, *, username: str, apikey: str, where: str) -> VaultAccess | None:
    if raw is None:
        return None
    where = f"{where} vault"
    if not isinstance(raw, dict):
        raise AccountsError(f"{where}: must be an object with 'address' and 'host_key'")
    unknown = sorted(set(raw) - VAULT_KEYS)
    if unknown:
        raise AccountsError(f"{where}: unknown keys {unknown}; known: {sorted(VAULT_KEYS)}")
    host, port = _address(raw.get("address"), where)
    host_key = " ".join(str(raw.get("host_key", "")).split()[:2])
    if not HOST_KEY_RE.match(host_key):
        raise AccountsError(
            f"{where}: 'host_key' must be the vault's public host key, e.g. 'ssh-ed25519 AAAA...'"
            " (ssh-keyscan prints it); no key is trusted on first use"
        )
    if "password" in raw and "private_key" in raw:
        raise AccountsError(f"{where}: give 'password' or 'private_key', not both")
    private_key = _text(raw, "private_key", where) if "private_key" in raw else None
    if private_key is not None and "PRIVATE KEY" not in private_key:
        raise AccountsError(f"{where}: 'private_key' must be a private key's text (-----BEGIN ... PRIVATE KEY-----)")
    password = _text(raw, "password", where) if "password" in raw else (None if private_key else apikey)
    return VaultAccess(
        host=host,
        port=port,
        host_key=host_key,
        username=_text(raw, "username", where) if "username" in raw else username,
        password=Secret(password) if password is not None else None,
        private_key=Secret(private_key + "\n") if private_key is not None else None,
    )


def _account(entry: object, where: str) -> Account:
    if not isinstance(entry, dict):
        raise AccountsError(f"{where}: each account must be an object")
    url = entry.get("url", DEFAULT_URL)
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise AccountsError(f"{where}: 'url' must be an http(s) URL, got {url!r}")
    username, apikey = _text(entry, "username", where), _text(entry, "apikey", where)
    return Account(
        name=_text(entry, "name", where),
        username=username,
        apikey=Secret(apikey),
        url=url.rstrip("/"),
        namespaces=_namespaces(entry, where),
        vault=_vault(entry.get("vault"), username=username, apikey=apikey, where=where),
    )


def _check_unique(accounts: Sequence[Account]) -> None:
    payer: dict[str, str] = {}
    names: set[str] = set()
    for account in accounts:
        if account.name in names:
            raise AccountsError(f"account name {account.name!r} is given twice")
        names.add(account.name)
        for namespace in account.namespaces:
            if namespace in payer:
                raise AccountsError(
                    f"namespace {namespace!r} is paid by both {payer[namespace]!r} and {account.name!r}: name it once"
                )
            payer[namespace] = account.name


def parse_accounts(text: str) -> Accounts:
    """The accounts file's JSON; AccountsError names what to fix (never the keys)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AccountsError(f"accounts.json is not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(document, dict) or not isinstance(document.get("accounts"), list) or not document["accounts"]:
        raise AccountsError('accounts.json must be {"accounts": [ ... ]} with at least one account')
    accounts = [_account(entry, f"account {i + 1}") for i, entry in enumerate(document["accounts"])]
    _check_unique(accounts)
    return Accounts(tuple(accounts))
