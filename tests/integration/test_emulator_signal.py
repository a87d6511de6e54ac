"""The emulator's /jarvice/signal over HTTP, with jobs that really run: an application whose image
sets JARVICE_SIGNAL_OVERRIDE has that script run in the job with the signal number; without one, 20
suspends the job (it stays PROCESSING STARTING) and 18 resumes it."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from devplatform.emulator import EmulatorConfig, EmulatorControl, EmulatorThread, Timing
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import API_KEY, USER, direct_session, wait_for_job

pytestmark = pytest.mark.timeout(HANG_SECONDS)

PLAIN = "plain-app"
OVERRIDDEN = "overridden-app"
CREDENTIALS = {"username": USER, "apikey": API_KEY}
# A trainer that checkpoints and exits 0 on SIGUSR1, and counts its steps in a file meanwhile.
TRAINER = (
    "echo $$ > trainer.pid; trap 'echo checkpoint written; exit 0' USR1; echo ready; "
    "n=0; while true; do n=$((n+1)); echo $n > steps; sleep 0.05; done"
)
# The override asks the trainer for a checkpoint (SIGUSR1), finding it by the pid file in the job's
# directory (the override runs there, as the job's HOME).
OVERRIDE = '#!/bin/bash\necho "override called with $1"\nkill -USR1 "$(cat "$HOME/trainer.pid")"\n'


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorThread]:
    scripts = tmp_path_factory.mktemp("image")
    override = scripts / "on-signal"
    override.write_text(OVERRIDE)
    override.chmod(0o755)
    config = EmulatorConfig(
        users={USER: API_KEY},
        apps={PLAIN: frozenset({"run"}), OVERRIDDEN: frozenset({"run"})},
        image_environment={OVERRIDDEN: {"JARVICE_SIGNAL_OVERRIDE": str(override)}},
        timing=Timing(queue_seconds=0.05, init_seconds=0.0),
        workdir=tmp_path_factory.mktemp("jobs"),
    )
    with EmulatorThread(config) as emu:
        yield emu


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with direct_session() as s:
        yield s


def start(
    session: requests.Session, emulator: EmulatorThread, app: str, command: str, *, until: str = "PROCESSING STARTING"
) -> tuple[int, str]:
    label = f"signal-{uuid.uuid4().hex[:8]}"
    body = {
        "app": app,
        "application": {"command": "run", "parameters": {"command": command}},
        "machine": {"type": "n0", "nodes": 1},
        "job_label": label,
        "user": CREDENTIALS,
    }
    answer = session.post(f"{emulator.url}/jarvice/submit", json=body, timeout=5)
    answer.raise_for_status()
    with EmulatorControl(emulator.url) as control:
        wait_for_job(control, label, until)
    return int(answer.json()["number"]), label


def signal(session: requests.Session, emulator: EmulatorThread, number: int, **params: Any) -> requests.Response:
    return session.get(f"{emulator.url}/jarvice/signal", params={**CREDENTIALS, "number": number, **params}, timeout=5)


def process_state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def wait_for_state(pid: int, wanted: bool, letter: str = "T", timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (process_state(pid) == letter) != wanted:
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} state {process_state(pid)}, wanted {'' if wanted else 'not '}{letter}")
        time.sleep(0.02)


def output(session: requests.Session, emulator: EmulatorThread, number: int) -> str:
    answer = session.get(f"{emulator.url}/jarvice/output", params={**CREDENTIALS, "number": number}, timeout=5)
    answer.raise_for_status()
    return answer.text


def test_the_override_runs_in_the_job_with_the_signal_number(
    emulator: EmulatorThread, session: requests.Session
) -> None:
    number, label = start(session, emulator, OVERRIDDEN, TRAINER)
    answer = signal(session, emulator, number, signal=10)
    assert answer.status_code == 200
    assert answer.json()["signal"] == 10 and isinstance(answer.json()["pid"], int)
    with EmulatorControl(emulator.url) as control:
        ended = wait_for_job(control, label, "COMPLETED")
    assert ended["exitcode"] == 0 and ended["signals"] == ["override"]
    text = output(session, emulator, number)
    assert "override called with 10" in text and "checkpoint written" in text


def test_the_override_also_handles_20_so_the_job_is_not_suspended(
    emulator: EmulatorThread, session: requests.Session
) -> None:
    number, label = start(session, emulator, OVERRIDDEN, TRAINER)
    assert signal(session, emulator, number).json()["signal"] == 20  # the default
    with EmulatorControl(emulator.url) as control:
        assert wait_for_job(control, label, "COMPLETED")["signals"] == ["override"]
    assert "override called with 20" in output(session, emulator, number)


def test_without_an_override_20_suspends_and_18_resumes(emulator: EmulatorThread, session: requests.Session) -> None:
    number, label = start(session, emulator, PLAIN, TRAINER)
    with EmulatorControl(emulator.url) as control:
        pid = control.jobs(label)[-1]["pid"]
        assert signal(session, emulator, number, signal=20).json() == {"signal": 20, "pid": pid}
        wait_for_state(pid, True)
        assert control.jobs(label)[-1]["status"] == "PROCESSING STARTING"  # suspended, still running (and billing)
        assert signal(session, emulator, number, signal=18).json() == {"signal": 18, "pid": pid}
        wait_for_state(pid, False)
        assert control.jobs(label)[-1]["signals"] == ["suspend", "resume"]
        # Any other number is sent to the job's processes as it is: SIGUSR1 makes the trainer checkpoint.
        assert signal(session, emulator, number, signal=10).status_code == 200
        assert wait_for_job(control, label, "COMPLETED")["signals"] == ["suspend", "resume", "send"]


def test_a_job_not_running_and_a_bad_number_are_refused(emulator: EmulatorThread, session: requests.Session) -> None:
    number, _ = start(session, emulator, PLAIN, "exit 0", until="COMPLETED")
    ended = signal(session, emulator, number, signal=10)
    assert (ended.status_code, ended.json()) == (404, {"error": "Running job is not found"})
    bad = signal(session, emulator, number, signal="stop")
    assert bad.status_code == 400 and "not a whole number" in bad.json()["detail"]
    unknown = signal(session, emulator, number, signal=999)
    assert unknown.status_code == 400 and "not a signal number" in unknown.json()["detail"]
    others = session.get(
        f"{emulator.url}/jarvice/signal", params={"username": USER, "apikey": API_KEY, "number": 1}, timeout=5
    )
    assert others.status_code == 404


def test_an_injected_503_on_signal_reaches_no_job(emulator: EmulatorThread, session: requests.Session) -> None:
    number, label = start(session, emulator, OVERRIDDEN, TRAINER)
    with EmulatorControl(emulator.url) as control:
        control.set_faults(status503=1, endpoints=["signal"])
        try:
            assert signal(session, emulator, number, signal=10).status_code == 503
            assert control.jobs(label)[-1]["signals"] == []
            assert control.jobs(label)[-1]["status"] == "PROCESSING STARTING"
            assert signal(session, emulator, number, signal=10).status_code == 200  # the next one gets through
            wait_for_job(control, label, "COMPLETED")
        finally:
            control.reset()
