"""A job JARVICE keeps queued moves to the next candidate machine: the runner as a real process against
the JARVICE emulator with a full machine (`machine_capacity`). Never two live jobs: the next is
submitted only after the first was seen ended."""

import threading
import time
from typing import Any

import pytest

from devplatform.emulator import EmulatorControl, EmulatorThread
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import base_env, label_of, run_runner

pytestmark = pytest.mark.timeout(HANG_SECONDS)

LIVE = ("SUBMITTED", "SEQUENTIALLY QUEUED", "PROCESSING STARTING")


@pytest.fixture
def env(emulator: EmulatorThread, control: EmulatorControl) -> dict[str, str]:
    # A 4-GPU V100 pod as the webhook rewrites it (the local install's mapping, its budget's count).
    return base_env(
        emulator.url,
        NUM_GPUS="4",
        NUM_CPUS="1",
        NIMBIX_BURST_COUNTED_GPUS="4",
        NIMBIX_BURST_ALLOWED_MACHINES="ng2,ng4,ng4v",
        APP_COMMAND_ARGS="echo done on the next machine",
    )


class LiveWatch:
    """Samples the label's jobs while the runner runs: the most live at any one look."""

    def __init__(self, control: EmulatorControl, label: str) -> None:
        self.control, self.label = control, label
        self.most_live = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self.stop.is_set():
            jobs: list[dict[str, Any]] = self.control.jobs(self.label)
            self.most_live = max(self.most_live, sum(job["status"] in LIVE for job in jobs))
            time.sleep(0.02)

    def __enter__(self) -> "LiveWatch":
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


@pytest.mark.parametrize("queued_end", ["TERMINATED", "CANCELED"])  # JARVICE may answer either (reference §6)
def test_a_job_queued_on_a_full_machine_moves_to_the_next_and_completes(
    env: dict[str, str], control: EmulatorControl, queued_end: str
) -> None:
    control.set_config(machine_capacity={"ng4": 0}, queued_end_status=queued_end)
    env["NIMBIX_BURST_MAX_REMOTE_QUEUE"] = "2s"
    with LiveWatch(control, label_of(env)) as watch:
        code, runner = run_runner(env)
    assert code == 0, runner.err
    assert runner.out == b"done on the next machine\n"
    first, second = control.jobs(label_of(env))
    assert (first["machine"], first["status"], first["stop_reason"]) == ("ng4", queued_end, "terminate")
    assert (second["machine"], second["status"]) == ("ng4v", "COMPLETED")
    assert watch.most_live == 1
    (move,) = [e for e in runner.logs() if e["message"].startswith("job queued too long")]
    assert move["job"] == first["number"] and move["machine"] == "ng4v"
    assert "candidate 2 of 2" in move["reason"]
    (ended,) = [e for e in runner.logs() if e["message"] == "queued job ended"]
    assert (ended["state"], ended["start_time"]) == (queued_end, 0)  # never ran: it cost nothing


def test_on_the_last_candidate_it_keeps_waiting(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_config(machine_capacity={"ng4": 0, "ng4v": 0})
    env["NIMBIX_BURST_MAX_REMOTE_QUEUE"] = "1s"

    def free_ng4v_later() -> None:
        time.sleep(4)
        control.set_config(machine_capacity={"ng4": 0})

    freeing = threading.Thread(target=free_ng4v_later, daemon=True)
    freeing.start()
    code, runner = run_runner(env)
    freeing.join()
    assert code == 0, runner.err
    jobs = control.jobs(label_of(env))
    assert [(job["machine"], job["status"]) for job in jobs] == [("ng4", "TERMINATED"), ("ng4v", "COMPLETED")]


def test_zero_never_moves(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_config(machine_capacity={"ng4": 0})
    env["NIMBIX_BURST_MAX_REMOTE_QUEUE"] = "0"

    def free_ng4_later() -> None:
        time.sleep(3)
        control.set_config(machine_capacity={})

    freeing = threading.Thread(target=free_ng4_later, daemon=True)
    freeing.start()
    code, runner = run_runner(env)
    freeing.join()
    assert code == 0, runner.err
    assert [(job["machine"], job["status"]) for job in control.jobs(label_of(env))] == [("ng4", "COMPLETED")]


def test_a_pinned_machine_never_moves(env: dict[str, str], control: EmulatorControl) -> None:
    control.set_config(machine_capacity={"ng4": 0})
    env.update(NIMBIX_BURST_MAX_REMOTE_QUEUE="1s", JARVICE_MACHINE="ng4")

    def free_ng4_later() -> None:
        time.sleep(3)
        control.set_config(machine_capacity={})

    freeing = threading.Thread(target=free_ng4_later, daemon=True)
    freeing.start()
    code, runner = run_runner(env)
    freeing.join()
    assert code == 0, runner.err
    assert [job["machine"] for job in control.jobs(label_of(env))] == ["ng4"]


def test_a_bad_max_remote_queue_is_refused_with_what_to_write(env: dict[str, str], control: EmulatorControl) -> None:
    env["NIMBIX_BURST_MAX_REMOTE_QUEUE"] = "10 minutes"
    code, runner = run_runner(env)
    assert code != 0
    assert "NIMBIX_BURST_MAX_REMOTE_QUEUE: '10 minutes' is not a duration" in runner.err
    assert control.submissions(label_of(env))["attempts"] == 0
