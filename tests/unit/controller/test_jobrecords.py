"""jobrecords: job status + the pod's annotations -> Events and one guarded annotation patch; the
ledger makes a second plan from the patched pod record nothing again (a restarted controller)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from controller.jobrecords import (
    BurstPod,
    JobFacts,
    job_uid,
    needs_finished_jobs,
    parse_burst_pod,
    plan_pod,
    record_owners,
)
from controller.pricing import Rate
from jarvice import contract
from jarvice.ledger import MAX_LEDGER, parse_ledger

UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
START = 1_700_000_000
HOUR = 3600
RATES = {"ng2": Rate(gpus=2, price=4.20), "ng4": Rate(gpus=4, price=8.40)}
P = "nimbix-burst.io/"


def job(
    number: int = 4711,
    state: str = "SUBMITTED",
    *,
    text: str = "",
    exitcode: int | None = None,
    machine: str = "ng2",
    nodes: int = 1,
    start: int = 0,
    end: int = 0,
) -> JobFacts:
    return JobFacts(number, state, text, exitcode, machine, nodes, start, end)


def burst(annotations: dict[str, str] | None = None, *, terminal: bool = False) -> BurstPod:
    return BurstPod(UID, "team", "train-0", terminal, annotations or {})


def reasons(jobs: list[JobFacts], annotations: dict[str, str] | None = None, now: float = START) -> list[str]:
    return [e.reason for e in plan_pod(burst(annotations), jobs, rates=RATES, now=now).events]


@pytest.mark.parametrize(
    ("jobs", "ledger", "expected"),
    [
        pytest.param([job()], None, ["NimbixSubmitted"], id="first-seen-submitted"),
        pytest.param([job(text="waiting for licence")], None, ["NimbixSubmitted", "NimbixQueued"], id="held"),
        pytest.param([job(text="waiting")], "4711=submitted", ["NimbixQueued"], id="held-later"),
        pytest.param([job(text="waiting")], "4711=queued", [], id="held-recorded"),
        pytest.param(
            [job(state="PROCESSING STARTING", start=START)],
            None,
            ["NimbixSubmitted", "NimbixRunning"],
            id="first-seen-running",
        ),
        pytest.param([job(state="PROCESSING STARTING", start=START)], "4711=queued", ["NimbixRunning"], id="started"),
        pytest.param([job(state="PROCESSING STARTING", start=START)], "4711=running", [], id="running-recorded"),
        pytest.param(
            [job(state="COMPLETED", exitcode=0, start=START, end=START + HOUR)],
            "4711=running",
            ["NimbixSucceeded"],
            id="succeeded",
        ),
        pytest.param(
            [job(state="COMPLETED WITH ERROR", exitcode=3, start=START, end=START + 60)],
            "4711=running",
            ["NimbixFailed"],
            id="failed",
        ),
        pytest.param(
            [job(state="TERMINATED", start=START, end=START + 60)],
            None,
            ["NimbixSubmitted", "NimbixFailed"],
            id="first-seen-terminated",
        ),
        pytest.param([job(state="CANCELED", exitcode=0)], "4711=submitted", ["NimbixFailed"], id="canceled-is-failed"),
        pytest.param([job(state="COMPLETED", exitcode=0)], "4711=succeeded", [], id="end-recorded"),
        # JARVICE never goes back, but a stale view could: no stage is recorded twice, none undone.
        pytest.param([job(state="PROCESSING STARTING")], "4711=succeeded", [], id="never-backwards"),
        pytest.param([job(), job(4712)], "4711=submitted", ["NimbixSubmitted"], id="second-job"),
        pytest.param(
            [job(4700 + i, "COMPLETED", exitcode=0) for i in range(MAX_LEDGER + 1)],
            ",".join(f"{4701 + i}=succeeded" for i in range(MAX_LEDGER)),
            [],
            id="older-than-full-ledger",
        ),
    ],
)
def test_events_are_the_stages_past_the_ledger(jobs: list[JobFacts], ledger: str | None, expected: list[str]) -> None:
    assert reasons(jobs, {P + "jobs": ledger} if ledger else None) == expected


def apply(pod: BurstPod, ops: tuple[dict[str, Any], ...]) -> BurstPod:
    raw = {"metadata": {"uid": pod.uid, "annotations": dict(pod.annotations)}}
    out = jsonpatch.apply_patch(copy.deepcopy(raw), list(ops))
    return BurstPod(pod.uid, pod.namespace, pod.name, pod.terminal, out["metadata"]["annotations"])


def test_a_job_through_all_its_stages_gets_each_event_once() -> None:
    pod = burst({P + "decision": "remote"})
    seen: list[str] = []
    timeline = [
        job(),
        job(),
        job(text="held: quota"),
        job(state="PROCESSING STARTING", start=START),
        job(state="PROCESSING STARTING", start=START),
        job(state="COMPLETED", exitcode=0, start=START, end=START + HOUR // 2),
        job(state="COMPLETED", exitcode=0, start=START, end=START + HOUR // 2),
    ]
    for facts in timeline:
        plan = plan_pod(pod, [facts], rates=RATES, now=START + HOUR)
        seen += [e.reason for e in plan.events]
        pod = apply(pod, plan.patch)
    assert seen == ["NimbixSubmitted", "NimbixQueued", "NimbixRunning", "NimbixSucceeded"]
    assert {k: v for k, v in pod.annotations.items() if k != P + "decision"} == {
        P + "jobs": "4711=succeeded",
        P + "job-number": "4711",
        P + "job-machine": "ng2",
        P + "job-nodes": "1",
        P + "job-state": "succeeded",
        P + "gpu-hours": "1.00",  # 2 GPUs x 1 node x 0.5 h
        P + "cost": "2.10",  # 4.20 per node-hour x 0.5 h
        P + "stage": "finishing",  # the job ended, the pod still runs (nothing to copy back)
    }


@pytest.mark.parametrize(
    ("jobs", "now", "gpu_hours", "cost"),
    [
        pytest.param(
            [job(state="PROCESSING STARTING", machine="ng4", nodes=2, start=START)],
            START + HOUR,
            "8.00",
            "16.80",
            id="running-so-far",
        ),
        pytest.param([job(state="SUBMITTED")], START + HOUR, "0.00", "0.00", id="not-started"),
        pytest.param(
            [
                job(4711, "COMPLETED", exitcode=0, start=START, end=START + HOUR),
                job(4712, "PROCESSING STARTING", start=START + HOUR),
            ],
            START + 2 * HOUR,
            "4.00",
            "8.40",
            id="all-jobs-together",
        ),
    ],
)
def test_gpu_hours_and_cost_from_the_machines_rates(jobs: list[JobFacts], now: int, gpu_hours: str, cost: str) -> None:
    pod = apply(burst(), plan_pod(burst(), jobs, rates=RATES, now=now).patch)
    assert (pod.annotations[P + "gpu-hours"], pod.annotations[P + "cost"]) == (gpu_hours, cost)


def test_an_unknown_machine_leaves_the_money_out_and_says_why() -> None:
    facts = job(state="COMPLETED", exitcode=0, machine="nx9", start=START, end=START + HOUR)
    plan = plan_pod(burst(), [facts], rates=RATES, now=START + HOUR)
    pod = apply(burst(), plan.patch)
    assert P + "cost" not in pod.annotations and P + "gpu-hours" not in pod.annotations
    assert "machine nx9 not in /jarvice/machines" in plan.events[-1].message


def test_money_is_never_lowered_and_a_money_change_alone_is_flagged() -> None:
    running = job(state="PROCESSING STARTING", start=START)
    base = {
        P + "jobs": "4710=succeeded,4711=running",
        P + "job-number": "4711",
        P + "job-machine": "ng2",
        P + "job-nodes": "1",
        P + "job-state": "running",
        P + "stage": "running",
    }
    lower = plan_pod(
        burst({**base, P + "gpu-hours": "9.00", P + "cost": "99.00"}), [running], rates=RATES, now=START + HOUR
    )
    assert lower.patch == () and lower.events == ()
    higher = plan_pod(
        burst({**base, P + "gpu-hours": "1.00", P + "cost": "2.00"}), [running], rates=RATES, now=START + HOUR
    )
    assert higher.money_only and higher.events == ()


def test_the_reapers_ended_is_never_replaced_and_is_tested() -> None:
    pod = burst({P + "job-state": "ended", P + "jobs": "4711=running"})
    plan = plan_pod(pod, [job(state="COMPLETED", exitcode=0, start=START, end=START + 60)], rates=RATES, now=START)
    assert [e.reason for e in plan.events] == ["NimbixSucceeded"]
    assert apply(pod, plan.patch).annotations[P + "job-state"] == "ended"
    assert {"op": "test", "path": "/metadata/annotations/nimbix-burst.io~1job-state", "value": "ended"} in plan.patch


def test_a_patch_planned_from_a_stale_ledger_is_refused() -> None:
    stale = burst({P + "jobs": "4711=submitted"})
    plan = plan_pod(stale, [job(state="PROCESSING STARTING", start=START)], rates=RATES, now=START)
    newer = {"metadata": {"uid": UID, "annotations": {P + "jobs": "4711=running"}}}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(newer, list(plan.patch))


@pytest.mark.parametrize(
    ("text", "ledger", "problem"),
    [
        pytest.param("", {}, False, id="empty"),
        pytest.param("4711=running, 4712=queued", {4711: "running", 4712: "queued"}, False, id="two"),
        pytest.param("4711=running,x=y,4712", {4711: "running"}, True, id="bad-entries"),
        pytest.param("4711=done", {}, True, id="unknown-stage"),
        # A pod of the user's own (no opt-in label: no webhook clears it) is still read by the controller.
        pytest.param("9" * 5000 + "=running,4711=running", {4711: "running"}, True, id="more-digits-than-int-reads"),
    ],
)
def test_parse_ledger(text: str, ledger: dict[int, str], problem: bool) -> None:
    parsed, why = parse_ledger(text)
    assert parsed == ledger and bool(why) == problem


@pytest.mark.parametrize(
    ("pod", "known", "live_pods", "searched", "expected"),
    [
        pytest.param(burst({P + "jobs": "4711=running"}), {4711}, {UID}, {}, [], id="job-live"),
        pytest.param(burst({P + "jobs": "4711=running"}), set(), set(), {}, [UID], id="job-gone-from-live"),
        pytest.param(burst({P + "jobs": "4711=running"}), set(), set(), {UID: "4711=running"}, [], id="looked-up"),
        pytest.param(burst({P + "jobs": "4711=succeeded"}), {4711}, set(), {}, [], id="ended-known"),
        pytest.param(burst({P + "jobs": "4711=succeeded"}), set(), set(), {}, [UID], id="ended-unknown-restart"),
        pytest.param(burst(terminal=True), set(), set(), {}, [UID], id="finished-never-seen"),
        pytest.param(burst(terminal=True), set(), set(), {UID: ""}, [], id="finished-looked-up"),
        pytest.param(burst(), set(), set(), {}, [], id="pending-no-job-yet"),
    ],
)
def test_the_history_is_listed_only_when_a_pod_needs_it(
    pod: BurstPod, known: set[int], live_pods: set[str], searched: dict[str, str], expected: list[str]
) -> None:
    assert needs_finished_jobs([pod], known=known, live_pods=live_pods, searched=searched) == expected


@pytest.mark.parametrize(
    ("obj", "burst_pod"),
    [
        pytest.param({"metadata": {"annotations": {P + "decision": "local"}}}, False, id="local"),
        pytest.param({"metadata": {}}, False, id="undecided"),
        pytest.param(
            {"metadata": {"uid": UID, "annotations": {P + "decision": "remote", "other": "x"}}}, True, id="remote"
        ),
    ],
)
def test_parse_burst_pod_keeps_only_burst_pods_and_our_annotations(obj: dict[str, Any], burst_pod: bool) -> None:
    parsed = parse_burst_pod(obj)
    assert (parsed is not None) == burst_pod
    assert parsed is None or dict(parsed.annotations) == {}


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, "pod"),  # a pod's jobs carry its own UID
        ({"nimbix-burst.io/gang": "gang", "nimbix-burst.io/gang-rank": "0"}, "gang"),  # the submitting rank
        ({"nimbix-burst.io/gang": "gang", "nimbix-burst.io/gang-rank": "1"}, None),  # follows rank 0's job
        ({"nimbix-burst.io/gang": "gang"}, None),  # no rank: not the submitter
    ],
)
def test_the_uid_a_pods_jobs_carry(annotations: dict[str, str], expected: str | None) -> None:
    pod = BurstPod(uid="pod", namespace="team", name="p", terminal=False, annotations=annotations)
    assert job_uid(pod) == expected


def test_a_pod_naming_another_pods_or_gangs_uid_never_takes_its_job_records() -> None:
    gang = "99999999-8888-7777-6666-555555555555"
    rank0 = {contract.ANNOTATION_GANG: gang, contract.ANNOTATION_GANG_RANK: "0"}
    victim = BurstPod(uid="victim", namespace="team", name="v", terminal=False, annotations={})
    rank_zero = BurstPod(uid="r0", namespace="team", name="r0", terminal=False, annotations=rank0)
    twin_of_pod = BurstPod("t1", "elsewhere", "t1", False, {contract.ANNOTATION_GANG: "victim", **_RANK0})
    twin_of_gang = BurstPod("t2", "elsewhere", "t2", False, rank0)
    for order in ([victim, rank_zero, twin_of_pod, twin_of_gang], [twin_of_gang, twin_of_pod, rank_zero, victim]):
        owners = record_owners(order)
        assert owners["victim"] == "victim"  # a pod's own UID is its own, whatever another pod says
        assert gang not in owners  # claimed by two submitting ranks: recorded on neither
    assert record_owners([victim, rank_zero]) == {"victim": "victim", "r0": "r0", gang: "r0"}


_RANK0 = {contract.ANNOTATION_GANG_RANK: "0"}
