"""parse_settings: defaults, the reaper's on/off rules, credentials from env or files."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from controller.settings import Settings, SettingsError, parse_settings

BASE = {"POD_NAME": "controller-0", "POD_NAMESPACE": "nimbix-burst"}
CREDS = {"JARVICE_USERNAME": "alice", "JARVICE_APIKEY": "s3cret"}


def parse(env: Mapping[str, str], *argv: str, files: Mapping[str, str] | None = None) -> Settings:
    def read(path: str) -> str:
        if files is None or path not in files:
            raise FileNotFoundError(path)
        return files[path]

    return parse_settings(list(argv), env, read_file=read)


def test_defaults() -> None:
    settings = parse(BASE)
    assert settings.stranded_seconds == 120 and settings.reburst_cap == 3 and settings.reburst
    assert settings.orphan_interval_seconds == 60 and settings.orphan_grace_seconds == 120
    assert not settings.orphan_dry_run
    assert settings.lease_name == "nimbix-burst-controller-leader"
    assert (settings.identity, settings.lease_namespace) == ("controller-0", "nimbix-burst")
    # auto: no credentials, no reaper, and the reason says why
    assert not settings.reap_orphans and "credentials" in settings.reap_disabled_reason


def test_auto_reaps_when_credentials_are_given() -> None:
    settings = parse({**BASE, **CREDS})
    assert settings.reap_orphans and settings.credentials is not None
    assert settings.credentials.username == "alice" and settings.credentials.apikey.reveal() == "s3cret"
    assert "s3cret" not in repr(settings)


def test_credentials_from_mounted_files() -> None:
    env = {**BASE, "JARVICE_USERNAME_FILE": "/s/username", "JARVICE_APIKEY_FILE": "/s/apikey"}
    settings = parse(env, files={"/s/username": "alice\n", "/s/apikey": "k\n"})
    assert settings.credentials is not None and settings.credentials.apikey.reveal() == "k"


@pytest.mark.parametrize(
    ("env", "argv", "fragment"),
    [
        pytest.param({}, (), "--pod-name (env POD_NAME) is required", id="no-identity"),
        pytest.param(BASE, ("--reap-orphans", "true"), "--reap-orphans true needs JARVICE", id="reap-no-creds"),
        pytest.param(BASE, ("--reap-orphans", "maybe"), "--reap-orphans: 'maybe'", id="reap-bad"),
        pytest.param({**BASE, "JARVICE_USERNAME": "a"}, (), "credentials incomplete", id="half-creds"),
        pytest.param({**BASE, **CREDS, "JARVICE_APIKEY_FILE": "/x"}, (), "both set", id="key-twice"),
        pytest.param(
            {**BASE, "JARVICE_USERNAME_FILE": "/nope", "JARVICE_APIKEY_FILE": "/nope2"},
            ("--reap-orphans", "true"),
            "/nope, /nope2 not found",
            id="secret-missing-but-required",
        ),
        pytest.param(BASE, ("--stranded-seconds", "0"), "--stranded-seconds: must be at least 1", id="threshold"),
        pytest.param(BASE, ("--reburst-cap", "-1"), "--reburst-cap: must be at least 0", id="cap"),
        pytest.param(BASE, ("--reburst", "perhaps"), "--reburst: 'perhaps' is not true or false", id="reburst-bool"),
        pytest.param(BASE, ("--lease-retry-seconds", "20"), "--lease-*-seconds", id="timing"),
        pytest.param(BASE, ("--jarvice-api-url", "ftp://x"), "not an http(s) URL", id="url"),
        pytest.param(
            {**BASE, "NIMBIX_BURST_CLUSTER_NAME": "Prod"},
            (),
            "--cluster-name (env NIMBIX_BURST_CLUSTER_NAME)",
            id="name",
        ),
        pytest.param(BASE, ("--cluster-name", "n" * 31), "at most 30 characters", id="name-long"),
        pytest.param(BASE, ("--cluster-name=-prod",), "start and end with a letter or digit", id="name-dash"),
    ],
)
def test_problems(env: Mapping[str, str], argv: tuple[str, ...], fragment: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse(env, *argv)
    assert any(fragment in problem for problem in caught.value.problems), caught.value.problems


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        parse({}, "--stranded-seconds", "x", "--reburst-cap", "y")
    assert len(caught.value.problems) >= 4


def test_each_part_can_be_turned_off() -> None:
    settings = parse({**BASE, **CREDS, "CONTROLLER_REBURST": "false", "CONTROLLER_REAP_ORPHANS": "false"})
    assert not settings.reburst and not settings.reap_orphans
    assert parse({**BASE, **CREDS}, "--orphan-dry-run", "true").orphan_dry_run


def test_a_missing_secret_turns_the_reaper_off_in_auto_mode() -> None:
    settings = parse({**BASE, "JARVICE_USERNAME_FILE": "/s/username", "JARVICE_APIKEY_FILE": "/s/apikey"})
    assert not settings.reap_orphans and "/s/username, /s/apikey not found" in settings.reap_disabled_reason


def test_an_unreadable_file_is_a_problem() -> None:
    def read(path: str) -> str:
        raise PermissionError(path)

    env = {**BASE, "JARVICE_USERNAME": "a", "JARVICE_APIKEY_FILE": "/k"}
    with pytest.raises(SettingsError) as caught:
        parse_settings([], env, read_file=read)
    assert any("cannot read /k (PermissionError)" in p for p in caught.value.problems)


@pytest.mark.parametrize(
    ("env", "argv", "name"),
    [
        pytest.param(BASE, (), "", id="default-none"),
        pytest.param({**BASE, "NIMBIX_BURST_CLUSTER_NAME": " staging "}, (), "staging", id="env"),
        pytest.param(
            {**BASE, "NIMBIX_BURST_CLUSTER_NAME": "staging"}, ("--cluster-name", "prod-2"), "prod-2", id="flag"
        ),
    ],
)
def test_cluster_name(env: Mapping[str, str], argv: tuple[str, ...], name: str) -> None:
    assert parse(env, *argv).cluster_name == name


def test_the_gateway_is_off_by_default_and_taken_with_its_ca_and_token() -> None:
    assert parse(BASE).gateway_url == ""
    settings = parse(
        {
            **BASE,
            "CONTROLLER_GATEWAY_URL": "https://nimbix-burst-gateway.nimbix-burst.svc/",
            "CONTROLLER_GATEWAY_CA_FILE": "/ca/ca.crt",
            "CONTROLLER_GATEWAY_TOKEN_FILE": "/token/token",
        }
    )
    assert (settings.gateway_url, settings.gateway_ca_file, settings.gateway_token_file) == (
        "https://nimbix-burst-gateway.nimbix-burst.svc",
        "/ca/ca.crt",
        "/token/token",
    )


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        pytest.param({"CONTROLLER_GATEWAY_URL": "http://gw"}, "not an https URL", id="plain-http"),
        pytest.param({"CONTROLLER_GATEWAY_URL": "https://gw"}, "needs --gateway-ca-file", id="no-ca-no-token"),
    ],
)
def test_gateway_problems(env: Mapping[str, str], fragment: str) -> None:
    with pytest.raises(SettingsError, match=fragment):
        parse({**BASE, **env})
