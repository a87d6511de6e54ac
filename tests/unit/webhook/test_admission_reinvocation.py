"""Reinvocation (reinvocationPolicy: IfNeeded): a later webhook changed a pod we already decided.

Each case runs the real admission twice (first decision, then the reinvocation) over the pod as the
API server would send it, applying every patch with jsonpatch.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.reinvocation import AUDIT, add_gpu, admit, env_of, first_pass
from tests.unit.webhook.builders import GPU


def gpus_left(raw: dict[str, Any]) -> list[str]:
    spec = raw["spec"]
    return [
        c["name"]
        for c in spec["containers"] + spec.get("initContainers", [])
        for source in ("requests", "limits")
        if GPU in c.get("resources", {}).get(source, {})
    ]


@pytest.mark.parametrize(
    ("later", "newly_burst"),
    [
        pytest.param(add_gpu("app"), set(), id="gpu-back-on-the-burst-container"),
        pytest.param(add_gpu("log"), {"log"}, id="gpu-on-a-local-container"),
        pytest.param(add_gpu("fetch", init=True), set(), id="gpu-on-an-init-container"),
        pytest.param(add_gpu("app", "log"), {"log"}, id="gpu-on-every-container"),
    ],
)
def test_remote_pod_gets_gpus_from_a_later_webhook_stripped(
    later: Callable[[dict[str, Any]], None], newly_burst: set[str]
) -> None:
    decided, cache = first_pass(free_gpus=1)
    assert decided["metadata"]["annotations"]["nimbix-burst.io/decision"] == "remote"
    changed = copy.deepcopy(decided)
    later(changed)
    assert gpus_left(changed)

    again, result = admit(changed, cache, "reinvoked")
    assert result.outcome == "remote"
    assert gpus_left(again) == []
    assert result.response["response"]["warnings"]
    for before, after in zip(changed["spec"]["containers"], again["spec"]["containers"], strict=True):
        if before["name"] in newly_burst:
            env = env_of(after)
            assert env["REMOTE"] == "1" and env["NUM_GPUS"] == "1" and env["NIMBIX_BURST_CONTAINER"] == "log"
            assert after["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}  # the full footprint
        else:
            # Exactly the GPU is stripped: what the first pass set stays as it was.
            expected = copy.deepcopy(before)
            for source in ("requests", "limits"):
                expected.get("resources", {}).get(source, {}).pop(GPU, None)
            assert after == expected
    assert again["spec"]["initContainers"][0]["resources"]["requests"] == {"cpu": "2"}
    audit = json.loads(again["metadata"]["annotations"][AUDIT])
    first_audit = json.loads(decided["metadata"]["annotations"][AUDIT])
    assert {k: v for k, v in audit.items() if k != "reinvoked"} == first_audit  # the original stays recorded
    assert set(audit["reinvoked"].get("containers", {})) | set(audit["reinvoked"].get("initContainers", {})) == set(
        gpus_left(changed)
    )
    assert [v["name"] for v in again["spec"]["volumes"]] == [
        "nimbix-burst-state",
        "nimbix-burst-jarvice-credentials",
        "nimbix-burst-pod-info",
    ]

    # Idempotent: another reinvocation with nothing new changes nothing.
    third, result = admit(again, cache, "reinvoked-again")
    assert "patch" not in result.response["response"]
    assert result.outcome == "skipped"
    assert third == again


def test_reinvocation_with_nothing_new_is_an_empty_patch() -> None:
    decided, cache = first_pass(free_gpus=1)
    _, result = admit(decided, cache, "reinvoked")
    assert "patch" not in result.response["response"]
    assert result.outcome == "skipped"


def test_local_pod_is_left_alone_on_reinvocation() -> None:
    decided, cache = first_pass(free_gpus=8)
    assert decided["metadata"]["annotations"]["nimbix-burst.io/decision"] == "local"
    changed = copy.deepcopy(decided)
    add_gpu("log")(changed)
    _, result = admit(changed, cache, "reinvoked")
    assert "patch" not in result.response["response"]
    assert result.outcome == "skipped"


def test_second_later_gpu_is_recorded_beside_the_first() -> None:
    decided, cache = first_pass(free_gpus=1)
    changed = copy.deepcopy(decided)
    add_gpu("app")(changed)
    once, _ = admit(changed, cache, "r1")
    add_gpu("fetch", init=True)(once)
    twice, _ = admit(once, cache, "r2")
    audit = json.loads(twice["metadata"]["annotations"][AUDIT])
    assert audit["reinvoked"] == {
        "containers": {"app": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}},
        "initContainers": {"fetch": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}},
    }
