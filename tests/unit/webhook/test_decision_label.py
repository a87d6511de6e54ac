"""The decision as a label (`kubectl get pods -l nimbix-burst.io/decision=remote`), set by every
decision patch, whatever labels the pod arrives with; the annotations stay."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from jarvice import gpubudget
from tests.unit.webhook.builders import GPU, container, pod
from tests.unit.webhook.patch_terms import POLICY, REMOTE, TERMS
from webhook import mutation
from webhook.types import Decision

LOCAL = Decision(kind="local", reason="1 candidate", node="a", candidates=1)
Build = Callable[[dict[str, Any]], list[dict[str, Any]]]


def _remote(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return mutation.build_remote_patch(raw, gpus={GPU: 4}, decision=REMOTE, policy=POLICY, terms=TERMS)


def _local(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return mutation.build_local_patch(raw, decision=LOCAL, reservation_id="r1")


def _kept_local(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return mutation.build_kept_local_patch(raw, reason="no cluster identity")


def _over_budget(raw: dict[str, Any]) -> list[dict[str, Any]]:
    # As the response for an over-budget verdict builds it: kept local, the budget recorded in the notes.
    return mutation.build_kept_local_patch(raw, reason="budget", notes={gpubudget.ANNOTATION_BUDGET: "4 of 4 in use"})


def _with_labels(raw: dict[str, Any], labels: dict[str, str] | None) -> dict[str, Any]:
    if labels is None:
        del raw["metadata"]["labels"]
    else:
        raw["metadata"]["labels"] = labels
    return raw


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        pytest.param(_remote, "remote", id="remote"),
        pytest.param(_local, "local", id="local"),
        pytest.param(_kept_local, "local", id="kept-local"),
        pytest.param(_over_budget, "local", id="over-budget"),
    ],
)
@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        pytest.param(pod(container(gpus=4)), {"task-type": "Nimbix"}, id="usual-labels"),
        pytest.param(_with_labels(pod(container(gpus=4)), None), {}, id="no-labels-map"),
        pytest.param(_with_labels(pod(container(gpus=4)), {}), {}, id="empty-labels-map"),
        pytest.param(
            pod(container(gpus=4), labels={"task-type": "Nimbix", "nimbix-burst.io/decision": "guess"}),
            {"task-type": "Nimbix"},
            id="users-value-replaced",
        ),
    ],
)
def test_every_decision_is_a_label(build: Build, expected: str, raw: dict[str, Any], kept: dict[str, str]) -> None:
    out = jsonpatch.apply_patch(copy.deepcopy(raw), build(raw))
    assert out["metadata"]["labels"] == {**kept, "nimbix-burst.io/decision": expected}
    assert out["metadata"]["annotations"]["nimbix-burst.io/decision"] == expected


def test_a_label_already_right_is_not_patched() -> None:
    raw = pod(container(gpus=4), labels={"task-type": "Nimbix", "nimbix-burst.io/decision": "local"})
    assert not [op for op in _local(raw) if op["path"].startswith("/metadata/labels")]
