"""parse_reap_view: which containers of a pod can still follow a JARVICE job, from API JSON."""

from __future__ import annotations

from typing import Any

import pytest

from controller.model import ReapView, parse_reap_view
from tests.unit.controller.builders import T0, T0_TEXT, UID

RUNNING: dict[str, Any] = {"running": {"startedAt": T0_TEXT}}
WAITING: dict[str, Any] = {"waiting": {"reason": "CrashLoopBackOff"}}


def exited(code: int) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed"}}


def burst_pod(
    *,
    policy: str | None = "Never",
    states: dict[str, dict[str, Any]] | None = None,
    containers: tuple[str, ...] = ("trainer", "sidecar"),
    container_policy: dict[str, str] | None = None,
    phase: str = "Running",
    deletion: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    policies = container_policy or {}
    spec: dict[str, Any] = {
        "containers": [{"name": c, **({"restartPolicy": policies[c]} if c in policies else {})} for c in containers],
        "initContainers": [{"name": "setup"}],
    }
    if policy is not None:
        spec["restartPolicy"] = policy
    metadata: dict[str, Any] = {
        "uid": UID,
        "namespace": "team",
        "name": "train-0",
        "labels": {"task-type": "Nimbix"},
        "annotations": {"nimbix-burst.io/decision": "remote"} if annotations is None else annotations,
    }
    if deletion is not None:
        metadata["deletionTimestamp"] = deletion
    statuses = [{"name": name, "state": state} for name, state in (states or {}).items()]
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase, "containerStatuses": statuses}}


@pytest.mark.parametrize(
    ("obj", "following"),
    [
        pytest.param(burst_pod(), ("trainer", "sidecar"), id="no-status-yet"),
        pytest.param(burst_pod(states={"trainer": RUNNING, "sidecar": RUNNING}), ("trainer", "sidecar"), id="running"),
        pytest.param(burst_pod(states={"trainer": exited(137)}), ("sidecar",), id="never-killed"),
        pytest.param(burst_pod(states={"trainer": exited(0)}), ("sidecar",), id="never-done"),
        pytest.param(burst_pod(policy="OnFailure", states={"trainer": exited(0)}), ("sidecar",), id="onfailure-done"),
        pytest.param(
            burst_pod(policy="OnFailure", states={"trainer": exited(137)}),
            ("trainer", "sidecar"),
            id="onfailure-restarts",
        ),
        pytest.param(burst_pod(policy="Always", states={"trainer": exited(0)}), ("trainer", "sidecar"), id="always"),
        pytest.param(
            burst_pod(policy=None, states={"trainer": exited(0)}), ("trainer", "sidecar"), id="default-always"
        ),
        pytest.param(burst_pod(states={"trainer": WAITING}), ("trainer", "sidecar"), id="waiting"),
        pytest.param(
            burst_pod(policy="Always", states={"trainer": exited(1)}, container_policy={"trainer": "Never"}),
            ("sidecar",),
            id="container-policy-wins",
        ),
        pytest.param(
            burst_pod(states={"trainer": exited(1), "sidecar": exited(0)}, phase="Failed"), (), id="all-exited"
        ),
    ],
)
def test_following(obj: dict[str, Any], following: tuple[str, ...]) -> None:
    assert parse_reap_view(obj).following == following


def test_parse_reap_view_reads_what_the_reaper_needs() -> None:
    view = parse_reap_view(
        burst_pod(
            phase="Failed",
            deletion=T0_TEXT,
            annotations={"nimbix-burst.io/decision": "remote", "nimbix-burst.io/job-state": "ended"},
        )
    )
    assert view == ReapView(
        uid=UID,
        namespace="team",
        name="train-0",
        terminal=True,
        deletion_deadline=T0,
        following=("trainer", "sidecar"),
        burst=True,
        job_ended=True,
    )


@pytest.mark.parametrize(
    ("phase", "annotations", "terminal", "burst", "ended"),
    [
        ("Succeeded", {}, True, False, False),
        ("Pending", {"nimbix-burst.io/decision": "local"}, False, False, False),
        ("Unknown", {"nimbix-burst.io/decision": "remote", "nimbix-burst.io/job-state": "running"}, False, True, False),
    ],
    ids=["succeeded", "local", "other-job-state"],
)
def test_phase_and_annotations(
    phase: str, annotations: dict[str, str], terminal: bool, burst: bool, ended: bool
) -> None:
    view = parse_reap_view(burst_pod(phase=phase, annotations=annotations))
    assert (view.terminal, view.burst, view.job_ended, view.deletion_deadline) == (terminal, burst, ended, None)


def test_an_empty_object() -> None:
    assert parse_reap_view({}) == ReapView("", "", "", False, None, (), False, False, decided=False)


@pytest.mark.parametrize(
    ("labels", "decision", "decided"),
    [
        ({"task-type": "Nimbix"}, "remote", True),
        ({}, "remote", False),  # a copy made without the label: no webhook decided it
        ({"task-type": "other"}, "remote", False),
        ({"task-type": "Nimbix"}, "local", False),
        ({"task-type": "Nimbix"}, None, False),
    ],
)
def test_decided_is_the_label_and_the_remote_decision(
    labels: dict[str, str], decision: str | None, decided: bool
) -> None:
    pod = burst_pod(annotations={} if decision is None else {"nimbix-burst.io/decision": decision})
    pod["metadata"]["labels"] = labels
    assert parse_reap_view(pod).decided is decided
