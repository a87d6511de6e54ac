"""A running job moves home, the runner's and JARVICE's side, with everything real but Kubernetes: the
runner (a subprocess in a mount namespace of its own, /srv its pod volume) stages a checkpoint directory
through the emulator's vault; its job runs the base image's run command around a checkpointing trainer,
with the base image's JARVICE_SIGNAL_OVERRIDE. The test plays the controller: once the trainer has taken
some steps it writes the move-home mark into the pod's annotations file (as the kubelet does), which
NIMBIX_BURST_POD_ANNOTATIONS_FILE names. The runner asks for the checkpoint through /jarvice/signal, the
trainer writes it and exits 0, the job ends COMPLETED, the checkpoint comes back into the pod volume,
and the runner exits 81. Needs root (the emulator's private job roots), as the staging tests do."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devplatform.emulator import EmulatorConfig, EmulatorControl, EmulatorThread, Timing
from devplatform.emulator.vault import VaultConfig
from jarvice import contract
from jarvice.exitcodes import EXIT_MOVED_HOME
from tests.integration.entrypoint.test_runner_staging import run_in_pod, staged_env
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import API_KEY, APP, FAST_TIMING, ROOT, USER
from tests.support.vaults import VAULT_KINDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

# Resumes from /srv/ckpt/step, checkpoints every 10 steps by itself and on SIGUSR1 (then exits 0), logs
# each step; 400 steps of 0.05 s, far more than the test lets it take.
TRAINER = """import os, signal, sys, time
path = "/srv/ckpt/step"
asked = []
signal.signal(signal.SIGUSR1, lambda *_: asked.append(1))
def save(step):
    with open(path + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(path + ".tmp", path)
start = int(open(path).read()) if os.path.exists(path) else 0
print("resumed from step", start, flush=True)
for step in range(start + 1, 401):
    time.sleep(0.05)
    print("step", step, flush=True)
    if step % 10 == 0 or asked:
        save(step)
    if asked:
        print("checkpoint written at step", step, flush=True)
        sys.exit(0)
"""


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatorThread, Path]]:
    jobs = tmp_path_factory.mktemp("jobs")
    config = EmulatorConfig(
        users={USER: API_KEY},
        apps={APP: frozenset({"run"})},
        timing=Timing(**FAST_TIMING),
        vaults=VaultConfig(root=tmp_path_factory.mktemp("vaults"), kinds=VAULT_KINDS),
        workdir=jobs,
        # The base image's override, by its path in this checkout (the emulator runs jobs on this host).
        image_environment={APP: {"JARVICE_SIGNAL_OVERRIDE": str(ROOT / "images" / "base" / "nimbix-burst-signal")}},
    )
    with EmulatorThread(config) as emu:
        yield emu, jobs


def mark_after_steps(
    emulator: EmulatorThread, jobs: Path, annotations: Path, *, steps: int, marked_at: list[float]
) -> threading.Thread:
    """Plays the controller: once the job's trainer logged `steps` steps, marks the pod to move home
    (the moment goes to `marked_at`)."""

    def play() -> None:
        deadline = time.monotonic() + 60
        with EmulatorControl(emulator.url) as control:
            while time.monotonic() < deadline:
                listed = control.jobs()
                if listed and listed[-1]["status"] == "PROCESSING STARTING":
                    number = listed[-1]["number"]
                    log = jobs / str(number) / "output.log"
                    if log.is_file() and f"step {steps}\n" in log.read_text():
                        marked = f'{contract.ANNOTATION_MOVE_HOME}="{number}"\n'
                        annotations.write_text(annotations.read_text() + marked)
                        marked_at.append(time.monotonic())
                        return
                time.sleep(0.05)

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("through", ["run-command", "catalogue"])
def test_a_marked_job_checkpoints_comes_back_and_the_runner_exits_moved_home(
    emulator: tuple[EmulatorThread, Path], tmp_path: Path, through: str
) -> None:
    """`run-command`: the job runs the base image's run command, as its AppDef does; `catalogue`: the
    job's command is the trainer itself (bash -c), the runner's prelude records the process group."""
    emu, jobs = emulator
    gateway = tmp_path / "gateway"  # where the webhook mounts the token (and, here, the pod's annotations)
    gateway.mkdir()
    (gateway / "token").write_text(API_KEY)
    annotations = gateway / contract.POD_ANNOTATIONS_FILE
    annotations.write_text('nimbix-burst.io/decision="remote"\nnimbix-burst.io/checkpoint-dir="/srv/ckpt"\n')
    run_command = ROOT / "images" / "base" / "nimbix-burst-run-command"
    trainer = shlex.quote("python3 -c " + shlex.quote(TRAINER))
    env = staged_env(
        emu.url,
        tmp_path,
        JARVICE_APIKEY="",
        JARVICE_APIKEY_FILE=str(gateway / "token"),
        NIMBIX_BURST_POD_ANNOTATIONS_FILE=str(annotations),
        NIMBIX_BURST_STAGE_IN="/srv/ckpt",
        NIMBIX_BURST_STAGE_OUT="/srv/ckpt",
        # As the base image's AppDef runs it: the run command leads the job's process group.
        APP_COMMAND_ARGS=(
            f"exec env NIMBIX_BURST_WORKDIR=/srv {run_command} {trainer}"
            if through == "run-command"
            else "python3 -c " + shlex.quote(TRAINER)
        ),
    )
    marked_at: list[float] = []
    player = mark_after_steps(emu, jobs, annotations, steps=25, marked_at=marked_at)
    code, out, err = run_in_pod(env, setup="mkdir -p /srv/ckpt", collect=tmp_path / "pod")
    exited = time.monotonic()
    player.join(timeout=5)
    assert code == EXIT_MOVED_HOME, err
    # Mark to exit 81 (checkpoint asked, written, job ended, copied back), for the record.
    print(f"\nmeasured: {through}: marked -> runner exited 81 in {exited - marked_at[0]:.2f} s")
    assert "asked the job for a checkpoint to move home" in err
    assert "moving home: the checkpoint was copied back" in err
    assert "nimbix-burst-signal: signal 10 handed to the job's processes" in out
    written = int((tmp_path / "pod" / "ckpt" / "step").read_text())
    assert f"checkpoint written at step {written}" in out
    assert 25 <= written < 400  # asked mid-run: not a run to the end
    with EmulatorControl(emu.url) as control:
        (job,) = [j for j in control.jobs() if j["status"] == "COMPLETED" and j["signals"] == ["override"]][-1:]
    assert job["exitcode"] == 0
