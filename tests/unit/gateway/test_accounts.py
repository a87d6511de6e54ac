"""Who pays for which namespace: the accounts file, read with every mistake named (never a key)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from gateway.accounts import AccountsError, parse_accounts


def _file(*accounts: Mapping[str, object]) -> str:
    return json.dumps({"accounts": list(accounts)})


TEAM = {"name": "research", "username": "alice", "apikey": "k-research-0001", "namespaces": ["team-a", "team-b"]}
SHARED = {
    "name": "shared",
    "username": "bob",
    "apikey": "k-shared-0002",
    "url": "http://10.0.0.1:8080/",
    "namespaces": ["*"],
}


@pytest.mark.parametrize(
    ("namespace", "payer"),
    [("team-a", "research"), ("team-b", "research"), ("other", "shared")],
)
def test_a_named_namespace_is_paid_by_its_account_any_other_by_the_star(namespace: str, payer: str) -> None:
    accounts = parse_accounts(_file(TEAM, SHARED))
    account = accounts.for_namespace(namespace)
    assert account is not None and account.name == payer


def test_without_a_star_an_unnamed_namespace_has_no_account() -> None:
    assert parse_accounts(_file(TEAM)).for_namespace("other") is None


def test_the_url_defaults_to_jarvice_and_loses_its_trailing_slash() -> None:
    accounts = parse_accounts(_file(TEAM, SHARED))
    assert [a.url for a in accounts.accounts] == ["https://cloud.nimbix.net/api", "http://10.0.0.1:8080"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not JSON"),
        ("[]", '{"accounts": [ ... ]}'),
        (json.dumps({"accounts": []}), "at least one account"),
        (_file({**TEAM, "apikey": ""}), "'apikey' must be a non-empty string"),
        (_file({**TEAM, "namespaces": []}), '"namespaces" must be a non-empty list'),
        (_file({**TEAM, "url": "ftp://x"}), "'url' must be an http(s) URL"),
        (_file(TEAM, {**SHARED, "namespaces": ["team-b"]}), "'team-b' is paid by both 'research' and 'shared'"),
        (_file(SHARED, {**SHARED, "name": "again"}), "'*' is paid by both"),
        (_file(TEAM, {**TEAM, "namespaces": ["x"]}), "account name 'research' is given twice"),
    ],
)
def test_a_mistake_is_named_and_no_key_is_shown(text: str, says: str) -> None:
    with pytest.raises(AccountsError) as failed:
        parse_accounts(text)
    assert says in str(failed.value)
    assert "k-research" not in str(failed.value) and "k-shared" not in str(failed.value)


def test_keys_do_not_show_in_the_accounts_repr() -> None:
    accounts = parse_accounts(_file(TEAM, SHARED))
    assert "k-research" not in repr(accounts) and "k-shared" not in repr(accounts)


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH3j0b0hWq2mJ0YdN0kqN2bX9tEo3sTz0mQeGkC0vJ3e"
PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("vault", "host", "port", "username", "password", "private_key"),
    [
        (
            {"address": "drop.jarvice.com", "host_key": HOST_KEY},
            "drop.jarvice.com",
            22,
            "alice",
            "k-research-0001",
            None,
        ),
        (
            {"address": "10.0.0.5:2222", "host_key": HOST_KEY + " comment"},
            "10.0.0.5",
            2222,
            "alice",
            "k-research-0001",
            None,
        ),
        (
            {"address": "[fd00::5]:2022", "host_key": HOST_KEY, "username": "v", "password": "pw-0001"},
            "fd00::5",
            2022,
            "v",
            "pw-0001",
            None,
        ),
        ({"address": "vault", "host_key": HOST_KEY, "private_key": PEM}, "vault", 22, "alice", None, PEM + "\n"),
    ],
)
def test_an_accounts_vault_defaults_to_its_username_and_api_key(
    vault: dict[str, str], host: str, port: int, username: str, password: str | None, private_key: str | None
) -> None:
    (account,) = parse_accounts(_file({**TEAM, "vault": vault})).accounts
    access = account.vault
    assert access is not None
    assert (access.host, access.port, access.username, access.host_key) == (host, port, username, HOST_KEY)
    assert (access.password.reveal() if access.password else None) == password
    assert (access.private_key.reveal() if access.private_key else None) == private_key
    assert "k-research" not in repr(access)


def test_an_account_without_a_vault_has_none_and_a_known_hosts_line_names_a_port_only_when_not_22() -> None:
    assert parse_accounts(_file(TEAM)).accounts[0].vault is None
    (plain,) = parse_accounts(_file({**TEAM, "vault": {"address": "v", "host_key": HOST_KEY}})).accounts
    (ported,) = parse_accounts(_file({**TEAM, "vault": {"address": "v:2222", "host_key": HOST_KEY}})).accounts
    assert plain.vault is not None and plain.vault.known_hosts_line() == f"v {HOST_KEY}\n"
    assert ported.vault is not None and ported.vault.known_hosts_line() == f"[v]:2222 {HOST_KEY}\n"


@pytest.mark.parametrize(
    ("vault", "says"),
    [
        ("drop.jarvice.com", "account 1 vault: must be an object with 'address' and 'host_key'"),
        ({"host_key": HOST_KEY}, "vault 'address' must be host or host:port"),
        ({"address": "v:99999", "host_key": HOST_KEY}, "port must be 1 to 65535"),
        ({"address": "user@v", "host_key": HOST_KEY}, "must be host or host:port"),
        ({"address": "v"}, "'host_key' must be the vault's public host key"),
        ({"address": "v", "host_key": "AAAA"}, "no key is trusted on first use"),
        ({"address": "v", "host_key": HOST_KEY, "password": "k-research-x", "private_key": PEM}, "not both"),
        ({"address": "v", "host_key": HOST_KEY, "private_key": "k-research-not-a-key"}, "must be a private key's text"),
        ({"address": "v", "host_key": HOST_KEY, "pasword": "k-research-x"}, "unknown keys ['pasword']"),
        ({"address": "v", "host_key": HOST_KEY, "password": ""}, "'password' must be a non-empty string"),
    ],
)
def test_a_vault_mistake_is_named_and_no_secret_is_shown(vault: object, says: str) -> None:
    with pytest.raises(AccountsError) as failed:
        parse_accounts(_file({**TEAM, "vault": vault}))
    assert says in str(failed.value)
    assert "k-research" not in str(failed.value)
