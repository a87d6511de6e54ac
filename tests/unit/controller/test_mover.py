"""A running burst job moves home from its checkpoint: Homecomer.round with a Mover against a fake API
server and a fake JARVICE, step by step (what it marks, says, terminates and counts), and the rows of
the fault matrix the controller sees (the checkpoint never comes, the GPUs are taken again)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from controller import moving
from controller.homecomer import Homecomer
from controller.metrics import Metrics
from controller.mover import Mover
from controller.store import PodStore
from jarvice.exitcodes import EXIT_MOVED_HOME
from jarvice.model import JobEntry, Machine
from tests.support.deadlines import HANG_SECONDS
from tests.unit.controller.builders import IGNORE_DISRUPTIONS, JOB_UID, job
from tests.unit.controller.test_homecoming import LOCAL, FakeJarvice, FakeKube, burst, entry

pytestmark = pytest.mark.timeout(HANG_SECONDS)

NOW = 1_800_000_000.0
MOVE_RULE = {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [EXIT_MOVED_HOME]}}
CONTRACT = {
    "nimbix-burst.io/checkpoint-dir": "/data/ckpt",
    "nimbix-burst.io/checkpoint-interval": "10s",
    "nimbix-burst.io/stage-in": "/data",
    "nimbix-burst.io/stage-out": "/data",
}
MARK = "/metadata/annotations/nimbix-burst.io~1move-home"


@dataclass
class Jarvice(FakeJarvice):
    machines: dict[str, Machine] = field(default_factory=lambda: {"ng4": Machine("ng4", cores=16, gpus=4, price=2.0)})

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        return self.ended if completed else self.jobs

    def fetch_machines(self) -> dict[str, Machine]:
        return self.machines


@dataclass
class Kube(FakeKube):
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)

    def list_namespace_annotations(self) -> dict[str, Mapping[str, str]]:
        return self.namespaces


def running(number: int = 4711) -> JobEntry:
    return replace(
        entry(number, "PROCESSING STARTING", started=int(NOW - 3600)), machine="ng4", walltime_limit=20 * 3600
    )


@dataclass
class World:
    homecomer: Homecomer
    kube: Kube
    jarvice: Jarvice
    metrics: Metrics
    store: PodStore
    clock: list[float]


@dataclass
class Checkpoints:
    """What the gateway answers of the pod's newest checkpoint (an exception: it did not answer)."""

    answer: moving.LastCheckpoint | Exception
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    def newest_checkpoint(self, namespace: str, name: str, uid: str) -> moving.LastCheckpoint:
        self.asked.append((namespace, name, uid))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def world(
    annotations: dict[str, str], *, namespace: dict[str, str] | None = None, checkpoints: Checkpoints | None = None
) -> World:
    body = burst()
    body["metadata"]["annotations"].update(annotations)
    store = PodStore(clock=lambda: 0.0)
    store.replace([body])
    kube = Kube(
        pods={body["metadata"]["name"]: body},
        answer=LOCAL,
        jobs={"train": job(rules=[IGNORE_DISRUPTIONS, MOVE_RULE])},
        namespaces={"team": namespace or {}},
    )
    jarvice = Jarvice({4711: running()})
    metrics = Metrics(is_leader=lambda: True)
    clock = [100.0]
    mover = Mover(
        jarvice=jarvice,
        kube=kube,
        metrics=metrics,
        clock=lambda: clock[0],
        wall_clock=lambda: NOW,
        checkpoints=checkpoints,
    )
    homecomer = Homecomer(
        store=store,
        jarvice=jarvice,
        kube=kube,
        metrics=metrics,
        is_leader=lambda: True,
        interval=10,
        stale_after=60,
        clock=lambda: clock[0],
        mover=mover,
    )
    return World(homecomer, kube, jarvice, metrics, store, clock)


def reasons(w: World) -> list[str]:
    return [reason for _, _, reason in w.kube.events]


def ended_with(w: World, code: int) -> None:
    """The runner exited `code`: its pod failed (a Job pod's restartPolicy is Never)."""
    body = w.kube.pods["train-abcde"]
    body["status"]["phase"] = "Failed"
    body["status"]["containerStatuses"] = [{"name": "app", "state": {"terminated": {"exitCode": code}}}]


