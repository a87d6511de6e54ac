"""The reservation caps and scheduler names: flags, environment, validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from webhook.settings import SettingsError, parse_settings


def test_defaults() -> None:
    settings = parse_settings([], {}, check_files=False)
    assert (settings.max_reservations, settings.max_reservations_per_namespace) == (256, 64)
    assert settings.scheduler_names == ("default-scheduler",)


def test_a_reservation_no_pod_claims_lives_seconds_by_default() -> None:
    # A create the API server refuses after mutating admission (name taken, quota, validation) never
    # shows a pod: what its admission reserved holds other namespaces' pods off those GPUs until the TTL.
    assert parse_settings([], {}, check_files=False).reservation_ttl_seconds <= 15
    root = Path(__file__).resolve().parents[3]
    shipped = [
        (root / "deploy/webhook.env").read_text(),
        (root / "charts/nimbix-burst/values.yaml").read_text(),
    ]
    for text in shipped:
        (value,) = re.findall(r"WEBHOOK_RESERVATION_TTL_SECONDS\W+(\d+)", text)
        assert int(value) <= 15, text


def test_env_and_flags() -> None:
    env = {
        "WEBHOOK_MAX_RESERVATIONS": "10",
        "WEBHOOK_MAX_RESERVATIONS_PER_NAMESPACE": "5",
        "WEBHOOK_SCHEDULER_NAMES": "default-scheduler, volcano",
    }
    settings = parse_settings(["--max-reservations-per-namespace", "3"], env, check_files=False)
    assert (settings.max_reservations, settings.max_reservations_per_namespace) == (10, 3)
    assert settings.scheduler_names == ("default-scheduler", "volcano")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--max-reservations", "0"], "--max-reservations: must be at least 1", id="total-zero"),
        pytest.param(["--max-reservations", "many"], "is not a whole number", id="total-not-a-number"),
        pytest.param(["--max-reservations-per-namespace", "-1"], "must be at least 1", id="namespace-negative"),
        pytest.param(
            ["--max-reservations", "8", "--max-reservations-per-namespace", "9"], "exceeds", id="namespace-over-total"
        ),
        pytest.param(["--scheduler-names", " , "], "--scheduler-names", id="no-scheduler"),
    ],
)
def test_invalid(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(argv, {}, check_files=False)
    assert message in str(caught.value)
