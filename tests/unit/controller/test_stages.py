"""The stage a burst pod is in, derived by the controller from the pod and its latest JARVICE job
(controller.stages), and how the job recorder writes it: the annotation, and an Event for each data stage."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from controller import stages
from controller.jobrecords import BurstPod, JobFacts, Rate, parse_burst_pod, plan_pod
from controller.stages import JobSeen, StagedPod

UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
START = 1_700_000_000
RATES = {"ng2": Rate(gpus=2, price=4.20)}
P = "nimbix-burst.io/"


def pod(
    *,
    terminal: bool = False,
    stages_in: bool = True,
    stages_out: bool = True,
    gang: bool = False,
    recorded_jobs: bool = False,
) -> StagedPod:
    return StagedPod(
        terminal=terminal, stages_in=stages_in, stages_out=stages_out, gang=gang, recorded_jobs=recorded_jobs
    )


def seen(state: str, *, started: bool = True) -> JobSeen:
    return JobSeen(4711, state, started)


@pytest.mark.parametrize(
    ("staged", "latest", "stage"),
    [
        pytest.param(pod(), None, "staging-in", id="no-job-yet-data-going-in"),
        pytest.param(pod(stages_in=False), None, "submitting", id="no-job-yet-nothing-to-stage-in"),
        pytest.param(pod(), seen("SUBMITTED", started=False), "queued", id="submitted"),
        pytest.param(pod(), seen("PROCESSING STARTING"), "running", id="running"),
        pytest.param(pod(), seen("COMPLETED"), "copying-back", id="ended-copying-back"),
        pytest.param(pod(), seen("COMPLETED WITH ERROR"), "copying-back", id="failed-copying-back"),
        pytest.param(pod(stages_out=False), seen("COMPLETED"), "finishing", id="ended-nothing-to-copy-back"),
        pytest.param(pod(), seen("TERMINATED", started=False), "queued", id="never-started-moving-on"),
        pytest.param(pod(), seen("TERMINATED"), "copying-back", id="terminated-after-it-started"),
        pytest.param(pod(), seen("CANCELED", started=False), "queued", id="never-started-canceled-moving-on"),
        pytest.param(pod(), seen("CANCELED"), "copying-back", id="canceled-after-it-started"),
        pytest.param(pod(terminal=True), seen("PROCESSING STARTING"), "ended", id="the-pod-ended"),
        pytest.param(pod(terminal=True), None, "ended", id="the-pod-ended-without-a-job"),
        pytest.param(pod(gang=True), seen("PROCESSING STARTING"), None, id="a-gang-s-job-names-no-pod"),
        pytest.param(pod(recorded_jobs=True), None, None, id="its-jobs-not-listed-this-round"),
    ],
)
def test_pod_stage(staged: StagedPod, latest: JobSeen | None, stage: str | None) -> None:
    assert stages.pod_stage(staged, latest) == stage


@pytest.mark.parametrize(
    ("before", "stage", "reason"),
    [
        pytest.param("", "staging-in", "NimbixStagingIn", id="into-staging-in"),
        pytest.param("running", "copying-back", "NimbixCopyingBack", id="into-copying-back"),
        pytest.param("staging-in", "staging-in", None, id="no-change-no-event"),
        pytest.param("copying-back", "copying-back", None, id="once"),
        pytest.param("staging-in", "running", None, id="job-stages-have-their-own-events"),
        pytest.param("copying-back", "ended", None, id="ended"),
        pytest.param("running", None, None, id="unknown"),
    ],
)
def test_stage_event(before: str, stage: stages.PodStage | None, reason: str | None) -> None:
    event = stages.stage_event(before, stage, seen("COMPLETED"))
    assert (event.reason if event else None) == reason


def burst(annotations: dict[str, str], *, terminal: bool = False, stages_out: bool = True) -> BurstPod:
    return BurstPod(UID, "team", "train-0", terminal, annotations, stages_in=True, stages_out=stages_out)


def apply(current: BurstPod, ops: tuple[dict[str, Any], ...], *, terminal: bool = False) -> BurstPod:
    raw = {"metadata": {"uid": current.uid, "annotations": dict(current.annotations)}}
    out = jsonpatch.apply_patch(copy.deepcopy(raw), list(ops))
    return BurstPod(
        current.uid,
        current.namespace,
        current.name,
        terminal,
        out["metadata"]["annotations"],
        stages_in=current.stages_in,
        stages_out=current.stages_out,
    )


def test_a_staging_pod_through_its_stages_gets_the_annotation_and_each_data_event_once() -> None:
    current = burst({P + "decision": "remote"})
    submitted = JobFacts(4711, "SUBMITTED", "", None, "ng2", 1, 0, 0)
    running = JobFacts(4711, "PROCESSING STARTING", "", None, "ng2", 1, START, 0)
    ended = JobFacts(4711, "COMPLETED WITH ERROR", "", 3, "ng2", 1, START, START + 60)
    timeline: list[tuple[list[JobFacts], bool]] = [
        ([], False),
        ([], False),
        ([submitted], False),
        ([running], False),
        ([ended], False),
        ([ended], False),
        ([ended], True),
    ]
    stages_seen: list[str] = []
    events: list[str] = []
    for jobs, terminal in timeline:
        current = apply(current, (), terminal=terminal)
        plan = plan_pod(current, jobs, rates=RATES, now=START + 120)
        events += [e.reason for e in plan.events]
        current = apply(current, plan.patch, terminal=terminal)
        stages_seen.append(current.annotations[P + "stage"])
    assert stages_seen == ["staging-in", "staging-in", "queued", "running", "copying-back", "copying-back", "ended"]
    assert events == ["NimbixStagingIn", "NimbixSubmitted", "NimbixRunning", "NimbixFailed", "NimbixCopyingBack"]


def test_a_stage_alone_is_not_a_money_change() -> None:
    plan = plan_pod(burst({P + "decision": "remote"}), [], rates=RATES, now=START)
    assert plan.patch and not plan.money_only


@pytest.mark.parametrize(
    ("env", "stages_in", "stages_out"),
    [
        pytest.param([], False, False, id="none"),
        pytest.param([{"name": "NIMBIX_BURST_STAGE_IN", "value": "/w/d"}], True, False, id="in"),
        pytest.param([{"name": "NIMBIX_BURST_STAGE_OUT", "value": "/w/o"}], False, True, id="out"),
        pytest.param("nonsense", False, False, id="env-not-a-list"),
    ],
)
def test_parse_burst_pod_reads_whether_it_stages(env: Any, stages_in: bool, stages_out: bool) -> None:
    obj = {
        "metadata": {"uid": UID, "annotations": {P + "decision": "remote"}},
        "spec": {"containers": [{"name": "sidecar"}, {"name": "train", "env": env}]},
    }
    parsed = parse_burst_pod(obj)
    assert parsed is not None and (parsed.stages_in, parsed.stages_out) == (stages_in, stages_out)


def test_a_gang_s_pod_gets_no_stage() -> None:
    plan = plan_pod(burst({P + "decision": "remote", P + "gang": UID}), [], rates=RATES, now=START)
    assert plan.patch == () and plan.events == ()
