from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from tests.unit.webhook.builders import GPU, container, pod
from webhook.mutation import RewritePolicy, build_local_patch, build_remote_patch
from webhook.types import Decision

LEGACY = "alpha.kubernetes.io/nvidia-gpu"
POLICY = RewritePolicy(
    gpu_resources=(GPU, LEGACY),
    remote_cpu="100m",
    remote_memory="128Mi",
    strip_node_selector_keys=frozenset({"gpu-model"}),
    strip_toleration_keys=frozenset({"nvidia.com/gpu"}),
    strip_runtime_classes=frozenset({"nvidia"}),
)
REMOTE = Decision(kind="remote", reason="needs 4 nvidia.com/gpu; best node a has 2 free")


def rewrite(raw: dict[str, Any], gpus: int = 4) -> dict[str, Any]:
    ops = build_remote_patch(raw, gpus={GPU: gpus}, decision=REMOTE, policy=POLICY)
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(raw), ops)
    return result


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


BIG = {"cpu": "32", "memory": "256Gi"}


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(pod(container(gpus=4, requests=BIG, limits=BIG)), id="plain"),
        pytest.param(pod(container(limits={GPU: "4"})), id="limits-only"),
        pytest.param(pod(container(gpus=4, env=[{"name": "A", "value": "1"}])), id="existing-env"),
        pytest.param(pod(container(gpus=4, env=[{"name": "REMOTE", "value": "0"}])), id="remote-replaced"),
        pytest.param(
            pod(container(gpus=4, env=[{"name": "REMOTE", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}])),
            id="remote-valueFrom-replaced",
        ),
        pytest.param(pod(container("a", gpus=2), container("b", gpus=2, requests=BIG)), id="multi-container"),
        pytest.param(pod(container(gpus=3), init=[container("init", gpus=4, requests=BIG)]), id="init-container"),
        pytest.param(pod(container(gpus=3), init=[container("side", gpus=1, restart_policy="Always")]), id="sidecar"),
        pytest.param(pod(container(gpus=4, resource=LEGACY)), id="legacy-name"),
    ],
)
def test_remote_rewrite_invariants(raw: dict[str, Any]) -> None:
    out = rewrite(raw)
    spec = out["spec"]
    for c in spec["containers"] + spec.get("initContainers", []):
        for source in ("requests", "limits"):
            values = c.get("resources", {}).get(source, {})
            assert GPU not in values and LEGACY not in values
            assert values.get("cpu", "100m") == "100m"
            assert values.get("memory", "128Mi") == "128Mi"
    for c in spec["containers"]:
        env = env_of(c)
        assert env["REMOTE"] == "1"
        assert env["NUM_GPUS"] == "4"
        assert "NUM_CPUS" in env
        assert [e["name"] for e in c["env"]].count("REMOTE") == 1
    for c in spec.get("initContainers", []):
        assert "REMOTE" not in env_of(c)
    annotations = out["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/decision"] == "remote"
    assert annotations["nimbix-burst.io/reason"] == REMOTE.reason
    audit = json.loads(annotations["nimbix-burst.io/original-resources"])
    assert audit["gpus"] == {GPU: 4}


def test_existing_num_gpus_and_num_cpus_are_kept_and_cpus_come_from_the_request() -> None:
    raw = pod(container(gpus=4, requests={"cpu": "2500m"}, env=[{"name": "NUM_GPUS", "value": "8"}]))
    env = env_of(rewrite(raw)["spec"]["containers"][0])
    assert env["NUM_GPUS"] == "8"
    assert env["NUM_CPUS"] == "3"


def test_audit_annotation_makes_the_change_reversible() -> None:
    raw = pod(container(gpus=4, requests=BIG, limits=BIG), annotations={"keep": "me"})
    out = rewrite(raw)
    audit = json.loads(out["metadata"]["annotations"]["nimbix-burst.io/original-resources"])
    assert audit["containers"]["app"]["limits"] == {GPU: "4", "cpu": "32", "memory": "256Gi"}
    assert audit["containers"]["app"]["requests"] == {GPU: "4", "cpu": "32", "memory": "256Gi"}
    assert out["metadata"]["annotations"]["keep"] == "me"


def test_gpu_only_scheduling_constraints_are_removed() -> None:
    raw = pod(
        container(gpus=4),
        nodeSelector={"gpu-model": "V100", "zone": "a"},
        tolerations=[
            {"key": "other", "operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"key": "x", "operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "1"},
        ],
        runtimeClassName="nvidia",
        overhead={"cpu": "100m"},
    )
    spec = rewrite(raw)["spec"]
    assert spec["nodeSelector"] == {"zone": "a"}
    assert [t["key"] for t in spec["tolerations"]] == ["other", "x"]
    assert "runtimeClassName" not in spec
    assert "overhead" not in spec


def test_node_selector_fully_stripped_is_removed_whole() -> None:
    spec = rewrite(pod(container(gpus=4), nodeSelector={"gpu-model": "V100"}))["spec"]
    assert "nodeSelector" not in spec


def test_other_runtime_class_is_kept() -> None:
    spec = rewrite(pod(container(gpus=4), runtimeClassName="gvisor"))["spec"]
    assert spec["runtimeClassName"] == "gvisor"


def test_local_patch_only_adds_annotations() -> None:
    raw = pod(container(gpus=1))
    decision = Decision(kind="local", reason="1 candidate", node="a", candidates=1)
    out = jsonpatch.apply_patch(copy.deepcopy(raw), build_local_patch(raw, decision=decision, reservation_id="r1"))
    assert out["spec"] == raw["spec"]
    assert out["metadata"]["annotations"] == {
        "nimbix-burst.io/decision": "local",
        "nimbix-burst.io/reason": "1 candidate",
        "nimbix-burst.io/candidate-nodes": "1",
        "nimbix-burst.io/reservation": "r1",
    }


def test_annotation_keys_with_slashes_are_escaped() -> None:
    raw = pod(container(gpus=1), annotations={"a": "b"})
    ops = build_local_patch(raw, decision=Decision(kind="local", reason="r", node="n"), reservation_id="")
    assert all("~1" in op["path"] for op in ops)
