"""The base image's signal path on the emulator: its AppDef's run command records the job's process
group, and its JARVICE_SIGNAL_OVERRIDE (nimbix-burst-signal) hands /jarvice/signal's number to it. A
checkpointing program asked by SIGUSR1 writes its checkpoint and exits 0 (the job ends COMPLETED, the
shells around it untouched); 20 and 18 suspend and resume the job's processes."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devplatform.emulator import EmulatorConfig, EmulatorControl, EmulatorThread, Timing, appdef
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import API_KEY, USER, direct_session, wait_for_job

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ROOT = Path(__file__).resolve().parents[2]
APP = "nimbix-burst-base"
CREDENTIALS = {"username": USER, "apikey": API_KEY}
# A Python program, as a trainer is: a child of the job's shells, with its own SIGUSR1 handler.
TRAINER = (
    "python3 -c '\n"
    "import signal, sys, time\n"
    "asked = []\n"
    "signal.signal(signal.SIGUSR1, lambda *_: asked.append(1))\n"
    "step = 0\n"
    "while not asked:\n"
    "    step += 1\n"
    '    print("step", step, flush=True)\n'
    "    time.sleep(0.05)\n"
    'print("checkpoint written at step", step, flush=True)\n'
    "sys.exit(0)\n"
    "'"
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jobs")


@pytest.fixture(scope="module")
def emulator(workdir: Path) -> Iterator[EmulatorThread]:
    config = EmulatorConfig(
        users={USER: API_KEY},
        apps={},
        appdefs={APP: appdef.load_appdef(ROOT / "images" / "base" / "AppDef.json")},
        # As images/base/Dockerfile sets it; the emulator runs the script of that name next to the AppDef.
        image_environment={APP: {"JARVICE_SIGNAL_OVERRIDE": "/usr/local/bin/nimbix-burst-signal"}},
        timing=Timing(queue_seconds=0.05, init_seconds=0.0),
        workdir=workdir,
    )
    with EmulatorThread(config) as emu:
        yield emu


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with direct_session() as s:
        yield s


def start(session: requests.Session, emulator: EmulatorThread, workdir: Path, command: str) -> tuple[int, str]:
    """Submits `command` through the base AppDef; returns once the job's process group is recorded."""
    label = f"base-signal-{uuid.uuid4().hex[:8]}"
    body = {
        "app": APP,
        "application": {"command": "run", "parameters": {"command": command}},
        "machine": {"type": "n0", "nodes": 1},
        "job_label": label,
        "user": CREDENTIALS,
    }
    answer = session.post(f"{emulator.url}/jarvice/submit", json=body, timeout=5)
    answer.raise_for_status()
    number = int(answer.json()["number"])
    record = workdir / str(number) / ".nimbix-burst" / "job-pgid"
    deadline = time.monotonic() + 15
    while not record.is_file() or not record.read_text().strip():
        assert time.monotonic() < deadline, f"no {record}"
        time.sleep(0.02)
    return number, label


def stepping(workdir: Path, number: int) -> None:
    """Until the program takes steps (its SIGUSR1 handler is set by then)."""
    deadline = time.monotonic() + 15
    while "step 3" not in (workdir / str(number) / "output.log").read_text():
        assert time.monotonic() < deadline, "the program took no steps"
        time.sleep(0.02)


def signal(session: requests.Session, emulator: EmulatorThread, number: int, signum: int) -> requests.Response:
    params = {**CREDENTIALS, "number": number, "signal": signum}
    return session.get(f"{emulator.url}/jarvice/signal", params=params, timeout=5)


def output(session: requests.Session, emulator: EmulatorThread, number: int) -> str:
    answer = session.get(f"{emulator.url}/jarvice/output", params={**CREDENTIALS, "number": number}, timeout=5)
    answer.raise_for_status()
    return answer.text


def test_sigusr1_reaches_the_program_which_checkpoints_and_the_job_completes(
    emulator: EmulatorThread, session: requests.Session, workdir: Path
) -> None:
    number, label = start(session, emulator, workdir, TRAINER)
    stepping(workdir, number)
    with EmulatorControl(emulator.url) as control:
        assert signal(session, emulator, number, 10).status_code == 200
        ended = wait_for_job(control, label, "COMPLETED")
    assert ended["exitcode"] == 0 and ended["signals"] == ["override"]
    text = output(session, emulator, number)
    assert "handed to the job's processes" in text and "checkpoint written at step" in text


def test_a_shell_program_traps_sigusr1_itself(
    emulator: EmulatorThread, session: requests.Session, workdir: Path
) -> None:
    command = (
        "trap 'echo checkpoint written; exit 0' USR1\nn=0; while true; do n=$((n+1)); echo step $n; sleep 0.05; done"
    )
    number, label = start(session, emulator, workdir, command)
    stepping(workdir, number)  # its trap is set by then
    assert signal(session, emulator, number, 10).status_code == 200
    with EmulatorControl(emulator.url) as control:
        assert wait_for_job(control, label, "COMPLETED")["exitcode"] == 0
    assert "checkpoint written" in output(session, emulator, number)


def test_20_suspends_and_18_resumes_the_jobs_processes(
    emulator: EmulatorThread, session: requests.Session, workdir: Path
) -> None:
    number, label = start(session, emulator, workdir, TRAINER)
    stepping(workdir, number)
    with EmulatorControl(emulator.url) as control:
        pid = control.jobs(label)[-1]["pid"]

        def stopped() -> bool:
            stat = Path(f"/proc/{pid}/stat").read_text()
            return stat.rsplit(")", 1)[1].split()[0] == "T"

        for signum, wanted in ((20, True), (18, False)):
            assert signal(session, emulator, number, signum).status_code == 200
            deadline = time.monotonic() + 10
            while stopped() != wanted:
                assert time.monotonic() < deadline, f"signal {signum}: stopped is not {wanted}"
                time.sleep(0.02)
        assert control.jobs(label)[-1]["status"] == "PROCESSING STARTING"
        assert signal(session, emulator, number, 10).status_code == 200
        assert wait_for_job(control, label, "COMPLETED")["exitcode"] == 0
