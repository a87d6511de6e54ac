"""Admission of a pod that selects a GPU model: burst with its model as the machine choice, or kept
local when no JARVICE machine offers it. Every patch is applied with jsonpatch, as the API server does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.deadlines import HANG_SECONDS
from tests.support.reinvocation import make_cache, patched_by, review
from tests.unit.webhook.builders import GPU, container, node, pod
from webhook import admission, gpu_models
from webhook.model import parse_node
from webhook.rewrite_terms import RewritePolicy

pytestmark = pytest.mark.timeout(HANG_SECONDS)

LABEL = "nvidia.com/gpu.product"
A100 = "NVIDIA-A100-SXM4-80GB"
MAPPING = gpu_models.ModelMap(machines={A100: ("ng1a", "ng4a"), "Tesla-T4": ("ng1",)})
POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi", gpu_model_map=MAPPING)
REAL_NODE = {"nimbix-burst.io/real-node": "true"}


def run(raw: dict[str, Any], policy: RewritePolicy = POLICY) -> tuple[dict[str, Any], admission.Admission]:
    """The pod after admission (node 'a' has 4 free GPUs and no model label), and the admission."""
    result = admission.admit(review(raw, "u1"), cache=make_cache(free_gpus=4), policy=policy)
    return patched_by(raw, result), result


def env_of(raw: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in raw["spec"]["containers"][0].get("env", [])}


def model_term(*models: str, operator: str = "In") -> dict[str, Any]:
    expression = {"key": LABEL, "operator": operator, "values": list(models)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [expression]}
    ]}}}  # fmt: skip


def test_a_pod_selecting_a100_bursts_to_the_a100_machines_without_its_selector() -> None:
    raw = pod(container(gpus=1), nodeSelector={LABEL: A100, **REAL_NODE})
    after, result = run(raw)
    assert result.outcome == "remote"
    annotations = after["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/allowed-machines"] == "ng1a,ng4a"
    assert annotations["nimbix-burst.io/gpu-model"] == f"{LABEL}={A100}"
    assert env_of(after)["NIMBIX_BURST_ALLOWED_MACHINES"] == "ng1a,ng4a"
    # The runner runs anywhere the pod's other constraints allow.
    assert after["spec"]["nodeSelector"] == REAL_NODE
    assert json.loads(annotations["nimbix-burst.io/original-resources"])["nodeSelector"] == {LABEL: A100}


def test_a_pod_selecting_a100_by_required_affinity_loses_it_and_records_it() -> None:
    raw = pod(container(gpus=1), affinity=model_term(A100, "Tesla-T4"))
    after, result = run(raw)
    assert result.outcome == "remote"
    assert "affinity" not in after["spec"]
    assert env_of(after)["NIMBIX_BURST_ALLOWED_MACHINES"] == "ng1,ng1a,ng4a"
    audit = json.loads(after["metadata"]["annotations"]["nimbix-burst.io/original-resources"])
    assert (
        audit["nodeAffinityRequired"]
        == raw["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    )


@pytest.mark.parametrize(
    ("spec", "policy", "why"),
    [
        ({"nodeSelector": {LABEL: "NVIDIA-H100-80GB-HBM3"}}, POLICY, f"no JARVICE machine offers {LABEL}="),
        ({"affinity": model_term("NVIDIA-H100-80GB-HBM3")}, POLICY, f"no JARVICE machine offers {LABEL} In ("),
        (
            {"nodeSelector": {LABEL: A100}},
            RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi"),
            "no GPU model mapping is configured (--gpu-models-file)",
        ),
    ],
    ids=["selector-unknown", "affinity-unknown", "no-mapping"],
)
def test_a_pod_whose_model_no_machine_offers_stays_as_submitted_and_says_why(
    spec: dict[str, Any], policy: RewritePolicy, why: str
) -> None:
    raw = pod(container(gpus=1), **spec)
    after, result = run(raw, policy)
    assert result.outcome == "local"
    annotations = after["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/decision"] == "local"
    assert why in annotations["nimbix-burst.io/reason"] and "not burst" in annotations["nimbix-burst.io/reason"]
    assert why in annotations["nimbix-burst.io/gpu-model"]
    assert after["spec"] == raw["spec"]  # its GPUs, its selector: it waits for a node with its model
    (warning,) = result.response["response"]["warnings"]
    assert warning.startswith("nimbix-burst: kept local, not burst: ")


def test_a_pod_that_selects_no_model_bursts_to_any_machine() -> None:
    after, result = run(pod(container(gpus=8), nodeSelector=REAL_NODE))
    assert result.outcome == "remote"
    assert "NIMBIX_BURST_ALLOWED_MACHINES" not in env_of(after)
    assert "nimbix-burst.io/allowed-machines" not in after["metadata"]["annotations"]


def test_a_pod_whose_model_is_here_stays_local_untouched() -> None:
    cache = make_cache(free_gpus=0)
    cache.replace_nodes([parse_node(node("a100", 4, labels={LABEL: A100}), (GPU,))])
    result = admission.admit(
        review(pod(container(gpus=1), nodeSelector={LABEL: A100}), "u1"), cache=cache, policy=POLICY
    )
    assert result.outcome == "local" and result.node == "a100"


def test_an_operator_strip_key_and_the_model_label_are_removed_once() -> None:
    policy = RewritePolicy(
        gpu_resources=(GPU,),
        remote_cpu="100m",
        remote_memory="128Mi",
        gpu_model_map=MAPPING,
        strip_node_selector_keys=frozenset({LABEL}),
    )
    after, result = run(pod(container(gpus=1), nodeSelector={LABEL: A100}), policy)
    assert result.outcome == "remote" and "nodeSelector" not in after["spec"]
