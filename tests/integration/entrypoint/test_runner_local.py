"""Local mode, as a real process: exit codes, signals forwarded and mirrored, the GPU warning."""

import os
import signal

import pytest

from tests.support.deadlines import HANG_SECONDS, PROGRAM_EXIT_SECONDS
from tests.support.runner_processes import COVERAGE_VARIABLES, Runner, run_runner

pytestmark = pytest.mark.timeout(HANG_SECONDS)


def local_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", *COVERAGE_VARIABLES)}
    env["LOG_LEVEL"] = "INFO"  # the tests read the runner's progress lines
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo hello", 0),
        ("exit 3", 3),
        ("kill -KILL $$", 128 + 9),
        ("kill -TERM $$", 128 + 15),
        ("no-such-command-xyz", 127),
    ],
    ids=["ok", "exit-3", "sigkill", "sigterm", "not-found"],
)
def test_exit_codes_are_mirrored(command: str, expected: int) -> None:
    code, runner = run_runner(local_env(APP_COMMAND_ARGS=command))
    assert code == expected, runner.err
    if expected == 0:
        assert runner.out == b"hello\n"
        assert runner.err == ""  # nothing of the runner's own on a clean local run


@pytest.mark.parametrize("remote", ["", "0"])
def test_remote_empty_or_zero_is_local(remote: str) -> None:
    code, runner = run_runner(local_env(REMOTE=remote, APP_COMMAND_ARGS="echo local"))
    assert (code, runner.out) == (0, b"local\n")


def test_argv_is_the_command_without_app_command_args() -> None:
    code, runner = run_runner(local_env(), args=("sh", "-c", 'echo "$0 $1"; exit 4', "a b", "$HOME"))
    assert code == 4
    assert runner.out == b"a b $HOME\n"


def test_missing_executable_in_argv() -> None:
    code, runner = run_runner(local_env(), args=("/no/such/binary",))
    assert code == 127
    assert "command not found" in runner.messages()


@pytest.mark.parametrize(
    ("signum", "trapped"),
    [(signal.SIGTERM, "TERM"), (signal.SIGINT, "INT"), (signal.SIGHUP, "HUP"), (signal.SIGQUIT, "QUIT")],
)
def test_signals_reach_the_child(signum: int, trapped: str) -> None:
    command = f"trap 'echo got {trapped}; exit 0' {trapped}; echo ready; while true; do sleep 0.05; done"
    runner = Runner.start(local_env(APP_COMMAND_ARGS=command))
    runner.wait_for_stdout(b"ready\n")
    runner.send(signum)
    assert runner.wait(PROGRAM_EXIT_SECONDS) == 0
    assert runner.out == f"ready\ngot {trapped}\n".encode()


def test_untrapped_sigterm_exits_143() -> None:
    runner = Runner.start(local_env(APP_COMMAND_ARGS="echo ready; exec sleep 30"))
    runner.wait_for_stdout(b"ready\n")
    runner.send(signal.SIGTERM)
    assert runner.wait(PROGRAM_EXIT_SECONDS) == 143


def test_gpu_shortage_warns_but_runs() -> None:
    code, runner = run_runner(local_env(APP_COMMAND_ARGS="echo ran", NUM_GPUS="2", CUDA_VISIBLE_DEVICES="0"))
    assert (code, runner.out) == (0, b"ran\n")
    (warning,) = [entry for entry in runner.logs() if entry["level"] == "WARNING"]
    assert warning["message"].startswith("NUM_GPUS=2 but only 1 GPU(s) are visible")
    assert (warning["requested_gpus"], warning["visible_gpus"]) == (2, 1)


def test_enough_gpus_no_warning() -> None:
    code, runner = run_runner(local_env(APP_COMMAND_ARGS="true", NUM_GPUS="1", NVIDIA_VISIBLE_DEVICES="0,1"))
    assert code == 0 and runner.err == ""


def test_bad_remote_value_is_a_clear_error() -> None:
    code, runner = run_runner(local_env(REMOTE="yes", APP_COMMAND_ARGS="echo never"))
    assert code == 78
    assert runner.out == b""
    (entry,) = runner.logs()
    assert entry["level"] == "ERROR" and entry["message"] == "invalid settings"
    assert entry["problems"] == ["REMOTE must be unset, empty, 0 (local) or 1 (remote), got 'yes'"]


def test_no_command_at_all() -> None:
    code, runner = run_runner(local_env())
    assert code == 78
    assert any("no command" in p for p in runner.logs()[0]["problems"])
