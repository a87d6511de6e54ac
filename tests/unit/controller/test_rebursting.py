"""Reburster.scan against a fake API (injected): what it deletes, reports, and refuses to touch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller import stranding
from controller.kube import PodChanged, PodGone
from controller.metrics import Metrics
from controller.model import PodView, format_time
from controller.rebursting import Reburster
from controller.store import PodStore
from tests.unit.controller.builders import JOB_UID, T0, T0_TEXT, job, job_owner, pod

NOW = T0 + 300


@dataclass
class FakeKube:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> what a GET returns now
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    deleted: list[tuple[str, str, str]] = field(default_factory=list)  # name, uid, resourceVersion
    annotated: list[tuple[str, str]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # kind, name, reason
    delete_conflict: bool = False
    conflicts_left: dict[str, int] = field(default_factory=dict)  # pod name -> evictions refused (409) first
    annotate_conflict: bool = False
    # What the webhook answers a dry-run create of the Job's next pod (its annotations), and the dry runs made.
    answer: dict[str, str] = field(default_factory=lambda: {"nimbix-burst.io/decision": "remote"})
    dry_runs: list[str] = field(default_factory=list)  # namespaces

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        if name not in self.pods:
            raise PodGone(name)
        return self.pods[name]

    def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.jobs.get(name)

    def evict_pod(self, pod: PodView) -> None:
        if self.delete_conflict:
            raise PodChanged("409")
        if self.conflicts_left.get(pod.name, 0) > 0:  # changed since read (a kubelet status update): 409
            self.conflicts_left[pod.name] -= 1
            raise PodChanged("409")
        self.deleted.append((pod.name, pod.uid, pod.resource_version))

    def dry_run_create_pod(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.dry_runs.append(namespace)
        return {**body, "metadata": {**body["metadata"], "annotations": dict(self.answer)}}

    def annotate_stranded(self, pod: PodView, *, since: str) -> None:
        if self.annotate_conflict:
            raise PodChanged("409")
        self.annotated.append((pod.name, since))

    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = "Warning"
    ) -> None:
        self.events.append((involved["kind"], involved["name"], reason))


def make(*bodies: dict[str, Any], leader: bool = True, cap: int = 3) -> tuple[Reburster, FakeKube, Metrics]:
    store = PodStore(clock=lambda: 0.0)
    store.replace(bodies)
    kube = FakeKube(pods={b["metadata"]["name"]: b for b in bodies}, jobs={"train": job()})
    metrics = Metrics(is_leader=lambda: leader)
    reburster = Reburster(
        store=store,
        kube=kube,
        policy=stranding.Policy(threshold=120, cap=cap),
        metrics=metrics,
        is_leader=lambda: leader,
        wall_clock=lambda: NOW,
    )
    return reburster, kube, metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_stranded_job_pod_is_deleted_with_preconditions_and_explained_on_the_job() -> None:
    reburster, kube, metrics = make(pod())
    kube.pods["train-abcde"] = pod(resource_version="43")  # the re-read sees a newer version
    reburster.scan()
    assert kube.deleted == [("train-abcde", pod()["metadata"]["uid"], "43")]
    assert kube.events == [("Job", "train", "NimbixReBurst")]
    assert reburster.rebursts_by_owner == {JOB_UID: 1}
    assert sample(metrics, "nimbix_burst_controller_rebursts_total") == 1
    reburster.scan()  # the watch has not shown the deletion yet: nothing twice
    assert len(kube.deleted) == 1


def test_a_follower_does_nothing() -> None:
    reburster, kube, _ = make(pod(), pod(name="bare", uid="u2", owners=[]), leader=False)
    reburster.scan()
    assert (kube.deleted, kube.annotated, kube.events) == ([], [], [])


@pytest.mark.parametrize(
    "now_body",
    [
        pytest.param(pod(node_name="gpu-1", resource_version="44"), id="bound-meanwhile"),
        pytest.param(pod(scheduled=("True", ""), resource_version="44"), id="scheduled-meanwhile"),
        pytest.param(pod(uid="recreated"), id="same-name-new-pod"),
    ],
)
def test_a_pod_that_recovered_before_the_delete_is_left_alone(now_body: dict[str, Any]) -> None:
    reburster, kube, metrics = make(pod())
    kube.pods["train-abcde"] = now_body
    reburster.scan()
    assert kube.deleted == [] and reburster.rebursts_by_owner == {}
    assert sample(metrics, "nimbix_burst_controller_reburst_aborted_total", reason="no-longer-stranded") == 1


def test_a_bind_between_read_and_delete_fails_the_precondition_and_counts_nothing() -> None:
    reburster, kube, metrics = make(pod())
    kube.delete_conflict = True
    reburster.scan()
    assert reburster.rebursts_by_owner == {} and kube.events == []
    assert sample(metrics, "nimbix_burst_controller_reburst_aborted_total", reason="changed") == 1


def test_a_bare_pod_is_reported_once_and_never_deleted() -> None:
    reburster, kube, metrics = make(pod(owners=[]))
    reburster.scan()
    reburster.scan()
    assert kube.deleted == []
    assert kube.annotated == [("train-abcde", "2023-11-14T22:13:20Z")]
    assert kube.events == [("Pod", "train-abcde", "NimbixStranded")]
    assert sample(metrics, "nimbix_burst_controller_stranded_noted_total", reason="no-owner") == 1


def test_a_job_pod_kept_local_for_its_gpu_model_is_reported_not_deleted() -> None:
    reburster, kube, metrics = make(pod(gpu_model="no JARVICE machine offers nvidia.com/gpu.product=H100"))
    reburster.scan()
    assert kube.deleted == [] and reburster.rebursts_by_owner == {}
    assert kube.annotated == [("train-abcde", "2023-11-14T22:13:20Z")]
    assert sample(metrics, "nimbix_burst_controller_stranded_noted_total", reason="gpu-model") == 1


def test_a_report_whose_pod_changed_is_given_up_under_its_own_reason() -> None:
    """The annotation carries the resourceVersion decided on: a pod changed since is not reported,
    and that is not counted as a re-burst given up."""
    reburster, kube, metrics = make(pod(owners=[]))
    kube.annotate_conflict = True
    reburster.scan()
    assert (kube.deleted, kube.annotated, kube.events) == ([], [], [])
    assert sample(metrics, "nimbix_burst_controller_reburst_aborted_total", reason="report-changed") == 1
    assert sample(metrics, "nimbix_burst_controller_reburst_aborted_total", reason="changed") == 0
    assert sample(metrics, "nimbix_burst_controller_stranded_noted_total", reason="no-owner") == 0
    kube.annotate_conflict = False
    reburster.scan()  # not marked handled: the next scan reports it
    assert kube.annotated == [("train-abcde", "2023-11-14T22:13:20Z")]


def test_the_cap_stops_rebursts_per_owner_and_is_counted() -> None:
    bodies = [pod(name=f"train-{i}", uid=f"uid-{i}") for i in range(4)]
    reburster, kube, metrics = make(*bodies, cap=3)
    reburster.scan()
    assert len(kube.deleted) == 3 and reburster.rebursts_by_owner == {JOB_UID: 3}
    assert kube.annotated == [("train-3", "2023-11-14T22:13:20Z")]
    assert ("Job", "train", "NimbixReBurstCapReached") in kube.events
    assert sample(metrics, "nimbix_burst_controller_reburst_cap_hits_total") == 1
    assert sample(metrics, "nimbix_burst_controller_rebursts_total") == 3


@pytest.mark.parametrize(
    ("owner", "why"),
    [
        pytest.param(None, "owner not found", id="job-gone"),
        pytest.param(job(conditions=[{"type": "Complete", "status": "True"}]), "owner has finished", id="finished"),
        pytest.param(job(suspend=True), "owner is suspended", id="suspended"),
    ],
)
def test_a_job_that_would_not_recreate_the_pod_gets_a_report_instead(owner: dict[str, Any] | None, why: str) -> None:
    reburster, kube, _ = make(pod())
    kube.jobs = {} if owner is None else {"train": owner}
    reburster.scan()
    assert kube.deleted == [] and len(kube.annotated) == 1
    assert kube.events == [("Pod", "train-abcde", "NimbixStranded")]


def test_a_failing_api_call_costs_one_pod_not_the_scan() -> None:
    class Broken(FakeKube):
        def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
            raise RuntimeError("API server down")

    reburster, _, metrics = make(pod(), pod(name="bare", uid="u2", owners=[]))
    broken = Broken(pods=dict(reburster._kube.pods))  # type: ignore[attr-defined]
    reburster._kube = broken
    reburster.scan()
    assert broken.annotated == [("bare", "2023-11-14T22:13:20Z")]
    assert sample(metrics, "nimbix_burst_controller_errors_total", kind="kubernetes") == 1


# --- gangs: the pods of one distributed job are re-burst together, never one alone ----------------

GANG = "99999999-8888-7777-6666-555555555555"


def test_a_stranded_gang_is_re_burst_whole_every_pod_deleted_once() -> None:
    stranded = pod(uid="a", name="train-0", gang=GANG)
    running = pod(uid="b", name="train-1", gang=GANG, node_name="n1", phase="Running", scheduled=("True", ""))
    bystander = pod(uid="c", name="other-0", node_name="n1", phase="Running", scheduled=("True", ""))
    reburster, kube, _ = make(stranded, running, bystander)
    reburster.scan()
    assert sorted(name for name, _, _ in kube.deleted) == ["train-0", "train-1"]
    assert [reason for _, _, reason in kube.events] == ["NimbixReBurst"]
    reburster.scan()  # the watch has not shown the deletions yet: nothing twice
    assert len(kube.deleted) == 2


def test_a_gang_whose_pods_two_owners_hold_is_reported_not_deleted() -> None:
    stranded = pod(uid="a", name="train-0", gang=GANG)
    other = pod(uid="b", name="x-1", gang=GANG, owners=[job_owner(uid="other", name="x")], node_name="n1")
    reburster, kube, _ = make(stranded, other)
    reburster.scan()
    assert kube.deleted == []
    assert [name for name, _ in kube.annotated] == ["train-0"]


def test_a_stranded_gang_pod_bound_meanwhile_stops_the_re_burst() -> None:
    stranded = pod(uid="a", name="train-0", gang=GANG)
    reburster, kube, _ = make(stranded, pod(uid="b", name="train-1", gang=GANG, node_name="n1"))
    kube.pods["train-0"] = pod(uid="a", name="train-0", gang=GANG, node_name="n2")
    reburster.scan()
    assert kube.deleted == []


def test_a_pod_that_waited_in_vain_is_replaced_at_its_deadline_with_its_own_event() -> None:
    waiting = pod(burst_deadline="2023-11-14T22:18:00Z")  # T0 + 280: NOW is past it
    reburster, kube, _ = make(waiting)
    reburster.scan()
    assert kube.deleted == [("train-abcde", waiting["metadata"]["uid"], "42")]
    assert kube.events == [("Job", "train", "NimbixBurstAfterWait")]
    assert reburster.rebursts_by_owner == {}  # a Job waits once: not a re-burst the cap counts


def test_every_pod_of_a_parallel_job_that_waited_in_vain_is_moved() -> None:
    """Its pods share one deadline: each is moved at it, the fourth as the first (cap 3 or not)."""
    bodies = [pod(name=f"train-{i}", uid=f"u-{i}", burst_deadline="2023-11-14T22:18:00Z") for i in range(5)]
    reburster, kube, _ = make(*bodies, cap=3)
    reburster.scan()
    assert sorted(name for name, _, _ in kube.deleted) == [f"train-{i}" for i in range(5)]
    assert kube.events == [("Job", "train", "NimbixBurstAfterWait")] * 5


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(pod(burst_deadline="2023-11-14T22:18:00Z"), id="waited-in-vain"),
        pytest.param(pod(), id="stranded"),
    ],
)
def test_a_pod_whose_job_would_count_the_move_is_reported_not_moved(body: dict[str, Any]) -> None:
    """A Job without the rule ignoring evictions (created before the webhook's Job rule, or with
    restartPolicy OnFailure): moving its pod would cost it a retry, so it stays and the pod says why."""
    reburster, kube, _ = make(body)
    kube.jobs["train"] = job(rules=[])
    reburster.scan()
    assert kube.deleted == []
    assert kube.annotated and kube.events == [("Pod", "train-abcde", "NimbixStranded")]


def test_a_pod_still_within_its_wait_is_left_alone_past_the_threshold() -> None:
    reburster, kube, _ = make(pod(burst_deadline="2023-11-14T22:30:00Z"))  # T0 + 1000: NOW is before it
    reburster.scan()
    assert kube.deleted == []
    assert kube.events == []


# --- a gang that waited before bursting (burst-after): replaced whole at its deadline -------------

PAST, AHEAD = "2023-11-14T22:18:00Z", "2023-11-14T22:30:00Z"  # T0 + 280 (NOW is past it), T0 + 1000


def test_a_waiting_gang_is_replaced_whole_at_its_deadline_a_rank_scheduled_here_meanwhile_too() -> None:
    """Never half a gang here and half on Nimbix: the rank a node took goes with the one none did."""
    pending = pod(uid="a", name="train-0", gang=GANG, burst_deadline=PAST)
    placed = pod(
        uid="b", name="train-1", gang=GANG, burst_deadline=PAST, node_name="n1", phase="Running", scheduled=("True", "")
    )
    reburster, kube, _ = make(pending, placed)
    reburster.scan()
    assert sorted(name for name, _, _ in kube.deleted) == ["train-0", "train-1"]
    assert kube.events == [("Job", "train", "NimbixBurstAfterWait")]
    assert reburster.rebursts_by_owner == {}  # a Job waits once: not a re-burst the cap counts
    reburster.scan()  # the watch has not shown the deletions yet: nothing twice
    assert len(kube.deleted) == 2


def test_a_gang_rank_whose_eviction_meets_a_change_is_evicted_on_a_fresh_read_never_left_running() -> None:
    """A running rank's status changes all the time (the kubelet): a 409 on its eviction is read again
    and retried, so the gang never ends split between here and its replacements on Nimbix."""
    pending = pod(uid="a", name="train-0", gang=GANG, burst_deadline=PAST)
    placed = pod(
        uid="b", name="train-1", gang=GANG, burst_deadline=PAST, node_name="n1", phase="Running", scheduled=("True", "")
    )
    reburster, kube, _ = make(pending, placed)
    kube.conflicts_left["train-1"] = 2
    reburster.scan()
    assert sorted(name for name, _, _ in kube.deleted) == ["train-0", "train-1"]


def test_a_waiting_gang_within_its_wait_or_all_scheduled_here_is_left_alone() -> None:
    within = [pod(uid=u, name=f"train-{i}", gang=GANG, burst_deadline=AHEAD) for i, u in enumerate("ab")]
    scheduled = [
        pod(uid=u, name=f"train-{i}", gang=GANG, burst_deadline=PAST, node_name="n1", scheduled=("True", ""))
        for i, u in enumerate("ab")
    ]
    for bodies in (within, scheduled):
        reburster, kube, _ = make(*bodies)
        reburster.scan()
        assert (kube.deleted, kube.events) == ([], [])


def test_the_waiting_gangs_event_says_it_waited_and_bursts_as_one() -> None:
    pods = [pod(uid=u, name=f"train-{i}", gang=GANG, burst_deadline=PAST) for i, u in enumerate("ab")]
    store = PodStore(clock=lambda: 0.0)
    store.replace(pods)
    messages: list[str] = []

    class Recording(FakeKube):
        def record_event(
            self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = "Warning"
        ) -> None:
            messages.append(message)

    kube = Recording(pods={b["metadata"]["name"]: b for b in pods}, jobs={"train": job()})
    reburster = Reburster(
        store=store,
        kube=kube,
        policy=stranding.Policy(threshold=120, cap=3),
        metrics=Metrics(is_leader=lambda: True),
        is_leader=lambda: True,
        wall_clock=lambda: NOW,
    )
    reburster.scan()
    (message,) = messages
    assert "a gang of 2 pods waited for local nodes (burst-after) until its deadline" in message
    assert "its replacements burst to Nimbix as one job (the evictions cost the Job no retry)" in message


def test_a_pod_whose_job_came_home_and_that_cannot_bind_is_sent_back_to_its_burst_within_a_scan() -> None:
    """Shared with the homecomer: the Jobs a pod came home for (a Job comes home once, so it never comes
    home again). Unschedulable past the bind time, far short of the threshold: evicted, and counted."""
    since = NOW - stranding.HOMECOMING_BIND_SECONDS
    body = pod(since=format_time(since))
    store = PodStore(clock=lambda: 0.0)
    store.replace([body])
    kube = FakeKube(pods={body["metadata"]["name"]: body}, jobs={"train": job()})
    reburster = Reburster(
        store=store,
        kube=kube,
        policy=stranding.Policy(threshold=120, cap=3),
        metrics=Metrics(is_leader=lambda: True),
        is_leader=lambda: True,
        wall_clock=lambda: NOW,
        came_home={JOB_UID},
    )
    reburster.scan()
    assert [name for name, _uid, _rv in kube.deleted] == ["train-abcde"]
    assert kube.events == [("Job", "train", "NimbixReBurst")]
    assert reburster.rebursts_by_owner == {JOB_UID: 1}


# A Job's pod kept local by its namespace's budget: when the webhook was replaced (or the controller was
# down) its spend record was not fresh, so the waiting pod's replacement was kept local ("no fresh spend
# record"); it is asked again, and moved once the webhook would burst it.
BUDGET_HELD = "the controller's spend record is 400 s old (at most 60 s: is the controller running?)"


def test_a_pod_kept_local_by_its_budget_is_moved_once_the_webhook_would_burst_it() -> None:
    reburster, kube, _ = make(pod(budget=BUDGET_HELD, stranded_since=T0_TEXT))  # reported before
    reburster.scan()
    assert kube.dry_runs == ["team"]
    assert [name for name, _uid, _rv in kube.deleted] == ["train-abcde"]
    assert kube.events == [("Job", "train", "NimbixReBurst")]
    assert reburster.rebursts_by_owner == {}  # asked first: not a strand loop, no cap


def test_a_pod_the_webhook_would_still_keep_local_is_reported_once_and_asked_again_later() -> None:
    body = pod(budget=BUDGET_HELD)
    reburster, kube, _ = make(body)
    kube.answer = {"nimbix-burst.io/decision": "local", "nimbix-burst.io/budget": BUDGET_HELD}
    reburster.scan()
    assert kube.deleted == [] and kube.annotated == [("train-abcde", T0_TEXT)]
    assert kube.events == [("Pod", "train-abcde", "NimbixStranded")]
    reburster.scan()  # within the recheck interval: not asked again
    assert kube.dry_runs == ["team"]
    later = [NOW + stranding.BUDGET_RECHECK_SECONDS]
    reburster._now = lambda: later[0]
    kube.answer = {"nimbix-burst.io/decision": "remote"}
    kube.pods["train-abcde"] = pod(budget=BUDGET_HELD, stranded_since=T0_TEXT)
    reburster._store.replace([kube.pods["train-abcde"]])
    reburster.scan()
    assert kube.dry_runs == ["team", "team"]
    assert [name for name, _uid, _rv in kube.deleted] == ["train-abcde"]


def test_pods_kept_local_by_their_budget_are_moved_one_per_namespace_at_a_time() -> None:
    """The dry run reserves nothing: two held pods asked at once would both be told the budget has room."""
    first, second = pod(budget=BUDGET_HELD), pod(budget=BUDGET_HELD, name="train-fghij", uid="u2")
    reburster, kube, _ = make(first, second)
    reburster.scan()
    assert len(kube.deleted) == 1 and kube.dry_runs == ["team"]
