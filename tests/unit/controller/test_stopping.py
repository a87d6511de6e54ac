"""Stopper.round against a fake gateway and a fake API writer (injected): two rounds for what a round
cannot prove, at once for a size above what was counted, the Event on the pod or the namespace, the
count by reason, leadership, a stale watch, a failed listing or terminate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.accounting import Counted, LiveJob
from controller.metrics import Metrics
from controller.stopping import EVENT_REASON, Stopper
from controller.store import PodStore
from tests.support.clocks import Clock

CLUSTER = "dev-0123456789ab"
DECIDED = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
COPY = "5f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f71"  # a label-less copy: not decided


def pod(uid: str, *, labeled: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": f"p-{uid[:4]}",
            "namespace": "demo",
            "labels": {"task-type": "Nimbix"} if labeled else {},
            "annotations": {"nimbix-burst.io/decision": "remote"},
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "app"}]},
        "status": {"phase": "Running"},
    }


def live(number: int, uid: str, *, gpus: int = 1, counted: bool = True) -> LiveJob:
    return LiveJob(
        account="shared",
        number=number,
        label=f"k8s-{CLUSTER}.{uid}-app-1",
        state="PROCESSING STARTING",
        machine="ng1",
        nodes=gpus,
        gpus=gpus,
        cost_per_hour=3.2 * gpus,
        counted=Counted(namespace="demo", pod_uid=uid, gpus=1, cost_per_hour=3.2, worst_case=6.4, at=1.0)
        if counted
        else None,
    )


@dataclass
class FakeGateway:
    jobs: list[LiveJob] = field(default_factory=list)
    terminated: list[tuple[str, int]] = field(default_factory=list)
    fail_list: bool = False
    fail_terminate: bool = False

    def live_jobs(self) -> list[LiveJob]:
        if self.fail_list:
            raise OSError("gateway down")
        return [j for j in self.jobs if (j.account, j.number) not in self.terminated]

    def terminate(self, account: str, number: int) -> None:
        if self.fail_terminate:
            raise OSError("gateway down")
        self.terminated.append((account, number))


@dataclass
class FakeKube:
    annotations: dict[str, Mapping[str, str]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def list_namespace_annotations(self) -> dict[str, Mapping[str, str]]:
        return dict(self.annotations)

    def read_configmap(self, namespace: str, name: str) -> tuple[Mapping[str, str], str] | None:
        return None

    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = "Warning"
    ) -> None:
        self.events.append({"namespace": namespace, "involved": dict(involved), "reason": reason, "message": message})


def make(
    jobs: list[LiveJob], *, leader: bool = True, listed: bool = True, dry_run: bool = False
) -> tuple[Stopper, FakeGateway, FakeKube, Metrics]:
    store = PodStore(clock=Clock())
    if listed:
        store.replace([pod(DECIDED), pod(COPY, labeled=False)])
    gateway, kube = FakeGateway(jobs=jobs), FakeKube()
    metrics = Metrics(is_leader=lambda: leader)
    stopper = Stopper(
        store=store,
        jobs=gateway,
        kube=kube,
        namespace="nimbix-burst",
        cluster=CLUSTER,
        dry_run=dry_run,
        stale_after=60,
        metrics=metrics,
        is_leader=lambda: leader,
    )
    return stopper, gateway, kube, metrics


def stopped(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "nimbix_burst_controller_unaccounted_jobs_stopped_total", {"reason": reason}
    )
    return value or 0.0


def test_a_copys_job_is_stopped_on_the_second_round_with_an_event_on_the_copy() -> None:
    stopper, gateway, kube, metrics = make([live(1, DECIDED), live(2, COPY)])
    stopper.round()
    assert gateway.terminated == []
    assert metrics.registry.get_sample_value("nimbix_burst_controller_unaccounted_jobs_marked") == 1
    stopper.round()
    assert gateway.terminated == [("shared", 2)]
    (event,) = kube.events
    assert event["involved"]["uid"] == COPY
    assert (event["namespace"], event["reason"]) == ("demo", EVENT_REASON)
    assert "not-decided" in event["message"]
    assert stopped(metrics, "not-decided") == 1


def test_a_job_bigger_than_counted_is_stopped_at_once() -> None:
    stopper, gateway, kube, metrics = make([live(1, DECIDED, gpus=8)])
    stopper.round()
    assert gateway.terminated == [("shared", 1)]
    assert "8 GPU(s); 1 were counted" in kube.events[0]["message"]
    assert stopped(metrics, "above-counted-size") == 1


def test_a_job_no_pod_is_known_for_gets_its_event_on_the_namespace_counted() -> None:
    gone = "00000000-1111-2222-3333-444444444444"
    stopper, gateway, kube, _ = make([live(1, gone)])
    stopper.round()
    stopper.round()
    assert gateway.terminated == [("shared", 1)]
    assert kube.events[0]["involved"] == {"apiVersion": "v1", "kind": "Namespace", "name": "demo"}


def test_a_namespace_over_its_budget_loses_its_newest_job() -> None:
    older = live(1, DECIDED)
    newer = LiveJob(
        account="shared",
        number=2,
        label=older.label.replace("-1", "-2"),
        state=older.state,
        machine="ng1",
        nodes=1,
        gpus=1,
        cost_per_hour=3.2,
        counted=Counted(namespace="demo", pod_uid=DECIDED, gpus=1, cost_per_hour=3.2, worst_case=6.4, at=2.0),
    )
    stopper, gateway, kube, metrics = make([older, newer])
    kube.annotations = {"demo": {"nimbix-burst.io/max-remote-gpus": "1"}}
    stopper.round()
    stopper.round()
    assert gateway.terminated == [("shared", 2)]
    assert stopped(metrics, "over-cap") == 1


def test_nothing_is_stopped_by_a_follower_a_stale_watch_or_a_dry_run() -> None:
    for options in ({"leader": False}, {"listed": False}, {"dry_run": True}):
        stopper, gateway, _, _ = make([live(1, DECIDED, gpus=8)], **options)
        stopper.round()
        stopper.round()
        assert gateway.terminated == [], options


def test_a_failed_listing_skips_the_round_and_a_failed_terminate_is_tried_again() -> None:
    stopper, gateway, _, metrics = make([live(1, DECIDED, gpus=8)])
    gateway.fail_list = True
    stopper.round()
    assert metrics.registry.get_sample_value("nimbix_burst_controller_errors_total", {"kind": "gateway-jobs"}) == 1
    gateway.fail_list, gateway.fail_terminate = False, True
    stopper.round()
    assert gateway.terminated == []
    gateway.fail_terminate = False
    stopper.round()
    assert gateway.terminated == [("shared", 1)]


def test_a_job_the_gateway_did_not_submit_in_an_own_key_namespace_is_left_alone() -> None:
    stopper, gateway, kube, _ = make([live(1, DECIDED, counted=False)])
    kube.annotations = {"demo": {"nimbix-burst.io/jarvice-account": "own"}}
    stopper.round()
    stopper.round()
    assert gateway.terminated == []
