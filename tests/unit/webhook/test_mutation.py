from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import jsonpatch
import pytest

from tests.unit.webhook.builders import GPU, container, pod
from tests.unit.webhook.patch_terms import LEGACY, POLICY, REMOTE, TERMS
from webhook import mutation
from webhook.mutation import build_local_patch, build_remote_patch
from webhook.types import Decision


def rewrite(raw: dict[str, Any], gpus: int = 4) -> dict[str, Any]:
    ops = build_remote_patch(raw, gpus={GPU: gpus}, decision=REMOTE, policy=POLICY, terms=TERMS)
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
        pytest.param(pod(container("gpu", gpus=2), container("log", requests=BIG)), id="gpu-and-cpu-container"),
    ],
)
def test_remote_rewrite_invariants(raw: dict[str, Any]) -> None:
    out = rewrite(raw)
    spec = out["spec"]
    before = {c["name"]: c for c in raw["spec"]["containers"] + raw["spec"].get("initContainers", [])}
    for c in spec["containers"] + spec.get("initContainers", []):
        for source in ("requests", "limits"):
            values = c.get("resources", {}).get(source, {})
            assert GPU not in values and LEGACY not in values
    for c in spec["containers"]:
        original = before[c["name"]]
        own_gpus = _own_gpus(original)
        env = env_of(c)
        if own_gpus:
            assert env["REMOTE"] == "1"
            assert env["NUM_GPUS"] == str(own_gpus)  # the container's own count, never the pod's
            assert env["NIMBIX_BURST_CONTAINER"] == c["name"]
            assert "NUM_CPUS" in env
            assert [e["name"] for e in c["env"]].count("REMOTE") == 1
            for source in ("requests", "limits"):
                values = c.get("resources", {}).get(source, {})
                assert values.get("cpu", "100m") == "100m"
                assert values.get("memory", "128Mi") == "128Mi"
        else:
            assert c == original  # a container without GPUs keeps running here, untouched
    for c in spec.get("initContainers", []):
        assert "REMOTE" not in env_of(c)
        original_resources = before[c["name"]].get("resources", {})
        for source in ("requests", "limits"):
            kept = {k: v for k, v in original_resources.get(source, {}).items() if k not in (GPU, LEGACY)}
            assert c.get("resources", {}).get(source, {}) == kept  # init steps keep their CPU and memory
    annotations = out["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/decision"] == "remote"
    assert annotations["nimbix-burst.io/reason"] == REMOTE.reason
    audit = json.loads(annotations["nimbix-burst.io/original-resources"])
    assert audit["gpus"] == {GPU: 4}


def _own_gpus(c: dict[str, Any]) -> int:
    limits = c.get("resources", {}).get("limits", {})
    return max((int(v) for k, v in limits.items() if k in (GPU, LEGACY)), default=0)


def test_two_plus_two_gpu_pod_submits_two_machines_of_two() -> None:
    # The defect: each runner used the pod-wide count and submitted a 4-GPU machine.
    raw = pod(container("a", gpus=2), container("b", gpus=2))
    out = rewrite(raw)
    assert [env_of(c)["NUM_GPUS"] for c in out["spec"]["containers"]] == ["2", "2"]
    assert [env_of(c)["NIMBIX_BURST_CONTAINER"] for c in out["spec"]["containers"]] == ["a", "b"]


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param({"requests": {"cpu": "2500m"}}, "3", id="rounded-up"),
        pytest.param({"requests": {"cpu": "100m"}}, "1", id="at-least-one"),
        pytest.param({}, "1", id="no-request"),
        pytest.param({"limits": {"cpu": "6"}}, "6", id="from-limit"),
        pytest.param({"requests": {"cpu": "2"}, "limits": {"cpu": "8"}}, "2", id="request-not-limit"),
    ],
)
def test_num_cpus_is_the_containers_own_cpu_request(resources: dict[str, Any], expected: str) -> None:
    app = container("app", gpus=1, requests=resources.get("requests"), limits=resources.get("limits"))
    # Neither the other container, the init container nor the overhead counts.
    raw = pod(
        app,
        container("log", requests={"cpu": "7"}),
        init=[container("fetch", requests={"cpu": "16"})],
        overhead={"cpu": "4"},
    )
    assert env_of(rewrite(raw)["spec"]["containers"][0])["NUM_CPUS"] == expected


def test_num_gpus_is_the_max_over_gpu_resource_names() -> None:
    app = container("app", limits={GPU: "2", LEGACY: "3"}, requests={GPU: "2", LEGACY: "3"})
    assert env_of(rewrite(pod(app))["spec"]["containers"][0])["NUM_GPUS"] == "3"


def test_num_gpus_does_not_count_init_containers() -> None:
    raw = pod(container("app", gpus=1), init=[container("warm", gpus=4)])
    out = rewrite(raw)
    assert env_of(out["spec"]["containers"][0])["NUM_GPUS"] == "1"
    init = out["spec"]["initContainers"][0]
    assert "resources" not in init or not any(init["resources"].values())
    audit = json.loads(out["metadata"]["annotations"]["nimbix-burst.io/original-resources"])
    assert audit["initContainers"]["warm"] == {"limits": {GPU: "4"}, "requests": {GPU: "4"}}


