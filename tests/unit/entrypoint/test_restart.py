"""Restart state: what a restarted runner does, and the state file's format."""

import json

import pytest

from entrypoint import restart
from entrypoint.restart import RunnerState
from entrypoint.settings import SettingsError, parse_settings
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

LABEL = "k8s-4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70-trainer-1"


@pytest.mark.parametrize(
    ("previous", "kind", "attempt"),
    [
        (None, "first", 1),
        (RunnerState(1, LABEL), "pick_up", 1),  # died before the submit's answer was saved
        (RunnerState(1, LABEL, job_number=42, printed_lines=7), "pick_up", 1),
        (RunnerState(3, LABEL, job_number=42, reported=False), "pick_up", 3),
        (RunnerState(1, LABEL, job_number=42, reported=True, exit_code=3), "retry", 2),
        (RunnerState(4, LABEL, job_number=42, reported=True, exit_code=143), "retry", 5),
        # Only restartPolicy Always restarts a container that succeeded: never a second job for it.
        (RunnerState(1, LABEL, job_number=42, reported=True, exit_code=0), "settled", 1),
        (RunnerState(2, LABEL, job_number=43, reported=True, exit_code=0), "settled", 2),
    ],
    ids=[
        "no-state",
        "unreported-no-number",
        "unreported",
        "unreported-attempt-3",
        "reported-3",
        "reported-143",
        "reported-success",
        "reported-success-of-a-retry",
    ],
)
def test_decide_start(previous: RunnerState | None, kind: str, attempt: int) -> None:
    decision = restart.decide_start(previous)
    assert (decision.kind, decision.attempt, decision.previous) == (kind, attempt, previous)


def test_state_round_trips() -> None:
    state = RunnerState(2, LABEL, job_number=42, printed_lines=1000, reported=True, exit_code=3)
    text = restart.render_state(state)
    assert json.loads(text)["format"] == restart.STATE_FORMAT
    assert restart.parse_state(text) == state


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"format": 2}',
        '{"format": 1, "attempt": 0, "job_label": "x", "reported": false}',
        '{"format": 1, "attempt": 1, "job_label": "x", "reported": "no"}',
        '{"format": 1, "attempt": 1, "job_label": "x", "reported": false, "job_number": "42"}',
    ],
)
def test_bad_state_is_an_error(text: str) -> None:
    with pytest.raises(restart.StateError):
        restart.parse_state(text)


@pytest.mark.parametrize(("container", "name"), [("trainer", "trainer.json"), ("", "runner.json")])
def test_state_name(container: str, name: str) -> None:
    assert restart.build_state_name(container) == name


def _settings(**env: str) -> object:
    return parse_settings({"APP_COMMAND_ARGS": "true", **env}, argv=(), read_file=str, hostname="h")


def test_settings_read_the_container_and_state_dir() -> None:
    settings = _settings(NIMBIX_BURST_CONTAINER="trainer", NIMBIX_BURST_STATE_DIR="/var/run/nimbix-burst")
    assert settings.pod.container == "trainer"  # type: ignore[attr-defined]
    assert settings.state_dir == "/var/run/nimbix-burst"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"NIMBIX_BURST_STATE_DIR": "relative/dir"}, "must be an absolute path"),
        ({"NIMBIX_BURST_CONTAINER": "Bad_Name"}, "must be a container name"),
    ],
)
def test_settings_reject_bad_values(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(SettingsError) as error:
        _settings(**env)
    assert any(fragment in p for p in error.value.problems)
