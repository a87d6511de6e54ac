"""A pod decided local that keeps the checkpoint contract is told how to leave with its checkpoint: its GPU
containers get the pod's annotations file and its own grace period (webhook.burst_containers.leave_ops), so
that their runner turns the kubelet's SIGTERM into the checkpoint request (entrypoint.leaving)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from tests.unit.webhook.builders import GPU, container, pod
from webhook import mutation
from webhook.types import Decision

CHECKPOINTS = {"nimbix-burst.io/checkpoint-dir": "/workspace/ckpt", "nimbix-burst.io/checkpoint-interval": "10m"}
LOCAL = Decision(kind="local", reason="fits", node="n", candidates=1)
FILE = "/var/run/nimbix-burst-pod/pod-annotations"
POD_INFO = {
    "name": "nimbix-burst-pod-info",
    "projected": {
        "sources": [
            {"downwardAPI": {"items": [{"path": "pod-annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}
        ],
        "defaultMode": 0o444,
    },
}
MOUNT = {"name": "nimbix-burst-pod-info", "mountPath": "/var/run/nimbix-burst-pod", "readOnly": True}


def local(raw: dict[str, Any]) -> dict[str, Any]:
    ops = mutation.build_local_patch(raw, decision=LOCAL, reservation_id="r", gpu_resources=(GPU,))
    out: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(raw), ops)
    return out


def kept(raw: dict[str, Any]) -> dict[str, Any]:
    ops = mutation.build_kept_local_patch(raw, reason="budget", gpu_resources=(GPU,))
    out: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(raw), ops)
    return out


def env_of(spec_container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in spec_container.get("env") or ()}


@pytest.mark.parametrize("patch", [local, kept], ids=["local", "kept-local"])
def test_a_checkpointing_pods_gpu_container_gets_its_annotations_and_grace_period(patch: Any) -> None:
    raw = pod(container("train", gpus=1), container("sidecar"), annotations=CHECKPOINTS)
    spec = patch(raw)["spec"]
    train, sidecar = spec["containers"]
    assert env_of(train) == {"NIMBIX_BURST_POD_ANNOTATIONS_FILE": FILE, "NIMBIX_BURST_GRACE_SECONDS": "30"}
    assert train["volumeMounts"] == [MOUNT]
    assert sidecar == raw["spec"]["containers"][1]  # no GPUs: not the trainer
    assert spec["volumes"] == [POD_INFO]
    assert train["resources"] == raw["spec"]["containers"][0]["resources"]  # runs here as it asked


def test_the_grace_period_is_the_pods_own_never_raised_and_its_env_and_mounts_are_kept() -> None:
    own = container("train", gpus=2, env=[{"name": "EPOCHS", "value": "3"}])
    own["volumeMounts"] = [{"name": "data", "mountPath": "/workspace"}]
    raw = pod(
        own,
        annotations=CHECKPOINTS,
        terminationGracePeriodSeconds=10,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}],
    )
    spec = local(raw)["spec"]
    (train,) = spec["containers"]
    assert spec["terminationGracePeriodSeconds"] == 10
    assert env_of(train) == {
        "EPOCHS": "3",
        "NIMBIX_BURST_POD_ANNOTATIONS_FILE": FILE,
        "NIMBIX_BURST_GRACE_SECONDS": "10",
    }
    assert train["volumeMounts"] == [{"name": "data", "mountPath": "/workspace"}, MOUNT]
    assert [volume["name"] for volume in spec["volumes"]] == ["data", "nimbix-burst-pod-info"]


def test_values_the_pod_set_for_the_runners_variables_are_replaced() -> None:
    wrong = [
        {"name": "NIMBIX_BURST_GRACE_SECONDS", "value": "9999"},
        {"name": "NIMBIX_BURST_POD_ANNOTATIONS_FILE", "value": "/etc/x"},
    ]
    raw = pod(container("train", gpus=1, env=wrong), annotations=CHECKPOINTS)
    (train,) = local(raw)["spec"]["containers"]
    assert env_of(train) == {"NIMBIX_BURST_GRACE_SECONDS": "30", "NIMBIX_BURST_POD_ANNOTATIONS_FILE": FILE}


def test_a_second_admission_changes_nothing_more() -> None:
    once = local(pod(container("train", gpus=1), annotations=CHECKPOINTS))
    assert local(once)["spec"] == once["spec"]


@pytest.mark.parametrize(
    "annotations",
    [None, {"nimbix-burst.io/checkpoint-dir": " "}, {"nimbix-burst.io/stage-in": "/workspace"}],
    ids=["none", "blank", "other"],
)
def test_a_pod_naming_no_checkpoint_directory_is_only_annotated(annotations: dict[str, str] | None) -> None:
    raw = pod(container("train", gpus=1), annotations=annotations)
    assert local(raw)["spec"] == raw["spec"]
    assert kept(raw)["spec"] == raw["spec"]
