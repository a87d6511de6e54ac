"""A local pod leaving with its checkpoint, as real processes: the runner (`python -m entrypoint`, local mode)
with the pod's annotations file naming a checkpoint directory, running the example app's trainer. The kubelet's
SIGTERM becomes the contract's SIGUSR1; the trainer checkpoints and exits 0; the runner exits as a stopped pod
(143, never the Job's success), and the next run resumes from the checkpoint with every step done once."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest

from jarvice.exitcodes import EXIT_TERMINATED
from tests.integration.entrypoint.test_runner_local import local_env
from tests.support.deadlines import HANG_SECONDS, PROGRAM_EXIT_SECONDS
from tests.support.runner_processes import Runner, run_runner

pytestmark = pytest.mark.timeout(HANG_SECONDS)

TRAIN = Path(__file__).resolve().parents[3] / "images" / "example-app" / "train.py"
STEP = re.compile(rb"^step (\d+)/", re.MULTILINE)


def annotations_file(tmp_path: Path, checkpoint_dir: Path | None) -> Path:
    """The file the kubelet writes from the downward API: `key="value"` lines."""
    path = tmp_path / "pod-annotations"
    lines = ['nimbix-burst.io/decision="local"']
    if checkpoint_dir is not None:
        lines.append(f'nimbix-burst.io/checkpoint-dir="{checkpoint_dir}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def leaving_env(tmp_path: Path, *, grace: str = "30", checkpoints: bool = True, **extra: str) -> dict[str, str]:
    found = annotations_file(tmp_path, tmp_path / "ckpt" if checkpoints else None)
    return local_env(NIMBIX_BURST_POD_ANNOTATIONS_FILE=str(found), NIMBIX_BURST_GRACE_SECONDS=grace, **extra)


def trainer(tmp_path: Path, steps: int = 40) -> tuple[str, ...]:
    return (
        sys.executable,
        str(TRAIN),
        *("--steps", str(steps), "--seconds-per-step", "0.05"),
        *("--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "5"),
    )


def steps(out: bytes) -> list[int]:
    return [int(n) for n in STEP.findall(out)]


def test_sigterm_checkpoints_the_trainer_and_the_next_run_resumes_with_every_step_once(tmp_path: Path) -> None:
    first = Runner.start(leaving_env(tmp_path), args=trainer(tmp_path))
    first.wait_for_stdout(b"step 7/")
    first.send(signal.SIGTERM)
    assert first.wait(PROGRAM_EXIT_SECONDS) == EXIT_TERMINATED, first.err
    stopped = steps(first.out)[-1]
    assert f"SIGUSR1: stopped after step {stopped} with its checkpoint".encode() in first.out, first.out
    assert "asked the program for a checkpoint before it stops" in first.messages()
    assert "left with a checkpoint: the Job's next pod resumes from it" in first.messages()

    code, second = run_runner(leaving_env(tmp_path), args=trainer(tmp_path))
    assert code == 0, second.err
    assert f"resumed from step {stopped} ".encode() in second.out, second.out
    assert steps(first.out) + steps(second.out) == list(range(1, 41))


def asked_then_stopped(tmp_path: Path, *, grace: str, code: int) -> Runner:
    """A program that only says when it is asked for a checkpoint, and exits `code` on SIGTERM; the runner
    sent SIGTERM, and the request seen."""
    command = (
        f"trap 'echo asked' USR1; trap 'echo stopping; exit {code}' TERM; echo ready; while true; do sleep 0.05; done"
    )
    runner = Runner.start(leaving_env(tmp_path, grace=grace, APP_COMMAND_ARGS=command))
    runner.wait_for_stdout(b"ready\n")
    runner.send(signal.SIGTERM)
    runner.wait_for_stdout(b"asked\n")
    return runner


def test_a_program_that_ignores_the_request_is_told_to_stop_before_the_grace_period_ends(tmp_path: Path) -> None:
    runner = asked_then_stopped(tmp_path, grace="2", code=7)
    # 1 s after the request (half of a 2 s grace period) the program gets SIGTERM: its own exit is mirrored.
    assert runner.wait(PROGRAM_EXIT_SECONDS) == 7, runner.err
    assert runner.out == b"ready\nasked\nstopping\n"
    assert "no checkpoint in time: telling the program to stop" in runner.messages()


def test_a_second_sigterm_is_passed_on_at_once(tmp_path: Path) -> None:
    runner = asked_then_stopped(tmp_path, grace="3600", code=9)
    runner.send(signal.SIGTERM)
    assert runner.wait(PROGRAM_EXIT_SECONDS) == 9, runner.err
    assert runner.out == b"ready\nasked\nstopping\n"


def test_a_pod_naming_no_checkpoint_directory_passes_sigterm_on(tmp_path: Path) -> None:
    command = "trap 'echo asked' USR1; trap 'echo stopping; exit 0' TERM; echo ready; while true; do sleep 0.05; done"
    runner = Runner.start(leaving_env(tmp_path, checkpoints=False, APP_COMMAND_ARGS=command))
    runner.wait_for_stdout(b"ready\n")
    runner.send(signal.SIGTERM)
    assert runner.wait(PROGRAM_EXIT_SECONDS) == 0, runner.err  # a finished program's 0, not the move's 81
    assert runner.out == b"ready\nstopping\n"


def test_an_unreadable_grace_period_is_a_warning_and_the_default(tmp_path: Path) -> None:
    runner = Runner.start(leaving_env(tmp_path, grace="soon"), args=trainer(tmp_path))
    runner.wait_for_stdout(b"step 2/")
    runner.send(signal.SIGTERM)
    assert runner.wait(PROGRAM_EXIT_SECONDS) == EXIT_TERMINATED, runner.err
    (warning,) = [entry for entry in runner.logs() if entry["level"] == "WARNING"]
    assert warning["message"] == "invalid grace period"
    assert "NIMBIX_BURST_GRACE_SECONDS='soon'" in warning["reason"]


@pytest.mark.parametrize("where", ["missing", "directory", "huge"])
def test_an_annotations_file_that_cannot_be_read_is_said_at_start(tmp_path: Path, where: str) -> None:
    """A volume of the pod's own mounted where the webhook mounts the annotations (a ConfigMap without the
    key, a directory) silently took the checkpoint request away: the pod was stopped as if it named none."""
    path = tmp_path / "pod-annotations"
    if where == "directory":
        path.mkdir()
    elif where == "huge":
        path.write_bytes(b"x" * ((1 << 20) + 1))
    command = "trap 'echo asked' USR1; trap 'echo stopping; exit 0' TERM; echo ready; while true; do sleep 0.05; done"
    runner = Runner.start(local_env(NIMBIX_BURST_POD_ANNOTATIONS_FILE=str(path), APP_COMMAND_ARGS=command))
    runner.wait_for_stdout(b"ready\n")
    runner.send(signal.SIGTERM)
    assert runner.wait(PROGRAM_EXIT_SECONDS) == 0, runner.err
    (warning,) = [entry for entry in runner.logs() if entry["level"] == "WARNING"]
    assert warning["message"] == "pod annotations file not read"
    assert warning["path"] == str(path) and "no checkpoint is asked for" in warning["reason"]
