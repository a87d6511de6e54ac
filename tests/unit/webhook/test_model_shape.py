"""A pod of the wrong shape is refused with a message naming the field (the 400 a user reads), and a
well-shaped one reads as before: the checks build their messages only when one fails (issue 15)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.model import ObjectError, check_pod_shape, parse_placement, pod_gpus

GPU = ("nvidia.com/gpu",)


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "labels": {"task-type": "Nimbix"}, "annotations": {"a": "b"}},
        "spec": {
            "nodeSelector": {"pool": "gpu"},
            "resources": {"requests": {"cpu": "1"}},
            "containers": [
                {
                    "name": "c",
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "initContainers": [{"name": "i", "resources": {}}],
            "tolerations": [{"key": "k", "operator": "Exists"}, {"key": "g", "value": "v", "effect": "NoSchedule"}],
        },
    }


def _with(path: str, value: object) -> dict[str, Any]:
    """The pod with the field at dotted `path` (list indexes as numbers) set to `value`."""
    pod = copy.deepcopy(_pod())
    *parents, last = path.split(".")
    target: Any = pod
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return pod


SHAPE_ERRORS = [
    pytest.param("metadata.labels", ["x"], "metadata.labels must be an object", id="labels-list"),
    pytest.param("metadata.labels.team", 7, "metadata.labels.team must be a string", id="label-value"),
    pytest.param("metadata.annotations.a", {"b": 1}, "metadata.annotations.a must be a string", id="annotation"),
    pytest.param("spec.nodeSelector.pool", True, "spec.nodeSelector.pool must be a string", id="selector-value"),
    pytest.param("spec.runtimeClassName", 1, "spec.runtimeClassName must be a string", id="runtime-class"),
    pytest.param("spec.resources", "1", "spec.resources must be an object", id="pod-resources"),
    pytest.param("spec.resources.requests", [], "spec.resources.requests must be an object", id="pod-requests"),
    pytest.param("spec.containers", {}, "spec.containers must be a list", id="containers-object"),
    pytest.param("spec.containers.0", "c", "spec.containers[0] must be an object", id="container"),
    pytest.param("spec.containers.0.resources", [], "spec.containers[0].resources must be an object", id="resources"),
    pytest.param(
        "spec.containers.0.resources.limits", "1", "spec.containers[0].resources.limits must be an object", id="limits"
    ),
    pytest.param("spec.containers.0.env", {}, "spec.containers[0].env must be a list", id="env-object"),
    pytest.param("spec.containers.0.env.0", "A=1", "spec.containers[0].env[0] must be an object", id="env-item"),
    pytest.param(
        "spec.initContainers.0.resources.requests",
        7,
        "spec.initContainers[0].resources.requests must be an object",
        id="init-requests",
    ),
]


@pytest.mark.parametrize(("path", "value", "message"), SHAPE_ERRORS)
def test_shape_errors_name_the_field(path: str, value: object, message: str) -> None:
    with pytest.raises(ObjectError) as caught:
        check_pod_shape(_with(path, value))
    assert str(caught.value) == message


PLACEMENT_ERRORS = [
    pytest.param("spec.tolerations", {}, "spec.tolerations must be a list", id="tolerations-object"),
    pytest.param("spec.tolerations.1", "g", "spec.tolerations[1] must be an object", id="toleration"),
    pytest.param("spec.tolerations.1.key", 5, "spec.tolerations[1].key must be a string", id="key"),
    pytest.param("spec.tolerations.0.operator", ["Exists"], "spec.tolerations[0].operator must be a string", id="op"),
    pytest.param("spec.tolerations.1.value", 1.5, "spec.tolerations[1].value must be a string", id="value"),
    pytest.param("spec.tolerations.1.effect", {}, "spec.tolerations[1].effect must be a string", id="effect"),
    pytest.param("spec.nodeSelector", "pool=gpu", "spec.nodeSelector must be an object", id="selector"),
    pytest.param("spec.nodeName", 3, "spec.nodeName must be a string", id="node-name"),
]


@pytest.mark.parametrize(("path", "value", "message"), PLACEMENT_ERRORS)
def test_placement_errors_name_the_field(path: str, value: object, message: str) -> None:
    with pytest.raises(ObjectError) as caught:
        parse_placement(_with(path, value)["spec"])
    assert str(caught.value) == message


def test_well_shaped_pod_reads_as_before() -> None:
    pod = _pod()
    check_pod_shape(pod)
    placement = parse_placement(pod["spec"])
    assert [(t.key, t.operator, t.value, t.effect) for t in placement.tolerations] == [
        ("k", "Exists", "", ""),
        ("g", "Equal", "v", "NoSchedule"),
    ]
    assert placement.node_selector == {"pool": "gpu"}
    assert pod_gpus(pod["spec"], GPU) == {"nvidia.com/gpu": 1}


def test_null_values_read_as_empty() -> None:
    pod = _with("spec.nodeSelector.pool", None)
    pod["spec"]["tolerations"] = [{"key": None, "operator": None, "value": None, "effect": None}]
    check_pod_shape(pod)
    placement = parse_placement(pod["spec"])
    assert placement.node_selector == {"pool": ""}
    assert [(t.key, t.operator, t.value, t.effect) for t in placement.tolerations] == [("", "Equal", "", "")]
