"""The state file on disk: atomic replace, clear errors for an unusable directory."""

from pathlib import Path

import pytest

from entrypoint import statefile
from entrypoint.restart import RunnerState
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)


def test_save_then_load(tmp_path: Path) -> None:
    store = statefile.StateFile.open(str(tmp_path), container="trainer")
    assert store.load() is None
    store.save(RunnerState(1, "k8s-x-1"))
    store.save(RunnerState(1, "k8s-x-1", job_number=5, printed_lines=3))
    assert store.load() == RunnerState(1, "k8s-x-1", job_number=5, printed_lines=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trainer.json"]  # no temporary files left


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(statefile.StateDirError, match="does not exist"):
        statefile.StateFile.open(str(tmp_path / "nope"), container="c")


def test_a_file_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(statefile.StateDirError, match="not a directory"):
        statefile.StateFile.open(str(tmp_path / "file"), container="c")


def test_open_removes_what_a_killed_runner_left_half_written(tmp_path: Path) -> None:
    # A runner SIGKILLed between its temporary file and the rename leaves the temporary file behind;
    # the next runner of the same container removes it, and another container's files stay.
    first = statefile.StateFile.open(str(tmp_path), container="trainer")
    first.save(RunnerState(1, "k8s-x-1", job_number=5))
    (tmp_path / ".trainer.json.qoddkbxv.tmp").write_text('{"reported": false}')
    (tmp_path / ".sidecar.json.abcdefgh.tmp").write_text("{}")
    store = statefile.StateFile.open(str(tmp_path), container="trainer")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".sidecar.json.abcdefgh.tmp", "trainer.json"]
    assert store.load() == RunnerState(1, "k8s-x-1", job_number=5)
