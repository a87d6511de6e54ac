"""The local control plane the replay runs on, and bulk object creation (I/O).

Nodes are created in bulk with kubectl (a List per call, a few kubectl processes side by side):
thousands of small requests are far cheaper from Go than from the Python client (measured: 16 s
against 31 s from 16 Python threads for the 1,523 nodes). Three passes: create (the API server
adds the not-ready taint), a status replace (capacity, allocatable, Ready), then a spec replace
(no taints). The two replaces must not overlap: run together they conflict (409).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from devplatform.cluster import controlplane, nodes
from devplatform.cluster.controlplane import ControlPlane
from replay import objects
from replay.trace import NodeRow

# kubectl processes run side by side for a bulk pass: enough to keep the API server busy on two
# cores without starving it.
KUBECTL_PARALLEL = 4
HTTP_NOT_FOUND = 404
WIPE_TIMEOUT_SECONDS = 60.0
REQUEST_TIMEOUT_SECONDS = 30.0


class ClusterError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class NodeTimings:
    count: int
    create_seconds: float
    status_and_untaint_seconds: float  # the two replace passes

    @property
    def total_seconds(self) -> float:
        return self.create_seconds + self.status_and_untaint_seconds


def start_control_plane(run_dir: Path) -> ControlPlane:
    """etcd + kube-apiserver + kube-scheduler. No controller-manager: nothing here needs one
    (namespaces get their ServiceAccount by hand, pods are created directly), and it would only
    compete for the two cores."""
    plane = ControlPlane(run_dir, bin_dir=controlplane.ensure_binaries(), controller_manager=False)
    plane.start()
    return plane


def _chunks(items: Sequence[Any], parts: int) -> list[list[Any]]:
    return [chunk for chunk in (list(items[i::parts]) for i in range(parts)) if chunk]


def kubectl_bulk(plane: ControlPlane, args: Sequence[str], items: Sequence[dict[str, Any]]) -> int:
    """`kubectl <args> -f -` over `items`, split across KUBECTL_PARALLEL processes; returns how
    many objects kubectl reported."""

    def run(chunk: list[dict[str, Any]]) -> int:
        result = plane.kubectl(*args, "-f", "-", "-o", "name", input=json.dumps(objects.build_list(chunk)))
        return len(result.stdout.splitlines())

    with ThreadPoolExecutor(KUBECTL_PARALLEL) as pool:
        return sum(pool.map(run, _chunks(items, KUBECTL_PARALLEL)))


def create_nodes(plane: ControlPlane, rows: Sequence[NodeRow], *, model_label: str) -> NodeTimings:
    began = time.monotonic()
    created = kubectl_bulk(plane, ["create"], [objects.build_node(r, model_label=model_label) for r in rows])
    middle = time.monotonic()
    kubectl_bulk(
        plane,
        ["replace", "--subresource=status"],
        [objects.build_node_with_status(r, model_label=model_label) for r in rows],
    )
    kubectl_bulk(plane, ["replace"], [objects.build_node(r, model_label=model_label) for r in rows])
    done = time.monotonic()
    if created != len(rows):
        raise ClusterError(f"created {created} of {len(rows)} nodes")
    return NodeTimings(count=created, create_seconds=middle - began, status_and_untaint_seconds=done - middle)


def check_nodes(core: Any, rows: Sequence[NodeRow]) -> list[str]:
    """Problems with the created nodes (missing, still tainted, wrong GPU count); [] when all is well."""
    response = core.list_node(_preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS)
    items = {i["metadata"]["name"]: i for i in json.loads(response.data)["items"]}
    problems = []
    for row in rows:
        item = items.get(row.name)
        if item is None:
            problems.append(f"{row.name}: missing")
            continue
        if item["spec"].get("taints"):
            problems.append(f"{row.name}: still tainted {item['spec']['taints']}")
        gpus = (item.get("status", {}).get("allocatable") or {}).get(objects.GPU_RESOURCE, "0")
        if int(gpus) != row.gpus:
            problems.append(f"{row.name}: allocatable {objects.GPU_RESOURCE}={gpus}, expected {row.gpus}")
    return problems


def create_namespace(core: Any, name: str) -> None:
    nodes.create_namespace(core, name, labels={objects.ROLE_LABEL: "replay"})


def wipe_namespace(core: Any, name: str, *, sleep: Callable[[float], None] = time.sleep) -> None:
    """Deletes every pod in the namespace with no grace period and waits until they are gone."""
    core.delete_collection_namespaced_pod(
        name, grace_period_seconds=0, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS
    )
    deadline = time.monotonic() + WIPE_TIMEOUT_SECONDS
    while True:
        response = core.list_namespaced_pod(name, limit=1, _preload_content=False)
        if not json.loads(response.data)["items"]:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"namespace {name}: pods still present after {WIPE_TIMEOUT_SECONDS:g}s")
        sleep(0.2)


def delete_pod(core: Any, namespace: str, name: str) -> None:
    """Grace 0: there is no kubelet to confirm a graceful stop. A missing pod is fine."""
    try:
        core.delete_namespaced_pod(
            name, namespace, grace_period_seconds=0, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS
        )
    except ApiException as error:
        if error.status != HTTP_NOT_FOUND:
            raise


def create_pod(core: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Creates a pod and returns the object as stored (after admission): raw JSON, no models."""
    response = core.create_namespaced_pod(
        namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS
    )
    created: dict[str, Any] = json.loads(response.data)
    return created


def core_api(plane: ControlPlane, *, pool_size: int) -> Any:
    """A CoreV1Api on a connection pool big enough for `pool_size` threads."""
    return k8s_client.CoreV1Api(plane.api_client(pool_size=pool_size))
