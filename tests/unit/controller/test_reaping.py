"""Reaper.round against a fake JARVICE and a fake pod writer (injected): grace, dry run, leadership,
stale watch, other clusters' jobs, and the job-state annotation on burst pods."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.kube import PodGone
from controller.metrics import Metrics
from controller.model import ReapView
from controller.reaping import Reaper
from controller.store import PodStore
from jarvice.client import JobNotFound, Unavailable
from jarvice.model import JobEntry
from tests.support.clocks import Clock

LIVE = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
GONE = "00000000-1111-2222-3333-444444444444"
FAILED = "99999999-1111-2222-3333-444444444444"
CLUSTER = "dev-0123456789ab"
WALL = 1_700_000_000.0


def pod(uid: str, *, phase: str = "Running", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": f"p-{uid[:4]}",
            "namespace": "n",
            "labels": {"task-type": "Nimbix"},
            "annotations": {"nimbix-burst.io/decision": "remote"} if annotations is None else annotations,
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "app"}]},
        "status": {"phase": phase},
    }


@dataclass
class FakeKube:
    recorded: list[str] = field(default_factory=list)
    fail: Exception | None = None

    def record_job_ended(self, pod: ReapView) -> None:
        if self.fail is not None:
            raise self.fail
        self.recorded.append(pod.uid)


@dataclass
class FakeJarvice:
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    terminated: list[int] = field(default_factory=list)
    list_calls: int = 0
    fail_terminate: Exception | None = None
    fail_list: bool = False

    def add(self, number: int, uid: str, state: str = "PROCESSING STARTING", cluster: str | None = CLUSTER) -> None:
        label = f"k8s-{cluster}.{uid}-app-1" if cluster else f"k8s-{uid}-app-1"
        self.jobs[number] = JobEntry(number=number, name=f"j{number}", state=state, label=label, exitcode=None)

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        assert not completed
        self.list_calls += 1
        if self.fail_list:
            raise Unavailable("jobs: down", endpoint="jobs")
        return dict(self.jobs)

    def terminate(self, number: int, *, deadline: float | None = None) -> None:
        if self.fail_terminate is not None:
            raise self.fail_terminate
        self.terminated.append(number)
        self.jobs[number] = JobEntry(number=number, name=f"j{number}", state="TERMINATED", label=None, exitcode=None)


def make(
    *, leader: bool = True, dry_run: bool = False, listed: bool = True, kube: FakeKube | None = None
) -> tuple[Reaper, FakeJarvice, Metrics, Clock]:
    clock = Clock()
    store = PodStore(clock=clock)
    if listed:
        store.replace([pod(LIVE)])
    jarvice = FakeJarvice()
    jarvice.add(1, LIVE)
    jarvice.add(2, GONE)
    metrics = Metrics(is_leader=lambda: leader)
    reaper = Reaper(
        store=store,
        jarvice=jarvice,
        kube=kube or FakeKube(),
        cluster=CLUSTER,
        grace=120,
        interval=60,
        dry_run=dry_run,
        stale_after=60,
        metrics=metrics,
        is_leader=lambda: leader,
        clock=clock,
        wall_clock=lambda: WALL,
        records_per_round=2,
    )
    return reaper, jarvice, metrics, clock


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_an_orphan_is_terminated_after_the_grace_period_and_only_once() -> None:
    reaper, jarvice, metrics, clock = make()
    reaper.round()
    assert (
        jarvice.terminated == []
        and sample(metrics, "nimbix_burst_controller_orphans_seen_total", reason="pod-gone") == 1
    )
    clock.now += 119
    reaper.round()
    assert jarvice.terminated == []
    clock.now += 1
    reaper.round()
    assert jarvice.terminated == [2]
    reaper.round()
    assert jarvice.terminated == [2]
    assert sample(metrics, "nimbix_burst_controller_orphans_terminated_total") == 1
    assert sample(metrics, "nimbix_burst_controller_orphans_seen_total", reason="pod-gone") == 1


def test_dry_run_counts_and_terminates_nothing() -> None:
    reaper, jarvice, metrics, clock = make(dry_run=True)
    reaper.round()
    clock.now += 200
    reaper.round()
    reaper.round()
    assert jarvice.terminated == []
    assert sample(metrics, "nimbix_burst_controller_orphans_dry_run_total") == 1


def test_a_follower_never_calls_jarvice() -> None:
    reaper, jarvice, _, clock = make(leader=False)
    reaper.round()
    clock.now += 500
    reaper.round()
    assert jarvice.list_calls == 0 and jarvice.terminated == []


def test_nothing_happens_before_the_pods_are_listed() -> None:
    reaper, jarvice, _, clock = make(listed=False)
    reaper.round()
    clock.now += 500
    reaper.round()
    assert jarvice.list_calls == 0


def test_nothing_happens_while_the_pod_watch_is_broken_too_long() -> None:
    reaper, jarvice, _, clock = make()
    reaper.round()
    reaper._store.mark_broken()
    clock.now += 200
    reaper.round()
    assert jarvice.list_calls == 1 and jarvice.terminated == []


def test_a_failed_terminate_is_retried_next_round() -> None:
    reaper, jarvice, metrics, clock = make()
    reaper.round()
    clock.now += 120
    jarvice.fail_terminate = Unavailable("terminate: down", endpoint="terminate")
    reaper.round()
    assert sample(metrics, "nimbix_burst_controller_errors_total", kind="jarvice-terminate") == 1
    jarvice.fail_terminate = None
    reaper.round()
    assert jarvice.terminated == [2]


def test_a_job_gone_meanwhile_is_not_an_error() -> None:
    reaper, jarvice, metrics, clock = make()
    reaper.round()
    clock.now += 120
    jarvice.fail_terminate = JobNotFound("terminate: Job not found", endpoint="terminate")
    reaper.round()
    assert sample(metrics, "nimbix_burst_controller_errors_total", kind="jarvice-terminate") == 0


def test_a_failed_list_is_counted_and_harmless() -> None:
    reaper, jarvice, metrics, _ = make()
    jarvice.fail_list = True
    reaper.round()
    assert sample(metrics, "nimbix_burst_controller_errors_total", kind="jarvice-list") == 1


def test_the_next_round_comes_when_the_first_orphan_is_due() -> None:
    reaper, _, _, clock = make()
    assert reaper.round() == 60  # orphan first seen now: due in 120, the interval comes first
    clock.now += 100
    assert reaper.round() == 20
    clock.now += 20
    assert reaper.round() == 60  # terminated: nothing pending


def test_the_job_of_a_failed_pod_is_terminated() -> None:
    reaper, jarvice, metrics, clock = make()
    reaper._store.replace([pod(LIVE), pod(FAILED, phase="Failed")])
    jarvice.add(3, FAILED)
    reaper.round()
    clock.now += 120
    reaper.round()
    assert jarvice.terminated == [2, 3]
    assert sample(metrics, "nimbix_burst_controller_orphans_seen_total", reason="pod-finished") == 1


def test_legacy_and_other_clusters_jobs_are_counted_logged_once_and_never_terminated(caplog: Any) -> None:
    reaper, jarvice, metrics, clock = make()
    jarvice.add(4, GONE, cluster=None)
    jarvice.add(5, GONE, cluster="prod-ba9876543210")
    jarvice.add(6, GONE, cluster="prod-ba9876543210", state="COMPLETED")
    caplog.set_level("INFO", logger="controller.reaping")
    reaper.round()
    clock.now += 500
    reaper.round()
    assert jarvice.terminated == [2]
    assert sample(metrics, "nimbix_burst_controller_jobs_not_ours", kind="legacy-label") == 1
    assert sample(metrics, "nimbix_burst_controller_jobs_not_ours", kind="other-cluster") == 1
    left_alone = [r for r in caplog.records if r.getMessage() == "job left alone: not this cluster's"]
    assert sorted((r.job, r.kind) for r in left_alone) == [(4, "legacy-label"), (5, "other-cluster")]


def test_a_burst_pod_no_live_job_carries_gets_its_job_end_recorded_once() -> None:
    kube = FakeKube()
    reaper, jarvice, metrics, _ = make(kube=kube)
    reaper._store.replace(
        [
            pod(LIVE),
            pod(FAILED, phase="Failed"),  # its job is live: not yet
            pod("aaaaaaaa-0000-0000-0000-000000000001", phase="Failed"),
            pod("aaaaaaaa-0000-0000-0000-000000000002", phase="Succeeded"),
            pod("aaaaaaaa-0000-0000-0000-000000000003", phase="Failed", annotations={}),  # not a burst pod
        ]
    )
    jarvice.add(3, FAILED)
    reaper.round()
    assert sorted(kube.recorded) == ["aaaaaaaa-0000-0000-0000-000000000001", "aaaaaaaa-0000-0000-0000-000000000002"]
    reaper.round()  # the watch has not shown the annotation yet: not patched twice
    assert len(kube.recorded) == 2
    del jarvice.jobs[3]  # the job ended
    reaper.round()
    assert kube.recorded[2:] == [FAILED]
    assert sample(metrics, "nimbix_burst_controller_job_ended_recorded_total") == 3


def test_recording_is_bounded_per_round() -> None:
    kube = FakeKube()
    reaper, _, _, _ = make(kube=kube)
    uids = [f"aaaaaaaa-0000-0000-0000-00000000000{i}" for i in range(5)]
    reaper._store.replace([pod(uid, phase="Failed") for uid in uids])
    reaper.round()
    assert len(kube.recorded) == 2
    reaper.round()
    reaper.round()
    assert sorted(kube.recorded) == uids


def test_a_pod_gone_before_the_patch_is_not_an_error() -> None:
    kube = FakeKube(fail=PodGone("pod n/p went away (404)"))
    reaper, _, metrics, _ = make(kube=kube)
    reaper._store.replace([pod(FAILED, phase="Failed")])
    reaper.round()
    assert sample(metrics, "nimbix_burst_controller_errors_total", kind="kubernetes") == 0


def test_a_failed_patch_is_counted_and_retried() -> None:
    kube = FakeKube(fail=RuntimeError("apiserver down"))
    reaper, _, metrics, _ = make(kube=kube)
    reaper._store.replace([pod(FAILED, phase="Failed")])
    reaper.round()
    assert sample(metrics, "nimbix_burst_controller_errors_total", kind="kubernetes") == 1
    kube.fail = None
    reaper.round()
    assert kube.recorded == [FAILED]


def test_nothing_is_recorded_without_a_job_list_or_as_a_follower() -> None:
    kube = FakeKube()
    reaper, jarvice, _, _ = make(kube=kube)
    reaper._store.replace([pod(FAILED, phase="Failed")])
    jarvice.fail_list = True
    reaper.round()
    follower, _, _, _ = make(leader=False, kube=kube)
    follower._store.replace([pod(FAILED, phase="Failed")])
    follower.round()
    assert kube.recorded == []
