"""The gateway reaches a vault when it runs as the add-on's image runs it: as uid 65532, which has no
passwd entry, with no LOGNAME or USER (asyncssh asks getpass for a local user name before every
connection, and that raises there: the gateway's pods reached no vault at all)."""

import getpass

import pytest

from gateway.__main__ import ensure_login_name


def no_passwd_entry() -> str:
    raise KeyError("getpwuid(): uid not found: 65532")


def test_a_process_without_a_name_is_named_after_its_uid_where_getpass_looks_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environ: dict[str, str] = {}
    ensure_login_name(environ, getuser=no_passwd_entry, uid=65532)
    assert environ == {"LOGNAME": "uid-65532"}
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOGNAME", environ["LOGNAME"])
    assert getpass.getuser() == "uid-65532"  # what asyncssh reads


def test_a_process_with_a_name_keeps_it() -> None:
    environ = {"USER": "gateway"}
    ensure_login_name(environ, getuser=lambda: "gateway", uid=65532)
    assert environ == {"USER": "gateway"}
