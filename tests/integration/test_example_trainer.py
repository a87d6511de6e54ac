"""The example app's trainer run for real: it keeps the checkpoint contract (docs/checkpoints.md).

Each test runs images/example-app/train.py as a process, signals it mid-run, and reads its log of steps:
across a stop and a resume every step is done, none is skipped, and only steps after the last
checkpoint are done again.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

TRAIN = Path(__file__).resolve().parents[2] / "images" / "example-app" / "train.py"
STEP = re.compile(r"step (\d+)/(\d+) loss=(\S+)")
WAIT_SECONDS = 30.0


def load_train() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_train", TRAIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(TRAIN), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def read_until(process: subprocess.Popen[str], pattern: str) -> tuple[list[str], str]:
    """The lines the trainer printed up to and including the first matching `pattern` (polled, with a
    deadline), and what followed it in the same reads (finish's to keep). Read from the pipe itself,
    as communicate() reads it: a line left in a file object's buffer would be lost to communicate()
    (two steps were, under load, when one read brought several lines)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    lines: list[str] = []
    pending = b""
    deadline = time.monotonic() + WAIT_SECONDS
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=0.2):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            *complete, pending = (pending + chunk).split(b"\n")
            for at, raw in enumerate(complete):
                lines.append(raw.decode())
                if re.search(pattern, lines[-1]):
                    rest = b"\n".join([*complete[at + 1 :], pending])
                    return lines, rest.decode()
    raise AssertionError(f"no line matching {pattern!r} within {WAIT_SECONDS} s; the trainer printed {lines}")


def finish(process: subprocess.Popen[str], lines: list[str], tail: str = "") -> tuple[int, list[str]]:
    out, err = process.communicate(timeout=WAIT_SECONDS)
    return process.returncode, lines + (tail + out).splitlines() + ([err] if err else [])


def run(*args: str) -> tuple[int, list[str]]:
    return finish(start(*args), [])


def steps(lines: list[str]) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(3)) for m in map(STEP.fullmatch, lines) if m]


def fast(directory: Path, total: int = 40, every: int = 5) -> list[str]:
    return [
        "--steps",
        str(total),
        "--seconds-per-step",
        "0.02",
        "--checkpoint-dir",
        str(directory),
        "--checkpoint-every",
        str(every),
    ]


def test_sigusr1_checkpoints_exits_0_and_the_resume_repeats_nothing(tmp_path: Path) -> None:
    first = start(*fast(tmp_path / "ckpt"))
    lines, tail = read_until(first, r"^step 7/")
    first.send_signal(signal.SIGUSR1)
    code, lines = finish(first, lines, tail)
    assert code == 0, lines
    stopped = steps(lines)[-1][0]
    assert lines[-2:] == [
        f"checkpoint written at step {stopped}",
        f"SIGUSR1: stopped after step {stopped} with its checkpoint; exiting 0 to be resumed",
    ], lines

    code, resumed = run(*fast(tmp_path / "ckpt"))
    assert code == 0, resumed
    assert resumed[0] == f"resumed from step {stopped} ({tmp_path / 'ckpt' / f'step-{stopped:08d}.json'})"
    assert resumed[-1] == "training done"
    # Every step once, and the same losses as a run never stopped.
    _, straight = run(*fast(tmp_path / "straight"))
    assert steps(lines) + steps(resumed) == steps(straight)
    assert [n for n, _ in steps(straight)] == list(range(1, 41))


def test_a_killed_run_resumes_from_its_last_checkpoint_repeating_at_most_one_interval(tmp_path: Path) -> None:
    first = start(*fast(tmp_path, every=5))
    lines, tail = read_until(first, r"^step 13/")
    first.kill()
    _, lines = finish(first, lines, tail)
    code, resumed = run(*fast(tmp_path, every=5))
    assert code == 0, resumed
    assert resumed[0].startswith("resumed from step 10 ")
    done_first = [n for n, _ in steps(lines)]
    done_after = [n for n, _ in steps(resumed)]
    assert done_after == list(range(11, 41))  # no gap
    repeated = sorted(set(done_first) & set(done_after))
    assert 1 <= len(repeated) <= 5, repeated  # the steps after the last checkpoint, no more than an interval


def test_a_half_written_or_foreign_checkpoint_is_ignored(tmp_path: Path) -> None:
    code, lines = run(*fast(tmp_path, total=10, every=5))
    assert code == 0 and (tmp_path / "step-00000010.json").is_file(), lines
    (tmp_path / "step-00000015.json").write_text('{"step": 15, "lo')  # cut short: not renamed into place
    (tmp_path / ".step-00000020.json.4711.tmp").write_text('{"step": 20, "loss": 0.5}')  # never renamed
    (tmp_path / "step-00000025.json").write_text('{"step": 24, "loss": 0.5}')  # its name and content disagree
    (tmp_path / "notes.json").write_text('{"step": 30, "loss": 0.5}')
    code, resumed = run(*fast(tmp_path, total=12, every=5))
    assert code == 0, resumed
    assert resumed[0].startswith("resumed from step 10 ")
    assert [n for n, _ in steps(resumed)] == [11, 12]


def test_sigterm_checkpoints_and_exits_143(tmp_path: Path) -> None:
    first = start(*fast(tmp_path, every=100))
    lines, tail = read_until(first, r"^step 3/")
    first.send_signal(signal.SIGTERM)
    code, lines = finish(first, lines, tail)
    stopped = steps(lines)[-1][0]
    assert code == 143, lines
    assert lines[-2:] == [
        f"checkpoint written at step {stopped}",
        f"SIGTERM: stopped after step {stopped} with its checkpoint",
    ]
    assert json.loads((tmp_path / f"step-{stopped:08d}.json").read_text())["step"] == stopped


def test_only_the_newest_checkpoints_are_kept_and_none_is_left_half_written(tmp_path: Path) -> None:
    code, lines = run(*fast(tmp_path, total=20, every=2), "--keep", "2")
    assert code == 0, lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000018.json", "step-00000020.json"]


def test_without_a_directory_it_trains_and_exits_with_the_code_asked(tmp_path: Path) -> None:
    code, lines = run("--epochs", "2", "--seconds-per-epoch", "0", "--exit-code", "3")
    assert code == 3
    assert [n for n, _ in steps(lines)] == [1, 2] and lines[-1] == "training done"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--steps", "-1"], "--steps must be at least 1"),
        (["--checkpoint-every", "0"], "--checkpoint-every must be at least 1"),
        (["--keep", "0"], "--keep must be at least 1"),
        (["--seconds-per-step", "-1"], "--seconds-per-step must be 0 or more"),
    ],
)
def test_bad_arguments_say_what_to_fix(args: list[str], error: str) -> None:
    code, lines = run(*args)
    assert code == 2 and error in lines[-1], lines


def test_newest_checkpoint_reads_only_complete_ones(tmp_path: Path) -> None:
    train = load_train()
    assert train.newest_checkpoint(tmp_path / "absent") is None
    assert train.newest_checkpoint(tmp_path) is None
    train.write_checkpoint(tmp_path, train.State(step=4, loss=0.5), keep=3)
    (tmp_path / "step-00000009.json").write_text('{"step": 9, "loss": "low"}')  # no float loss
    (tmp_path / "step-00000008.json").write_text("[8]")
    assert train.newest_checkpoint(tmp_path) == train.State(step=4, loss=0.5)
