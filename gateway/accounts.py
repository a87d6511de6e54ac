"""The JARVICE accounts the add-on pays with, and the namespaces each pays for (pure).

Read from the gateway's Secret (`accounts.json`), written by the cluster admin:

    {"accounts": [
        {"name": "research", "username": "alice", "apikey": "...", "url": "https://cloud.nimbix.net/api",
         "namespaces": ["team-a", "team-b"]},
        {"name": "shared", "username": "bob", "apikey": "...", "namespaces": ["*"]}]}

A namespace named by an account is paid by it; `"*"` pays for every namespace no account names. A
namespace named by two accounts, or two `"*"`, is refused: who pays must never be a guess.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jarvice.redaction import Secret

ANY_NAMESPACE: Final = "*"
DEFAULT_URL: Final = "https://cloud.nimbix.net/api"


class AccountsError(ValueError):
    """The accounts file is unusable; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    username: str
    apikey: Secret
    url: str
    namespaces: tuple[str, ...]


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


def _account(entry: object, where: str) -> Account:
    if not isinstance(entry, dict):
        raise AccountsError(f"{where}: each account must be an object")
    url = entry.get("url", DEFAULT_URL)
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise AccountsError(f"{where}: 'url' must be an http(s) URL, got {url!r}")
    return Account(
        name=_text(entry, "name", where),
        username=_text(entry, "username", where),
        apikey=Secret(_text(entry, "apikey", where)),
        url=url.rstrip("/"),
        namespaces=_namespaces(entry, where),
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
