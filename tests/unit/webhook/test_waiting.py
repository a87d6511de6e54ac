"""Waiting before bursting (`nimbix-burst.io/burst-after`).

Expected values are written from the rules in docs/decision.md ("Waiting before bursting"), never by
calling the code under test: a Job's pod that would burst waits for a local node until its Job's
deadline (admission time + the setting, the pod's own or its namespace's); any other pod bursts at
once and says why; a pod of a Job whose deadline has passed bursts at once. A gang's wait:
tests/unit/webhook/test_gang_waiting.py.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from jarvice import contract
from tests.support.clocks import Clock
from tests.support.reinvocation import patched_by
from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, node, pod
from webhook import admission, waiting
from webhook.cache import ClusterCache
from webhook.job_moves import WAIT_MEMORY_SECONDS
from webhook.review import AdmissionRequest
from webhook.rewrite_terms import RewritePolicy
from webhook.sync import CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
NS = "team"
START = 1_790_000_000.0  # 2026-09-21T14:13:20.000Z
JOB = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-1", "controller": True}


# ----- the duration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90s", 90.0),
        ("10m", 600.0),
        (" 1h ", 3600.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5m", 90.0),
        ("168h", 604800.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert waiting.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("90", "not a duration"),
        ("", "not a duration"),
        ("ten minutes", "not a duration"),
        ("-5m", "not a duration"),
        ("5 m", "not a duration"),
        ("1d", "not a duration"),
        ("169h", "longer than a week"),
    ],
)
def test_what_is_not_a_duration_says_what_to_write(text: str, says: str) -> None:
    with pytest.raises(waiting.DurationError, match=says):
        waiting.parse_duration(text)


# ----- the rule, as a table ----------------------------------------------------------------------

NOW = 5000.0


def ask(
    setting: str | None = "60s",
    *,
    ns: str | None = None,
    job: str = "job-1",
    deadlines: dict[str, float] | None = None,
    restart: str = "Never",
) -> waiting.WaitAsk:
    return waiting.WaitAsk(setting, ns, job, NOW, deadlines or {}, restart)


@pytest.mark.parametrize(
    ("the_ask", "gang", "expected"),
    [
        # a Job's pod waits for its setting, the pod's first, else its namespace's
        (ask("60s"), False, waiting.Wait("job-1", NOW + 60, 60, "pod")),
        (ask(None, ns="5m"), False, waiting.Wait("job-1", NOW + 300, 300, "namespace")),
        (ask("30s", ns="5m"), False, waiting.Wait("job-1", NOW + 30, 30, "pod")),
        # 0, the default, or no setting at all: burst at once, nothing to say
        (ask("0"), False, waiting.NO_WAIT),
        (ask("0", ns="5m"), False, waiting.NO_WAIT),
        (ask(None), False, waiting.NO_WAIT),
        # the Job already has a deadline: its pod waits until that one, or bursts once it passed
        (ask("60s", deadlines={"job-1": NOW + 10}), False, waiting.Wait("job-1", NOW + 10, 60, "pod")),
        (ask("60s", deadlines={"job-2": NOW - 1}), False, waiting.Wait("job-1", NOW + 60, 60, "pod")),
    ],
)
def test_the_wait(the_ask: waiting.WaitAsk, gang: bool, expected: waiting.Wait | waiting.NoWait) -> None:
    assert waiting.decide(the_ask, gang=gang) == expected


@pytest.mark.parametrize(
    ("the_ask", "gang", "says"),
    [
        (ask("60s", job=""), False, "only a Job's pod can wait"),
        (ask("sixty"), False, "the pod's nimbix-burst.io/burst-after is ignored: 'sixty' is not a duration"),
        (ask(None, ns="soon"), False, "the namespace's nimbix-burst.io/burst-after is ignored"),
        (ask("60s", deadlines={"job-1": NOW}), False, "its Job waited until 1970-01-01T01:23:20.000Z"),
        # its Job would count the eviction that bursts it later (no podFailurePolicy with OnFailure)
        (ask("60s", restart="OnFailure"), False, "only a pod with restartPolicy Never can wait"),
        (ask("60s", restart=""), False, "with Always the eviction would count against the Job's backoffLimit"),
        (ask(None, ns="5m", restart="OnFailure"), True, "only a pod with restartPolicy Never can wait"),
    ],
)
def test_who_bursts_at_once_and_why(the_ask: waiting.WaitAsk, gang: bool, says: str) -> None:
    decided = waiting.decide(the_ask, gang=gang)
    assert isinstance(decided, waiting.NoWait)
    assert says in decided.reason


@pytest.mark.parametrize(
    ("refs", "uid"),
    [
        ([JOB], "job-1"),
        ([{**JOB, "controller": False}], ""),
        ([{**JOB, "kind": "ReplicaSet", "apiVersion": "apps/v1"}], ""),
        ([{**JOB, "kind": "CronJob"}], ""),
        ([], ""),
        (None, ""),
    ],
)
def test_only_a_job_that_controls_the_pod_recreates_it(refs: Any, uid: str) -> None:
    assert waiting.controlling_job({"ownerReferences": refs} if refs is not None else {}) == uid


def test_a_deadline_is_written_in_milliseconds_never_early() -> None:
    assert waiting.format_deadline(START) == "2026-09-21T14:13:20.000Z"
    assert waiting.format_deadline(START + 0.2) == "2026-09-21T14:13:20.200Z"
    assert waiting.format_deadline(START + 0.0751) == "2026-09-21T14:13:20.076Z"


# ----- through admit(): a full cluster, a Job's pod that asks to wait ----------------------------


def make_sync(*, local_gpus: int = 0, ns_setting: str | None = None) -> tuple[CacheSync, Clock]:
    clock, wall = Clock(), Clock(START)
    cache = ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60, wall_clock=wall)
    sync = CacheSync(cache, clock=clock)
    sync.apply_list("nodes", [node("gpu", local_gpus), node("cpu", 0)])
    sync.apply_list("pods", [])
    annotations = {} if ns_setting is None else {contract.ANNOTATION_BURST_AFTER: ns_setting}
    sync.apply_list(
        "namespaces", [{"kind": "Namespace", "metadata": {"name": NS, "annotations": annotations}}, KUBE_SYSTEM]
    )
    return sync, wall


def job_pod(uid: str, *, setting: str | None = "60s", owned: bool = True) -> dict[str, Any]:
    raw = pod(
        container(gpus=1),
        namespace=NS,
        name=uid,
        annotations={contract.ANNOTATION_BURST_AFTER: setting} if setting is not None else None,
    )
    raw["spec"]["restartPolicy"] = "Never"  # a Job's pods that may wait (webhook.job_policy)
    if owned:
        raw["metadata"]["ownerReferences"] = [JOB]
    return raw


def admit(sync: CacheSync, raw: dict[str, Any], *, dry_run: bool = False) -> tuple[admission.Admission, dict[str, Any]]:
    uid = raw["metadata"]["name"]
    request = AdmissionRequest(
        uid=uid, operation="CREATE", kind="Pod", group="", namespace=NS, dry_run=dry_run, object=raw
    )
    result = admission.admit(request, cache=sync.cache, policy=POLICY)
    return result, patched_by(raw, result)


def annotations(patched: dict[str, Any]) -> dict[str, str]:
    return dict(patched["metadata"].get("annotations") or {})


def test_a_jobs_pod_on_a_full_cluster_waits_with_its_deadline_and_the_reason() -> None:
    sync, _ = make_sync()
    result, patched = admit(sync, job_pod("p1"))
    notes = annotations(patched)
    assert result.outcome == "local"
    assert notes[contract.ANNOTATION_DECISION] == "local"
    assert notes[contract.ANNOTATION_BURST_DEADLINE] == "2026-09-21T14:14:20.000Z"  # START + 60 s
    assert "waits for a local node until 2026-09-21T14:14:20.000Z" in notes[contract.ANNOTATION_REASON]
    assert patched["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"  # as submitted: it waits here
    assert any("kept local for now" in w for w in result.response["response"]["warnings"])


def test_the_jobs_next_pod_waits_until_the_same_deadline_and_after_it_bursts_at_once() -> None:
    sync, wall = make_sync()
    admit(sync, job_pod("p1"))
    wall.now = START + 30
    _, second = admit(sync, job_pod("p2"))
    assert annotations(second)[contract.ANNOTATION_BURST_DEADLINE] == "2026-09-21T14:14:20.000Z"
    wall.now = START + 61  # the controller replaced the pod that waited in vain
    result, replacement = admit(sync, job_pod("p3"))
    notes = annotations(replacement)
    assert result.outcome == "remote"
    assert contract.ANNOTATION_BURST_DEADLINE not in notes
    assert "its Job waited until 2026-09-21T14:14:20.000Z" in notes[contract.ANNOTATION_BURST_AFTER_IGNORED]


def test_a_job_is_forgotten_an_hour_after_its_deadline_and_may_wait_again() -> None:
    sync, wall = make_sync()
    admit(sync, job_pod("p1"))
    wall.now = START + 60 + WAIT_MEMORY_SECONDS + 1
    result, patched = admit(sync, job_pod("p2"))
    assert result.outcome == "local"
    assert contract.ANNOTATION_BURST_DEADLINE in annotations(patched)


def test_a_pod_that_fits_locally_runs_locally_whatever_its_setting() -> None:
    sync, _ = make_sync(local_gpus=1)
    result, patched = admit(sync, job_pod("p1"))
    assert result.outcome == "local"
    assert contract.ANNOTATION_BURST_DEADLINE not in annotations(patched)
    assert contract.ANNOTATION_BURST_AFTER_IGNORED not in annotations(patched)


def test_a_bare_pod_bursts_at_once_and_its_annotation_says_why() -> None:
    sync, _ = make_sync()
    result, patched = admit(sync, job_pod("p1", owned=False))
    assert result.outcome == "remote"
    assert "only a Job's pod can wait" in annotations(patched)[contract.ANNOTATION_BURST_AFTER_IGNORED]


def test_the_namespace_default_applies_and_the_pods_0_overrides_it() -> None:
    sync, _ = make_sync(ns_setting="5m")
    _, patched = admit(sync, job_pod("p1", setting=None))
    assert annotations(patched)[contract.ANNOTATION_BURST_DEADLINE] == "2026-09-21T14:18:20.000Z"
    result, patched = admit(sync, job_pod("p2", setting="0"))
    assert result.outcome == "remote"
    assert contract.ANNOTATION_BURST_AFTER_IGNORED not in annotations(patched)


def test_an_unreadable_setting_bursts_at_once_and_names_the_value() -> None:
    sync, _ = make_sync()
    result, patched = admit(sync, job_pod("p1", setting="a while"))
    assert result.outcome == "remote"
    assert "'a while' is not a duration" in annotations(patched)[contract.ANNOTATION_BURST_AFTER_IGNORED]


def test_a_dry_run_waits_the_same_and_gives_the_job_no_deadline() -> None:
    sync, wall = make_sync()
    _, patched = admit(sync, job_pod("p1"), dry_run=True)
    assert annotations(patched)[contract.ANNOTATION_BURST_DEADLINE] == "2026-09-21T14:14:20.000Z"
    wall.now = START + 30
    _, patched = admit(sync, job_pod("p2"))
    assert (
        annotations(patched)[contract.ANNOTATION_BURST_DEADLINE] == "2026-09-21T14:14:50.000Z"
    )  # its own, not the dry run's


def test_a_pod_without_the_setting_is_decided_as_before() -> None:
    sync, _ = make_sync()
    result, patched = admit(sync, job_pod("p1", setting=None))
    assert result.outcome == "remote"
    assert not {contract.ANNOTATION_BURST_DEADLINE, contract.ANNOTATION_BURST_AFTER_IGNORED} & set(annotations(patched))
    assert json.loads(annotations(patched)[contract.ANNOTATION_ORIGINAL_RESOURCES])["gpus"] == {GPU: 1}


def test_a_job_whose_pod_burst_never_waits_again_even_once_its_deadline_is_forgotten() -> None:
    """A Job waits once. Its burst pod, seen by the watch, says so for as long as it lives: a later pod of the
    Job (the replacement of a pod that came home and lost its GPU meanwhile, or one admitted by a webhook that
    restarted) bursts at once, with no second wait at the back of JARVICE's queue."""
    sync, wall = make_sync()
    admit(sync, job_pod("p1"))
    wall.now = START + 61
    result, burst = admit(sync, job_pod("p2"))
    assert result.outcome == "remote"
    burst["metadata"]["uid"] = "p2"
    sync.apply_event("pods", "ADDED", burst)  # the watch shows it: a burst pod of the Job
    wall.now = START + 60 + WAIT_MEMORY_SECONDS + 1  # the deadline forgotten; the burst pod still there
    sync.apply_event("pods", "MODIFIED", burst)
    result, patched = admit(sync, job_pod("p3"))
    notes = annotations(patched)
    assert result.outcome == "remote"
    assert contract.ANNOTATION_BURST_DEADLINE not in notes
    assert "its Job's pods already burst" in notes[contract.ANNOTATION_BURST_AFTER_IGNORED]


def test_the_rule_a_job_that_burst_never_waits_again() -> None:
    decided = waiting.decide(dataclasses.replace(ask("60s"), burst_before=True), gang=False)
    assert isinstance(decided, waiting.NoWait) and "its Job's pods already burst" in decided.reason
