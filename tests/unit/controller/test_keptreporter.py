"""KeptReporter.round against a pod writer that applies the JSON patches to its pods as the API server
would (a failed `test` op refuses the patch with a 422-like PodChanged, each write bumps the
resourceVersion) and a watch that shows the writes to the store when told: one Event on the pod and
one on its Job per pod, across rounds, a lagging watch and a change of leader; leadership, a stale
watch, refused writes and the per-round cap."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from controller.keptoutputs import ANNOTATION_REPORTED, REASON
from controller.keptreporter import KeptReporter
from controller.kube import PodChanged, PodGone
from controller.metrics import Metrics
from controller.store import PodStore
from entrypoint.termination import KeptInVault, build_message
from tests.support.clocks import Clock
from tests.unit.controller.builders import job_owner

DIR = "nimbix-burst/job-11111111-2222-3333-4444-555555555555.train"


def pod(n: int = 0, *, phase: str = "Failed", owned: bool = True) -> dict[str, Any]:
    message = build_message(job=4711, job_may_run=False, exit_code=75, kept=KeptInVault(DIR, 1, (f"{DIR}/out/a",)))
    return {
        "metadata": {
            "uid": f"4f1c2a9e-7b1d-4c55-9d0e-{n:012d}",
            "name": f"train-{n}",
            "namespace": "team",
            "resourceVersion": "1",
            "annotations": {"nimbix-burst.io/decision": "remote"},
            "ownerReferences": [job_owner()] if owned else [],
        },
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "c", "state": {"terminated": {"exitCode": 75, "message": message}}}],
        },
    }


@dataclass
class ApiServer:
    """The pods, patched as the API server patches them; the watch shows a write when `watching`."""

    store: PodStore
    pods: dict[str, dict[str, Any]]
    watching: bool = True
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # kind, name, reason, message
    refuse_patches: int = 0
    fail_events: int = 0
    patches: int = 0

    def patch_pod_json(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        self.patches += 1
        found = [uid for uid, p in self.pods.items() if p["metadata"]["name"] == name]
        if not found:
            raise PodGone("gone (404)")
        if self.refuse_patches:
            self.refuse_patches -= 1
            raise PodChanged("changed (409)")
        try:
            patched = jsonpatch.apply_patch(copy.deepcopy(self.pods[found[0]]), list(ops))
        except jsonpatch.JsonPatchTestFailed as exc:
            raise PodChanged("changed (422)") from exc
        patched["metadata"]["resourceVersion"] = str(int(patched["metadata"]["resourceVersion"]) + 1)
        self.pods[found[0]] = patched
        if self.watching:
            self.store.apply("MODIFIED", patched)

    def catch_up(self) -> None:
        for obj in self.pods.values():
            self.store.apply("MODIFIED", obj)

    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        if self.fail_events:
            self.fail_events -= 1
            raise RuntimeError("events: 500")
        assert event_type == "Warning"
        self.events.append((involved["kind"], involved["name"], reason, message))


@dataclass
class World:
    store: PodStore
    api: ApiServer
    metrics: Metrics
    clock: Clock
    leader: list[bool]

    def reporter(self, *, cap: int = 50) -> KeptReporter:
        return KeptReporter(
            store=self.store,
            kube=self.api,
            metrics=self.metrics,
            is_leader=lambda: self.leader[0],
            stale_after=60,
            pods_per_round=cap,
        )

    def counted(self, name: str, labels: dict[str, str]) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


def world(*pods: dict[str, Any]) -> World:
    clock = Clock()
    store = PodStore(clock=clock)
    store.replace(pods)
    leader = [True]
    return World(
        store,
        ApiServer(store, {p["metadata"]["uid"]: p for p in pods}),
        Metrics(is_leader=lambda: leader[0]),
        clock,
        leader,
    )


def test_a_finished_pod_gets_one_event_and_its_job_one_naming_it_once() -> None:
    w = world(pod())
    reporter = w.reporter()
    reporter.round()
    reporter.round()
    message = (
        f"1 output the job wrote could not be put in place and is kept in the vault at {DIR} (first: /out/a);"
        f" copy them with lftp -u \"$USER\" -e 'mirror {DIR}; bye' sftp://<vault host>"
    )
    assert w.api.events == [("Pod", "train-0", REASON, message), ("Job", "train", REASON, f"pod train-0: {message}")]
    assert w.api.pods["4f1c2a9e-7b1d-4c55-9d0e-000000000000"]["metadata"]["annotations"][ANNOTATION_REPORTED] == "true"
    assert w.counted("nimbix_burst_controller_job_events_total", {"reason": REASON}) == 1.0
    assert w.api.patches == 1


def test_a_bare_pod_gets_the_event_alone() -> None:
    w = world(pod(owned=False))
    w.reporter().round()
    assert [(kind, name) for kind, name, _, _ in w.api.events] == [("Pod", "train-0")]


def test_a_running_pod_gets_none_until_it_ends() -> None:
    w = world(pod(phase="Running"))
    reporter = w.reporter()
    reporter.round()
    assert w.api.events == []
    ended = pod()
    w.api.pods[ended["metadata"]["uid"]] = ended
    w.store.apply("MODIFIED", ended)
    reporter.round()
    assert [kind for kind, *_ in w.api.events] == ["Pod", "Job"]


def test_a_lagging_watch_and_a_new_leader_report_nothing_twice() -> None:
    w = world(pod())
    w.api.watching = False  # the mark is written; the watch has not shown it yet
    first = w.reporter()
    first.round()
    first.round()  # the same leader remembers what it marked
    assert len(w.api.events) == 2 and w.api.patches == 1
    w.leader[0] = False
    first.round()
    second = w.reporter()  # another replica leads, its view still without the mark
    w.leader[0] = True
    second.round()
    assert len(w.api.events) == 2  # its patch was planned from the older resourceVersion: refused
    assert w.api.patches == 2
    w.api.catch_up()
    second.round()
    assert len(w.api.events) == 2 and w.api.patches == 2
    assert w.store.kept_pods() == []


def test_a_follower_and_a_stale_watch_do_nothing() -> None:
    w = world(pod())
    w.leader[0] = False
    w.reporter().round()
    w.leader[0] = True
    w.store.mark_broken()
    w.clock.sleep(61)
    w.reporter().round()
    assert w.api.events == [] and w.api.patches == 0
    w.store.mark_contact()
    w.reporter().round()
    assert len(w.api.events) == 2


def test_a_refused_mark_costs_a_round_and_no_event() -> None:
    w = world(pod())
    reporter = w.reporter()
    w.api.refuse_patches = 1
    reporter.round()
    assert w.api.events == []
    reporter.round()
    assert len(w.api.events) == 2


def test_an_event_that_fails_after_its_mark_is_lost_not_repeated() -> None:
    w = world(pod())
    reporter = w.reporter()
    w.api.fail_events = 1
    reporter.round()
    reporter.round()
    assert [kind for kind, *_ in w.api.events] == ["Job"]
    assert w.counted("nimbix_burst_controller_errors_total", {"kind": "kubernetes"}) == 1.0
    assert w.counted("nimbix_burst_controller_job_events_total", {"reason": REASON}) == 0.0


def test_a_pod_gone_before_its_mark_gets_no_event() -> None:
    w = world(pod())
    w.api.pods.clear()
    w.reporter().round()
    assert w.api.events == []
    assert w.counted("nimbix_burst_controller_errors_total", {"kind": "kubernetes"}) == 0.0


def test_a_backlog_is_worked_off_a_few_pods_a_round_in_name_order() -> None:
    w = world(*(pod(n) for n in (3, 1, 2)))
    reporter = w.reporter(cap=2)
    reporter.round()
    assert [name for kind, name, _, _ in w.api.events if kind == "Pod"] == ["train-1", "train-2"]
    reporter.round()
    assert [name for kind, name, _, _ in w.api.events if kind == "Pod"] == ["train-1", "train-2", "train-3"]


def test_a_pod_deleted_before_its_round_leaves_nothing_to_report() -> None:
    w = world(pod(1), pod(2))
    gone = w.api.pods.pop("4f1c2a9e-7b1d-4c55-9d0e-000000000001")
    w.store.apply("DELETED", gone)
    w.reporter().round()
    assert [name for kind, name, _, _ in w.api.events if kind == "Pod"] == ["train-2"]
    assert w.api.patches == 1
