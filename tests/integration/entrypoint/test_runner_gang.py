"""A gang burst as one multi-node job: the runners of its ranks as real processes against the
JARVICE emulator running the base image's AppDef, so the run command really fans the command out
(each node a local process of the emulator's host)."""

import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devplatform.emulator import EmulatorConfig, EmulatorControl, EmulatorThread, Timing, appdef
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import API_KEY, USER, Runner, base_env, run_runner

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ROOT = Path(__file__).resolve().parents[3]
APP = "nimbix-burst-base"
RANK_LINE = 'echo "rank=$NODE_RANK of $NNODES index=$JOB_COMPLETION_INDEX master=$MASTER_ADDR:$MASTER_PORT"'


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorThread]:
    config = EmulatorConfig(
        users={USER: API_KEY},
        apps={},
        appdefs={APP: appdef.load_appdef(ROOT / "images" / "base" / "AppDef.json")},
        timing=Timing(queue_seconds=0.1, init_seconds=0.0, shutdown_kill_seconds=5.0),
        workdir=tmp_path_factory.mktemp("gang-jobs"),
    )
    with EmulatorThread(config) as emu:
        yield emu


@pytest.fixture
def control(emulator: EmulatorThread) -> Iterator[EmulatorControl]:
    with EmulatorControl(emulator.url) as ctl:
        yield ctl


def gang_envs(url: str, command: str, *, size: int = 2, **overrides: str) -> list[dict[str, str]]:
    """One runner environment per rank, as the webhook sets them (REMOTE=1 plus the gang)."""
    gang = str(uuid.uuid4())
    return [
        base_env(
            url,
            APP_NAME=APP,
            APP_COMMAND_ARGS=command,
            NIMBIX_BURST_GANG_UID=gang,
            NIMBIX_BURST_GANG_SIZE=str(size),
            NIMBIX_BURST_GANG_RANK=str(rank),
            **overrides,
        )
        for rank in range(size)
    ]


def gang_label(env: dict[str, str]) -> str:
    return f"k8s-{env['NIMBIX_BURST_GANG_UID']}-1"


def submissions(control: EmulatorControl, env: dict[str, str]) -> list[dict[str, Any]]:
    listing: list[dict[str, Any]] = control.submissions(gang_label(env))["submissions"]
    return listing


def test_a_gang_of_two_is_one_job_on_two_nodes_and_both_ranks_exit_with_its_result(
    emulator: EmulatorThread, control: EmulatorControl
) -> None:
    rank0, rank1 = gang_envs(emulator.url, f"{RANK_LINE}; exit 0")
    follower = Runner.start(rank1)  # the follower starts first: it waits for rank 0's job
    code0, submitter = run_runner(rank0)
    code1 = follower.wait()
    assert (code0, code1) == (0, 0), (submitter.err, follower.err)
    (submission,) = submissions(control, rank0)
    assert submission["body"]["machine"]["nodes"] == 2
    (job,) = control.jobs(gang_label(rank0))
    assert job["status"] == "COMPLETED" and job["nodes"] == ["127.0.0.1", "127.0.0.2"]
    # Rank 0's log carries the job's output: every rank's line, each with its own NODE_RANK.
    assert b"rank=0 of 2 index=0 master=127.0.0.1:29500\n" in submitter.out
    assert b"rank=1 of 2 index=1 master=127.0.0.1:29500\n" in submitter.out
    # Rank 1's log says which job it follows and its states, never the job's output.
    assert b"rank=" not in follower.out
    lines = follower.out.decode().splitlines()
    assert f"rank 1 of 2 follows JARVICE job {job['number']}" in lines[-2]
    assert lines[-2].endswith(": COMPLETED") and lines[-1].startswith(
        f"nimbix-burst: JARVICE job {job['number']} ended"
    )
    assert "job submitted" not in follower.messages()


def test_a_rank_that_starts_after_its_gangs_job_ended_follows_it_from_when_its_generation_began(
    emulator: EmulatorThread, control: EmulatorControl
) -> None:
    """Its Job recreated this rank after rank 0's replacement had run the gang's job to its end: the webhook
    told it when its generation began (before rank 0's pod), so the job that ended before it started is its."""
    began = int(time.time())
    rank0, rank1 = gang_envs(emulator.url, "exit 0", NIMBIX_BURST_GANG_WAIT_SECONDS="3")
    code0, submitter = run_runner(rank0)
    assert code0 == 0, submitter.err
    ended_by = int(time.time())  # the job ended before its runner exited
    deadline = time.monotonic() + HANG_SECONDS
    while int(time.time()) <= ended_by:  # this rank starts in a later second than the job's end
        assert time.monotonic() < deadline
        time.sleep(0.05)
    code1, follower = run_runner({**rank1, "NIMBIX_BURST_GANG_SINCE": str(began)})
    (job,) = control.jobs(gang_label(rank0))
    assert code1 == 0, follower.err
    assert f"rank 1 of 2 follows JARVICE job {job['number']}" in follower.out.decode()
    assert len(submissions(control, rank0)) == 1


