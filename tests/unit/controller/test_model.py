"""parse_pod / parse_time: the fields the decisions read, from API JSON."""

from __future__ import annotations

import pytest

from controller.model import Owner, format_time, log_context, parse_pod, pod_reference
from kubeplumbing.times import parse_time
from tests.unit.controller.builders import JOB_UID, T0, T0_TEXT, UID, job_owner, pod


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(T0_TEXT, T0, id="zulu"),
        pytest.param("2023-11-14T22:13:20+00:00", T0, id="offset"),
        pytest.param("2023-11-14T23:13:20+01:00", T0, id="other-offset"),
        pytest.param("2023-11-14T22:13:20.500000Z", T0 + 0.5, id="fraction"),
        pytest.param("", None, id="empty"),
        pytest.param("yesterday", None, id="garbage"),
        pytest.param(None, None, id="absent"),
        pytest.param(12, None, id="number"),
    ],
)
def test_parse_time(text: object, expected: float | None) -> None:
    assert parse_time(text) == expected


def test_format_time_round_trips() -> None:
    assert format_time(T0) == T0_TEXT
    assert parse_time(format_time(T0)) == T0


def test_parse_pod_reads_what_the_rules_need() -> None:
    view = parse_pod(pod(owners=[{**job_owner(), "controller": False}, job_owner(name="real")]))
    assert view.uid == UID
    assert (view.namespace, view.name, view.resource_version) == ("team", "train-abcde", "42")
    assert view.labeled and view.decision == "local"
    assert view.owner == Owner(api_version="batch/v1", kind="Job", name="real", uid=JOB_UID)
    assert (view.scheduled_status, view.scheduled_reason, view.scheduled_since) == ("False", "Unschedulable", T0)


def test_parse_pod_tolerates_an_empty_object() -> None:
    view = parse_pod({})
    assert view.uid == "" and view.owner is None and view.scheduled_since is None and not view.labeled


def test_a_pod_and_its_owner_as_events_name_them() -> None:
    view = parse_pod(pod(owners=[job_owner(name="real")]))
    assert view.owner is not None
    assert view.owner.reference() == {"apiVersion": "batch/v1", "kind": "Job", "name": "real", "uid": JOB_UID}
    assert pod_reference(view) == {"apiVersion": "v1", "kind": "Pod", "name": "train-abcde", "uid": UID}
    assert log_context(view, count=2) == {"namespace": "team", "pod": "train-abcde", "uid": UID, "count": 2}
