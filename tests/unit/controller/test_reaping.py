"""Reaper.round against a fake JARVICE (injected): grace, dry run, leadership, stale watch."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.metrics import Metrics
from controller.reaping import Reaper
from controller.store import PodStore
from entrypoint.jarvice import JobNotFound, Unavailable
from entrypoint.model import JobEntry

LIVE = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
GONE = "00000000-1111-2222-3333-444444444444"


@dataclass
class FakeJarvice:
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    terminated: list[int] = field(default_factory=list)
    list_calls: int = 0
    fail_terminate: Exception | None = None
    fail_list: bool = False

    def add(self, number: int, uid: str, state: str = "PROCESSING STARTING") -> None:
        self.jobs[number] = JobEntry(
            number=number, name=f"j{number}", state=state, label=f"k8s-{uid}-app-1", exitcode=None
        )

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


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(
    *, leader: bool = True, dry_run: bool = False, listed: bool = True
) -> tuple[Reaper, FakeJarvice, Metrics, Clock]:
    clock = Clock()
    store = PodStore(clock=clock)
    if listed:
        store.replace([{"metadata": {"uid": LIVE, "name": "p", "namespace": "n"}}])
    jarvice = FakeJarvice()
    jarvice.add(1, LIVE)
    jarvice.add(2, GONE)
    metrics = Metrics(is_leader=lambda: leader)
    reaper = Reaper(
        store=store,
        jarvice=jarvice,
        grace=120,
        interval=60,
        dry_run=dry_run,
        stale_after=60,
        metrics=metrics,
        is_leader=lambda: leader,
        clock=clock,
    )
    return reaper, jarvice, metrics, clock


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_an_orphan_is_terminated_after_the_grace_period_and_only_once() -> None:
    reaper, jarvice, metrics, clock = make()
    reaper.round()
    assert jarvice.terminated == [] and sample(metrics, "nimbix_burst_controller_orphans_seen_total") == 1
    clock.now += 119
    reaper.round()
    assert jarvice.terminated == []
    clock.now += 1
    reaper.round()
    assert jarvice.terminated == [2]
    reaper.round()
    assert jarvice.terminated == [2]
    assert sample(metrics, "nimbix_burst_controller_orphans_terminated_total") == 1
    assert sample(metrics, "nimbix_burst_controller_orphans_seen_total") == 1


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
    reaper._store.mark_broken()  # type: ignore[attr-defined]
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
