import pytest

from entrypoint.remote_settings import DEFAULT_API_URL
from entrypoint.settings import (
    ArgvCommand,
    SettingsError,
    ShellCommand,
    parse_cpus,
    parse_mode,
    parse_settings,
)
from jarvice.redaction import Secret
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

REMOTE_OK = {
    "REMOTE": "1",
    "JARVICE_USERNAME": "alice",
    "JARVICE_APIKEY": "k3y-XYZ-123456",
    "APP_NAME": "my-app",
    "APP_COMMAND_ARGS": "echo hi",
}


def no_files(path: str) -> str:
    raise FileNotFoundError(2, "No such file or directory", path)


def parse(env: dict[str, str], argv: tuple[str, ...] = (), files: dict[str, str] | None = None):
    def read_file(path: str) -> str:
        if files is None or path not in files:
            return no_files(path)
        return files[path]

    return parse_settings(env, argv=argv, read_file=read_file, hostname="host-1")


def problems(env: dict[str, str], argv: tuple[str, ...] = (), files: dict[str, str] | None = None) -> tuple[str, ...]:
    with pytest.raises(SettingsError) as info:
        parse(env, argv, files)
    return info.value.problems


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "local"),
        ("", "local"),
        ("  ", "local"),
        ("0", "local"),
        ("1", "remote"),
        (" 1 ", "remote"),
        ("yes", None),
        ("true", None),
        ("2", None),
        ("01", None),
    ],
    ids=["unset", "empty", "blank", "zero", "one", "one-padded", "yes", "true", "two", "zero-one"],
)
def test_parse_mode(value: str | None, expected: str | None) -> None:
    assert parse_mode(value) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("4", 4), ("1.5", 2), ("0.1", 1), ("500m", 1), ("2000m", 2), ("2500m", 3), ("0", 0), ("-1", None), ("x", None)],
)
def test_parse_cpus(raw: str, expected: int | None) -> None:
    assert parse_cpus(raw) == expected


def test_local_defaults_need_only_a_command() -> None:
    settings = parse({"APP_COMMAND_ARGS": "echo hi"})
    assert settings.mode == "local"
    assert settings.command == ShellCommand("echo hi")
    assert settings.remote is None
    assert settings.num_gpus is None


def test_argv_is_the_command_when_app_command_args_is_unset() -> None:
    assert parse({}, argv=("python", "train.py")).command == ArgvCommand(("python", "train.py"))
    assert parse({"APP_COMMAND_ARGS": ""}, argv=("true",)).command == ArgvCommand(("true",))


def test_app_command_args_kept_byte_for_byte() -> None:
    text = ' echo "a\\b" $HOME\nprintf ü \n'
    assert parse({"APP_COMMAND_ARGS": text}).command == ShellCommand(text)


def test_remote_defaults() -> None:
    settings = parse(REMOTE_OK)
    assert settings.remote is not None
    remote = settings.remote
    assert remote.api_url == DEFAULT_API_URL
    assert remote.app_command == "run"
    assert remote.command_parameter == "command"
    assert remote.nodes == 1
    assert remote.machine is None
    assert remote.vault is None
    assert remote.geometry == "1280x720"
    assert remote.credentials.username == "alice"
    assert remote.credentials.apikey == Secret("k3y-XYZ-123456")
    assert remote.tuning.poll_seconds == 5.0


def test_secret_never_shows_in_repr() -> None:
    settings = parse(REMOTE_OK)
    assert "k3y-XYZ-123456" not in repr(settings)
    assert "k3y-XYZ-123456" not in str(settings)


