"""devplatform.helmchart's pure part: Helm's labels stripped, and the object-by-object comparison of
two renders that the chart-equals-kustomize test relies on (it must see every kind of difference)."""

from __future__ import annotations

from typing import Any

import pytest

from devplatform import helmchart


def _obj(
    kind: str, name: str, *, namespace: str = "nimbix-burst", labels: dict[str, str] | None = None, **rest: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": kind, "metadata": metadata, **rest}


HELM = {
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/instance": "nimbix-burst",
    "app.kubernetes.io/version": "0.1.0",
    "helm.sh/chart": "nimbix-burst-0.1.0",
}


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({**HELM, "app.kubernetes.io/part-of": "nimbix-burst"}, {"app.kubernetes.io/part-of": "nimbix-burst"}),
        (HELM, None),
        ({"app.kubernetes.io/name": "x"}, {"app.kubernetes.io/name": "x"}),
    ],
    ids=["keeps-others", "drops-emptied-map", "nothing-to-strip"],
)
def test_strip_helm_labels(labels: dict[str, str], expected: dict[str, str] | None) -> None:
    original = _obj("Service", "s", labels=dict(labels))
    stripped = helmchart.strip_helm_labels(original)
    assert stripped["metadata"].get("labels") == expected
    assert original["metadata"]["labels"] == labels  # a copy: the input is untouched


@pytest.mark.parametrize(
    ("kustomize", "chart", "expected"),
    [
        ([_obj("Service", "s", spec={"a": 1})], [_obj("Service", "s", labels=HELM, spec={"a": 1})], []),
        ([_obj("Namespace", "nimbix-burst", namespace="")], [], []),
        ([_obj("Service", "s")], [], ["only in kustomize: Service/nimbix-burst/s"]),
        ([], [_obj("Secret", "x")], ["only in the chart: Secret/nimbix-burst/x"]),
        (
            [_obj("Service", "s", spec={"a": 1})],
            [_obj("Service", "s", spec={"a": "1"})],
            ['Service/nimbix-burst/s: .spec.a: kustomize 1 != chart "1"'],
        ),
        (
            [_obj("Service", "s", spec={"a": 1})],
            [_obj("Service", "s", spec={"a": 1, "b": 2})],
            ["Service/nimbix-burst/s: .spec.b only in the chart"],
        ),
        (
            [_obj("Service", "s", spec={"l": [1, 2]})],
            [_obj("Service", "s", spec={"l": [1, 3]})],
            ["Service/nimbix-burst/s: .spec.l[1]: kustomize 2 != chart 3"],
        ),
        (
            [_obj("Service", "s", spec={"l": [1, 2]})],
            [_obj("Service", "s", spec={"l": [1]})],
            ["Service/nimbix-burst/s: .spec.l: kustomize [1, 2] != chart [1]"],
        ),
        (
            [_obj("Service", "s", labels={"app.kubernetes.io/part-of": "nimbix-burst"})],
            [_obj("Service", "s", labels=HELM)],
            ["Service/nimbix-burst/s: .metadata.labels only in kustomize"],
        ),
    ],
    ids=[
        "same-but-helm-labels",
        "namespace-left-to-the-user",
        "missing",
        "extra",
        "changed-type",
        "added-key",
        "changed-item",
        "shorter-list",
        "missing-label",
    ],
)
def test_find_render_differences(
    kustomize: list[dict[str, Any]], chart: list[dict[str, Any]], expected: list[str]
) -> None:
    assert helmchart.find_render_differences(kustomize, chart) == expected


def test_build_local_values_places_every_deployment_on_the_node_and_never_pulls() -> None:
    taint = {"key": "nimbix-burst.io/real-node", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    values = helmchart.build_local_values(
        gateway="10.213.0.1",
        node_label="nimbix-burst.io/real-node",
        taint=taint,
        gpu_models={"Tesla-T4": ("ng1",)},
        gateway_service_ip="10.0.0.53",
    )
    assert values["image"] == {"repository": "localhost/nimbix-burst-webhook", "tag": "0.1.0", "pullPolicy": "Never"}
    placement = {"nodeSelector": {"nimbix-burst.io/real-node": "true"}, "tolerations": [taint]}
    assert values["controller"] == placement
    assert values["webhook"] == {**placement, "gpuModels": {"Tesla-T4": ["ng1"]}}
    assert values["gateway"] == {**placement, "clusterIP": "10.0.0.53"}
    assert values["webhook"]["tolerations"] is not values["controller"]["tolerations"]
    assert values["gateway"]["tolerations"] is not values["controller"]["tolerations"]
    assert values["networkPolicy"] == {"apiServerCIDRs": ["10.213.0.1/32"]}


def test_the_chart_ships_the_same_gpu_model_file_as_deploy() -> None:
    """With no mapping in the values the chart mounts its copy of deploy/gpu-models.yaml, byte for
    byte (so both installs name the ConfigMap alike): the two files must not drift apart."""
    shipped = (helmchart.CHART_DIR / "files" / "gpu-models.yaml").read_bytes()
    assert shipped == (helmchart.manifests.DEPLOY_DIR / "gpu-models.yaml").read_bytes()
