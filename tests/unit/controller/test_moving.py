"""The move home of a running burst job: whether it goes (a table), and its steps with their deadlines,
including the fault rows (the checkpoint never comes, the copy-back is cut, the pod ends mid-move, the
GPUs are taken again before the replacement binds)."""

from dataclasses import replace

import pytest

from controller import moving
from controller.model import burst_containers, parse_job
from jarvice.checkpoint import CheckpointContract
from jarvice.exitcodes import EXIT_MOVED_HOME, EXIT_TERMINATED, EXIT_TRANSFER
from jarvice.model import JobEntry
from tests.support.deadlines import HANG_SECONDS
from tests.unit.controller.builders import IGNORE_DISRUPTIONS, job

pytestmark = pytest.mark.timeout(HANG_SECONDS)

NOW = 1_800_000_000.0
HOUR = 3600.0
TERMS = CheckpointContract(
    directory="/data/ckpt", interval_seconds=600, come_home_running=True, come_home_source="pod", min_saving=5.0
)
RUNNING = JobEntry(
    number=1042,
    name="j",
    state="PROCESSING STARTING",
    label="l",
    exitcode=None,
    start_time=int(NOW - HOUR),
    walltime_limit=int(20 * HOUR),
)


def decide(
    terms: CheckpointContract | None = TERMS,
    job: JobEntry = RUNNING,
    *,
    price: float | None = 2.0,
    age: float | None = 60.0,
    policy: bool = True,
) -> moving.MoveChoice:
    """`age`: seconds since the newest checkpoint was written (None: not known)."""
    checkpoint = None if age is None else moving.LastCheckpoint("step-00000010.json", NOW - age)
    return moving.decide(
        terms, job, price_per_hour=price, gpus=4, now=NOW, checkpoint=checkpoint, policy_ignores_move=policy
    )


@pytest.mark.parametrize(
    ("terms", "job", "price", "age", "policy", "fragment"),
    [
        (replace(TERMS, come_home_running=False), RUNNING, 2.0, 60.0, True, "not opted in"),
        (None, RUNNING, 2.0, 60.0, True, "no nimbix-burst.io/checkpoint-dir"),
        (TERMS, RUNNING, 2.0, 60.0, False, f"does not ignore exit code {EXIT_MOVED_HOME}"),
        (TERMS, replace(RUNNING, state="SUBMITTED"), 2.0, 60.0, True, "not running (SUBMITTED)"),
        (TERMS, replace(RUNNING, walltime_limit=None), 2.0, 60.0, True, "walltime or its price is not known"),
        (TERMS, RUNNING, None, 60.0, True, "walltime or its price is not known"),
        # 19 h left at 0.25 an hour: 4.75, not above 5.
        (TERMS, RUNNING, 0.25, 60.0, True, "not worth it: the rest of its walltime costs 4.75, not above 5.00"),
        (
            TERMS,
            RUNNING,
            2.0,
            631.0,
            True,
            "its newest checkpoint (step-00000010.json) was written at 2027-01-15T07:49:29Z, longer ago than its"
            " interval (600 s) and 30 s of slack",
        ),
    ],
)
def test_a_move_does_not_go(
    terms: CheckpointContract | None, job: JobEntry, price: float | None, age: float | None, policy: bool, fragment: str
) -> None:
    choice = decide(terms, job, price=price, age=age, policy=policy)
    assert not choice.go and fragment in choice.reason


@pytest.mark.parametrize("age", [None, 0.0, 630.0])
def test_a_move_goes_and_counts_what_it_saves(age: float | None) -> None:
    choice = decide(age=age)
    assert choice.go
    assert choice.saving == pytest.approx(38.0)  # 19 h x 2.0
    assert choice.gpu_hours == pytest.approx(76.0)  # 19 h x 4 GPUs
    assert "saves 38.00 (76.0 GPU-hours)" in choice.reason


STARTED = float(RUNNING.start_time)  # an hour ago
ALLOWED = TERMS.interval_seconds + moving.FRESHNESS_SLACK_SECONDS


