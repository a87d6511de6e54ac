"""`make dev-up` that stops half-way leaves nothing running that `make dev-down` would not stop.

Both run the real commands behind the make targets (`python -m devplatform.cluster up|down --dir D`)
with the real control plane. The first dev-up fails on its own after its control plane is up: its
node directory is a file, so the real node cannot lay out its run directory (whoever holds the
machine's one real node meanwhile: a node that another session holds fails it as well), and dev-up
must stop that control plane itself. The second is killed (SIGKILL: no cleanup runs) while its
control plane starts, and dev-down stops what its state.json recorded. Neither keeps the real node:
this module never claims it. (Two whole dev-up/dev-down cycles would need the real node for
themselves, minutes each; whether a second cycle's JARVICE job output is its own is
tests/integration/test_emulator_lifetimes.py.)
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from devplatform.cluster import devstate, processes

REPO_ROOT = Path(__file__).resolve().parents[2]
# dev-up first checks the project's images (devplatform/images/build.sh, cached by content), which
# waits its turn behind other checkouts' image builds on this machine.
UP_TIMEOUT_SECONDS = 1500
STATE_WAIT_SECONDS = 1500.0


def cluster_command(*args: str, dev_dir: Path) -> list[str]:
    return [sys.executable, "-m", "devplatform.cluster", *args, "--dir", str(dev_dir)]


def stopped_pids(output: str) -> list[int]:
    """The PIDs dev-down (or a failed dev-up's own cleanup) reports, one line per process."""
    return [int(pid) for pid in re.findall(r"\bpid (\d+)\s", output)]


def test_a_dev_up_that_fails_half_way_stops_its_control_plane(tmp_path: Path) -> None:
    (tmp_path / "node").write_text("not a directory\n")  # where dev-up's real node keeps its run directory
    up = subprocess.run(
        cluster_command("up", dev_dir=tmp_path),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT_SECONDS,
        check=False,
    )
    assert up.returncode == 1, up.stdout + up.stderr
    assert "dev-up failed; stopping what it started" in up.stderr
    pids = stopped_pids(up.stdout)
    assert len(pids) >= 4, up.stdout  # etcd, kube-apiserver, kube-controller-manager, kube-scheduler
    assert not [pid for pid in pids if processes.is_alive(pid)]
    assert not (tmp_path / "state.json").exists()


def test_dev_down_stops_a_dev_up_killed_while_it_started(tmp_path: Path) -> None:
    state_path = tmp_path / "state.json"
    up = subprocess.Popen(
        cluster_command("up", dev_dir=tmp_path), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    recorded: tuple[processes.ManagedProcess, ...] = ()
    try:
        deadline = time.monotonic() + STATE_WAIT_SECONDS
        while not recorded and up.poll() is None and time.monotonic() < deadline:
            if state_path.exists():
                recorded = processes.load_state(state_path).processes
            time.sleep(0.05)
        assert recorded, f"dev-up recorded no process in {STATE_WAIT_SECONDS:g} s (exit {up.poll()})"
    finally:
        up.send_signal(signal.SIGKILL)
        up.wait(30)
    try:
        state = processes.load_state(state_path)
        assert state.extra[devstate.PHASE] == devstate.STARTING
        assert [proc for proc in state.processes if processes.is_running(proc)], "nothing left running to stop"
        down = subprocess.run(
            cluster_command("down", dev_dir=tmp_path),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert down.returncode == 0, down.stdout + down.stderr
        assert "dev-up did not finish" in down.stdout
        assert not [proc for proc in state.processes if processes.is_running(proc)]
        assert not state_path.exists()
    finally:
        for proc in processes.load_state(state_path).processes if state_path.exists() else ():
            processes.stop_process(proc)
