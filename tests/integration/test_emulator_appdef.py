"""The JARVICE emulator with the AppDef the base image ships (images/base/AppDef.json): submissions
are checked against its commands and parameters over HTTP, accepted ones run through the image's own
run-command script, and the runner works against it unchanged."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from devplatform.emulator import EmulatorConfig, EmulatorThread, Timing, appdef
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import API_KEY, USER, base_env, direct_session, run_runner

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ROOT = Path(__file__).resolve().parents[2]
BASE_APPDEF = ROOT / "images" / "base" / "AppDef.json"
APP = "nimbix-burst-base"
MALFORMED = "Missing or Malformed API Syntax"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jobs")


@pytest.fixture(scope="module")
def emulator(workdir: Path) -> Iterator[EmulatorThread]:
    config = EmulatorConfig(
        users={USER: API_KEY},
        apps={},
        appdefs={APP: appdef.load_appdef(BASE_APPDEF)},
        timing=Timing(queue_seconds=0.05, init_seconds=0.0),
        workdir=workdir,
    )
    with EmulatorThread(config) as emu:
        yield emu


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with direct_session() as s:
        yield s


def submit(session: requests.Session, url: str, application: dict[str, Any], app: str = APP) -> requests.Response:
    body = {
        "app": app,
        "application": application,
        "machine": {"type": "n0", "nodes": 1},
        "job_label": f"appdef-{uuid.uuid4().hex[:8]}",
        "user": {"username": USER, "apikey": API_KEY},
    }
    return session.post(f"{url}/jarvice/submit", json=body, timeout=5)


@pytest.mark.parametrize(
    ("application", "detail"),
    [
        ({"command": "batch", "parameters": {"command": "true"}}, "unknown command 'batch' (AppDef commands: run)"),
        ({"command": "run", "parameters": {}}, "required parameter 'command' of command 'run' is missing"),
        ({"command": "run"}, "required parameter 'command' of command 'run' is missing"),
        ({"command": "run", "parameters": {"command": "true", "x": "1"}}, "unknown parameter(s) ['x']"),
        ({"command": "run", "parameters": {"command": ["true"]}}, "parameter 'command' (STR) expects a string"),
    ],
    ids=["unknown-command", "missing-parameter", "no-parameters", "unknown-parameter", "wrong-type"],
)
def test_submissions_that_do_not_match_the_appdef_are_rejected(
    emulator: EmulatorThread, session: requests.Session, application: dict[str, Any], detail: str
) -> None:
    response = submit(session, emulator.url, application)
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert body["error"] == MALFORMED
    assert body["detail"].startswith(detail)


def test_unknown_application_is_404(emulator: EmulatorThread, session: requests.Session) -> None:
    response = submit(session, emulator.url, {"command": "run", "parameters": {"command": "true"}}, app="nope")
    assert (response.status_code, response.json()) == (404, {"error": "Application Not Found"})


def test_accepted_submission_runs_the_run_command_script_in_the_job_directory(
    emulator: EmulatorThread, session: requests.Session, workdir: Path
) -> None:
    command = 'echo "cwd=$PWD"; echo "shell=$0 login=$(shopt -q login_shell && echo yes)"; exit 4'
    response = submit(session, emulator.url, {"command": "run", "parameters": {"command": command}})
    assert response.status_code == 200, response.text
    number = response.json()["number"]
    params = {"username": USER, "apikey": API_KEY, "number": number}
    deadline = time.monotonic() + 20
    while True:
        entry = session.get(f"{emulator.url}/jarvice/status", params=params, timeout=5).json()[str(number)]
        if entry["job_status"] not in ("SUBMITTED", "PROCESSING STARTING"):
            break
        assert time.monotonic() < deadline, entry
        time.sleep(0.05)
    assert entry["job_status"] == "COMPLETED WITH ERROR"
    output = session.get(f"{emulator.url}/jarvice/output", params={**params, "lines": 0}, timeout=5).text
    assert f"cwd={workdir / str(number)}\n" in output
    assert "shell=bash login=yes\n" in output


def test_the_runner_bursts_to_the_base_image_appdef(emulator: EmulatorThread) -> None:
    env = base_env(emulator.url, APP_NAME=APP, APP_COMMAND_ARGS='echo "it\'s $((6 * 7))"; exit 3')
    code, runner = run_runner(env)
    assert code == 3, runner.err
    assert b"it's 42\n" in runner.out
