"""install.find_serving_pods: which of the add-on's pods serve (pure)."""

from __future__ import annotations

import pytest

from devplatform.cluster.install import PodState, find_serving_pods

PODS = [
    PodState(name="a", node="real", phase="Running", ready=True, terminating=False),
    PodState(name="b", node="other", phase="Running", ready=True, terminating=False),
    PodState(name="c", node="real", phase="Running", ready=False, terminating=False),
    PodState(name="d", node="real", phase="Running", ready=True, terminating=True),
    PodState(name="e", node="real", phase="Pending", ready=False, terminating=False),
    PodState(name="f", node="", phase="Pending", ready=False, terminating=False),
]


@pytest.mark.parametrize(
    ("node", "serving"),
    [
        pytest.param("real", ["a"], id="on-the-node"),
        pytest.param("other", ["b"], id="on-another-node"),
        pytest.param("none-such", [], id="no-such-node"),
        pytest.param(None, ["a", "b"], id="any-node"),
    ],
)
def test_serving_pods_are_running_ready_and_not_terminating(node: str | None, serving: list[str]) -> None:
    assert find_serving_pods(PODS, node=node) == serving
