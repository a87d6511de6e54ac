"""A runner behind the add-on's gateway: its key is the pod's projected token, a file the kubelet
replaces while a job runs, so it is read again when it changes (and masked in logs from then on); the
gateway's CA comes from the webhook and must be a certificate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from entrypoint.__main__ import FileKey
from entrypoint.settings import SettingsError, parse_settings
from jarvice.redaction import Secret

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
GATEWAY_ENV = {
    "REMOTE": "1",
    "JARVICE_USERNAME": "pod",
    "JARVICE_APIKEY_FILE": "/var/run/secrets/nimbix-burst-gateway/token",
    "JARVICE_APIKEY": "",
    "APP_NAME": "app",
    "APP_COMMAND_ARGS": "echo hi",
    "NIMBIX_BURST_GATEWAY_CA": CA,
}


def _files(path: str) -> str:
    assert path == "/var/run/secrets/nimbix-burst-gateway/token"
    return "token-1\n"


def test_the_token_file_is_the_key_and_the_ca_is_kept() -> None:
    settings = parse_settings(GATEWAY_ENV, argv=(), read_file=_files, hostname="h")
    assert settings.remote is not None
    assert settings.remote.credentials.apikey.reveal() == "token-1"
    assert settings.remote.apikey_file == "/var/run/secrets/nimbix-burst-gateway/token"
    assert settings.remote.gateway_ca == CA


def test_a_gateway_ca_that_is_no_certificate_is_refused_with_what_it_must_be() -> None:
    with pytest.raises(SettingsError) as info:
        parse_settings({**GATEWAY_ENV, "NIMBIX_BURST_GATEWAY_CA": "oops"}, argv=(), read_file=_files, hostname="h")
    assert any("NIMBIX_BURST_GATEWAY_CA must hold a PEM certificate" in p for p in info.value.problems)


def test_a_replaced_token_file_is_read_again_and_masked_from_then_on(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("token-1")
    secrets: list[str] = []
    key = FileKey(str(token), Secret("token-1"), secrets)
    assert key().reveal() == "token-1" and secrets == []
    # The kubelet writes a new file and swaps it in (a new inode), as atomic writers do.
    fresh = tmp_path / "token.new"
    fresh.write_text("token-2\n")
    os.replace(fresh, token)
    assert key().reveal() == "token-2"
    assert secrets == ["token-2"]
    assert key().reveal() == "token-2" and secrets == ["token-2"]  # read once per change


def test_a_token_file_caught_missing_keeps_the_last_value(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("token-1")
    key = FileKey(str(token), Secret("token-1"), [])
    token.unlink()
    assert key().reveal() == "token-1"