def test_a_running_job_moves_home_step_by_step() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.homecomer.round()
    ((name, ops),) = w.kube.patched
    assert (name, ops) == ("train-abcde", [{"op": "add", "path": MARK, "value": "4711"}])
    assert reasons(w) == ["NimbixMoveCheckpointAsked"]
    assert w.jarvice.terminated == [] and w.kube.deleted == []  # the runner asks; nothing is killed
    w.homecomer.round()
    assert reasons(w) == ["NimbixMoveCheckpointAsked"]  # the job still runs: nothing new
    # The program wrote its checkpoint and exited: the job ended COMPLETED.
    w.jarvice.jobs, w.jarvice.ended = {}, {4711: replace(running(), state="COMPLETED", exitcode=0)}
    w.homecomer.round()
    assert reasons(w)[1:] == ["NimbixMoveCheckpointWritten", "NimbixMoveJobStopped"]
    ended_with(w, EXIT_MOVED_HOME)  # the runner copied the checkpoint back and exited 81
    w.homecomer.round()
    assert reasons(w)[3:] == ["NimbixMoveCopiedBack"]
    replacement = burst(uid="22222222-3333-4444-5555-666666666666", name="train-fghij", node_name="gpu-1")
    replacement["metadata"]["annotations"]["nimbix-burst.io/decision"] = "local"
    w.store.replace([w.kube.pods["train-abcde"], replacement])
    w.homecomer.round()
    assert reasons(w)[4:] == ["NimbixMoveResumed"]
    assert w.jarvice.terminated == []
    sample = w.metrics.registry.get_sample_value
    assert sample("nimbix_burst_controller_moves_home_total", {"outcome": "resumed"}) == 1.0
    # 19 h of walltime left on a 4-GPU node.
    assert sample("nimbix_burst_controller_gpu_hours_moved_home_total") == pytest.approx(76.0)
    assert w.homecomer.came_home == {JOB_UID}


def test_the_namespace_opts_its_pods_in() -> None:
    w = world(CONTRACT, namespace={"nimbix-burst.io/come-home": "running"})
    w.homecomer.round()
    assert reasons(w) == ["NimbixMoveCheckpointAsked"]


@pytest.mark.parametrize(
    ("annotations", "why"),
    [
        (CONTRACT, "not opted in"),
        ({}, "no nimbix-burst.io/checkpoint-dir"),
        (
            {**CONTRACT, "nimbix-burst.io/come-home": "running", "nimbix-burst.io/come-home-min-saving": "100"},
            "not worth it",
        ),
    ],
)
def test_a_pod_that_does_not_move_stays_and_says_why(annotations: dict[str, str], why: str) -> None:
    w = world(annotations)
    w.homecomer.round()
    w.homecomer.round()
    ((_, ops),) = w.kube.patched  # said once
    assert ops[0]["path"] == "/metadata/annotations/nimbix-burst.io~1homecoming"
    assert why in ops[0]["value"] and "stays on Nimbix" in ops[0]["value"]
    assert w.kube.events == [] and w.jarvice.terminated == []


def test_a_fresh_checkpoint_lets_the_move_go() -> None:
    checkpoints = Checkpoints(moving.LastCheckpoint("step-00000040.json", NOW - 9.9))
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"}, checkpoints=checkpoints)
    w.homecomer.round()
    assert reasons(w) == ["NimbixMoveCheckpointAsked"]
    assert checkpoints.asked == [("team", "train-abcde", w.kube.pods["train-abcde"]["metadata"]["uid"])]


def test_a_stale_checkpoint_keeps_the_job_remote_until_a_fresh_one_comes() -> None:
    """The program stopped checkpointing by itself: said once on the pod, looked at again each round."""
    stale = moving.LastCheckpoint("step-00000040.json", NOW - 10 - moving.FRESHNESS_SLACK_SECONDS - 1)
    checkpoints = Checkpoints(stale)
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"}, checkpoints=checkpoints)
    w.homecomer.round()
    w.homecomer.round()
    ((_, ops),) = w.kube.patched  # said once, though looked at twice
    assert len(checkpoints.asked) == 2
    assert "stays on Nimbix" in ops[0]["value"]
    assert "not moved home: its newest checkpoint (step-00000040.json) was written at" in ops[0]["value"]
    assert w.kube.events == []
    checkpoints.answer = moving.LastCheckpoint("step-00000050.json", NOW - 1)
    w.homecomer.round()
    assert reasons(w) == ["NimbixMoveCheckpointAsked"]