@pytest.mark.parametrize(
    ("checkpoint", "job", "says"),
    [
        pytest.param(None, RUNNING, None, id="not-known"),
        pytest.param(moving.LastCheckpoint("a", NOW - ALLOWED), RUNNING, None, id="at-the-bound"),
        pytest.param(moving.LastCheckpoint("a", NOW - ALLOWED - 1), RUNNING, "its newest checkpoint (a) was", id="old"),
        pytest.param(moving.LastCheckpoint("a", NOW + 5), RUNNING, None, id="the-vaults-clock-ahead"),
        # None yet: the work at stake is the job's since it started.
        pytest.param(moving.LastCheckpoint(), RUNNING, "no checkpoint since its job started at", id="none-for-an-hour"),
        pytest.param(
            moving.LastCheckpoint(), replace(RUNNING, start_time=int(NOW - ALLOWED)), None, id="none-yet-just-started"
        ),
        # Staged in from an earlier run: the job resumed from it when it started.
        pytest.param(
            moving.LastCheckpoint("a", STARTED - 86400),
            replace(RUNNING, start_time=int(NOW - 60)),
            None,
            id="staged-in-job-just-started",
        ),
        pytest.param(
            moving.LastCheckpoint("a", STARTED - 86400), RUNNING, "(the newest, a, is from before)", id="old-run"
        ),
        pytest.param(moving.LastCheckpoint(), replace(RUNNING, start_time=0), None, id="start-not-known"),
        pytest.param(
            moving.LastCheckpoint("a", NOW - ALLOWED - 1),
            replace(RUNNING, start_time=0),
            "its newest checkpoint (a)",
            id="old-start-not-known",
        ),
    ],
)
def test_the_work_a_failed_move_would_cost_is_within_the_interval(
    checkpoint: moving.LastCheckpoint | None, job: JobEntry, says: str | None
) -> None:
    stale = moving.checkpoint_stale(checkpoint, TERMS, job, now=NOW)
    assert (stale is None) == (says is None)
    if says is not None:
        assert stale is not None and says in stale and "longer ago than its interval (600 s) and 30 s" in stale
        assert moving.checkpoint_stale(checkpoint, TERMS, job, now=NOW + 10) == stale  # the same each round


def test_a_stale_checkpoint_is_refused_for_now_only() -> None:
    choice = decide(age=ALLOWED + 1)
    assert (choice.go, choice.again) == (False, True)
    assert not decide(price=0.25).again  # not worth it: it never will be


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"checkpoint": {"name": "step-1.json", "mtime": 5}, "directory": "d"},
            moving.LastCheckpoint("step-1.json", 5.0),
        ),
        ({"checkpoint": None, "directory": "d"}, moving.LastCheckpoint()),
        ({"checkpoint": {"name": "", "mtime": 5}}, None),
        ({"checkpoint": {"name": "a", "mtime": True}}, None),
        ({"checkpoint": {"name": "a"}}, None),
        ({"directory": "d"}, None),
        (["checkpoint"], None),
    ],
)
def test_the_gateways_answer_is_read_or_refused(body: object, expected: moving.LastCheckpoint | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="not a checkpoint answer"):
            moving.parse_last_checkpoint(body)
    else:
        assert moving.parse_last_checkpoint(body) == expected


def test_a_pod_of_a_parallel_job_without_indexes_does_not_move() -> None:
    """Its siblings write into the same checkpoint directory: the replacement could resume from theirs."""
    choice = moving.decide(
        TERMS,
        RUNNING,
        price_per_hour=2.0,
        gpus=4,
        now=NOW,
        checkpoint=moving.LastCheckpoint("step-00000010.json", NOW - 60.0),
        policy_ignores_move=True,
        parallel_unindexed=2,
    )
    assert not choice.go and "2 pods at once without completion indexes" in choice.reason


@pytest.mark.parametrize(
    ("spec", "parallel_unindexed"),
    [
        ({}, 1),
        ({"parallelism": 3}, 3),
        ({"parallelism": 3, "completions": 1}, 1),  # one completion: one pod at a time
        ({"parallelism": 3, "completionMode": "Indexed"}, 0),
    ],
)
def test_a_jobs_pods_at_once_and_indexes_are_read(spec: dict[str, object], parallel_unindexed: int) -> None:
    body = job()
    body["spec"].update(spec)
    owner = parse_job(body)
    assert (0 if owner.indexed else owner.parallelism) == parallel_unindexed


def test_the_remaining_walltime_never_goes_below_zero() -> None:
    assert moving.remaining_seconds(replace(RUNNING, start_time=int(NOW - 30 * HOUR)), now=NOW) == 0.0
    assert moving.remaining_seconds(replace(RUNNING, start_time=0), now=NOW) is None