def test_local_steps_keep_their_cpu_and_memory() -> None:
    # A dataset-download init container and a GPU-less sidecar still do their work here.
    big = {"cpu": "4", "memory": "16Gi"}
    raw = pod(
        container("app", gpus=2, requests=BIG, limits=BIG),
        container("log", requests=big, limits=big),
        init=[container("download", requests=big, limits=big)],
    )
    out = rewrite(raw)
    assert out["spec"]["initContainers"] == raw["spec"]["initContainers"]
    assert out["spec"]["containers"][1] == raw["spec"]["containers"][1]
    assert out["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "100m", "memory": "128Mi"},
        "requests": {"cpu": "100m", "memory": "128Mi"},
    }


DOWNWARD = {
    "POD_UID": {"fieldRef": {"fieldPath": "metadata.uid"}},
    "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
}


# The pod's annotations, where the runner sees a move-home mark (every burst container).
POD_INFO_MOUNT = {"name": "nimbix-burst-pod-info", "mountPath": "/var/run/nimbix-burst-pod", "readOnly": True}
POD_INFO_VOLUME = {
    "name": "nimbix-burst-pod-info",
    "projected": {
        "sources": [
            {"downwardAPI": {"items": [{"path": "pod-annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}
        ],
        "defaultMode": 0o444,
    },
}


def test_burst_container_gets_identity_and_state_dir() -> None:
    out = rewrite(pod(container("app", gpus=1), container("log")))
    app, log = out["spec"]["containers"]
    env = {e["name"]: e for e in app["env"]}
    for name, value_from in DOWNWARD.items():
        assert env[name] == {"name": name, "valueFrom": value_from}
    assert env["NIMBIX_BURST_STATE_DIR"] == {"name": "NIMBIX_BURST_STATE_DIR", "value": "/var/run/nimbix-burst"}
    assert env["NIMBIX_BURST_POD_ANNOTATIONS_FILE"]["value"] == "/var/run/nimbix-burst-pod/pod-annotations"
    assert app["volumeMounts"] == [{"name": "nimbix-burst-state", "mountPath": "/var/run/nimbix-burst"}, POD_INFO_MOUNT]
    assert out["spec"]["volumes"] == [{"name": "nimbix-burst-state", "emptyDir": {"sizeLimit": "1Mi"}}, POD_INFO_VOLUME]
    assert "volumeMounts" not in log and "env" not in log


def test_identity_comes_from_the_api_server_whatever_the_container_says() -> None:
    """The job's pod identity is what the reaper and the spend record attribute the job by: a value
    the pod sets (an empty or foreign POD_UID) would make a job nobody attributes."""
    mine: list[dict[str, Any]] = [
        {"name": "POD_NAME", "value": "fixed"},
        {"name": "POD_UID", "value": ""},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
    ]
    env = env_of(rewrite(pod(container("app", gpus=1, env=mine)))["spec"]["containers"][0])
    assert env["POD_NAME"] == DOWNWARD["POD_NAME"]
    assert env["POD_UID"] == DOWNWARD["POD_UID"]
    assert env["POD_NAMESPACE"] == DOWNWARD["POD_NAMESPACE"]


def test_machine_size_is_what_was_counted_not_what_the_container_says() -> None:
    mine: list[dict[str, Any]] = [{"name": "NUM_GPUS", "value": "8"}]
    env = env_of(rewrite(pod(container("app", gpus=1, env=mine)))["spec"]["containers"][0])
    assert env["NUM_GPUS"] == "1"


def test_state_volume_is_added_once_and_appended_to_existing_lists() -> None:
    user_mount = {"name": "data", "mountPath": "/data"}
    a = container("a", gpus=1)
    a["volumeMounts"] = [user_mount]
    raw = pod(a, container("b", gpus=1), volumes=[{"name": "data", "emptyDir": {}}])
    spec = rewrite(raw)["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["data", "nimbix-burst-state", "nimbix-burst-pod-info"]
    state = {"name": "nimbix-burst-state", "mountPath": "/var/run/nimbix-burst"}
    assert spec["containers"][0]["volumeMounts"] == [user_mount, state, POD_INFO_MOUNT]
    assert spec["containers"][1]["volumeMounts"] == [state, POD_INFO_MOUNT]


@pytest.mark.parametrize(
    ("volumes", "mounts", "expected_volumes", "expected_mounts"),
    [
        pytest.param(
            [{"name": "nimbix-burst-state", "hostPath": {"path": "/x"}}],
            None,
            [{"name": "nimbix-burst-state", "hostPath": {"path": "/x"}}],
            [{"name": "nimbix-burst-state", "mountPath": "/var/run/nimbix-burst"}],
            id="pod-volume-of-that-name-is-used-as-is",
        ),
        pytest.param(
            [{"name": "mine", "emptyDir": {}}],
            [{"name": "mine", "mountPath": "/var/run/nimbix-burst/"}],
            [{"name": "mine", "emptyDir": {}}],
            [{"name": "mine", "mountPath": "/var/run/nimbix-burst/"}],
            id="mount-at-that-path-is-the-state-dir",
        ),
        pytest.param(
            [{"name": "nimbix-burst-state", "emptyDir": {"sizeLimit": "1Mi"}}],
            [{"name": "nimbix-burst-state", "mountPath": "/var/run/nimbix-burst"}],
            [{"name": "nimbix-burst-state", "emptyDir": {"sizeLimit": "1Mi"}}],
            [{"name": "nimbix-burst-state", "mountPath": "/var/run/nimbix-burst"}],
            id="copied-burst-pod-is-unchanged",
        ),
    ],
)
def test_state_volume_name_and_path_clashes(
    volumes: list[dict[str, Any]],
    mounts: list[dict[str, Any]] | None,
    expected_volumes: list[dict[str, Any]],
    expected_mounts: list[dict[str, Any]],
) -> None:
    app = container("app", gpus=1)
    if mounts is not None:
        app["volumeMounts"] = mounts
    spec = rewrite(pod(app, volumes=volumes))["spec"]
    assert spec["volumes"] == [*expected_volumes, POD_INFO_VOLUME]
    assert spec["containers"][0]["volumeMounts"] == [*expected_mounts, POD_INFO_MOUNT]
    assert env_of(spec["containers"][0])["NIMBIX_BURST_STATE_DIR"] == "/var/run/nimbix-burst"


def test_pod_level_resources_are_removed_and_recorded() -> None:
    pod_resources = {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"cpu": "32", "memory": "256Gi"}}
    out = rewrite(pod(container(gpus=4), resources=pod_resources))
    assert "resources" not in out["spec"]
    audit = json.loads(out["metadata"]["annotations"]["nimbix-burst.io/original-resources"])
    assert audit["resources"] == pod_resources


def test_num_gpus_is_the_counted_request_and_num_cpus_is_kept() -> None:
    raw = pod(container(gpus=4, env=[{"name": "NUM_GPUS", "value": "8"}, {"name": "NUM_CPUS", "value": "2"}]))
    env = env_of(rewrite(raw)["spec"]["containers"][0])
    assert env["NUM_GPUS"] == "4"
    assert env["NUM_CPUS"] == "2"


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


FOOTPRINT = {"cpu": "100m", "memory": "128Mi"}


@pytest.mark.parametrize(
    "resources",
    [
        pytest.param({"limits": {GPU: "1"}, "requests": {GPU: "1"}}, id="gpus-only"),
        pytest.param({"limits": {GPU: "1"}}, id="no-requests-map"),
        pytest.param({"limits": {GPU: "1", "cpu": "8"}, "requests": {GPU: "1", "memory": "64Gi"}}, id="partial"),
        pytest.param({"limits": {GPU: "1", **FOOTPRINT}, "requests": {GPU: "1", **FOOTPRINT}}, id="already-small"),
    ],
)
def test_a_burst_container_always_gets_the_runners_footprint_as_requests_and_limits(
    resources: dict[str, Any],
) -> None:
    raw = pod({"name": "app", "image": "example/app", "resources": copy.deepcopy(resources)})
    (after,) = rewrite(raw, gpus=1)["spec"]["containers"]
    assert after["resources"] == {"requests": FOOTPRINT, "limits": FOOTPRINT}


def test_a_runner_that_stages_data_may_use_more_cpu_while_reserving_the_same() -> None:
    raw = pod({"name": "app", "image": "example/app", "resources": {"limits": {GPU: "1"}}})
    policy = dataclasses.replace(POLICY, staging_cpu_limit="2")
    terms = dataclasses.replace(TERMS, staging=(("app", "/w/data", "/w/out"),))
    ops = build_remote_patch(raw, gpus={GPU: 1}, decision=REMOTE, policy=policy, terms=terms)
    (after,) = jsonpatch.apply_patch(raw, ops)["spec"]["containers"]
    assert after["resources"] == {"requests": FOOTPRINT, "limits": {"cpu": "2", "memory": "128Mi"}}
    # A runner that stages nothing keeps the footprint as its limit.
    plain = build_remote_patch(raw, gpus={GPU: 1}, decision=REMOTE, policy=policy, terms=TERMS)
    assert jsonpatch.apply_patch(raw, plain)["spec"]["containers"][0]["resources"]["limits"] == FOOTPRINT


@pytest.mark.parametrize(
    "audit",
    [
        {"containers": {"train": {"limits": {"nvidia.com/gpu": "8", "cpu": "4"}}}, "initContainers": {}},
        {"containers": {"big": {"requests": {"cpu": 2**70}}}},  # past orjson's 64 bits: the stdlib writes it
        {"containers": {"n": {"limits": {"memory": 1.5, "x": None, "y": True}}}},
    ],
)
def test_the_resource_audit_is_compact_sorted_json(audit: dict[str, Any]) -> None:
    assert mutation._audit_json(audit) == json.dumps(audit, sort_keys=True, separators=(",", ":"))
