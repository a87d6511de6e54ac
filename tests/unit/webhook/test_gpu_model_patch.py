"""Taking the GPU model off a burst pod's required node affinity: the patch applied with jsonpatch
must leave the spec written out by hand in each row (other keys, matchFields, empty terms and the
rest of the affinity kept; a requirement that only named the model gone, whole)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from tests.support.deadlines import HANG_SECONDS
from webhook import gpu_model_patch

pytestmark = pytest.mark.timeout(HANG_SECONDS)

LABEL = "nvidia.com/gpu.product"
MODEL = {"key": LABEL, "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}
ZONE = {"key": "zone", "operator": "In", "values": ["a"]}
NAME = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
PREFERRED = [{"weight": 1, "preference": {"matchExpressions": [MODEL]}}]
POD_AFFINITY = {"requiredDuringSchedulingIgnoredDuringExecution": []}


def affinity(*terms: dict[str, Any], **extra: Any) -> dict[str, Any]:
    node_affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
    }
    node_affinity.update(extra.pop("node", {}))
    return {"affinity": {"nodeAffinity": node_affinity, **extra}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # only the model: the requirement matches every node once it is gone, and nothing is left
        (affinity({"matchExpressions": [MODEL]}), {}),
        # the model beside another key in the same term: the other key stays
        (affinity({"matchExpressions": [MODEL, ZONE]}), affinity({"matchExpressions": [ZONE]})),
        # the model term ORed with a zone term: the model term now matches every node, so all do
        (affinity({"matchExpressions": [MODEL]}, {"matchExpressions": [ZONE]}), {}),
        # a term with matchFields keeps them
        (affinity({"matchExpressions": [MODEL], "matchFields": [NAME]}), affinity({"matchFields": [NAME]})),
        # the model in two terms, each with more: both keep the rest
        (
            affinity({"matchExpressions": [MODEL, ZONE]}, {"matchExpressions": [NAME | {"key": "rack"}, MODEL]}),
            affinity({"matchExpressions": [ZONE]}, {"matchExpressions": [NAME | {"key": "rack"}]}),
        ),
        # preferred terms stay (they never leave a pod Pending)
        (affinity({"matchExpressions": [MODEL]}, node={"preferredDuringSchedulingIgnoredDuringExecution": PREFERRED}),
         {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": PREFERRED}}}),
        # pod affinity stays
        (affinity({"matchExpressions": [MODEL]}, podAffinity=POD_AFFINITY),
         {"affinity": {"podAffinity": POD_AFFINITY}}),
    ],
    ids=["only-model", "model-and-zone", "or-zone", "match-fields", "two-terms", "preferred-kept", "pod-affinity-kept"],
)  # fmt: skip
def test_the_model_leaves_the_required_affinity(spec: dict[str, Any], expected: dict[str, Any]) -> None:
    ops, before = gpu_model_patch.build_affinity_ops(spec, label=LABEL)
    pod = {"spec": {"containers": [], **copy.deepcopy(spec)}}
    after = jsonpatch.apply_patch(pod, ops)
    assert after["spec"] == {"containers": [], **expected}
    assert before == spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


@pytest.mark.parametrize(
    "spec",
    [{}, {"nodeSelector": {LABEL: "x"}}, affinity({"matchExpressions": [ZONE]}), {"affinity": {"podAffinity": {}}}],
    ids=["nothing", "selector-only", "other-key", "no-node-affinity"],
)
def test_nothing_to_do_when_no_required_term_names_the_model(spec: dict[str, Any]) -> None:
    assert gpu_model_patch.build_affinity_ops(spec, label=LABEL) == ([], None)