@pytest.mark.parametrize(
    ("extra", "username", "apikey", "source"),
    [
        ({}, "alice", "k3y-XYZ-123456", "JARVICE_USERNAME/JARVICE_APIKEY"),
        (
            {"JARVICE_USERNAME": "", "JARVICE_APIKEY": "", "USERNAME": "bob", "APIKEY": "legacy-key"},
            "bob",
            "legacy-key",
            "USERNAME/APIKEY",
        ),
        (
            {
                "JARVICE_USERNAME": "",
                "JARVICE_APIKEY": "",
                "JARVICE_USERNAME_FILE": "/s/u",
                "JARVICE_APIKEY_FILE": "/s/k",
            },
            "carol",
            "file-key",
            "JARVICE_USERNAME_FILE/JARVICE_APIKEY_FILE",
        ),
        (
            {"JARVICE_APIKEY": "", "JARVICE_APIKEY_FILE": "/s/k", "APIKEY": "ignored"},
            "alice",
            "file-key",
            "JARVICE_USERNAME/JARVICE_APIKEY_FILE",
        ),
    ],
    ids=["direct", "legacy-fallback", "files-stripped", "file-beats-legacy"],
)
def test_credential_sources(extra: dict[str, str], username: str, apikey: str, source: str) -> None:
    settings = parse({**REMOTE_OK, **extra}, files={"/s/u": "carol\n", "/s/k": "  file-key\n"})
    assert settings.remote is not None
    creds = settings.remote.credentials
    assert (creds.username, creds.apikey.reveal(), creds.source) == (username, apikey, source)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({**REMOTE_OK, "REMOTE": "yes"}, ["REMOTE must be unset, empty, 0 (local) or 1 (remote), got 'yes'"]),
        ({"REMOTE": "1"}, ["no command", "JARVICE_USERNAME", "JARVICE_APIKEY", "APP_NAME"]),
        ({**REMOTE_OK, "NUM_GPUS": "two"}, ["NUM_GPUS must be an integer >= 0, got 'two'"]),
        ({**REMOTE_OK, "NUM_GPUS": "-1"}, ["NUM_GPUS must be an integer >= 0"]),
        ({**REMOTE_OK, "NUM_CPUS": "lots"}, ["NUM_CPUS must be a non-negative number of cores"]),
        ({**REMOTE_OK, "JARVICE_NODES": "0"}, ["JARVICE_NODES must be an integer >= 1"]),
        ({**REMOTE_OK, "JARVICE_WALLTIME": "1h"}, ["JARVICE_WALLTIME must look like HH:MM:SS"]),
        ({**REMOTE_OK, "JARVICE_GEOMETRY": "big"}, ["JARVICE_GEOMETRY must look like WIDTHxHEIGHT"]),
        ({**REMOTE_OK, "JARVICE_API_URL": "ftp://x"}, ["JARVICE_API_URL must be an http(s) URL"]),
        ({**REMOTE_OK, "JARVICE_POLL_SECONDS": "0"}, ["JARVICE_POLL_SECONDS must be a number of seconds > 0"]),
        ({**REMOTE_OK, "JARVICE_POLL_SECONDS": "nan"}, ["JARVICE_POLL_SECONDS must be a number"]),
        ({**REMOTE_OK, "JARVICE_TAIL_LINES": "-5"}, ["JARVICE_TAIL_LINES must be an integer >= 0"]),
        (
            {**REMOTE_OK, "JARVICE_RETRY_BASE_SECONDS": "10", "JARVICE_RETRY_CAP_SECONDS": "1"},
            ["JARVICE_RETRY_CAP_SECONDS must be >= JARVICE_RETRY_BASE_SECONDS"],
        ),
        ({**REMOTE_OK, "JARVICE_APIKEY_FILE": "/s/k"}, ["set only one of JARVICE_APIKEY and JARVICE_APIKEY_FILE"]),
        (
            {**REMOTE_OK, "JARVICE_APIKEY": "", "JARVICE_APIKEY_FILE": "/missing"},
            ["JARVICE_APIKEY_FILE: cannot read /missing: No such file or directory"],
        ),
        (
            {**REMOTE_OK, "JARVICE_APIKEY": "", "JARVICE_APIKEY_FILE": "/empty"},
            ["JARVICE_APIKEY_FILE: /empty is empty"],
        ),
        ({**REMOTE_OK, "LOG_LEVEL": "loud"}, ["LOG_LEVEL must be one of"]),
    ],
    ids=[
        "bad-remote",
        "everything-missing",
        "gpus-not-int",
        "gpus-negative",
        "cpus-garbage",
        "nodes-zero",
        "walltime",
        "geometry",
        "url-scheme",
        "poll-zero",
        "poll-nan",
        "tail-negative",
        "retry-cap-below-base",
        "apikey-twice",
        "apikey-file-missing",
        "apikey-file-empty",
        "log-level",
    ],
)
def test_problems_are_reported(env: dict[str, str], expected: list[str]) -> None:
    found = problems(env, files={"/empty": "  \n"})
    for fragment in expected:
        assert any(fragment in p for p in found), (fragment, found)
    assert len(found) == len(expected)