def test_a_checkpoint_the_gateway_cannot_read_is_not_known_and_the_move_goes() -> None:
    checkpoints = Checkpoints(ConnectionError("gateway unreachable"))
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"}, checkpoints=checkpoints)
    w.homecomer.round()
    assert reasons(w) == ["NimbixMoveCheckpointAsked"]
    errors = w.metrics.registry.get_sample_value("nimbix_burst_controller_errors_total", {"kind": "gateway-checkpoint"})
    assert errors == 1.0


def test_the_gateway_is_not_asked_for_a_move_that_would_not_go_anyway() -> None:
    checkpoints = Checkpoints(moving.LastCheckpoint())
    annotations = {**CONTRACT, "nimbix-burst.io/come-home": "running", "nimbix-burst.io/come-home-min-saving": "100"}
    w = world(annotations, checkpoints=checkpoints)
    w.homecomer.round()
    assert checkpoints.asked == [] and "not worth it" in w.kube.patched[0][1][0]["value"]


def test_a_job_created_before_the_move_rule_never_moves() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.kube.jobs = {"train": job(rules=[IGNORE_DISRUPTIONS])}
    w.homecomer.round()
    ((_, ops),) = w.kube.patched
    assert f"does not ignore exit code {EXIT_MOVED_HOME}" in ops[0]["value"]


def test_the_checkpoint_never_comes_the_mark_goes_and_the_job_keeps_running() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.homecomer.round()
    w.clock[0] += moving.CHECKPOINT_DEADLINE_SECONDS
    w.homecomer.round()
    assert w.kube.patched[-1] == ("train-abcde", [{"op": "remove", "path": MARK}])
    assert reasons(w) == ["NimbixMoveCheckpointAsked", "NimbixMoveGivenUp"]
    assert w.jarvice.terminated == []  # it keeps running remotely
    assert (
        w.metrics.registry.get_sample_value("nimbix_burst_controller_moves_home_total", {"outcome": "given_up"}) == 1.0
    )


def test_the_gpus_taken_again_the_replacement_bursts_and_resumes_remotely() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.homecomer.round()
    w.jarvice.jobs, w.jarvice.ended = {}, {4711: replace(running(), state="COMPLETED", exitcode=0)}
    w.homecomer.round()
    ended_with(w, EXIT_MOVED_HOME)
    w.homecomer.round()
    replacement = burst(uid="22222222-3333-4444-5555-666666666666", name="train-fghij")
    w.store.replace([w.kube.pods["train-abcde"], replacement])  # decided remote: the GPUs were taken again
    w.homecomer.round()
    assert reasons(w)[-1] == "NimbixMoveGivenUp"
    assert w.jarvice.terminated == []


def test_a_job_still_live_after_the_pod_left_with_its_checkpoint_is_terminated() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.homecomer.round()
    w.jarvice.ended = {4711: replace(running(), state="COMPLETED", exitcode=0)}
    w.jarvice.jobs = {}
    w.homecomer.round()
    ended_with(w, EXIT_MOVED_HOME)
    w.jarvice.jobs = {4711: running()}  # listed live again (a stale listing): never billing after the pod left
    w.homecomer.round()
    assert w.jarvice.terminated == [4711]


REMOTE_ANSWER = {
    "metadata": {"annotations": {"nimbix-burst.io/decision": "remote", "nimbix-burst.io/reason": "no GPUs"}}
}


@pytest.mark.parametrize(("annotations", "dry_runs"), [(CONTRACT, 2), ({}, 1)])
def test_only_a_pod_with_a_checkpoint_directory_is_looked_at_again_until_local_gpus_free(
    annotations: dict[str, str], dry_runs: int
) -> None:
    w = world({**annotations, "nimbix-burst.io/come-home": "running"} if annotations else {})
    w.kube.answer = REMOTE_ANSWER  # no local node can run it yet
    w.homecomer.round()
    w.homecomer.round()
    assert len(w.kube.dry_runs) == dry_runs
    w.kube.answer = LOCAL  # GPUs free
    w.homecomer.round()
    assert reasons(w) == (["NimbixMoveCheckpointAsked"] if annotations else [])


