from pathlib import Path

import pytest

from webhook.settings import SettingsError, parse_settings


def test_defaults_and_env(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("x")
    (tmp_path / "tls.key").write_text("x")
    settings = parse_settings([], {"WEBHOOK_TLS_DIR": str(tmp_path), "WEBHOOK_STRIP_TOLERATION_KEYS": "a, b"})
    assert settings.port == 8443
    assert settings.gpu_resources == ("nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu")
    assert settings.policy.strip_toleration_keys == {"a", "b"}
    assert settings.max_body_bytes == 8 * 1024 * 1024


def test_flags_override_env(tmp_path: Path) -> None:
    settings = parse_settings(["--port", "9443"], {"WEBHOOK_PORT": "1"}, check_files=False)
    assert settings.port == 9443


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    argv = [
        "--port", "99999",
        "--gpu-resources", "not a name",
        "--remote-cpu", "lots",
        "--remote-memory", "0",
        "--log-level", "LOUD",
        "--watch-stale-seconds", "soon",
        "--tls-dir", str(tmp_path / "missing"),
    ]  # fmt: skip
    with pytest.raises(SettingsError) as caught:
        parse_settings(argv, {})
    text = str(caught.value)
    for expected in (
        "--port",
        "--gpu-resources",
        "--remote-cpu",
        "--remote-memory",
        "--log-level",
        "--watch-stale-seconds",
        "tls.crt",
        "tls.key",
    ):
        assert expected in text
    assert len(caught.value.problems) == 8


def test_a_staging_cpu_limit_below_the_runner_s_request_is_refused() -> None:
    assert parse_settings([], {}, check_files=False).policy.staging_cpu_limit == "2"
    with pytest.raises(SettingsError, match="--staging-cpu-limit: must be at least --remote-cpu"):
        parse_settings(["--remote-cpu", "4", "--staging-cpu-limit", "2"], {}, check_files=False)


def test_client_ca_file_is_off_by_default_and_read_from_the_environment(tmp_path: Path) -> None:
    assert parse_settings([], {}, check_files=False).client_ca_file is None
    ca = tmp_path / "client-ca.crt"
    ca.write_text("PEM")
    (tmp_path / "tls.crt").write_text("x")
    (tmp_path / "tls.key").write_text("x")
    settings = parse_settings([], {"WEBHOOK_TLS_DIR": str(tmp_path), "WEBHOOK_CLIENT_CA_FILE": str(ca)})
    assert settings.client_ca_file == ca


def test_a_missing_client_ca_file_says_what_to_mount(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(["--client-ca-file", str(tmp_path / "nope.crt")], {}, check_files=True)
    (problem,) = [p for p in caught.value.problems if p.startswith("--client-ca-file")]
    assert "nope.crt does not exist" in problem and "client certificate" in problem
