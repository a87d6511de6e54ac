"""Table tests for the small reads a remote review's patch and data plan make of a pod, each held to
the plain definition it replaced for speed (a loop for max(key=...), min() for sorted()[0], no
rounding of absent quantities)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from jarvice import contract
from webhook import data_volumes
from webhook.resources import container_gpus, container_quantity

GPU = ("nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu")


def _container(requests: dict[str, Any], limits: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources}


@pytest.mark.parametrize(
    ("container", "resources", "expected"),
    [
        (_container({}), GPU, 0),
        (_container({"nvidia.com/gpu": "2"}), GPU, 2),
        (_container({"nvidia.com/gpu": "1500m"}), GPU, 2),  # whole devices: rounded up
        (_container({"alpha.kubernetes.io/nvidia-gpu": 3, "nvidia.com/gpu": 1}), GPU, 3),  # the largest
        (_container({}, {"nvidia.com/gpu": "4"}), GPU, 4),  # requests default from limits
        (_container({"nvidia.com/gpu": "-1"}), ("nvidia.com/gpu",), -1),  # as max() over the one count
        (_container({"nvidia.com/gpu": "-1"}), GPU, 0),  # the absent resource counts 0
        (_container({"nvidia.com/gpu": "2"}), (), 0),
        ({"name": "bare"}, GPU, 0),
    ],
)
def test_container_gpus_is_the_largest_rounded_count(
    container: dict[str, Any], resources: tuple[str, ...], expected: int
) -> None:
    assert container_gpus(container, resources) == expected
    assert expected == max((math.ceil(container_quantity(container, r)) for r in resources), default=0)


@pytest.mark.parametrize(
    ("volume", "expected"),
    [
        ({"name": "v", "persistentVolumeClaim": {"claimName": "c"}}, "persistentVolumeClaim"),
        ({"name": "v"}, "unknown"),
        ({}, "unknown"),
        ({"name": "v", "secret": {}, "configMap": {}}, "configMap"),  # two sources (invalid): the first sorted
        ({"name": "v", "": {}, "secret": {}}, ""),
    ],
)
def test_volume_kind(volume: dict[str, Any], expected: str) -> None:
    assert data_volumes.volume_kind(volume) == expected
    assert expected == (sorted(k for k in volume if k != "name") or ["unknown"])[0]


def _pod(mounts: list[tuple[str, str]], volumes: dict[str, str]) -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "app",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                "volumeMounts": [{"name": name, "mountPath": path} for name, path in mounts],
            }
        ],
        "volumes": [{"name": name, kind: {}} for name, kind in volumes.items()],
    }


@pytest.mark.parametrize(
    ("mounts", "stage_out", "expected"),
    [
        # The deepest mount holding the path decides: a config volume inside a data volume refuses stage-out.
        ([("data", "/work"), ("conf", "/work/conf")], "/work/conf/out", None),
        ([("data", "/work"), ("conf", "/work/conf")], "/work/results", ("/work/results",)),
        # Two mounts at one path (invalid in a pod): the first of them, as max() gave.
        ([("data", "/work"), ("conf", "/work")], "/work/out", ("/work/out",)),
        ([("conf", "/work"), ("data", "/work")], "/work/out", None),
        ([("data", "/work")], "/elsewhere", None),  # under no mount
    ],
)
def test_the_deepest_mount_decides_a_staged_path(
    mounts: list[tuple[str, str]], stage_out: str, expected: tuple[str, ...] | None
) -> None:
    spec = _pod(mounts, {"data": "persistentVolumeClaim", "conf": "configMap"})
    plan = data_volumes.plan_data(spec, {contract.ANNOTATION_STAGE_OUT: stage_out}, burst_containers=("app",))
    if expected is None:
        assert isinstance(plan, data_volumes.DataRefusal)
    else:
        assert isinstance(plan, data_volumes.DataPlan)
        assert [s.stage_out for s in plan.staging] == [expected]