def test_a_failed_look_at_the_prices_is_tried_again_next_round() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    machines = w.jarvice.machines

    def unreachable() -> dict[str, Machine]:
        raise ConnectionError("JARVICE unreachable")

    w.jarvice.fetch_machines = unreachable  # type: ignore[method-assign]
    w.homecomer.round()
    assert w.kube.events == [] and w.kube.patched == []
    w.jarvice.fetch_machines = lambda: machines  # type: ignore[method-assign]
    w.homecomer.round()
    assert reasons(w) == ["NimbixMoveCheckpointAsked"]


def test_a_new_leader_takes_over_a_move_under_way_without_asking_again() -> None:
    """The leader that marked the pod is gone; the next one sees the mark and carries the move on."""
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running", "nimbix-burst.io/move-home": "4711"})
    w.homecomer.round()
    assert (w.kube.patched, reasons(w)) == ([], [])  # not marked again, nothing said again
    w.jarvice.jobs, w.jarvice.ended = {}, {4711: replace(running(), state="COMPLETED", exitcode=0)}
    w.homecomer.round()
    assert reasons(w) == ["NimbixMoveCheckpointWritten", "NimbixMoveJobStopped"]
    ended_with(w, EXIT_MOVED_HOME)
    w.homecomer.round()
    assert reasons(w)[2:] == ["NimbixMoveCopiedBack"]
    assert w.jarvice.terminated == []


def test_a_new_leader_gives_a_taken_over_move_its_own_deadline_and_takes_the_mark_away() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running", "nimbix-burst.io/move-home": "4711"})
    w.homecomer.round()
    w.clock[0] += moving.CHECKPOINT_DEADLINE_SECONDS
    w.homecomer.round()
    assert w.kube.patched == [("train-abcde", [{"op": "remove", "path": MARK}])]
    assert reasons(w) == ["NimbixMoveGivenUp"]
    w.homecomer.round()  # the watch still shows the mark for a moment: the move is not taken over again
    assert reasons(w) == ["NimbixMoveGivenUp"]


def test_a_pod_that_ended_with_the_mark_is_not_taken_over() -> None:
    """Its runner finished the move (or the pod ended otherwise): the Job creates the replacement."""
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running", "nimbix-burst.io/move-home": "4711"})
    ended_with(w, EXIT_MOVED_HOME)
    w.store.replace([w.kube.pods["train-abcde"]])
    w.homecomer.round()
    assert (w.kube.patched, reasons(w), w.jarvice.terminated) == ([], [], [])


SIBLING = "33333333-4444-5555-6666-777777777777"


@pytest.mark.parametrize("sibling_decision", ["remote", "local"])
def test_in_a_parallel_job_a_sibling_that_ran_all_along_is_not_the_replacement(sibling_decision: str) -> None:
    """An Indexed Job, parallelism 2: the Job's other pod (burst, or bound to a local node) was there
    before the move; only the pod the Job creates for the one that left says how the move ended."""
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.kube.jobs["train"]["spec"].update(parallelism=2, completionMode="Indexed")
    sibling = burst(uid=SIBLING, name="train-sibli", node_name="gpu-9" if sibling_decision == "local" else "cpu-1")
    sibling["metadata"]["annotations"]["nimbix-burst.io/decision"] = sibling_decision
    w.store.replace([w.kube.pods["train-abcde"], sibling])
    w.homecomer.round()
    w.jarvice.jobs, w.jarvice.ended = {}, {4711: replace(running(), state="COMPLETED", exitcode=0)}
    w.homecomer.round()
    ended_with(w, EXIT_MOVED_HOME)
    w.homecomer.round()
    w.homecomer.round()  # the replacement is not created yet: the sibling says nothing of it
    assert reasons(w)[-1] == "NimbixMoveCopiedBack"
    replacement = burst(uid="22222222-3333-4444-5555-666666666666", name="train-fghij", node_name="gpu-1")
    replacement["metadata"]["annotations"]["nimbix-burst.io/decision"] = "local"
    w.store.replace([w.kube.pods["train-abcde"], sibling, replacement])
    w.homecomer.round()
    assert reasons(w)[-1] == "NimbixMoveResumed"
    sample = w.metrics.registry.get_sample_value
    assert sample("nimbix_burst_controller_moves_home_total", {"outcome": "resumed"}) == 1.0


