"""A runner that never leaves its job unwatched: restarts told apart through the state volume, and
failures while following that end in a re-attach, a retry or a terminate - never an orphan."""

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from devplatform.emulator import EmulatorControl, EmulatorThread
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import Runner, base_env, label_of, run_runner, wait_for_job

pytestmark = pytest.mark.timeout(HANG_SECONDS)

CONTAINER = "trainer"


@pytest.fixture
def env(emulator: EmulatorThread, control: EmulatorControl, tmp_path: Path) -> dict[str, str]:
    return base_env(emulator.url, NIMBIX_BURST_STATE_DIR=str(tmp_path), NIMBIX_BURST_CONTAINER=CONTAINER)


def numbered(first: int, last: int) -> bytes:
    return b"".join(b"line %d\n" % i for i in range(first, last + 1))


def state_of(env: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((Path(env["NIMBIX_BURST_STATE_DIR"]) / f"{CONTAINER}.json").read_text())
    return result


def wait_for_state(env: dict[str, str], predicate: Any, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = state_of(env)
        except (FileNotFoundError, ValueError):
            state = {}
        if state and predicate(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"state never matched: {state}")
        time.sleep(0.02)


# --- restarts ------------------------------------------------------------------------------------


def test_runner_killed_before_reporting_picks_up_the_finished_job(
    env: dict[str, str], control: EmulatorControl
) -> None:
    env["APP_COMMAND_ARGS"] = "for i in $(seq 1 20); do echo line $i; sleep 0.05; done; exit 3"
    first = Runner.start(env)
    first.wait_for_stdout(b"line 3\n")
    wait_for_state(env, lambda s: s["printed_lines"] >= 3)
    first.send(signal.SIGKILL)  # OOM kill: no chance to report
    assert first.wait() == -9
    wait_for_job(control, label_of(env), "COMPLETED WITH ERROR")
    printed = state_of(env)["printed_lines"]
    assert state_of(env)["reported"] is False
    assert first.out.startswith(numbered(1, printed))  # at least what the state says was printed

    code, second = run_runner(env)  # the kubelet restarts the container in the same pod
    assert code == 3, second.err
    assert second.out == numbered(printed + 1, 20)  # what is left, once
    assert control.submissions(label_of(env))["count"] == 1  # not run again
    assert control.submissions(label_of(env, attempt=2))["count"] == 0
    assert "picking up the job of the previous runner" in second.messages()
    final = state_of(env)
    assert (final["reported"], final["exit_code"], final["attempt"]) == (True, 3, 1)


def test_runner_killed_while_the_job_runs_reattaches_and_prints_the_rest(
    env: dict[str, str], control: EmulatorControl
) -> None:
    env["APP_COMMAND_ARGS"] = "for i in $(seq 1 30); do echo line $i; sleep 0.05; done"
    first = Runner.start(env)
    first.wait_for_stdout(b"line 3\n")
    wait_for_state(env, lambda s: s["printed_lines"] >= 3)
    first.send(signal.SIGKILL)
    first.wait()
    printed = state_of(env)["printed_lines"]
    code, second = run_runner(env)
    assert code == 0, second.err
    assert second.out == numbered(printed + 1, 30)
    assert control.submissions(label_of(env))["count"] == 1


def test_runner_restarted_after_reporting_a_failure_submits_anew(env: dict[str, str], control: EmulatorControl) -> None:
    env["APP_COMMAND_ARGS"] = "echo attempt; exit 3"
    code, first = run_runner(env)
    assert code == 3, first.err
    assert state_of(env)["reported"] is True
    code, second = run_runner(env)  # restartPolicy: OnFailure - a deliberate retry
    assert code == 3, second.err
    assert second.out == b"attempt\n"
    assert control.submissions(label_of(env, attempt=1))["count"] == 1
    assert control.submissions(label_of(env, attempt=2))["count"] == 1  # exactly one more, its own label
    start = next(e for e in second.logs() if e["message"] == "remote run starting")
    assert (start["attempt"], start["start"], start["job_label"]) == (2, "retry", label_of(env, attempt=2))
    assert state_of(env)["attempt"] == 2


def test_runner_restarted_after_a_success_submits_nothing_and_waits(
    env: dict[str, str], control: EmulatorControl
) -> None:
    env["APP_COMMAND_ARGS"] = "echo done"
    code, first = run_runner(env)
    assert code == 0, first.err
    requests_before = control.stats()["requests"]
    second = Runner.start(env)  # restartPolicy: Always restarts a container that succeeded
    deadline = time.monotonic() + 15
    while "the job already succeeded: not submitting again, waiting to be stopped" not in second.messages():
        assert time.monotonic() < deadline, second.err
        assert second.process.poll() is None, second.err  # it waits: no crash loop
        time.sleep(0.02)
    second.send(signal.SIGTERM)
    assert second.wait() == 0, second.err
    assert second.out == b""  # the output was the first runner's (kubectl logs --previous)
    assert control.submissions(label_of(env, attempt=1))["count"] == 1
    assert control.submissions(label_of(env, attempt=2))["count"] == 0
    assert control.stats()["requests"] == requests_before  # not even a look at JARVICE
    held = next(e for e in second.logs() if e["message"].startswith("the job already succeeded"))
    assert (held["attempt"], held["exit_code"], held["job_label"]) == (1, 0, label_of(env))
    assert state_of(env)["attempt"] == 1


def test_two_containers_of_one_pod_get_jobs_of_their_own(env: dict[str, str], control: EmulatorControl) -> None:
    env["APP_COMMAND_ARGS"] = "echo hi"
    other = {**env, "NIMBIX_BURST_CONTAINER": "eval"}
    assert run_runner(env)[0] == 0
    assert run_runner(other)[0] == 0  # same pod UID, same state volume
    assert control.submissions(label_of(env))["count"] == 1
    assert control.submissions(label_of(other))["count"] == 1


def test_unusable_state_dir_is_a_settings_error(env: dict[str, str], control: EmulatorControl, tmp_path: Path) -> None:
    env["NIMBIX_BURST_STATE_DIR"] = str(tmp_path / "missing")
    env["APP_COMMAND_ARGS"] = "echo never"
    code, runner = run_runner(env)
    assert code == 78
    (error,) = [e for e in runner.logs() if e["level"] == "ERROR"]
    assert error["message"] == "invalid settings"
    assert "NIMBIX_BURST_STATE_DIR" in error["problems"][0] and "does not exist" in error["problems"][0]
    assert control.stats()["requests"] == {}


def test_without_a_state_dir_the_runner_warns_once(emulator: EmulatorThread, control: EmulatorControl) -> None:
    env = base_env(emulator.url, APP_COMMAND_ARGS="echo hi")
    code, runner = run_runner(env)
    assert code == 0
    warnings = [e for e in runner.logs() if "cannot tell a crash from a deliberate retry" in e["message"]]
    assert len(warnings) == 1


# --- failures while following: never an orphan ------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "code"),
    [("html", 76), ("status401", 77), ("status404", 76)],
    ids=["76-html-page", "77-credentials", "76-job-not-found"],
)
def test_giving_up_while_the_job_runs_terminates_it(
    env: dict[str, str], control: EmulatorControl, fault: str, code: int
) -> None:
    env["APP_COMMAND_ARGS"] = "echo started; sleep 30"
    runner = Runner.start(env)
    runner.wait_for_stdout(b"started\n")
    control.set_faults(**{fault: 100000}, endpoints=["status", "tail", "output"])
    assert runner.wait() == code
    (job,) = control.jobs(label_of(env))
    assert (job["status"], job["stop_reason"]) == ("TERMINATED", "terminate")  # not left RUNNING
    assert "giving up: terminate requested for the job" in runner.messages()
    assert state_of(env)["reported"] is True  # the job is stopped: a restart is a deliberate retry


@pytest.mark.parametrize("fault", ["html", "status401", "status404"])
def test_transient_odd_answers_while_following_are_survived(
    env: dict[str, str], control: EmulatorControl, fault: str
) -> None:
    env["APP_COMMAND_ARGS"] = "for i in $(seq 1 20); do echo line $i; sleep 0.05; done"
    runner = Runner.start(env)
    runner.wait_for_stdout(b"line 2\n")
    control.set_faults(**{fault: 3}, endpoints=["status", "tail"])
    assert runner.wait() == 0, runner.err
    assert runner.out == numbered(1, 20)
    assert control.submissions(label_of(env))["count"] == 1
    assert "JARVICE failed while following the job; trying again" in runner.messages()
