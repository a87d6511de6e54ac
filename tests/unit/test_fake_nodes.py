"""One fake-node shape for the tests, the benchmarks and the replay (devplatform.cluster.nodes)."""

from __future__ import annotations

import pytest

from bench import clusters
from devplatform.cluster import nodes
from replay import objects
from replay.trace import NodeRow


def _ready(node: dict[str, object]) -> bool:
    status = node["status"]
    assert isinstance(status, dict)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        (0, {"cpu": "8", "memory": "32Gi", "pods": "110"}),
        (4, {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}),
    ],
)
def test_node_resources_lists_gpus_only_when_present(gpus: int, expected: dict[str, str]) -> None:
    got = nodes.node_resources(gpus=gpus, cpu="8", memory="32Gi", pods=110, gpu_resource="nvidia.com/gpu")
    assert got == expected


def test_create_body_and_status_patch_split_one_fake_node() -> None:
    body = nodes.build_node("n1", labels={"a": "b"}, taints=[], unschedulable=True)
    patch = nodes.build_node_status(gpus=2, cpu="4", memory="8Gi", pods=10, gpu_resource="nvidia.com/gpu")
    assert "status" not in body
    assert body["spec"] == {"taints": [], "unschedulable": True}
    assert patch["status"]["allocatable"] == patch["status"]["capacity"]
    assert patch["status"]["allocatable"]["nvidia.com/gpu"] == "2"


def test_replay_nodes_are_the_shared_fake_node() -> None:
    row = NodeRow(name="openb-node-0001", cpu_milli=96000, memory_mib=786432, gpus=8, model="V100M32")
    node = objects.build_node_with_status(row, model_label="m")
    assert _ready(node)
    assert node["status"]["allocatable"] == {
        "cpu": "96000m",
        "memory": "786432Mi",
        "pods": "110",
        "nvidia.com/gpu": "8",
    }
    assert node["metadata"]["labels"]["m"] == "V100M32"
    assert "status" not in objects.build_node(row, model_label="m")


def test_bench_nodes_are_the_shared_fake_node_plus_cache_metadata() -> None:
    node = clusters.build_node("node-00001", uid="u1", gpus=4, cpu="32", memory="128Gi", zone="z", tainted=True)
    assert _ready(node)
    assert node["status"]["allocatable"]["ephemeral-storage"] == "500Gi"
    assert node["metadata"]["uid"] == "u1"
    assert node["metadata"]["resourceVersion"] == "1"
    assert node["spec"]["taints"] == [clusters.GPU_TAINT]
