"""JobRecorder.round against a fake JARVICE and a pod writer that applies the JSON patches to the
store's pods as the API server would (its `test` ops refused with a 422-like PodChanged): Events
once each across rounds and across a restart, leadership, the history listed only when needed, the
per-round cap, and the machines cached."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from controller.kube import PodChanged
from controller.machinerates import MachineRates
from controller.metrics import Metrics
from controller.recording import JobRecorder
from controller.store import PodStore
from jarvice.client import Unavailable
from jarvice.model import JobEntry, Machine
from tests.support.clocks import Clock

UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
OTHER = "00000000-1111-2222-3333-444444444444"
WALL = 1_700_000_000


def pod(uid: str = UID, name: str = "train-0", *, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": name,
            "namespace": "team",
            "annotations": {"nimbix-burst.io/decision": "remote"},
        },
        "status": {"phase": phase},
    }


@dataclass
class FakeJarvice:
    live: dict[int, JobEntry] = field(default_factory=dict)
    ended: dict[int, JobEntry] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    down: bool = False

    def set(self, number: int, state: str, uid: str = UID, *, start: int = 0, end: int = 0, code: int = 0) -> None:
        entry = JobEntry(number, f"j{number}", state, f"k8s-0123456789ab.{uid}-app-1", code, "", "ng2", 1, start, end)
        self.live.pop(number, None)
        self.ended.pop(number, None)
        (self.ended if end else self.live)[number] = entry

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        self.calls.append("history" if completed else "live")
        if self.down:
            raise Unavailable("jobs: down", endpoint="jobs")
        return dict(self.ended if completed else self.live)

    def fetch_machines(self) -> dict[str, Machine]:
        self.calls.append("machines")
        return {"ng2": Machine("ng2", cores=16, gpus=2, price=4.20)}


@dataclass
class ApiServer:
    """The pods of the store, patched as the API server patches them (a failed test op refuses all)."""

    store: PodStore
    pods: dict[str, dict[str, Any]]
    events: list[tuple[str, str]] = field(default_factory=list)
    refuse_next_patch: bool = False

    def patch_pod_json(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        (uid,) = [u for u, p in self.pods.items() if p["metadata"]["name"] == name]
        if self.refuse_next_patch:
            self.refuse_next_patch = False
            raise PodChanged("changed (422)")
        try:
            patched = jsonpatch.apply_patch(copy.deepcopy(self.pods[uid]), list(ops))
        except jsonpatch.JsonPatchTestFailed as exc:
            raise PodChanged("changed (422)") from exc
        self.pods[uid] = patched
        self.store.apply("MODIFIED", patched)  # the watch shows it

    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        self.events.append((involved["name"], reason))


def make(
    *pods: dict[str, Any], leader: bool = True, cap: int = 50
) -> tuple[JobRecorder, FakeJarvice, ApiServer, Clock]:
    clock = Clock()
    store = PodStore(clock=clock)
    store.replace(pods)
    api = ApiServer(store, {p["metadata"]["uid"]: p for p in pods})
    jarvice = FakeJarvice()
    return recorder(store, jarvice, api, clock, leader=leader, cap=cap), jarvice, api, clock


def recorder(
    store: PodStore, jarvice: FakeJarvice, api: ApiServer, clock: Clock, *, leader: bool = True, cap: int = 50
) -> JobRecorder:
    return JobRecorder(
        store=store,
        jarvice=jarvice,
        kube=api,
        metrics=Metrics(is_leader=lambda: leader),
        is_leader=lambda: leader,
        interval=15,
        cost_refresh=300,
        rates=MachineRates(fetch=jarvice.fetch_machines, refresh=3600, clock=clock, on_error=lambda: None),
        stale_after=60,
        clock=clock,
        wall_clock=lambda: float(WALL + 3600),
        pods_per_round=cap,
    )


def test_each_stage_once_and_nothing_again_after_a_restart() -> None:
    rec, jarvice, api, clock = make(pod())
    jarvice.set(4711, "SUBMITTED")
    rec.round()
    rec.round()
    jarvice.set(4711, "PROCESSING STARTING", start=WALL)
    rec.round()
    jarvice.set(4711, "COMPLETED", start=WALL, end=WALL + 1800)
    rec.round()
    rec.round()
    assert [reason for _, reason in api.events] == ["NimbixSubmitted", "NimbixRunning", "NimbixSucceeded"]
    annotations = api.pods[UID]["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/job-state"] == "succeeded"
    assert annotations["nimbix-burst.io/cost"] == "2.10"
    restarted = recorder(rec._store, jarvice, api, clock)
    restarted.round()
    assert len(api.events) == 3


def test_a_refused_patch_records_no_event_and_the_next_round_does() -> None:
    rec, jarvice, api, _ = make(pod())
    jarvice.set(4711, "SUBMITTED")
    api.refuse_next_patch = True
    rec.round()
    assert api.events == []
    rec.round()
    assert api.events == [("train-0", "NimbixSubmitted")]


def test_a_follower_asks_jarvice_nothing() -> None:
    rec, jarvice, api, _ = make(pod(), leader=False)
    jarvice.set(4711, "SUBMITTED")
    rec.round()
    assert jarvice.calls == [] and api.events == []


def test_no_burst_pod_no_jarvice_call() -> None:
    rec, jarvice, _, _ = make()
    rec.round()
    assert jarvice.calls == []


def test_the_history_is_listed_once_per_need() -> None:
    rec, jarvice, api, _ = make(pod(phase="Succeeded"))
    jarvice.set(4711, "COMPLETED", start=WALL, end=WALL + 60)  # ended between two rounds: never seen live
    rec.round()
    assert api.events == [("train-0", "NimbixSubmitted"), ("train-0", "NimbixSucceeded")]
    rec.round()
    rec.round()
    assert jarvice.calls.count("history") == 1
    assert jarvice.calls.count("machines") == 1  # cached


def test_a_pod_that_never_submitted_is_looked_up_once() -> None:
    rec, jarvice, api, _ = make(pod(phase="Failed"))
    for _ in range(3):
        rec.round()
    assert jarvice.calls.count("history") == 1 and api.events == []


def test_jarvice_down_costs_a_round() -> None:
    rec, jarvice, api, _ = make(pod())
    jarvice.set(4711, "SUBMITTED")
    jarvice.down = True
    rec.round()
    jarvice.down = False
    rec.round()
    assert api.events == [("train-0", "NimbixSubmitted")]


def test_the_round_is_capped_and_every_pod_gets_its_turn() -> None:
    rec, jarvice, api, _ = make(pod(UID, "a"), pod(OTHER, "b"), cap=1)
    jarvice.set(4711, "SUBMITTED", UID)
    jarvice.set(4712, "SUBMITTED", OTHER)
    rec.round()
    assert api.events == [("a", "NimbixSubmitted")]
    rec.round()
    assert api.events == [("a", "NimbixSubmitted"), ("b", "NimbixSubmitted")]


def test_a_running_jobs_cost_is_refreshed_every_cost_refresh_seconds() -> None:
    rec, jarvice, api, clock = make(pod())
    jarvice.set(4711, "PROCESSING STARTING", start=WALL)
    rec.round()
    first = api.pods[UID]["metadata"]["annotations"]["nimbix-burst.io/cost"]
    rec._wall_clock = lambda: float(WALL + 7200)
    rec.round()
    assert api.pods[UID]["metadata"]["annotations"]["nimbix-burst.io/cost"] == first  # not yet
    clock.now += 300
    rec.round()
    assert api.pods[UID]["metadata"]["annotations"]["nimbix-burst.io/cost"] == "8.40"


def test_a_fruitless_lookup_is_retried_with_a_doubling_wait() -> None:
    rec, jarvice, _, clock = make(pod(phase="Failed"))
    looked = []
    for _ in range(8):  # rounds 30 s apart: 0, 30, ..., 210 s
        rec.round()
        looked.append(jarvice.calls.count("history"))
        clock.now += 30
    assert looked == [1, 1, 2, 2, 2, 2, 3, 3]  # at 0 s, at 60 s, then 120 s later (180 s)


def test_a_job_that_reaches_the_history_late_is_still_found() -> None:
    rec, jarvice, api, clock = make(pod())
    jarvice.set(4711, "PROCESSING STARTING", start=WALL)
    rec.round()
    jarvice.live.clear()  # gone from the live list, not yet in the history
    rec.round()
    jarvice.set(4711, "COMPLETED", start=WALL, end=WALL + 60)
    clock.now += 60
    rec.round()
    assert [reason for _, reason in api.events] == ["NimbixSubmitted", "NimbixRunning", "NimbixSucceeded"]


GANG = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def gang_pod(uid: str, name: str, rank: int) -> dict[str, Any]:
    body = pod(uid, name)
    body["metadata"]["annotations"] |= {"nimbix-burst.io/gang": GANG, "nimbix-burst.io/gang-rank": str(rank)}
    return body


def test_a_gangs_job_is_recorded_on_its_submitting_rank_only() -> None:
    """The gang's one job carries the gang's identity in its label: its Events and cost go on rank 0
    (which carries the gang's GPUs and cost), none on the ranks that follow it."""
    rec, jarvice, api, _ = make(gang_pod(UID, "ddp-0", 0), gang_pod(OTHER, "ddp-1", 1))
    jarvice.set(4711, "PROCESSING STARTING", uid=GANG, start=WALL)
    rec.round()
    assert api.events == [("ddp-0", "NimbixSubmitted"), ("ddp-0", "NimbixRunning")]
    assert api.pods[UID]["metadata"]["annotations"]["nimbix-burst.io/job-number"] == "4711"
    assert "nimbix-burst.io/job-number" not in api.pods[OTHER]["metadata"]["annotations"]


def test_a_gangs_following_rank_is_never_looked_up_in_the_history() -> None:
    rec, jarvice, _, _ = make(gang_pod(OTHER, "ddp-1", 1) | {"status": {"phase": "Succeeded"}})
    rec.round()
    assert "history" not in jarvice.calls
