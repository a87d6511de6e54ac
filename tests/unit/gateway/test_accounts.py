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
