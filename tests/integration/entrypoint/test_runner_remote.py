"""Remote mode end to end: the runner as a real process against the JARVICE emulator over HTTP.

One test per acceptance bullet of the runner issue, plus the edges around them."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from devplatform.emulator import EmulatorControl, EmulatorThread
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import (
    ALL_OUTPUT,
    API_KEY,
    RUNNER_TIMEOUT,
    Runner,
    base_env,
    direct_session,
    label_of,
    run_runner,
    wait_for_job,
)

pytestmark = pytest.mark.timeout(HANG_SECONDS)


@pytest.fixture
def env(emulator: EmulatorThread, control: EmulatorControl) -> dict[str, str]:
    return base_env(emulator.url)


def numbered(count: int, prefix: str = "line") -> bytes:
    return b"".join(f"{prefix} {i}\n".encode() for i in range(1, count + 1))


def states(runner: Runner) -> list[str]:
    return [e["state"] for e in runner.logs() if e["message"] == "job state changed"]


# --- success, failure, exit codes ---------------------------------------------------------------


def test_success_streams_every_line_exactly_once(env: dict[str, str], control: EmulatorControl) -> None:
    env["APP_COMMAND_ARGS"] = "for i in $(seq 1 40); do echo line $i; sleep 0.01; done"
    code, runner = run_runner(env)
    assert code == 0, runner.err
    assert runner.out == numbered(40)
    assert states(runner) == ["SUBMITTED", "PROCESSING STARTING", "COMPLETED"]
    finished = next(e for e in runner.logs() if e["message"] == "job finished")
    assert (finished["state"], finished["job_exitcode"], finished["exit_code"]) == ("COMPLETED", 0, 0)
    assert control.submissions(label_of(env))["count"] == 1
    assert control.stats()["requests"].get("tail", 0) > 0  # streamed while running, not only at the end


def test_output_streams_while_the_job_runs(env: dict[str, str], control: EmulatorControl) -> None:
    env["APP_COMMAND_ARGS"] = "echo first; sleep 300"
    runner = Runner.start(env)
    runner.wait_for_stdout(b"first\n")  # printed while the job is still running
    assert wait_for_job(control, label_of(env), "PROCESSING STARTING")
    runner.send(signal.SIGTERM)
    assert runner.wait() == 143
    assert runner.out == b"first\n"


def test_failure_exit_code_7(env: dict[str, str]) -> None:
    env["APP_COMMAND_ARGS"] = "echo before; exit 7"
    code, runner = run_runner(env)
    assert code == 7
    assert runner.out == b"before\n"
    assert states(runner)[-1] == "COMPLETED WITH ERROR"


def test_stderr_and_partial_last_line(env: dict[str, str]) -> None:
    env["APP_COMMAND_ARGS"] = "echo out; echo err >&2; printf 'no newline at the end'"
    code, runner = run_runner(env)
    assert code == 0
    assert runner.out == b"out\nerr\nno newline at the end"


def test_command_with_special_characters_runs_byte_identical(env: dict[str, str], control: EmulatorControl) -> None:
    command = (
        'printf "%s|%s\\n" "double \\"quoted\\"" \'single "q" \\back\\slash\'\n'
        "echo \"path=$PATH\" 'literal=$PATH' `echo tick` $((1+2))\n"
        "printf 'ünïcødé ✓ 日本語 \\\\ \\x41\\n'\n"
        'cat <<"EOF"\n  indented $NOT_EXPANDED "x"\n\ttabbed\nEOF\n'
        "echo 'trailing spaces   '"
    )
    env["APP_COMMAND_ARGS"] = command
    code, runner = run_runner(env)
    assert code == 0, runner.err
    # What JARVICE received is exactly the command ...
    (submission,) = control.submissions(label_of(env))["submissions"]
    assert submission["body"]["application"]["parameters"]["command"] == command
    # ... so the remote output is exactly what bash prints for it here (the emulator runs jobs with the
    # same PATH as this process; HOME is the job's own directory).
    expected = subprocess.run(["bash", "-c", command], capture_output=True, check=True, timeout=10).stdout
    assert runner.out == expected
    assert "ünïcødé ✓ 日本語 \\ A\n".encode() in runner.out


def test_argv_command_runs_remotely(env: dict[str, str], control: EmulatorControl) -> None:
    code, runner = run_runner(env, args=("printf", "%s\\n", "a b", "$HOME", "it's"))
    assert code == 0, runner.err
    assert runner.out == b"a b\n$HOME\nit's\n"


def test_canceled_fast_jobs(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_config(cancel_fast_seconds=5)
    env["APP_COMMAND_ARGS"] = "exit 5"
    code, runner = run_runner(env)
    assert code == 5
    assert states(runner)[-1] == "CANCELED"
    success_env = {**env, "POD_UID": env["POD_UID"] + "-ok", "APP_COMMAND_ARGS": "true"}
    code, runner = run_runner(success_env)
    assert code == 80  # CANCELED with exit code 0 is ambiguous: a distinct failure, with a warning
    assert any("ambiguous" in e["message"] for e in runner.logs())


def test_tail_without_preamble_and_tiny_window(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_config(tail_preamble=False)
    env["JARVICE_TAIL_LINES"] = "3"
    env["APP_COMMAND_ARGS"] = "for i in $(seq 1 30); do echo same; echo n $i; echo; sleep 0.01; done"
    code, runner = run_runner(env)
    assert code == 0
    assert runner.out == b"".join(b"same\nn %d\n\n" % i for i in range(1, 31))


# --- cancel --------------------------------------------------------------------------------------


def test_sigterm_while_running_shuts_the_job_down(env: dict[str, str], control: EmulatorControl) -> None:
    env["APP_COMMAND_ARGS"] = "trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.05; done"
    runner = Runner.start(env)
    runner.wait_for_stdout(b"ready\n")
    runner.send(signal.SIGTERM)
    assert runner.wait() == 143
    (job,) = control.jobs(label_of(env))
    assert (job["status"], job["stop_reason"]) == ("TERMINATED", "shutdown")
    assert "shutdown requested" in runner.messages()
    assert "terminate requested" not in runner.messages()
    # The job's last words are printed too (bash may also report its killed `sleep` as "Terminated":
    # shutdown signals the whole process group, like a poweroff).
    assert runner.out.startswith(b"ready\n") and runner.out.endswith(b"got TERM\n")


def test_sigint_while_queued_terminates(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_config(queue_seconds=30)
    env["APP_COMMAND_ARGS"] = "echo never"
    runner = Runner.start(env)
    wait_for_job(control, label_of(env), "SUBMITTED")
    runner.send(signal.SIGINT)
    assert runner.wait() == 143
    (job,) = control.jobs(label_of(env))
    assert (job["status"], job["stop_reason"]) == ("TERMINATED", "terminate")
    assert runner.out == b""


def test_shutdown_ignored_is_terminated_after_the_grace_period(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_config(shutdown_kill_seconds=None)  # the job ignores SIGTERM and is never force-killed
    env["JARVICE_CANCEL_GRACE_SECONDS"] = "1"
    env["APP_COMMAND_ARGS"] = "trap '' TERM; echo ready; while true; do sleep 0.05; done"
    runner = Runner.start(env)
    runner.wait_for_stdout(b"ready\n")
    runner.send(signal.SIGTERM)
    assert runner.wait() == 143
    (job,) = control.jobs(label_of(env))
    assert job["status"] == "TERMINATED"
    messages = runner.messages()
    assert messages.index("shutdown requested") < messages.index("terminate requested")
    assert "job still running after the grace period; terminating" in messages


# --- never twice -----------------------------------------------------------------------------------


def test_killed_runner_restarts_and_reattaches(env: dict[str, str], control: EmulatorControl, tmp_path: Path) -> None:
    # The job holds after line 3 until the restarted runner has re-attached (the emulator runs it on this
    # host): however slowly the second runner starts, the job is still live when it looks.
    go_on = tmp_path / "go-on"
    env["APP_COMMAND_ARGS"] = (
        f"for i in $(seq 1 30); do echo line $i;"
        f" if [ $i = 3 ]; then while [ ! -e {go_on} ]; do sleep 0.05; done; fi; done"
    )
    first = Runner.start(env)
    first.wait_for_stdout(b"line 3\n")
    first.send(signal.SIGKILL)  # the container dies without any chance to cancel
    assert first.wait() == -9
    assert wait_for_job(control, label_of(env), "PROCESSING STARTING")
    second = Runner.start(env)  # same pod => same label
    second.wait_for_stdout(b"line 3\n")  # it follows the live job: the output so far is printed
    go_on.touch()
    code = second.wait()
    assert code == 0, second.err
    assert second.out == numbered(30)  # the new container's log has the whole output
    assert "re-attaching to the live job carrying this pod's label" in second.messages()
    listing = control.submissions(label_of(env))
    assert listing["count"] == 1
    assert "job submitted" not in second.messages()  # the restarted runner re-attached: it submitted nothing


def test_dropped_submit_response_is_resolved_by_label(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_faults(drop_after_submit=True)
    env["APP_COMMAND_ARGS"] = "echo once"
    code, runner = run_runner(env)
    assert code == 0, runner.err
    assert runner.out == b"once\n"
    assert control.submissions(label_of(env))["count"] == 1
    assert "found the job created by the submit with an unknown outcome" in runner.messages()


def test_a_502_to_submit_is_resolved_by_label_not_submitted_again(
    env: dict[str, str], control: EmulatorControl
) -> None:
    control.set_faults(status502_after_submit=1)
    env["APP_COMMAND_ARGS"] = "echo once"
    code, runner = run_runner(env)
    assert code == 0, runner.err
    assert runner.out == b"once\n"
    listing = control.submissions(label_of(env))
    assert (listing["count"], listing["attempts"]) == (1, 1)
    assert "found the job created by the submit with an unknown outcome" in runner.messages()


def test_of_two_live_jobs_with_its_label_the_runner_keeps_the_lowest(
    env: dict[str, str], control: EmulatorControl, tmp_path: Path
) -> None:
    # Two jobs already carry this container's label (a duplicate submit): the runner follows the
    # lowest-numbered one, as the controller's reaper would keep it, and terminates the other.
    release = tmp_path / "release"  # the kept job runs until the runner has made its choice, however slow the machine
    session = direct_session()
    body = {
        "app": env["APP_NAME"],
        "staging": False,
        "checkedout": False,
        "application": {
            "command": "run",
            "parameters": {"command": f"echo kept; while [ ! -e {release} ]; do sleep 0.1; done"},
        },
        "machine": {"type": "n0", "nodes": 1},
        "job_label": label_of(env),
        "user": {"username": env["JARVICE_USERNAME"], "apikey": env["JARVICE_APIKEY"]},
    }
    numbers = [session.post(f"{env['JARVICE_API_URL']}/jarvice/submit", json=body, timeout=5).json()["number"]]
    body["application"]["parameters"] = {"command": "echo duplicate; sleep 300"}
    numbers.append(session.post(f"{env['JARVICE_API_URL']}/jarvice/submit", json=body, timeout=5).json()["number"])
    session.close()
    env["APP_COMMAND_ARGS"] = "echo never submitted"
    runner = Runner.start(env, ())
    try:
        deadline = time.monotonic() + RUNNER_TIMEOUT
        while {j["number"]: j["status"] for j in control.jobs(label_of(env))}.get(numbers[1]) != "TERMINATED":
            assert time.monotonic() < deadline, f"the duplicate job was not terminated: {runner.err}"
            time.sleep(0.1)
    finally:
        release.touch()
    code = runner.wait(RUNNER_TIMEOUT)
    assert code == 0, runner.err
    assert runner.out == b"kept\n"
    jobs = {job["number"]: job for job in control.jobs(label_of(env))}
    assert sorted(jobs) == numbers
    assert jobs[numbers[0]]["status"] == "COMPLETED"
    assert (jobs[numbers[1]]["status"], jobs[numbers[1]]["stop_reason"]) == ("TERMINATED", "terminate")
    assert "terminating another live job carrying this label" in runner.messages()


def test_storms_of_503_429_and_dropped_connections(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_faults(status503=25, status429=10, status500=5, drop=10, rate=0.5)
    env["JARVICE_TAIL_LINES"] = "7"
    # Long enough (~2.4 s) for the runner's polls to meet at least 20 of the faults however busy the
    # machine is (0.6 s met only 18 on a loaded one).
    env["APP_COMMAND_ARGS"] = (
        "for i in $(seq 1 120); do echo line $i; [ $((i % 10)) = 0 ] && echo same; sleep 0.02; done"
    )
    code, runner = run_runner(env)
    assert code == 0, runner.err
    expected = b"".join(b"line %d\n" % i + (b"same\n" if i % 10 == 0 else b"") for i in range(1, 121))
    assert runner.out == expected  # nothing lost, nothing twice
    listing = control.submissions(label_of(env))
    assert listing["count"] == 1
    injected = control.stats()["injected"]
    assert sum(injected.values()) >= 20 and set(injected) >= {"status503", "status429", "status500", "drop"}, injected
    assert "JARVICE call failed, retrying" in runner.messages()


def test_read_timeouts_are_retried(env: dict[str, str], control: EmulatorControl) -> None:
    env["JARVICE_READ_TIMEOUT"] = "0.3"
    control.set_faults(latency_ms=600, latency_requests=3, endpoints=["status", "tail", "jobs"])
    env["APP_COMMAND_ARGS"] = "echo a; sleep 0.3; echo b"
    code, runner = run_runner(env)
    assert code == 0, runner.err
    assert runner.out == b"a\nb\n"
    retries = [e for e in runner.logs() if e["message"] == "JARVICE call failed, retrying"]
    assert any("Timeout" in e["error"] for e in retries)


def test_outage_longer_than_budget_fails_clearly_and_terminates(env: dict[str, str], control: EmulatorControl) -> None:
    env["JARVICE_OUTAGE_SECONDS"] = "1"
    env["APP_COMMAND_ARGS"] = "echo started; sleep 30"
    runner = Runner.start(env)
    runner.wait_for_stdout(b"started\n")
    control.set_faults(status503=100000, endpoints=["status", "tail", "jobs", "output"])
    assert runner.wait() == 69
    errors = [e for e in runner.logs() if e["level"] == "ERROR"]
    assert errors[0]["message"] == "JARVICE is unavailable; giving up"
    assert "JARVICE unreachable for" in errors[0]["error"] and "budget 1s" in errors[0]["error"]
    (job,) = control.jobs(label_of(env))
    assert job["status"] == "TERMINATED"  # the best-effort terminate got through


# --- rejected before any submit --------------------------------------------------------------------


def test_bad_credentials(env: dict[str, str], control: EmulatorControl) -> None:
    env["JARVICE_APIKEY"] = "wrong-key-but-long-enough"
    env["APP_COMMAND_ARGS"] = "echo never"
    code, runner = run_runner(env)
    assert code == 77
    (error,) = [e for e in runner.logs() if e["level"] == "ERROR"]
    assert error["message"] == "JARVICE rejected the credentials"
    assert "HTTP 401: Not Authorized" in error["error"]
    assert control.stats()["requests"].get("submit", 0) == 0
    assert b"wrong-key-but-long-enough" not in runner.stderr


def test_unknown_app(env: dict[str, str], control: EmulatorControl) -> None:
    env["APP_NAME"] = "no-such-app"
    env["APP_COMMAND_ARGS"] = "echo never"
    code, runner = run_runner(env)
    assert code == 78
    (error,) = [e for e in runner.logs() if e["level"] == "ERROR"]
    assert error["message"] == "JARVICE does not know the application (check APP_NAME)"
    assert "'no-such-app'" in error["error"] and "Application Not Found" in error["error"]
    assert control.submissions(label_of(env))["count"] == 0


def test_no_machine_fits(env: dict[str, str], control: EmulatorControl) -> None:
    env["NUM_GPUS"] = "64"
    env["APP_COMMAND_ARGS"] = "echo never"
    code, runner = run_runner(env)
    assert code == 79
    (error,) = [e for e in runner.logs() if e["level"] == "ERROR"]
    assert error["message"] == "no machine fits the request"
    assert "64 GPU(s)" in error["reason"] and "largest available is ng8" in error["reason"]
    assert control.stats()["requests"].get("submit", 0) == 0


def test_machine_choice_is_logged_and_used(env: dict[str, str], control: EmulatorControl) -> None:
    env.update(NUM_GPUS="2", NUM_CPUS="4", APP_COMMAND_ARGS="true")
    code, runner = run_runner(env)
    assert code == 0
    (order,) = [e for e in runner.logs() if e["message"] == "machine candidates"]
    assert order["machines"] == ["ng2"] and "cheapest first of" in order["reason"]
    (chosen,) = [e for e in runner.logs() if e["message"] == "machine selected"]
    assert chosen["machine"] == "ng2" and chosen["reason"] == "candidate 1 of 1"
    (submission,) = control.submissions(label_of(env))["submissions"]
    assert submission["body"]["machine"] == {"type": "ng2", "nodes": 1}


def test_the_machine_is_chosen_among_those_the_gpu_model_allows(env: dict[str, str], control: EmulatorControl) -> None:
    # What the webhook sets for a pod that selected an A100 (the local install's mapping).
    env.update(NUM_GPUS="1", NUM_CPUS="1", APP_COMMAND_ARGS="true", NIMBIX_BURST_ALLOWED_MACHINES="ng1a,ng4a,ng8")
    code, runner = run_runner(env)
    assert code == 0
    (order,) = [e for e in runner.logs() if e["message"] == "machine candidates"]
    assert order["machines"] == ["ng1a"] and "among the machines with the pod's GPU model" in order["reason"]
    (chosen,) = [e for e in runner.logs() if e["message"] == "machine selected"]
    assert chosen["machine"] == "ng1a"
    (submission,) = control.submissions(label_of(env))["submissions"]
    assert submission["body"]["machine"] == {"type": "ng1a", "nodes": 1}


def test_bad_settings_list_every_problem_and_submit_nothing(env: dict[str, str], control: EmulatorControl) -> None:
    for key in ("JARVICE_USERNAME", "APP_NAME"):
        env.pop(key)
    env.update(REMOTE="1", NUM_GPUS="many", JARVICE_POLL_SECONDS="-1", APP_COMMAND_ARGS="echo never")
    code, runner = run_runner(env)
    assert code == 78
    (entry,) = runner.logs()
    assert len(entry["problems"]) == 4, entry["problems"]
    assert control.stats()["requests"] == {}


def test_credentials_from_files(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "username").write_text("alice\n")
    (tmp_path / "apikey").write_text(API_KEY + "\n")
    env.pop("JARVICE_USERNAME")
    env.pop("JARVICE_APIKEY")
    env.update(
        JARVICE_USERNAME_FILE=str(tmp_path / "username"),
        JARVICE_APIKEY_FILE=str(tmp_path / "apikey"),
        APP_COMMAND_ARGS="echo from files",
    )
    code, runner = run_runner(env)
    assert (code, runner.out) == (0, b"from files\n")
    (mode,) = [e for e in runner.logs() if e["message"] == "remote mode"]
    assert mode["credentials_from"] == "JARVICE_USERNAME_FILE/JARVICE_APIKEY_FILE"


# --- the API key never shows -------------------------------------------------------------------------


def test_api_key_never_appears_in_runner_output(env: dict[str, str], control: EmulatorControl) -> None:
    """Debug logging, retries with URLs in their errors, a failing job, a cancel; the emulator even
    echoes the key back in job_api_submission. Then grep everything every runner printed."""
    env["LOG_LEVEL"] = "DEBUG"
    env["JARVICE_READ_TIMEOUT"] = "0.3"
    control.set_faults(status503=5, drop=5, latency_ms=500, latency_requests=2, rate=0.6)
    env["APP_COMMAND_ARGS"] = "env | grep -c . >/dev/null; echo visible; exit 3"
    code, runner = run_runner(env)
    assert code == 3
    assert b"visible\n" in runner.out
    assert any(e["level"] == "DEBUG" for e in runner.logs())
    assert "apikey=***" in runner.err  # URLs are logged at DEBUG, redacted
    assert ALL_OUTPUT[-2:] == [runner.out, bytes(runner.stderr)], "this runner's output is among what is checked"
    for blob in ALL_OUTPUT:
        assert API_KEY.encode() not in blob
        assert json.dumps(API_KEY).encode() not in blob


def test_emulator_job_environment_carries_no_credentials(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    env["APP_COMMAND_ARGS"] = "env"
    monkeypatch.setenv("JARVICE_APIKEY", "leaked-into-the-emulator")  # the emulator runs in this process
    code, runner = run_runner(env)
    assert code == 0
    assert b"JARVICE_" not in runner.out


# --- money safety: walltime, GPU budget, termination message ------------------------------------------


def test_a_job_past_its_walltime_exits_74_and_says_so(
    env: dict[str, str], control: EmulatorControl, tmp_path: Path
) -> None:
    env["APP_COMMAND_ARGS"] = "echo started; sleep 30"
    env["JARVICE_WALLTIME"] = "00:00:01"
    env["NIMBIX_BURST_TERMINATION_LOG"] = str(tmp_path / "termination-log")
    code, runner = run_runner(env)
    assert code == 74, runner.err
    assert runner.out == b"started\n"
    (submission,) = control.submissions(label_of(env))["submissions"]
    assert submission["body"]["application"]["walltime"] == "00:00:01"
    assert "JARVICE stopped the job at its walltime" in runner.messages()
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message == {"nimbix_burst": {"job": submission["number"], "job_may_run": False, "exit_code": 74}}


def test_every_submit_carries_the_default_walltime(env: dict[str, str], control: EmulatorControl) -> None:
    env["APP_COMMAND_ARGS"] = "true"
    code, runner = run_runner(env)
    assert code == 0, runner.err
    (submission,) = control.submissions(label_of(env))["submissions"]
    assert submission["body"]["application"]["walltime"] == "24:00:00"


def test_a_machine_over_the_counted_gpus_is_refused_with_73(
    env: dict[str, str], control: EmulatorControl, tmp_path: Path
) -> None:
    # A 1-GPU pod whose env asks JARVICE for 4 GPUs x 2 nodes (ng4 scales to 8 nodes).
    env.update(NUM_GPUS="4", JARVICE_NODES="2", NIMBIX_BURST_COUNTED_GPUS="1", APP_COMMAND_ARGS="true")
    env["NIMBIX_BURST_TERMINATION_LOG"] = str(tmp_path / "termination-log")
    code, runner = run_runner(env)
    assert code == 73, runner.err
    assert control.submissions(label_of(env))["attempts"] == 0
    refusal = next(e for e in runner.logs() if e["message"].startswith("the machine holds more GPUs"))
    assert (refusal["counted_gpus"], refusal["nodes"]) == (1, 2) and "nvidia.com/gpu" in refusal["reason"]
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message == {"nimbix_burst": {"job": None, "job_may_run": False, "exit_code": 73}}


def test_an_unwritable_termination_log_changes_nothing_but_a_warning(env: dict[str, str], tmp_path: Path) -> None:
    env["APP_COMMAND_ARGS"] = "echo ok"
    env["NIMBIX_BURST_TERMINATION_LOG"] = str(tmp_path / "missing-dir" / "termination-log")
    code, runner = run_runner(env)
    assert code == 0, runner.err
    assert any(m.startswith("cannot write the termination message") for m in runner.messages())
