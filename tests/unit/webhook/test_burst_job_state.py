"""A finished burst pod keeps its GPUs counted against the budget until its JARVICE job is gone.

Written from the rule in docs/decision.md ("Burst budget per namespace", when GPUs are freed): a burst pod
that turned Succeeded or Failed keeps counting until (a) every burst container's terminated state
carries the runner's termination message saying its job may not run, or (b) the controller annotated
the pod `nimbix-burst.io/job-state: ended`, or (c) the pod is deleted. Any message we cannot read
means the job may run.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from jarvice import contract
from tests.support.budgets import NS, burst_pod, make_sync
from tests.unit.webhook.builders import container, pod
from webhook import model


def _message(job: object = 7, job_may_run: object = False, **extra: object) -> str:
    return json.dumps({contract.TERMINATION_KEY: {"job": job, "job_may_run": job_may_run, **extra}})


@pytest.mark.parametrize(
    ("message", "may_run"),
    [
        pytest.param(_message(), False, id="job-ended"),
        pytest.param(_message(job=None), False, id="no-job-submitted"),
        pytest.param(_message(exit_code=137), False, id="extra-fields"),
        pytest.param("  " + _message() + "\n", False, id="surrounding-whitespace"),
        pytest.param(_message(job_may_run=True), True, id="job-may-run"),
        pytest.param(_message(job_may_run=0), True, id="falsy-not-false"),
        pytest.param(_message(job_may_run="false"), True, id="string-false"),
        pytest.param(_message(job="7"), True, id="job-not-a-number"),
        pytest.param(_message(job=True), True, id="job-a-boolean"),
        pytest.param(json.dumps({contract.TERMINATION_KEY: {"job": 7}}), True, id="no-job-may-run"),
        pytest.param(json.dumps({contract.TERMINATION_KEY: []}), True, id="payload-not-an-object"),
        pytest.param(json.dumps({"other": {"job_may_run": False}}), True, id="other-key"),
        pytest.param(json.dumps([1]), True, id="not-an-object"),
        pytest.param("Traceback (most recent call last):", True, id="log-tail"),
        pytest.param("", True, id="empty"),
        pytest.param(None, True, id="absent"),
        pytest.param(42, True, id="not-a-string"),
        pytest.param("[" * 100_000, True, id="deeply-nested"),
    ],
)
def test_the_termination_message_says_whether_the_job_may_run(message: object, may_run: bool) -> None:
    assert model.parse_job_may_run(message) is may_run


def _terminated(raw: dict[str, Any], phase: str, messages: dict[str, object]) -> dict[str, Any]:
    """The pod in `phase`, each named container terminated with its message (None: no message)."""
    raw = copy.deepcopy(raw)
    raw["status"]["phase"] = phase
    statuses = []
    for name, message in messages.items():
        terminated: dict[str, Any] = {"exitCode": 1}
        if message is not None:
            terminated["message"] = message
        statuses.append({"name": name, "state": {"terminated": terminated}})
    raw["status"]["containerStatuses"] = statuses
    return raw


def _burst(uid: str, gpus: int, *names: str) -> dict[str, Any]:
    """A burst pod whose containers `names` run the runner (REMOTE=1), plus a local log shipper."""
    raw = burst_pod(uid, gpus)
    runners = [
        container(name, requests={"cpu": "100m"}, env=[{"name": contract.ENV_REMOTE, "value": "1"}]) for name in names
    ]
    raw["spec"]["containers"] = [*runners, container("shipper", requests={"cpu": "100m"})]
    return raw


ENDED = _message()
MAY_RUN = _message(job_may_run=True)


@pytest.mark.parametrize(
    ("runners", "phase", "messages", "annotations", "counted"),
    [
        pytest.param("a", "Running", {"a": ENDED}, {}, 2, id="running-counts-whatever-it-says"),
        pytest.param("a", "Failed", {"a": None}, {}, 2, id="runner-killed-no-message"),
        pytest.param("a", "Failed", {"a": "OOMKilled"}, {}, 2, id="unreadable-message"),
        pytest.param("a", "Failed", {"a": ENDED}, {}, 0, id="runner-said-ended"),
        pytest.param("a", "Succeeded", {"a": ENDED}, {}, 0, id="succeeded-said-ended"),
        pytest.param("a", "Succeeded", {"a": None}, {}, 2, id="succeeded-without-message"),
        pytest.param("a", "Failed", {"a": MAY_RUN}, {}, 2, id="runner-said-may-run"),
        pytest.param("a", "Failed", {}, {}, 2, id="never-started"),
        pytest.param("ab", "Failed", {"a": ENDED, "b": MAY_RUN}, {}, 2, id="one-of-two-may-run"),
        pytest.param("ab", "Failed", {"a": ENDED, "b": ENDED}, {}, 0, id="both-ended"),
        pytest.param("ab", "Failed", {"a": ENDED}, {}, 2, id="second-runner-has-no-status"),
        pytest.param("ab", "Failed", {"a": ENDED, "b": ENDED, "shipper": None}, {}, 0, id="local-container-ignored"),
        pytest.param("", "Failed", {"shipper": None}, {}, 2, id="no-runner-found"),
        pytest.param("a", "Failed", {"a": None}, {contract.ANNOTATION_JOB_STATE: "ended"}, 0, id="controller-ended"),
        pytest.param("a", "Failed", {"a": None}, {contract.ANNOTATION_JOB_STATE: "running"}, 2, id="other-job-state"),
        pytest.param("a", "Running", {}, {contract.ANNOTATION_JOB_STATE: "ended"}, 2, id="running-ignores-job-state"),
    ],
)
def test_a_finished_burst_pod_counts_until_its_job_is_gone(
    runners: str, phase: str, messages: dict[str, object], annotations: dict[str, str], counted: int
) -> None:
    raw = _burst("p1", 2, *runners)
    raw["metadata"]["annotations"].update(annotations)
    sync = make_sync()
    assert sync.apply_event("pods", "ADDED", _terminated(raw, phase, messages)) is None
    assert sync.cache.remote_in_use(NS) == counted


def test_the_count_follows_a_pod_from_running_to_failed_to_ended_and_deleted() -> None:
    sync = make_sync()
    cache = sync.cache
    running = _burst("p1", 2, "a")
    assert sync.apply_event("pods", "ADDED", running) is None
    assert sync.apply_event("pods", "ADDED", _burst("p2", 1, "a")) is None
    assert cache.remote_in_use(NS) == 3
    failed = _terminated(running, "Failed", {"a": None})  # the runner was SIGKILLed: its job may run
    assert sync.apply_event("pods", "MODIFIED", failed) is None
    assert sync.apply_event("pods", "MODIFIED", failed) is None  # a repeated event changes nothing
    assert cache.remote_in_use(NS) == 3
    assert cache.free("cpu")["cpu"] == 16000 - 200  # the finished pod holds nothing on its node; p2 (2 x 100m) does
    sync.apply_list("pods", [failed, _burst("p2", 1, "a")])  # a relist counts it the same
    assert cache.remote_in_use(NS) == 3
    ended = copy.deepcopy(failed)
    ended["metadata"]["annotations"][contract.ANNOTATION_JOB_STATE] = contract.JOB_STATE_ENDED
    assert sync.apply_event("pods", "MODIFIED", ended) is None
    assert cache.remote_in_use(NS) == 1
    sync.apply_list("pods", [ended, _burst("p2", 1, "a")])
    assert cache.remote_in_use(NS) == 1
    assert sync.apply_event("pods", "DELETED", ended) is None  # deleting a pod that no longer counts
    assert cache.remote_in_use(NS) == 1
    assert sync.apply_event("pods", "DELETED", _burst("p2", 1, "a")) is None
    assert cache.remote_in_use(NS) == 0


def test_a_finished_pod_whose_job_may_run_stops_counting_when_deleted_or_relisted_away() -> None:
    sync = make_sync()
    failed = _terminated(_burst("p1", 2, "a"), "Failed", {"a": None})
    assert sync.apply_event("pods", "ADDED", failed) is None
    assert sync.apply_event("pods", "ADDED", _terminated(_burst("p2", 3, "a"), "Failed", {"a": None})) is None
    assert sync.cache.remote_in_use(NS) == 5
    assert sync.apply_event("pods", "DELETED", failed) is None
    assert sync.cache.remote_in_use(NS) == 3
    sync.apply_list("pods", [])
    assert sync.cache.remote_in_use(NS) == 0


def test_a_finished_pod_that_never_burst_holds_nothing() -> None:
    local = pod(container(requests={"cpu": "100m"}), annotations={contract.ANNOTATION_DECISION: "local"}, uid="l")
    local["status"]["phase"] = "Failed"
    assert model.parse_pod(local, ("nvidia.com/gpu",)) is None