def test_a_failing_rank_fails_the_job_and_every_rank_exits_with_its_status(
    emulator: EmulatorThread, control: EmulatorControl
) -> None:
    # Rank 1 fails at once; rank 0 would run for a minute: the fan-out stops it.
    rank0, rank1 = gang_envs(emulator.url, 'if [ "$NODE_RANK" = 1 ]; then exit 5; fi; exec sleep 60')
    submitter, follower = Runner.start(rank0), Runner.start(rank1)
    assert (submitter.wait(), follower.wait()) == (5, 5), (submitter.err, follower.err)
    (job,) = control.jobs(gang_label(rank0))
    assert (job["status"], job["exitcode"]) == ("COMPLETED WITH ERROR", 5)


def test_the_pods_master_port_reaches_every_rank(emulator: EmulatorThread) -> None:
    rank0, rank1 = gang_envs(emulator.url, RANK_LINE, MASTER_PORT="23456")
    follower = Runner.start(rank1)
    code, submitter = run_runner(rank0)
    assert (code, follower.wait()) == (0, 0), submitter.err
    assert b"rank=1 of 2 index=1 master=127.0.0.1:23456\n" in submitter.out


def test_sigterm_on_a_following_rank_terminates_the_gangs_job(
    emulator: EmulatorThread, control: EmulatorControl
) -> None:
    rank0, rank1 = gang_envs(emulator.url, 'echo "started $NODE_RANK"; exec sleep 60')
    submitter, follower = Runner.start(rank0), Runner.start(rank1)
    submitter.wait_for_stdout(b"started 1\n")  # both ranks run
    follower.wait_for_stdout(b": PROCESSING STARTING\n")
    follower.send(signal.SIGTERM)  # the pod of rank 1 is deleted
    assert follower.wait() == 143, follower.err
    (job,) = control.jobs(gang_label(rank0))
    assert job["status"] == "TERMINATED"
    assert submitter.wait() == 143, submitter.err  # rank 0 follows the job to its end
    assert len(submissions(control, rank0)) == 1


def test_a_following_rank_waits_a_bounded_time_for_rank_0(emulator: EmulatorThread, control: EmulatorControl) -> None:
    _, rank1 = gang_envs(emulator.url, "true", NIMBIX_BURST_GANG_WAIT_SECONDS="0.5")
    code, follower = run_runner(rank1)
    assert code == 71, follower.err
    assert b"waits for the gang's JARVICE job" in follower.out and b"giving up" in follower.out
    assert submissions(control, rank1) == []
    assert "no job of the gang's label appeared; rank 0's pod submits it (see its logs)" in follower.messages()


def test_sigterm_while_waiting_for_rank_0_exits_at_once(emulator: EmulatorThread, control: EmulatorControl) -> None:
    _, rank1 = gang_envs(emulator.url, "true")
    follower = Runner.start(rank1)
    follower.wait_for_stdout(b"waits for the gang's JARVICE job")
    follower.send(signal.SIGTERM)
    assert follower.wait() == 143, follower.err
    assert "no remote job to stop" in follower.messages()
    assert submissions(control, rank1) == []


def test_a_restarted_rank_0_picks_its_job_up_and_never_submits_twice(
    emulator: EmulatorThread, control: EmulatorControl, tmp_path: Path
) -> None:
    rank0, rank1 = gang_envs(emulator.url, 'for i in $(seq 1 20); do echo "$NODE_RANK $i"; sleep 0.05; done')
    rank0["NIMBIX_BURST_STATE_DIR"] = str(tmp_path)  # rank 0's pod's own emptyDir
    follower = Runner.start(rank1)
    first = Runner.start(rank0)
    first.wait_for_stdout(b"0 3\n")
    first.send(signal.SIGKILL)  # rank 0's container dies without a word
    assert first.wait() == -9
    code, second = run_runner(rank0)
    assert (code, follower.wait()) == (0, 0), (second.err, follower.err)
    assert len(submissions(control, rank0)) == 1
    assert "job submitted" not in second.messages()
    assert b"0 20\n" in second.out and b"1 20\n" in second.out
    # One file: the restarted runner removed what the killed one may have left half written.
    (state_file,) = tmp_path.iterdir()
    state = json.loads(state_file.read_text())
    assert state["job_label"] == gang_label(rank0) and state["reported"] is True


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"NIMBIX_BURST_GANG_RANK": None}, "missing NIMBIX_BURST_GANG_RANK"),
        ({"NIMBIX_BURST_GANG_RANK": "2"}, "NIMBIX_BURST_GANG_RANK must be within 0..1"),
        ({"JARVICE_NODES": "3"}, "JARVICE_NODES=3 conflicts with NIMBIX_BURST_GANG_SIZE=2"),
    ],
    ids=["partial", "rank-out-of-range", "nodes-conflict"],
)
def test_a_gang_env_that_cannot_be_used_is_refused_before_anything_is_submitted(
    emulator: EmulatorThread, control: EmulatorControl, overrides: dict[str, str | None], problem: str
) -> None:
    env = gang_envs(emulator.url, "true")[0]
    for name, value in overrides.items():
        if value is None:
            env.pop(name)
        else:
            env[name] = value
    code, runner = run_runner(env)
    assert code == 78
    (entry,) = [e for e in runner.logs() if e["message"] == "invalid settings"]
    assert any(problem in p for p in entry["problems"]), entry
    assert submissions(control, env) == []
