"""The budget's count is authoritative (docs/decision.md, "What a burst pod looks like").

Each burst container gets `NIMBIX_BURST_COUNTED_GPUS` = its own GPU request (what the budget counts
for it; the runner refuses a machine whose GPUs x nodes exceed it), replacing any value the pod set.
A container whose env asks for more (NUM_GPUS x JARVICE_NODES) gets an admission warning. On
reinvocation a container never gets more than the first rewrite counted: one that only now asks for
GPUs is counted 0. Expected values are worked out by hand.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from jarvice import contract
from tests.support.reinvocation import add_gpu, admit, env_of, first_pass, make_cache
from tests.unit.webhook.builders import container, pod
from webhook import overreach
from webhook.budget import ANNOTATION_REMOTE_GPUS


def _env(**values: str) -> list[dict[str, Any]]:
    return [{"name": name, "value": value} for name, value in values.items()]


@pytest.mark.parametrize(
    ("env", "counted", "asked"),
    [
        pytest.param([], 2, 2, id="nothing-set-the-webhook-sets-num-gpus"),
        pytest.param(_env(NUM_GPUS="1"), 2, 1, id="fewer"),
        pytest.param(_env(NUM_GPUS="4"), 2, 4, id="more-gpus"),
        pytest.param(_env(JARVICE_NODES="2"), 2, 4, id="more-nodes"),
        pytest.param(_env(NUM_GPUS="2", JARVICE_NODES="3"), 6, 6, id="exactly"),
        pytest.param(_env(NUM_GPUS=" 4 ", JARVICE_NODES=" 2"), 2, 8, id="spaces"),
        pytest.param(_env(NUM_GPUS="0", JARVICE_NODES="8"), 2, 0, id="no-gpus"),
        pytest.param(_env(NUM_GPUS="two"), 2, None, id="unreadable-the-runner-says-so"),
        pytest.param(_env(JARVICE_NODES="-1"), 2, None, id="negative-nodes"),
        pytest.param([{"name": "NUM_GPUS", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}], 2, None, id="value-from"),
        pytest.param(_env(NUM_GPUS="9") + _env(NUM_GPUS="3"), 2, 3, id="last-duplicate-wins"),
    ],
)
def test_what_a_containers_env_asks_for(env: list[dict[str, Any]], counted: int, asked: int | None) -> None:
    assert overreach.env_gpus(env, default_gpus=counted) == asked


@pytest.mark.parametrize(
    ("env", "warned"),
    [
        pytest.param([], False, id="defaults"),
        pytest.param(_env(NUM_GPUS="1", JARVICE_NODES="2"), False, id="within"),
        pytest.param(_env(NUM_GPUS="2", JARVICE_NODES="2"), True, id="over"),
        pytest.param(_env(NUM_GPUS="nope"), False, id="unreadable"),
    ],
)
def test_a_container_asking_for_more_than_counted_gets_a_warning(env: list[dict[str, Any]], warned: bool) -> None:
    raw = pod(container("trainer", gpus=2, env=env))
    patched, result = admit(raw, make_cache(free_gpus=1), "u1")
    assert result.outcome == "remote"
    (trainer,) = patched["spec"]["containers"]
    assert env_of(trainer)[contract.ENV_COUNTED_GPUS] == "2"
    warnings = [w for w in result.response["response"]["warnings"] if "NUM_GPUS" in w]
    if warned:
        (warning,) = warnings
        assert "trainer" in warning and "4" in warning and "2" in warning and "refuse" in warning
    else:
        assert warnings == []


def test_every_burst_container_gets_its_own_count_and_a_pod_value_is_replaced() -> None:
    raw = pod(
        container("a", gpus=2),
        container("b", gpus=3, env=_env(NIMBIX_BURST_COUNTED_GPUS="64")),
        container("log"),
    )
    patched, result = admit(raw, make_cache(free_gpus=1), "u1")
    assert result.outcome == "remote"
    a, b, log = patched["spec"]["containers"]
    assert env_of(a)[contract.ENV_COUNTED_GPUS] == "2"
    assert [e["value"] for e in b["env"] if e["name"] == contract.ENV_COUNTED_GPUS] == ["3"]
    assert contract.ENV_COUNTED_GPUS not in env_of(log)
    assert patched["metadata"]["annotations"][ANNOTATION_REMOTE_GPUS] == "5"  # the pod's sum: the budget's count


def test_reinvocation_never_raises_what_was_counted() -> None:
    decided, cache = first_pass(free_gpus=1)
    assert env_of(decided["spec"]["containers"][0])[contract.ENV_COUNTED_GPUS] == "2"
    changed = copy.deepcopy(decided)
    add_gpu("app", "log")(changed)
    again, _ = admit(changed, cache, "reinvoked")
    app, log = again["spec"]["containers"]
    assert env_of(app)[contract.ENV_COUNTED_GPUS] == "2"  # kept as first counted
    assert env_of(log)[contract.ENV_COUNTED_GPUS] == "0"  # the budget never counted it: its runner refuses GPUs
    third, _ = admit(again, cache, "reinvoked-again")
    assert third == again
