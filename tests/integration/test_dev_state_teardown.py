"""A dev-up that dies half-way leaves a state.json that `make dev-down` stops.

The stand-in for dev-up is a Python process that records what it starts as dev-up does
(devstate.StartRecord, each process the moment it exists) and is then killed with SIGKILL, which no
cleanup survives; the teardown is the real `python -m devplatform.cluster down`, the command behind
`make dev-down`. (A whole dev-up needs the built control plane and claims the machine's one real
node; what this checks is the record and the teardown, which are the same whatever was started.)
"""

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devplatform.cluster import devstate, processes
from tests.support.deadlines import HANG_SECONDS, PROGRAM_EXIT_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ROOT = Path(__file__).resolve().parents[2]
DIES_HALF_WAY = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from devplatform.cluster import devstate, processes

    dev_dir = Path(sys.argv[1])
    record = devstate.StartRecord(dev_dir / "state.json")
    for name in ("first-component", "second-component"):
        record.add(processes.start_process(name, ["sleep", "600"], log_path=dev_dir / "logs" / f"{name}.log"))
    os.kill(os.getpid(), signal.SIGKILL)  # dies before it could finish or clean up
    """
)


def test_dev_down_stops_what_a_killed_dev_up_had_started(tmp_path: Path) -> None:
    dying = subprocess.run(
        [sys.executable, "-c", DIES_HALF_WAY, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        timeout=PROGRAM_EXIT_SECONDS,
        check=False,
    )
    assert dying.returncode == -signal.SIGKILL, dying.stderr
    state = processes.load_state(tmp_path / "state.json")
    assert state.extra[devstate.PHASE] == devstate.STARTING
    started = state.processes
    assert [proc.name for proc in started] == ["first-component", "second-component"]
    assert all(processes.is_running(proc) for proc in started)

    try:
        down = subprocess.run(
            [sys.executable, "-m", "devplatform.cluster", "down", "--dir", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=PROGRAM_EXIT_SECONDS,
            check=False,
        )
        assert down.returncode == 0, down.stderr
        assert "dev-up did not finish" in down.stdout
        assert not any(processes.is_running(proc) for proc in started)
        assert not (tmp_path / "state.json").exists()
    finally:
        for proc in started:
            processes.stop_process(proc)
