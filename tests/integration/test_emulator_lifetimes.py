"""Two lifetimes of the emulator process over one directory, started as `make dev-up` starts it
(devplatform.cluster.addons.start_jarvice_emulator over `.dev/jarvice`): the second lifetime's job gets
a new number and a fresh directory, and its output is its own, not the first lifetime's job's too.

This is the dev-up/dev-down cycle's JARVICE half. A whole `make dev-up` (control plane, real node,
cert-manager, the add-on) takes minutes and claims the machine's one real node; what mixed runs' output
was only the emulator's numbering over the directory the cycles share, which this runs in a second.
"""

import uuid
from pathlib import Path

import pytest

from devplatform.cluster import addons
from devplatform.emulator import EmulatorControl
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import direct_session, wait_for_job

pytestmark = pytest.mark.timeout(HANG_SECONDS)

FAST = ("--queue-seconds", "0", "--init-seconds", "0")


def run_one_job(emulator: addons.EmulatorProcess, line: str) -> tuple[int, str]:
    """Submits `echo line` with the emulator's own account, waits for it, returns (number, output)."""
    env = emulator.runner_env()
    credentials = {"username": env["JARVICE_USERNAME"], "apikey": env["JARVICE_APIKEY"]}
    label = f"lifetime-{uuid.uuid4().hex[:8]}"
    body = {
        "app": env["APP_NAME"],
        "staging": False,
        "checkedout": False,
        "application": {"command": env["APP_COMMAND"], "parameters": {"command": f"echo {line}"}},
        "machine": {"type": "n0", "nodes": 1},
        "vault": {"name": "ephemeral", "readonly": False, "force": False},
        "job_label": label,
        "user": credentials,
    }
    with direct_session() as session, EmulatorControl(emulator.url) as control:
        submitted = session.post(f"{emulator.url}/jarvice/submit", json=body, timeout=5)
        submitted.raise_for_status()
        number = int(submitted.json()["number"])
        wait_for_job(control, label, "COMPLETED")
        output = session.get(f"{emulator.url}/jarvice/output", params={**credentials, "number": number}, timeout=5)
        output.raise_for_status()
    return number, output.text


def test_a_restarted_emulator_never_replays_an_earlier_jobs_output(tmp_path: Path) -> None:
    run_dir = tmp_path / "jarvice"
    outputs = []
    for lifetime in ("first", "second"):
        emulator = addons.start_jarvice_emulator(run_dir, args=FAST)
        try:
            outputs.append(run_one_job(emulator, f"{lifetime}-lifetime-line"))
        finally:
            addons.stop_jarvice_emulator(emulator)
    (first_number, first_output), (second_number, second_output) = outputs
    assert second_number != first_number
    assert first_output.count("first-lifetime-line") == 1
    assert second_output.count("second-lifetime-line") == 1
    assert "first-lifetime-line" not in second_output
    assert (run_dir / "jobs" / str(first_number) / "output.log").is_file()  # the earlier job's files stay