# --- the steps -----------------------------------------------------------------------------------

T = 100.0  # monotonic seconds
NOTHING = moving.Seen(job=RUNNING, pod_gone=False, pod_exit_code=None, replacement_node="", replacement_remote=False)
COMPLETED = replace(RUNNING, state="COMPLETED", exitcode=0)


def asked() -> moving.Move:
    progress = moving.start("pod-uid", "job-uid", RUNNING.number, now=T, gpu_hours=76.0)
    assert progress.events[0][0] == "NimbixMoveCheckpointAsked" and progress.actions == ()
    return progress.move


def reasons(progress: moving.Progress) -> list[str]:
    return [reason for reason, _ in progress.events]


def test_the_whole_move_step_by_step() -> None:
    move = asked()
    waiting = moving.advance(move, NOTHING, now=T + 10)
    assert waiting.move == move and waiting.events == () and waiting.actions == ()
    stopped = moving.advance(move, replace(NOTHING, job=COMPLETED), now=T + 20)
    assert stopped.move.step == "job_stopped"
    assert reasons(stopped) == ["NimbixMoveCheckpointWritten", "NimbixMoveJobStopped"]
    ended = replace(NOTHING, job=None, pod_gone=True, pod_exit_code=EXIT_MOVED_HOME)
    copied = moving.advance(stopped.move, ended, now=T + 30)
    assert copied.move.step == "copied_back" and reasons(copied) == ["NimbixMoveCopiedBack"]
    assert copied.actions == ()  # the job has ended: nothing bills
    resumed = moving.advance(copied.move, replace(ended, replacement_node="real-node"), now=T + 40)
    assert resumed.move.step == "resumed" and reasons(resumed) == ["NimbixMoveResumed"]
    assert "real-node" in resumed.events[0][1] and moving.finished(resumed.move)


def test_the_checkpoint_never_comes_the_job_keeps_running() -> None:
    move = asked()
    before = moving.advance(move, NOTHING, now=T + moving.CHECKPOINT_DEADLINE_SECONDS - 1)
    assert before.move.step == "asked"
    late = moving.advance(move, NOTHING, now=T + moving.CHECKPOINT_DEADLINE_SECONDS)
    assert late.move.step == "withdrawn" and late.actions == ("unmark",)  # never terminated: it keeps running
    assert reasons(late) == ["NimbixMoveGivenUp"] and "it keeps running" in late.events[0][1]
    assert not moving.finished(late.move) and not moving.under_way(late.move)
    # The runner had asked, the program wrote its checkpoint late: the pod leaves with it after all.
    ended = replace(NOTHING, job=COMPLETED, pod_gone=True, pod_exit_code=EXIT_MOVED_HOME)
    copied = moving.advance(late.move, ended, now=T + 2 * moving.CHECKPOINT_DEADLINE_SECONDS)
    assert copied.move.step == "copied_back" and reasons(copied) == ["NimbixMoveCopiedBack"]
    # The job ran on to its own end (the runner never asked): nothing more is said.
    done = moving.advance(late.move, replace(ended, pod_exit_code=0), now=T + 10 * HOUR)
    assert done == moving.Progress(replace(late.move, step="given_up", since=T + 10 * HOUR))


@pytest.mark.parametrize("state", ["TERMINATED", "COMPLETED WITH ERROR"])
def test_a_job_that_ends_otherwise_is_no_move(state: str) -> None:
    gone = moving.advance(asked(), replace(NOTHING, job=replace(RUNNING, state=state)), now=T + 5)
    assert gone.move.step == "given_up" and state in gone.events[0][1] and gone.actions == ()


def test_the_pod_ends_before_the_checkpoint_mid_move() -> None:
    # The runner killed mid-move: its pod ends (the Job handles that as any pod's end); nothing else is done.
    gone = moving.advance(asked(), replace(NOTHING, pod_gone=True, pod_exit_code=EXIT_TERMINATED), now=T + 5)
    assert gone.move.step == "given_up" and gone.actions == ()


def stopped_move() -> moving.Move:
    return moving.advance(asked(), replace(NOTHING, job=COMPLETED), now=T + 20).move