def test_every_problem_is_listed_at_once() -> None:
    found = problems({"REMOTE": "1", "NUM_GPUS": "x", "NUM_CPUS": "y", "JARVICE_WALLTIME": "soon"})
    assert len(found) == 7, found
    assert "invalid settings: " in str(SettingsError(found))


def test_bad_remote_value_is_reported_without_remote_checks() -> None:
    # An invalid REMOTE does not pretend to know which mode's settings to check.
    assert problems({"REMOTE": "on", "APP_COMMAND_ARGS": "true"}) == (
        "REMOTE must be unset, empty, 0 (local) or 1 (remote), got 'on'",
    )


def test_local_mode_ignores_remote_settings() -> None:
    settings = parse({"REMOTE": "0", "APP_COMMAND_ARGS": "true", "JARVICE_POLL_SECONDS": "bogus"})
    assert settings.mode == "local"


def test_api_key_is_not_in_problem_messages() -> None:
    found = problems({**REMOTE_OK, "JARVICE_APIKEY_FILE": "/s/k", "NUM_GPUS": "x"})
    assert not any("k3y-XYZ-123456" in p for p in found)


def test_tuning_overrides() -> None:
    settings = parse(
        {
            **REMOTE_OK,
            "JARVICE_POLL_SECONDS": "0.25",
            "JARVICE_CANCEL_GRACE_SECONDS": "0",
            "JARVICE_TAIL_LINES": "0",
            "JARVICE_API_URL": "http://127.0.0.1:9/api/",
            "JARVICE_MACHINE": " ng1 ",
            "JARVICE_VAULT": "ephemeral",
            "JARVICE_GEOMETRY": "",
            "JARVICE_WALLTIME": "24:00:00",
        }
    )
    assert settings.remote is not None
    remote = settings.remote
    assert remote.tuning.poll_seconds == 0.25
    assert remote.tuning.cancel_grace_seconds == 0
    assert remote.tuning.tail_lines == 0
    assert remote.api_url == "http://127.0.0.1:9/api"
    assert remote.machine == "ng1"
    assert remote.vault == "ephemeral"
    assert remote.geometry is None
    assert remote.walltime == "24:00:00"


@pytest.mark.parametrize(
    ("extra", "counted"),
    [({}, None), ({"NIMBIX_BURST_COUNTED_GPUS": "0"}, 0), ({"NIMBIX_BURST_COUNTED_GPUS": " 16 "}, 16)],
)
def test_counted_gpus(extra: dict[str, str], counted: int | None) -> None:
    remote = parse({**REMOTE_OK, **extra}).remote
    assert remote is not None and remote.counted_gpus == counted


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"NIMBIX_BURST_COUNTED_GPUS": "-1"}, "NIMBIX_BURST_COUNTED_GPUS must be an integer >= 0, got '-1'"),
        ({"NIMBIX_BURST_COUNTED_GPUS": "1.5"}, "NIMBIX_BURST_COUNTED_GPUS must be an integer >= 0"),
        ({"JARVICE_WALLTIME": "00:00:00"}, "JARVICE_WALLTIME must be longer than 00:00:00"),
        ({"NIMBIX_BURST_TERMINATION_LOG": "termination-log"}, "NIMBIX_BURST_TERMINATION_LOG must be an absolute path"),
    ],
    ids=["counted-negative", "counted-fraction", "walltime-zero", "termination-log-relative"],
)
def test_money_safety_settings_are_validated(extra: dict[str, str], fragment: str) -> None:
    assert any(fragment in problem for problem in problems({**REMOTE_OK, **extra}))


def test_walltime_and_termination_log_defaults() -> None:
    settings = parse(REMOTE_OK)
    assert settings.remote is not None and settings.remote.walltime == "24:00:00"
    assert settings.termination_log == "/dev/termination-log"
    other = parse({**REMOTE_OK, "JARVICE_WALLTIME": "2:00:00", "NIMBIX_BURST_TERMINATION_LOG": "/tmp/t"})
    assert other.remote is not None and other.remote.walltime == "2:00:00"
    assert other.termination_log == "/tmp/t"
