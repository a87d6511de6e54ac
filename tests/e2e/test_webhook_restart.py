"""The webhook restarted on its port: its decisions stay correct, rebuilt from the API server's view.

A module of its own, so the webhook it stops and replaces is its own (tests/e2e/test_webhook.py's
module-scoped webhook serves that module's other tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devplatform.cluster import addons
from devplatform.cluster.controlplane import ControlPlane
from tests.support.webhook_group import WEBHOOK_ARGS, Group, annotations_of, assert_remote


@pytest.fixture
def webhook(control_plane: ControlPlane) -> Iterator[addons.WebhookProcess]:
    """A host webhook registered for this test alone; the test stops it and starts its replacement."""
    run_dir = control_plane.run_dir / "webhook-restart"
    with addons.registered_webhook(control_plane, run_dir, name_suffix="-e2e-restart", args=WEBHOOK_ARGS) as hook:
        yield hook


def test_decisions_stay_correct_after_a_webhook_restart(
    control_plane: ControlPlane,
    core: Any,
    namespace: str,
    make_gpu_node: Callable[..., str],
    webhook: addons.WebhookProcess,
) -> None:
    group = Group(control_plane, core, namespace, make_gpu_node)
    gpu = group.gpu_node(2)
    group.cpu_node()
    first = group.pod(1)
    group.create(first)
    assert group.bound_node(first["metadata"]["name"]) == gpu
    addons.stop_webhook(webhook)
    # The replacement: the same port, CA and registration; its cache starts empty and lists the cluster.
    restarted = addons.start_webhook(
        control_plane.run_dir / "webhook-restart",
        kubeconfig=control_plane.kubeconfig_path,
        args=WEBHOOK_ARGS,
        port=int(webhook.url.rsplit(":", 1)[1]),
        ca=webhook.ca,
    )
    try:
        assert restarted.url == webhook.url
        second, _ = group.create(group.pod(1))
        assert annotations_of(second)["nimbix-burst.io/decision"] == "local"
        third, stderr = group.create(group.pod(1))
        assert_remote(third, stderr, 1)
    finally:
        addons.stop_webhook(restarted)