def test_a_cut_copy_back_is_not_a_move() -> None:
    # The runner could not copy the checkpoint back: it exits EXIT_TRANSFER (the data stays in the vault).
    cut = replace(NOTHING, job=None, pod_gone=True, pod_exit_code=EXIT_TRANSFER)
    progress = moving.advance(stopped_move(), cut, now=T + 30)
    assert progress.move.step == "given_up" and f"exit code {EXIT_TRANSFER}" in progress.events[0][1]


def test_a_copy_back_that_never_ends_is_given_up_after_its_deadline() -> None:
    move = stopped_move()
    assert moving.advance(move, replace(NOTHING, job=COMPLETED), now=move.since + 1).move.step == "job_stopped"
    late = moving.advance(move, replace(NOTHING, job=COMPLETED), now=move.since + moving.COPY_BACK_DEADLINE_SECONDS)
    assert late.move.step == "given_up"


def copied_move() -> moving.Move:
    ended = replace(NOTHING, job=None, pod_gone=True, pod_exit_code=EXIT_MOVED_HOME)
    return moving.advance(stopped_move(), ended, now=T + 30).move


def test_a_job_still_live_after_its_pod_came_home_is_terminated() -> None:
    live = replace(NOTHING, job=RUNNING, pod_gone=True, pod_exit_code=EXIT_MOVED_HOME)
    progress = moving.advance(copied_move(), live, now=T + 31)
    assert progress.actions == ("terminate",) and progress.move.step == "copied_back"


def test_the_gpus_taken_again_before_the_replacement_binds() -> None:
    remote = replace(NOTHING, job=None, pod_gone=True, replacement_remote=True)
    progress = moving.advance(copied_move(), remote, now=T + 35)
    assert progress.move.step == "given_up" and "resumes remotely from the checkpoint" in progress.events[0][1]


def test_a_replacement_that_never_binds_is_given_up_after_its_deadline() -> None:
    move = copied_move()
    waiting = replace(NOTHING, job=None, pod_gone=True)
    assert moving.advance(move, waiting, now=move.since + 1).move.step == "copied_back"
    late = moving.advance(move, waiting, now=move.since + moving.RESUME_DEADLINE_SECONDS)
    assert late.move.step == "given_up"


def test_a_finished_move_stays_finished() -> None:
    done = replace(asked(), step="resumed")
    assert moving.advance(done, NOTHING, now=T + 10_000) == moving.Progress(done)


MOVE_RULE = {"action": "Ignore", "onExitCodes": {"containerName": "app", "operator": "In", "values": [EXIT_MOVED_HOME]}}
ANY_MOVE_RULE = {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [EXIT_MOVED_HOME]}}


def named(rule: dict[str, object], container: str) -> dict[str, object]:
    return {**rule, "onExitCodes": {**rule["onExitCodes"], "containerName": container}}  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("rules", "moves_home"),
    [
        ([IGNORE_DISRUPTIONS, MOVE_RULE], True),
        ([IGNORE_DISRUPTIONS, ANY_MOVE_RULE], True),  # a Job made before the rules named their containers
        ([IGNORE_DISRUPTIONS, named(MOVE_RULE, "log"), MOVE_RULE], True),
        ([IGNORE_DISRUPTIONS], False),  # a Job created before the rule: queued homecomings only
        ([MOVE_RULE, IGNORE_DISRUPTIONS], False),  # evictions not ignored first
        ([IGNORE_DISRUPTIONS, {**MOVE_RULE, "action": "Count"}], False),
        # the user's rule for a container of theirs: the runner's 81 would count against backoffLimit
        ([IGNORE_DISRUPTIONS, named(MOVE_RULE, "log")], False),
        ([IGNORE_DISRUPTIONS, {**MOVE_RULE, "onExitCodes": {"operator": "NotIn", "values": [EXIT_MOVED_HOME]}}], False),
    ],
)
def test_a_jobs_policy_lets_its_burst_containers_pod_move_home(
    rules: list[dict[str, object]], moves_home: bool
) -> None:
    assert parse_job(job(rules=rules)).moves_home(["app"]) is moves_home


def test_a_pods_burst_containers_are_those_the_webhook_made_runners() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "app", "env": [{"name": "REMOTE", "value": "1"}]},
                {"name": "log", "env": [{"name": "REMOTE", "value": "0"}]},
                {"name": "side"},
            ]
        }
    }
    assert burst_containers(pod) == ("app",)
