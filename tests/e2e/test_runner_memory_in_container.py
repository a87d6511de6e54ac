"""The runner under its real limits: a burst pod's container gets the webhook's --remote-cpu and
--remote-memory (100m, 128Mi), and the runner streams a large remote output through it
(tests/support/large_output.py says what is checked; test_gateway.py checks the same through the
JARVICE gateway).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devplatform.cluster import addons, controlplane, node
from tests.support.large_output import COMMAND, assert_streamed_whole_within_bounds, stream
from tests.support.real_node_pods import burst_pod, create


@pytest.fixture(scope="module")
def webhook(control_plane: controlplane.ControlPlane, real_node: node.RealNode) -> Iterator[addons.WebhookProcess]:
    with addons.registered_webhook(
        control_plane, control_plane.run_dir / "memory-webhook", name_suffix="-memory"
    ) as hook:
        yield hook


def test_runner_streams_a_large_output_in_a_128mi_container(
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    node_emulator: addons.EmulatorProcess,
    webhook: addons.WebhookProcess,
    ns: str,
) -> None:
    big = burst_pod("big", COMMAND, node_emulator)
    # A training container with CPU and memory limits: the webhook cuts them to the runner's footprint.
    big["spec"]["containers"][0]["resources"]["limits"].update({"cpu": "2", "memory": "4Gi"})
    create(control_plane, ns, big)
    streamed = stream(control_plane, ns, "big")
    print("\n" + streamed.summary())
    assert_streamed_whole_within_bounds(streamed)
