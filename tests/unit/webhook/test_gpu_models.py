"""The GPU model a pod selects, read from its spec, and the JARVICE machines the mapping offers for it.

Oracles are written from the scheduler's rules (nodeSelector equality; required terms ORed, their
expressions ANDed; In, NotIn, Exists as for a node labelled with the machine's model)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.deadlines import HANG_SECONDS
from webhook import gpu_models
from webhook.model import parse_placement

pytestmark = pytest.mark.timeout(HANG_SECONDS)

LABEL = "nvidia.com/gpu.product"
T4, V100, A100, P100 = "Tesla-T4", "Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-80GB", "Tesla-P100-SXM2-16GB"
MAPPING = gpu_models.ModelMap(
    machines={T4: ("ng1",), V100: ("ng2", "ng4"), A100: ("ng1a", "ng4a", "ng8"), P100: ("np8g4",)}
)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)} if values else {"key": key, "operator": operator}


def required(*terms: list[dict[str, Any]], fields: bool = False) -> dict[str, Any]:
    node_terms = [{"matchExpressions": t} for t in terms]
    if fields:
        node_terms.append({"matchFields": [expr("metadata.name", "In", "n1")]})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}}}


def allowed(spec: dict[str, Any], mapping: gpu_models.ModelMap | None = MAPPING) -> object:
    constraint = gpu_models.parse_constraint(parse_placement(spec), label=LABEL)
    if constraint is None:
        return "unconstrained"
    result = gpu_models.resolve(constraint, mapping)
    return result.machines if isinstance(result, gpu_models.AllowedMachines) else None


ZONE = expr("zone", "In", "a")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "unconstrained"),
        ({"nodeSelector": {"zone": "a"}}, "unconstrained"),
        ({"affinity": required([ZONE])}, "unconstrained"),
        ({"nodeSelector": {LABEL: A100}}, ("ng1a", "ng4a", "ng8")),
        ({"nodeSelector": {LABEL: T4, "zone": "a"}}, ("ng1",)),
        ({"nodeSelector": {LABEL: "NVIDIA-H100-80GB-HBM3"}}, None),
        ({"affinity": required([expr(LABEL, "In", A100)])}, ("ng1a", "ng4a", "ng8")),
        ({"affinity": required([expr(LABEL, "In", T4, V100)])}, ("ng1", "ng2", "ng4")),
        ({"affinity": required([expr(LABEL, "NotIn", T4, V100, P100)])}, ("ng1a", "ng4a", "ng8")),
        ({"affinity": required([expr(LABEL, "Exists")])}, ("ng1", "ng1a", "ng2", "ng4", "ng4a", "ng8", "np8g4")),
        ({"affinity": required([expr(LABEL, "DoesNotExist")])}, None),  # every mapped machine has a model
        ({"affinity": required([expr(LABEL, "In", "H100")])}, None),
        # terms are ORed
        ({"affinity": required([expr(LABEL, "In", T4)], [expr(LABEL, "In", P100)])}, ("ng1", "np8g4")),
        # expressions in a term are ANDed
        (
            {"affinity": required([expr(LABEL, "Exists"), expr(LABEL, "NotIn", T4, V100)])},
            ("ng1a", "ng4a", "ng8", "np8g4"),
        ),
        ({"affinity": required([expr(LABEL, "In", T4), expr(LABEL, "In", A100)])}, None),
        # a term that leaves the model free allows every mapped model
        (
            {"affinity": required([expr(LABEL, "In", T4)], [ZONE])},
            ("ng1", "ng1a", "ng2", "ng4", "ng4a", "ng8", "np8g4"),
        ),
        # other expressions in the model's term constrain where the pod runs, not the model
        ({"affinity": required([expr(LABEL, "In", V100), ZONE])}, ("ng2", "ng4")),
        # matchFields terms without the label leave the model free too
        (
            {"affinity": required([expr(LABEL, "In", P100)], fields=True)},
            ("ng1", "ng1a", "ng2", "ng4", "ng4a", "ng8", "np8g4"),
        ),
        # nodeSelector and affinity both hold
        ({"nodeSelector": {LABEL: A100}, "affinity": required([expr(LABEL, "In", T4, A100)])}, ("ng1a", "ng4a", "ng8")),
        ({"nodeSelector": {LABEL: A100}, "affinity": required([expr(LABEL, "In", T4)])}, None),
    ],
    ids=[
        "no-constraint",
        "selector-other-key",
        "affinity-other-key",
        "selector-a100",
        "selector-t4-beside-zone",
        "selector-unknown",
        "in-a100",
        "in-two-models",
        "notin",
        "exists",
        "does-not-exist",
        "in-unknown",
        "terms-ored",
        "exists-and-notin",
        "contradiction",
        "free-term",
        "model-and-zone",
        "match-fields-term",
        "selector-and-affinity",
        "selector-against-affinity",
    ],
)
def test_the_machines_a_constraint_allows(spec: dict[str, Any], expected: object) -> None:
    assert allowed(spec) == expected


def test_without_a_mapping_a_pod_that_selects_a_model_is_refused_and_one_that_does_not_is_free() -> None:
    assert allowed({}, None) == "unconstrained"
    constraint = gpu_models.parse_constraint(parse_placement({"nodeSelector": {LABEL: A100}}), label=LABEL)
    assert constraint is not None
    result = gpu_models.resolve(constraint, None)
    assert isinstance(result, gpu_models.NoMachineOffers)
    assert "no GPU model mapping is configured (--gpu-models-file)" in result.reason


def test_the_refusal_names_what_was_asked_for_and_what_the_mapping_knows() -> None:
    constraint = gpu_models.parse_constraint(
        parse_placement({"affinity": required([expr(LABEL, "In", "H100", "H200")])}), label=LABEL
    )
    assert constraint is not None
    result = gpu_models.resolve(constraint, MAPPING)
    assert isinstance(result, gpu_models.NoMachineOffers)
    assert result.reason == (
        f"no JARVICE machine offers {LABEL} In (H100, H200) (GPU models mapped: {A100}, {P100}, {T4}, {V100})"
    )


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"nodeSelector": {LABEL: A100}}, f"{LABEL}={A100}"),
        ({"affinity": required([expr(LABEL, "In", T4, V100)])}, f"{LABEL} In ({T4}, {V100})"),
        ({"affinity": required([expr(LABEL, "Exists")], [ZONE])}, f"{LABEL} Exists or any model"),
        (
            {"nodeSelector": {LABEL: A100}, "affinity": required([expr(LABEL, "NotIn", T4), expr(LABEL, "Exists")])},
            f"{LABEL}={A100}; {LABEL} NotIn ({T4}) and {LABEL} Exists",
        ),
    ],
    ids=["selector", "in", "or", "both"],
)
def test_describe_constraint(spec: dict[str, Any], text: str) -> None:
    constraint = gpu_models.parse_constraint(parse_placement(spec), label=LABEL)
    assert constraint is not None and gpu_models.describe_constraint(constraint) == text


def test_the_label_is_configurable() -> None:
    spec = {"nodeSelector": {"example.com/gpu-model": "a100", LABEL: T4}}
    constraint = gpu_models.parse_constraint(parse_placement(spec), label="example.com/gpu-model")
    assert constraint is not None
    result = gpu_models.resolve(constraint, gpu_models.ModelMap(machines={"a100": ("big",), T4: ("small",)}))
    assert isinstance(result, gpu_models.AllowedMachines) and result.machines == ("big",)


# ----- the mapping file --------------------------------------------------------------------------


def test_a_valid_mapping_is_read_sorted_and_without_duplicates() -> None:
    parsed = gpu_models.parse_model_map({A100: ["ng8", "ng4a", "ng8"], T4: ["ng1"]}, source="f")
    assert parsed.machines == {A100: ("ng4a", "ng8"), T4: ("ng1",)}
    assert gpu_models.parse_model_map({}, source="f").machines == {}


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        (None, "must be a map of GPU model -> list of JARVICE machine types"),
        ([A100], "must be a map of GPU model"),
        ({1080: ["ng1"]}, "1080 is not a label value"),
        ({"A100 80GB": ["ng1"]}, "'A100 80GB' is not a label value"),
        ({"x" * 64: ["ng1"]}, "is not a label value"),
        ({A100: "ng4a"}, f"{A100}: give a non-empty list of JARVICE machine types"),
        ({A100: []}, f"{A100}: give a non-empty list"),
        ({A100: ["ng4a, ng8"]}, "'ng4a, ng8' is not a JARVICE machine type"),
        ({A100: [8]}, "8 is not a JARVICE machine type"),
        ({A100: ["ng4a"], V100: ["ng4a"]}, f"machine ng4a is listed under {A100} and {V100}: a machine has one model"),
    ],
    ids=["empty-file", "list", "number-key", "space-key", "long-key", "string-value", "empty-list", "comma",
         "number-machine", "two-models"],
)  # fmt: skip
def test_a_bad_mapping_says_what_to_fix(document: object, fragment: str) -> None:
    with pytest.raises(gpu_models.ModelMapError) as caught:
        gpu_models.parse_model_map(document, source="--gpu-models-file /m.yaml")
    assert fragment in str(caught.value)
    assert all(p.startswith("--gpu-models-file /m.yaml") for p in caught.value.problems)


def test_every_problem_of_a_mapping_is_reported_at_once() -> None:
    with pytest.raises(gpu_models.ModelMapError) as caught:
        gpu_models.parse_model_map({"a b": ["ng1"], A100: [], T4: ["x y"]}, source="f")
    assert len(caught.value.problems) == 3
