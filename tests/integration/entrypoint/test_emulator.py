"""The JARVICE emulator itself, over HTTP: documented shapes, statuses, errors, content types, real
execution, fault injection; and its CLI as a separate process."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from devplatform.emulator import EmulatorControl, EmulatorThread
from tests.support.deadlines import HANG_SECONDS, PROGRAM_EXIT_SECONDS
from tests.support.runner_processes import API_KEY, APP, ROOT, USER, direct_session, wait_for_job

pytestmark = pytest.mark.timeout(HANG_SECONDS)

SEPARATOR = b"#" * 79 + b"\n"


class Api:
    def __init__(self, url: str) -> None:
        self.url = url
        self.session = direct_session()
        self.label = f"emu-test-{uuid.uuid4().hex[:12]}"  # the emulator is shared by the session

    def get(self, endpoint: str, **params: Any) -> requests.Response:
        params.setdefault("username", USER)
        params.setdefault("apikey", API_KEY)
        return self.session.get(f"{self.url}/jarvice/{endpoint}", params=params, timeout=5)

    def submit(self, body: dict[str, Any]) -> requests.Response:
        if body.get("job_label") == "emu-test":
            body = {**body, "job_label": self.label}
        return self.session.post(f"{self.url}/jarvice/submit", json=body, timeout=5)


@pytest.fixture
def api(emulator: EmulatorThread, control: EmulatorControl) -> Any:
    client = Api(emulator.url)
    yield client
    client.session.close()


def submit_body(command: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "app": APP,
        "staging": False,
        "checkedout": False,
        "application": {"command": "run", "parameters": {"command": command}, "geometry": "1280x720"},
        "machine": {"type": "n0", "nodes": 1},
        "vault": {"name": "ephemeral", "readonly": False, "force": False},
        "job_label": "emu-test",
        "user": {"username": USER, "apikey": API_KEY},
    }
    body.update(extra)
    return body


def wait_terminal(api: Api, number: int, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = api.get("status", number=number).json()[str(number)]
        if entry["job_status"] in ("COMPLETED", "COMPLETED WITH ERROR", "TERMINATED", "CANCELED"):
            return entry
        time.sleep(0.02)
    raise AssertionError("job did not finish")


def wait_tail(api: Api, number: int, needle: bytes, timeout: float = 10) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = api.get("tail", number=number, lines=0)
        if response.status_code == 200 and needle in response.content:
            return response.content
        time.sleep(0.02)
    raise AssertionError(f"{needle!r} never appeared in tail")


def test_live_and_ready_need_no_credentials(api: Api) -> None:
    for endpoint in ("live", "ready"):
        response = api.session.get(f"{api.url}/jarvice/{endpoint}", timeout=5)
        assert response.status_code == 200
        assert response.headers["Content-Type"] == "application/json"
        assert response.json() == {"status": "OK"}


def test_machines_catalogue(api: Api) -> None:
    response = api.get("machines")
    assert response.headers["Content-Type"] == "application/json"  # bare, no charset
    machines = response.json()
    assert len(machines) >= 8
    assert any(m["mc_gpus"] == 0 for m in machines.values()) and any(m["mc_gpus"] >= 4 for m in machines.values())
    for machine in machines.values():
        for key in ("mc_cores", "mc_gpus", "mc_ram", "mc_slave_gpus", "mc_scale_min", "mc_scale_max", "mc_price"):
            assert isinstance(machine[key], int | float), key
        assert isinstance(machine["mc_description"], str) and isinstance(machine["mc_arch"], str)
    assert list(api.get("machines", name="ng1").json()) == ["ng1"]


@pytest.mark.parametrize("endpoint", ["machines", "jobs", "status", "tail", "output", "shutdown", "terminate"])
def test_credentials_are_checked(api: Api, endpoint: str) -> None:
    wrong = api.get(endpoint, apikey="nope", number=1)
    assert (wrong.status_code, wrong.json()) == (401, {"error": "Not Authorized"})
    missing = api.session.get(f"{api.url}/jarvice/{endpoint}", timeout=5)
    assert (missing.status_code, missing.json()) == (400, {"error": "User required"})


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"user": {"username": USER, "apikey": "bad"}}, 401, "Not Authorized"),
        ({"app": "no-such-app"}, 404, "Application Not Found"),
        (
            {"application": {"command": "nope", "parameters": {"command": "true"}}},
            400,
            "Missing or Malformed API Syntax",
        ),
        ({"machine": {"type": "n99", "nodes": 1}}, 400, "Missing or Malformed API Syntax"),
        ({"machine": {"type": "n0", "nodes": 2}}, 400, "Missing or Malformed API Syntax"),
        ({"job_label": "x" * 256}, 400, "Missing or Malformed API Syntax"),
        ({"user": None}, 400, "Missing or Malformed API Syntax"),
    ],
    ids=["bad-key", "unknown-app", "unknown-command", "unknown-machine", "too-many-nodes", "label-too-long", "no-user"],
)
def test_submit_errors(api: Api, control: EmulatorControl, change: dict[str, Any], status: int, message: str) -> None:
    response = api.submit(submit_body("true", **change))
    assert (response.status_code, response.json()) == (status, {"error": message})
    assert response.headers["Content-Type"] == "application/json"
    assert control.submissions(api.label)["count"] == 0


def test_malformed_submit_body(api: Api) -> None:
    response = api.session.post(f"{api.url}/jarvice/submit", data=b"{not json", timeout=5)
    assert (response.status_code, response.json()) == (400, {"error": "Missing or Malformed API Syntax"})


def test_job_lifecycle_really_runs_the_command(api: Api, control: EmulatorControl) -> None:
    control.set_config(queue_seconds=0.3)
    response = api.submit(submit_body('echo "out $((6*7))"; echo err >&2; exit 3'))
    assert response.headers["Content-Type"] == "application/json"
    created = response.json()
    number, name = created["number"], created["name"]
    assert isinstance(number, int) and name.endswith(f"-{APP}-{USER}_s1")
    status = api.get("status", number=number).json()
    assert list(status) == [str(number)]
    assert status[str(number)]["job_status"] == "SUBMITTED"
    assert set(status[str(number)]) == {
        "job_name", "job_status", "job_substatus", "job_submit_time", "job_start_time", "job_end_time",
        "job_application", "job_command", "job_walltime", "job_project",
    }  # fmt: skip
    queued = api.get("tail", number=number)
    assert (queued.status_code, queued.json()) == (404, {"error": "Running job is not found"})
    assert api.get("shutdown", number=number).status_code == 404  # shutdown only in PROCESSING STARTING
    active = api.get("jobs").json()
    assert str(number) in active and active[str(number)]["job_label"] == api.label
    final = wait_terminal(api, number)
    assert final["job_status"] == "COMPLETED WITH ERROR"
    assert final["job_end_time"] >= final["job_start_time"] > 0 and final["job_walltime"].count(":") == 2
    assert str(number) not in api.get("jobs").json()
    entry = api.get("jobs", completed="true").json()[str(number)]
    assert entry["job_exitcode"] == 3 and entry["job_label"] == api.label and entry["job_owner_username"] == USER
    assert entry["job_api_submission"]["application"]["parameters"]["command"].startswith("echo")
    assert str(number) not in api.get("jobs", completed="True").json()  # case-sensitive flag
    out = api.get("output", number=number, lines=0)
    assert out.headers["Content-Type"] == "text/plain"
    preamble, _, app = out.content.partition(SEPARATOR)
    assert all(line.startswith(b"INIT[1]: ") for line in preamble.splitlines())
    assert sorted(app.splitlines()) == [b"err", b"out 42"]
    assert api.get("output", number=number, lines=1).content in (b"out 42\n", b"err\n")
    assert api.get("output", number=number).content == out.content  # default 100 lines covers it
    assert api.get("terminate", number=number).status_code == 404


def test_tail_while_running_and_selector_by_name(api: Api, control: EmulatorControl) -> None:
    created = api.submit(submit_body("for i in 1 2 3 4 5; do echo line $i; sleep 0.05; done; sleep 5")).json()
    number = created["number"]
    text = wait_tail(api, number, b"line 5")
    assert text.startswith(b"INIT[1]: ") and SEPARATOR in text and text.endswith(b"line 5\n")
    assert api.get("tail", number=number, lines=2).content == b"line 4\nline 5\n"
    assert api.get("tail", name=created["name"], lines=1).content == b"line 5\n"
    assert api.get("status", name=created["name"]).json()[str(number)]["job_status"] == "PROCESSING STARTING"
    not_done = api.get("output", number=number)
    assert not_done.status_code == 404
    assert api.get("tail", number=number, lines="x").status_code == 400
    control.set_config(tail_preamble=False)
    assert api.get("tail", number=number, lines=0).content.startswith(b"line 1\n")
    assert api.get("terminate", number=number).json() == {"status": "terminated"}
    assert wait_terminal(api, number)["job_status"] == "TERMINATED"


def test_job_selector_errors(api: Api) -> None:
    assert (api.get("status").status_code, api.get("status").json()) == (400, {"error": "No job specified"})
    assert api.get("status", number=999999).json() == {"error": "Job not found"}
    assert api.get("status", number=999999).status_code == 404
    assert api.get("status", number="abc").status_code == 400


def test_other_users_jobs_are_invisible(api: Api) -> None:
    number = api.submit(submit_body("true")).json()["number"]
    other = api.get("status", username="bob", apikey="bob-other-key-0000", number=number)
    assert other.status_code == 404
    assert str(number) not in api.get("jobs", username="bob", apikey="bob-other-key-0000").json()


def test_form_post_works_like_get(api: Api) -> None:
    response = api.session.post(
        f"{api.url}/jarvice/machines", data={"username": USER, "apikey": API_KEY, "name": "n0"}, timeout=5
    )
    assert response.status_code == 200 and list(response.json()) == ["n0"]


def test_shutdown_is_graceful_then_forced(api: Api, control: EmulatorControl) -> None:
    control.set_config(shutdown_kill_seconds=0.5)
    command = "trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.05; done"
    number = api.submit(submit_body(command)).json()["number"]
    wait_tail(api, number, b"ready")
    assert api.get("shutdown", number=number).json() == {"status": "shutdown requested"}
    assert wait_terminal(api, number)["job_status"] == "TERMINATED"
    assert b"got TERM" in api.get("output", number=number, lines=0).content
    ignoring = api.submit(submit_body("trap '' TERM; echo ready; while true; do sleep 0.05; done")).json()["number"]
    wait_tail(api, ignoring, b"ready")
    api.get("shutdown", number=ignoring)
    assert wait_terminal(api, ignoring, timeout=5)["job_status"] == "TERMINATED"  # SIGKILL after 0.5 s


def test_terminate_while_queued(api: Api, control: EmulatorControl) -> None:
    control.set_config(queue_seconds=30)
    number = api.submit(submit_body("echo never")).json()["number"]
    assert api.get("terminate", number=number).json() == {"status": "terminated"}
    final = wait_terminal(api, number)
    assert final["job_status"] == "TERMINATED" and final["job_start_time"] == 0


def test_terminate_while_queued_can_end_canceled_as_jarvice_may_answer(api: Api, control: EmulatorControl) -> None:
    control.set_config(queue_seconds=30, queued_end_status="CANCELED")
    number = api.submit(submit_body("echo never")).json()["number"]
    assert api.get("terminate", number=number).json() == {"status": "terminated"}
    final = wait_terminal(api, number)
    assert final["job_status"] == "CANCELED" and final["job_start_time"] == 0


def test_a_queued_end_status_jarvice_never_answers_is_refused(control: EmulatorControl) -> None:
    with pytest.raises(requests.HTTPError, match="400"):
        control.set_config(queued_end_status="COMPLETED")


def test_fast_jobs_can_show_canceled(api: Api, control: EmulatorControl) -> None:
    control.set_config(cancel_fast_seconds=5)
    number = api.submit(submit_body("exit 5")).json()["number"]
    assert wait_terminal(api, number)["job_status"] == "CANCELED"
    assert api.get("jobs", completed="true").json()[str(number)]["job_exitcode"] == 5


def test_fault_injection(api: Api, control: EmulatorControl) -> None:
    assert control.set_faults(status503=1, status429=1, status500=1, drop=1, rate=1.0)["drop"] == 1
    seen = []
    for _ in range(4):
        try:
            seen.append(api.get("machines").status_code)
        except requests.ConnectionError:
            seen.append("dropped")
    assert sorted(map(str, seen)) == ["429", "500", "503", "dropped"]
    assert api.get("machines").status_code == 200
    assert control.stats()["injected"] == {"status503": 1, "status429": 1, "status500": 1, "drop": 1}
    control.set_faults(status503=5, endpoints=["status"])
    assert api.get("machines").status_code == 200  # filtered to status only
    unavailable = api.get("status", number=1)
    assert unavailable.status_code == 503 and unavailable.headers["Content-Type"] == "text/plain"
    control.set_faults(latency_ms=300, latency_requests=1)
    started = time.monotonic()
    api.get("machines")
    assert time.monotonic() - started >= 0.3
    with pytest.raises(requests.HTTPError):
        control.set_faults(bogus=1)


def test_drop_after_submit_creates_the_job(api: Api, control: EmulatorControl) -> None:
    control.set_faults(drop_after_submit=True)
    with pytest.raises(requests.ConnectionError):
        api.submit(submit_body("true"))
    listing = control.submissions(api.label)
    assert listing["count"] == 1 and listing["attempts"] == 1
    assert listing["submissions"][0]["body"]["user"]["apikey"] == "***"


def test_status502_after_submit_creates_the_job_then_answers_502(api: Api, control: EmulatorControl) -> None:
    control.set_faults(status502_after_submit=2)
    first, second = api.submit(submit_body("true")), api.submit(submit_body("true"))
    assert (first.status_code, second.status_code) == (502, 502)
    assert first.headers["Content-Type"] == "text/plain"
    assert api.submit(submit_body("true")).status_code == 200  # the count is spent
    assert control.submissions(api.label)["count"] == 3  # every one of them created a job
    assert control.stats()["injected"]["status502_after_submit"] == 2
    for bad in ({"status502_after_submit": -1}, {"drop": -2}):
        with pytest.raises(requests.HTTPError):
            control.set_faults(**bad)


def test_cli_runs_as_a_process_and_cleans_up(tmp_path: Path) -> None:
    state_file, env_file = tmp_path / "state.json", tmp_path / "jarvice.env"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "devplatform.emulator", "--port", "0", "--users", f"{USER}:{API_KEY}",
            "--apps", f"{APP}:run", "--queue-seconds", "0", "--init-seconds", "0",
            "--state-file", str(state_file), "--env-file", str(env_file),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_PROXY": "127.0.0.1"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        assert info["pid"] == process.pid and info["url"].startswith("http://127.0.0.1:")
        assert json.loads(state_file.read_text()) == info
        assert oct(env_file.stat().st_mode & 0o777) == "0o600"
        env_text = env_file.read_text()
        for key in ("JARVICE_API_URL=", "JARVICE_USERNAME=alice", f"JARVICE_APIKEY={API_KEY}", f"APP_NAME={APP}"):
            assert key in env_text
        # The env file is shell-sourceable and names what the emulator knows.
        sourced = subprocess.run(
            ["bash", "-c", f'set -a; . "{env_file}"; echo "$JARVICE_API_URL|$APP_COMMAND"'],
            capture_output=True, text=True, check=True, timeout=5,
        )  # fmt: skip
        assert sourced.stdout.strip() == f"{info['url']}|run"
        api = Api(info["url"])
        try:
            number = api.submit(submit_body("sleep 60")).json()["number"]
            with EmulatorControl(info["url"]) as ctl:
                pid = wait_for_job(ctl, api.label, "PROCESSING STARTING")["pid"]
                deadline = time.monotonic() + 5
                while pid is None and time.monotonic() < deadline:
                    pid = ctl.jobs(api.label)[-1]["pid"]
            assert pid is not None and number
        finally:
            api.session.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(PROGRAM_EXIT_SECONDS) == 0
        assert not state_file.exists()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the job's process group was killed with the emulator
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"job process {pid} survived the emulator")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_a_job_past_its_walltime_is_stopped_terminated(api: Api, control: EmulatorControl) -> None:
    number = api.submit(
        submit_body(
            "echo started; sleep 30",
            application={"command": "run", "parameters": {"command": "echo started; sleep 30"}, "walltime": "00:00:01"},
        )
    ).json()["number"]
    entry = wait_terminal(api, number)
    assert entry["job_status"] == "TERMINATED"
    listed = api.get("jobs", completed="true").json()[str(number)]
    assert listed["job_substatus_text"] == "Job exceeded its walltime limit"
    assert control.jobs(api.label)[-1]["stop_reason"] == "walltime"
    quick = api.submit(
        submit_body("true", application={"command": "run", "parameters": {"command": "true"}, "walltime": "00:00:05"})
    )
    assert wait_terminal(api, quick.json()["number"])["job_status"] == "COMPLETED"
    bad = api.submit(
        submit_body("true", application={"command": "run", "parameters": {"command": "true"}, "walltime": "1h"})
    )
    assert bad.status_code == 400 and "walltime" in bad.json()["detail"]


# --- machine capacity --------------------------------------------------------------------------------


def wait_status(api: Api, number: int, wanted: str, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = api.get("status", number=number).json()[str(number)]
        if entry["job_status"] == wanted:
            return entry
        time.sleep(0.02)
    raise AssertionError(f"job {number} never reached {wanted}")


def substatus_text(api: Api, number: int, *, completed: bool = False) -> str:
    jobs = api.get("jobs", completed="true" if completed else "false").json()
    return str(jobs[str(number)]["job_substatus_text"])


def test_a_job_on_a_full_machine_stays_submitted_until_capacity_frees(api: Api, control: EmulatorControl) -> None:
    control.set_config(queue_seconds=0, machine_capacity={"ng4": 0})
    full = api.submit(submit_body("echo on ng4", machine={"type": "ng4", "nodes": 1})).json()["number"]
    other = api.submit(submit_body("echo on ng4a", machine={"type": "ng4a", "nodes": 1})).json()["number"]
    assert wait_terminal(api, other)["job_status"] == "COMPLETED"  # a machine not named is unlimited
    time.sleep(0.5)  # well past the queue time and a few capacity looks
    assert api.get("status", number=full).json()[str(full)]["job_status"] == "SUBMITTED"
    assert substatus_text(api, full) == "Waiting for capacity on machine ng4"
    assert control.set_config(machine_capacity={"ng4": 1})["machine_capacity"] == {"ng4": 1}
    final = wait_terminal(api, full)
    assert final["job_status"] == "COMPLETED" and final["job_start_time"] > 0
    assert substatus_text(api, full, completed=True) == ""


def test_a_job_ending_frees_its_nodes_for_the_next_in_line(api: Api, control: EmulatorControl) -> None:
    control.set_config(queue_seconds=0, machine_capacity={"ng2": 2})
    body = submit_body("sleep 30", machine={"type": "ng2", "nodes": 2})
    first = api.submit(body).json()["number"]
    wait_status(api, first, "PROCESSING STARTING")
    second = api.submit(submit_body("echo next", machine={"type": "ng2", "nodes": 1})).json()["number"]
    time.sleep(0.5)
    assert api.get("status", number=second).json()[str(second)]["job_status"] == "SUBMITTED"
    assert api.get("terminate", number=first).json() == {"status": "terminated"}
    assert wait_terminal(api, second)["job_status"] == "COMPLETED"


def test_a_job_waiting_for_capacity_can_be_terminated(api: Api, control: EmulatorControl) -> None:
    control.set_config(queue_seconds=0, machine_capacity={"ng4": 0})
    number = api.submit(submit_body("echo never", machine={"type": "ng4", "nodes": 1})).json()["number"]
    wait_status(api, number, "SUBMITTED")
    time.sleep(0.3)
    assert api.get("terminate", number=number).json() == {"status": "terminated"}
    final = wait_terminal(api, number)
    assert final["job_status"] == "TERMINATED" and final["job_start_time"] == 0


@pytest.mark.parametrize(
    ("capacity", "message"),
    [
        ([], "expected an object of machine type -> nodes"),
        ({"nx99": 0}, "'nx99' is not a machine of /jarvice/machines"),
        ({"ng4": -1}, "ng4: -1 is not a whole number of nodes >= 0"),
        ({"ng4": True}, "ng4: True is not a whole number"),
    ],
)
def test_machine_capacity_is_validated(
    control: EmulatorControl, emulator: EmulatorThread, capacity: Any, message: str
) -> None:
    response = requests.post(f"{emulator.url}/_emulator/config", json={"machine_capacity": capacity}, timeout=5)
    assert response.status_code == 400 and message in response.text


def test_reset_makes_every_machine_unlimited_again(control: EmulatorControl) -> None:
    control.set_config(machine_capacity={"ng4": 0})
    control.reset()
    assert control.set_config()["machine_capacity"] == {}
