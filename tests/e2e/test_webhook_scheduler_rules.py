"""The webhook counts what kube-scheduler counts, checked through the real apiserver and scheduler:
spec.nodeName set at creation, scheduling gates, a cordoned node and its toleration, and the node's
`pods` allocatable.

Watch events reach the webhook asynchronously, so a test that needs the webhook to have seen a pod
first passes a barrier (`Rules.synced`): a later pod, bound by the scheduler on a fresh node, that a
dry-run admission shows the webhook has counted. One watch stream delivers pod events in order, so
everything created before the barrier pod has been seen too.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devplatform.cluster import addons, nodes
from devplatform.cluster.controlplane import ControlPlane
from tests.support.gpus import GPU

UNSCHEDULABLE_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
BARRIER_TIMEOUT = 20.0


@pytest.fixture(scope="module")
def rules_webhook(control_plane: ControlPlane) -> Iterator[addons.WebhookProcess]:
    with addons.registered_webhook(
        control_plane, control_plane.run_dir / "webhook-rules", name_suffix="-rules"
    ) as hook:
        yield hook


class Rules:
    """One test's nodes (labelled with its namespace) and pods pinned to them."""

    def __init__(self, cp: ControlPlane, core: Any, namespace: str, make_gpu_node: Callable[..., str]) -> None:
        self.cp, self.core, self.namespace = cp, core, namespace
        self.label = {"nb-rules": namespace}
        self._make_node = make_gpu_node

    def node(self, gpus: int, **kwargs: Any) -> str:
        return self._make_node(gpus=gpus, labels={**self.label, **kwargs.pop("labels", {})}, **kwargs)

    def pod(self, gpus: int, *, labeled: bool = True, **spec: Any) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
        if gpus:
            container["resources"] = {"limits": {GPU: str(gpus)}}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p-{uuid.uuid4().hex[:8]}",
                "namespace": self.namespace,
                "labels": {"task-type": "Nimbix"} if labeled else {},
            },
            "spec": {"containers": [container], "nodeSelector": {**self.label, **spec.pop("nodeSelector", {})}, **spec},
        }

    def create(self, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        args = ["create", "-o", "json", "-f", "-", *(["--dry-run=server"] if dry_run else [])]
        created: dict[str, Any] = json.loads(self.cp.kubectl(*args, input=json.dumps(body)).stdout)
        return created

    def decision(self, body: dict[str, Any]) -> tuple[str, str]:
        annotations = self.create(body)["metadata"].get("annotations", {})
        return annotations.get("nimbix-burst.io/decision", ""), annotations.get("nimbix-burst.io/reason", "")

    def synced(self) -> None:
        """Barrier: returns once the webhook's watch has shown every pod created before this call."""
        marker = self.node(1, labels={"nb-barrier": "1"})
        pinned: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": marker}}
        body = self.pod(1, labeled=False, **pinned)
        self.create(body)
        nodes.wait_for_pod_bound(self.core, self.namespace, body["metadata"]["name"], timeout=BARRIER_TIMEOUT)
        deadline = time.monotonic() + BARRIER_TIMEOUT
        while time.monotonic() < deadline:
            probe = self.create(self.pod(1, **pinned), dry_run=True)
            if probe["metadata"]["annotations"]["nimbix-burst.io/decision"] == "remote":
                return
            time.sleep(0.2)
        raise AssertionError(f"the webhook never counted the barrier pod on {marker}")


@pytest.fixture
def rules(
    control_plane: ControlPlane,
    core: Any,
    namespace: str,
    make_gpu_node: Callable[..., str],
    rules_webhook: addons.WebhookProcess,
) -> Rules:
    return Rules(control_plane, core, namespace, make_gpu_node)


def test_a_pod_created_with_node_name_is_decided_on_that_node_only(rules: Rules) -> None:
    small = rules.node(1)
    big = rules.node(8)
    kind, reason = rules.decision(rules.pod(2, nodeName=small))
    assert kind == "remote", reason
    assert f"spec.nodeName pins it to {small}" in reason
    kind, reason = rules.decision(rules.pod(2, nodeName=big))
    assert kind == "local", reason
    assert reason.endswith(f"best fit {big}")


def test_a_gated_pod_claims_no_gpus_until_ungated(rules: Rules) -> None:
    gpu = rules.node(4)
    gated = rules.pod(4, labeled=False, schedulingGates=[{"name": "example.com/quota"}])
    rules.create(gated)
    rules.synced()
    kind, reason = rules.decision(rules.pod(4, nodeSelector={"kubernetes.io/hostname": gpu}))
    assert kind == "local", reason  # the scheduler ignores the gated pod: so does the webhook


def test_a_cordoned_node_takes_only_pods_tolerating_the_cordon(rules: Rules) -> None:
    cordoned = rules.node(8, unschedulable=True)
    kind, reason = rules.decision(rules.pod(1))
    assert kind == "remote", reason
    assert "cordoned or not ready" in reason
    body = rules.pod(1, tolerations=[UNSCHEDULABLE_TOLERATION])
    kind, reason = rules.decision(body)
    assert kind == "local", reason
    assert nodes.wait_for_pod_bound(rules.core, rules.namespace, body["metadata"]["name"]) == cordoned


def test_a_node_without_pod_slots_cannot_host(rules: Rules) -> None:
    full = rules.node(4, pods=1)
    occupant = rules.pod(0, labeled=False, nodeSelector={"kubernetes.io/hostname": full})
    rules.create(occupant)
    nodes.wait_for_pod_bound(rules.core, rules.namespace, occupant["metadata"]["name"])
    rules.synced()
    kind, reason = rules.decision(rules.pod(1, nodeSelector={"kubernetes.io/hostname": full}))
    assert kind == "remote", reason
    assert "pod slots" in reason
    # kube-scheduler agrees: an unlabeled GPU pod pinned there stays Pending for want of a pod slot.
    probe = rules.pod(1, labeled=False, nodeSelector={"kubernetes.io/hostname": full})
    rules.create(probe)
    message = nodes.wait_for_pod_unschedulable(
        rules.core, rules.namespace, probe["metadata"]["name"], saying="Too many pods"
    )
    assert "Too many pods" in message
