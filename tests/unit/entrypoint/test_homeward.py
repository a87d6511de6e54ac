"""The runner's part of a move home: the controller's mark read from the pod's annotations file, the
checkpoint asked of the marked running job once, and the exit the Job ignores once the checkpoint was
copied back; the fault rows (JARVICE's 503 during the signal, a cut copy-back, no mark)."""

from __future__ import annotations

import pytest

from entrypoint import homeward, ports, remote
from entrypoint.termination import KeptInVault
from jarvice import contract
from jarvice.client import Unavailable
from jarvice.exitcodes import EXIT_MOVED_HOME, EXIT_OK, EXIT_TRANSFER
from tests.support.deadlines import HANG_SECONDS
from tests.unit.entrypoint.test_remote import LINES, World, make_plan, world

pytestmark = pytest.mark.timeout(HANG_SECONDS)
__all__ = ["world"]  # the fixture, used by name


class CopyBack:
    """The data stage: nothing to stage in; the copy-back gives `result` (the exit code, or the transfer's failure)."""

    def __init__(self, *, cut: bool = False) -> None:
        self.cut = cut
        self.finished: list[int] = []

    def prepare(self) -> ports.EarlyExit | None:
        return None

    def command(self, shell_command: str) -> str:
        return shell_command

    def finish(self, *, job: int | None, job_may_run: bool, exit_code: int, stopping_since: float | None) -> int:
        self.finished.append(exit_code)
        return EXIT_TRANSFER if self.cut else exit_code

    def kept_in_vault(self) -> KeptInVault | None:
        return KeptInVault("nimbix-burst/job-1", 0, ("ckpt/step-40.pt",)) if self.cut else None


def marked(world: World, *, after: float) -> ports.RemoteDeps:
    """The world's deps with the mark naming the world's job from `after` seconds on."""
    start = world.clock.now

    def mark() -> int | None:
        if world.clock.now < start + after or not world.backend.jobs:
            return None
        return max(world.backend.jobs)

    return world.deps(data=copy_back_of(world), move_mark=mark)


def copy_back_of(world: World) -> CopyBack:
    stage = getattr(world, "_copy_back", None)
    if stage is None:
        stage = CopyBack()
        world._copy_back = stage  # type: ignore[attr-defined]
    return stage


def test_a_marked_running_job_is_asked_for_a_checkpoint_once_and_the_runner_exits_moved_home(world: World) -> None:
    world.backend.template.lines = LINES * 10  # long enough to be still running when the mark comes
    deps = marked(world, after=5.0)
    code = remote.run_remote(make_plan(), deps)
    assert code == EXIT_MOVED_HOME
    assert world.backend.calls.count("signal:10") == 1
    assert copy_back_of(world).finished == [EXIT_OK]  # the copy-back ran on the job's good end
    assert '"exit_code":81' in world.messages[-1]  # the termination message says so too


def test_without_a_mark_no_signal_and_the_job_completes_as_before(world: World) -> None:
    world.backend.template.lines = LINES
    code = remote.run_remote(make_plan(), world.deps(data=CopyBack()))
    assert code == EXIT_OK and not any(call.startswith("signal") for call in world.backend.calls)


def test_jarvice_503_during_the_signal_is_asked_again_at_the_next_poll(world: World) -> None:
    world.backend.template.lines = LINES * 10
    world.backend.fail["signal:10"] = Unavailable("signal: HTTP 503", endpoint="signal")
    world.clock.alarms.append((world.clock.now + 8.0, lambda: world.backend.fail.pop("signal:10")))
    deps = marked(world, after=5.0)
    assert remote.run_remote(make_plan(), deps) == EXIT_MOVED_HOME
    assert world.backend.calls.count("signal:10") >= 2  # refused, then asked again and delivered


def test_a_cut_copy_back_is_no_move_the_runner_says_the_transfer_failed(world: World) -> None:
    world.backend.template.lines = LINES * 10
    world._copy_back = CopyBack(cut=True)  # type: ignore[attr-defined]
    deps = marked(world, after=5.0)
    assert remote.run_remote(make_plan(), deps) == EXIT_TRANSFER  # the Job sees a failure, never a move


def test_without_staged_data_nothing_would_come_back_so_the_job_is_never_asked(world: World) -> None:
    world.backend.template.lines = LINES * 3
    deps = world.deps(move_mark=lambda: max(world.backend.jobs) if world.backend.jobs else None)
    assert remote.run_remote(make_plan(), deps) == EXIT_OK  # it ran to its end
    assert not any(call.startswith("signal") for call in world.backend.calls)


@pytest.mark.parametrize(
    ("text", "job"),
    [
        ('nimbix-burst.io/decision="remote"\nnimbix-burst.io/move-home="1042"\n', 1042),
        ('nimbix-burst.io/decision="remote"\n', None),
        ('nimbix-burst.io/move-home=""\n', None),
        ('nimbix-burst.io/move-home="soon"\n', None),
        ('broken line\nnimbix-burst.io/move-home="7"', 7),
        ('x="a \\"quoted\\" value"\nnimbix-burst.io/move-home="8"\n', 8),
        # A file the user mounts there themselves: digits int() does not read are no mark, not a crash.
        ('nimbix-burst.io/move-home="\u00b2"\n', None),
        (f'nimbix-burst.io/move-home="{"9" * 5000}"\n', None),
    ],
)
def test_the_mark_is_read_from_the_downward_api_annotations_file(text: str, job: int | None) -> None:
    assert homeward.marked_job(homeward.parse_annotations(text)) == job
    assert contract.ANNOTATION_MOVE_HOME == "nimbix-burst.io/move-home"


@pytest.mark.parametrize(
    ("code", "asked", "staged_out", "expected"),
    [
        (EXIT_OK, True, True, EXIT_MOVED_HOME),
        (EXIT_OK, False, True, EXIT_OK),
        (EXIT_OK, True, False, EXIT_OK),
        (EXIT_TRANSFER, True, True, EXIT_TRANSFER),
        (3, True, True, 3),
    ],
)
def test_the_final_exit(code: int, asked: bool, staged_out: bool, expected: int) -> None:
    assert homeward.final_exit(code, asked=asked, staged_out=staged_out) == expected


@pytest.mark.parametrize("checkpoints", [True, False])
def test_a_checkpointing_pods_job_records_its_process_group_and_traps_sigusr1(world: World, checkpoints: bool) -> None:
    world.backend.template.lines = LINES
    assert remote.run_remote(make_plan(), world.deps(checkpoints=checkpoints)) == EXIT_OK
    (body,) = world.backend.bodies
    command = body["application"]["parameters"]["command"]
    assert command.startswith(homeward.SIGNAL_PRELUDE) is checkpoints
    assert command.endswith("python train.py")


@pytest.mark.parametrize(
    ("annotations", "checkpoints"),
    [
        ({"nimbix-burst.io/checkpoint-dir": "/data/ckpt"}, True),
        ({"nimbix-burst.io/checkpoint-dir": " "}, False),
        ({}, False),
    ],
)
def test_a_pod_names_checkpoints(annotations: dict[str, str], checkpoints: bool) -> None:
    assert homeward.names_checkpoints(annotations) is checkpoints