def test_a_pod_of_a_parallel_job_without_indexes_stays_and_says_why() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.kube.jobs["train"]["spec"]["parallelism"] = 2
    w.homecomer.round()
    ((_, ops),) = w.kube.patched  # no mark: the note why
    assert "2 pods at once without completion indexes" in ops[0]["value"]
    assert w.kube.events == []


def test_a_checkpoint_written_after_the_move_was_given_up_still_comes_home_as_a_move() -> None:
    """The runner asked before the deadline; the program wrote its checkpoint late (the mark was taken
    away meanwhile) and its runner exited 81: the Job creates the replacement all the same. It settles
    as a homecoming's (no other pod comes home onto those GPUs meanwhile) and its job never bills on."""
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.homecomer.round()
    w.clock[0] += moving.CHECKPOINT_DEADLINE_SECONDS
    w.homecomer.round()
    assert reasons(w) == ["NimbixMoveCheckpointAsked", "NimbixMoveGivenUp"]
    w.jarvice.jobs, w.jarvice.ended = {}, {4711: replace(running(), state="COMPLETED", exitcode=0)}
    ended_with(w, EXIT_MOVED_HOME)
    w.homecomer.round()
    assert reasons(w)[-1] == "NimbixMoveCopiedBack"
    assert not w.homecomer.may_bring_home()  # the replacement settles first
    replacement = burst(uid="22222222-3333-4444-5555-666666666666", name="train-fghij", node_name="gpu-1")
    replacement["metadata"]["annotations"]["nimbix-burst.io/decision"] = "local"
    w.store.replace([w.kube.pods["train-abcde"], replacement])
    w.homecomer.round()
    assert reasons(w)[-1] == "NimbixMoveResumed"


def test_a_move_given_up_while_its_job_runs_on_does_not_hold_back_other_homecomings() -> None:
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.homecomer.round()
    w.clock[0] += moving.CHECKPOINT_DEADLINE_SECONDS
    w.homecomer.round()
    w.clock[0] += 10 * moving.CHECKPOINT_DEADLINE_SECONDS
    w.homecomer.round()  # the job runs on remotely, for hours maybe
    assert w.homecomer.may_bring_home()


def test_a_replacement_seen_in_the_round_its_pod_left_still_settles_when_it_binds() -> None:
    """The Job controller creates the replacement the moment the moved pod ends 81, so the watch may show it
    in the very round the move reaches "copied back". It is still the replacement: once it binds, other pods
    may come home again (not only SETTLE_SECONDS later, which held every homecoming back for 5 minutes)."""
    w = world({**CONTRACT, "nimbix-burst.io/come-home": "running"})
    w.homecomer.round()
    w.jarvice.jobs, w.jarvice.ended = {}, {4711: replace(running(), state="COMPLETED", exitcode=0)}
    w.homecomer.round()
    ended_with(w, EXIT_MOVED_HOME)
    replacement = burst(uid="22222222-3333-4444-5555-666666666666", name="train-fghij")
    replacement["metadata"]["annotations"]["nimbix-burst.io/decision"] = "local"
    w.store.replace([w.kube.pods["train-abcde"], replacement])  # created, not yet bound
    w.homecomer.round()
    assert reasons(w)[-1] == "NimbixMoveCopiedBack"
    assert not w.homecomer.may_bring_home()  # the replacement settles first
    replacement["spec"]["nodeName"] = "gpu-1"
    w.store.replace([w.kube.pods["train-abcde"], replacement])
    w.clock[0] += 10
    w.homecomer.round()
    assert reasons(w)[-1] == "NimbixMoveResumed"
    assert w.homecomer.may_bring_home()
