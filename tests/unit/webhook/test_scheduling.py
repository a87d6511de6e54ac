import pytest

from tests.unit.webhook.builders import GPU, node
from webhook.model import parse_node, parse_placement
from webhook.scheduling import placement_allows, tolerates
from webhook.types import Taint, Toleration

T = Taint


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration("gpu", "Equal", "yes", "NoSchedule"), T("gpu", "yes", "NoSchedule"), True),
        (Toleration("gpu", "Equal", "no", "NoSchedule"), T("gpu", "yes", "NoSchedule"), False),
        (Toleration("gpu", "Exists", "", ""), T("gpu", "yes", "NoExecute"), True),
        (Toleration("gpu", "Exists", "", "NoSchedule"), T("gpu", "yes", "NoExecute"), False),
        (Toleration("", "Exists", "", ""), T("anything", "x", "NoSchedule"), True),
        (Toleration("", "Equal", "", ""), T("anything", "", "NoSchedule"), False),
        (Toleration("other", "Exists", "", ""), T("gpu", "", "NoSchedule"), False),
    ],
)
def test_tolerates(toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def _affinity(*terms: list[dict[str, object]]) -> dict[str, object]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": exprs} for exprs in terms]
            }
        }
    }


def _req(key: str, op: str, *values: str) -> dict[str, object]:
    return {"key": key, "operator": op, "values": list(values)}


LABELS = {"gpu-model": "V100", "gpu-mem": "32", "zone": "a"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, True, id="no-constraints"),
        pytest.param({"nodeSelector": {"gpu-model": "V100"}}, True, id="selector-match"),
        pytest.param({"nodeSelector": {"gpu-model": "A100"}}, False, id="selector-mismatch"),
        pytest.param({"affinity": _affinity([_req("gpu-model", "In", "A100", "V100")])}, True, id="In"),
        pytest.param({"affinity": _affinity([_req("gpu-model", "NotIn", "V100")])}, False, id="NotIn"),
        pytest.param({"affinity": _affinity([_req("zone", "Exists")])}, True, id="Exists"),
        pytest.param({"affinity": _affinity([_req("zone", "DoesNotExist")])}, False, id="DoesNotExist"),
        pytest.param({"affinity": _affinity([_req("gpu-mem", "Gt", "16")])}, True, id="Gt"),
        pytest.param({"affinity": _affinity([_req("gpu-mem", "Lt", "16")])}, False, id="Lt"),
        pytest.param({"affinity": _affinity([_req("gpu-model", "Gt", "1")])}, False, id="Gt-non-integer"),
        pytest.param(
            {"affinity": _affinity([_req("gpu-model", "In", "A100")], [_req("zone", "In", "a")])}, True, id="terms-OR"
        ),
        pytest.param(
            {"affinity": _affinity([_req("gpu-model", "In", "V100"), _req("zone", "In", "b")])},
            False,
            id="expressions-AND",
        ),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
                }
            },
            False,
            id="empty-terms-match-nothing",
        ),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchFields": [_req("metadata.name", "In", "n1")]}]
                        }
                    }
                }
            },
            True,
            id="matchFields-name",
        ),
    ],
)
def test_selectors_and_affinity(spec: dict[str, object], expected: bool) -> None:
    info = parse_node(node("n1", 4, labels=LABELS), [GPU])
    assert placement_allows(parse_placement(spec), info) is expected


@pytest.mark.parametrize(
    ("taints", "tolerations", "expected"),
    [
        pytest.param([{"key": "gpu", "effect": "NoSchedule"}], [], False, id="untolerated-NoSchedule"),
        pytest.param([{"key": "gpu", "effect": "NoExecute"}], [], False, id="untolerated-NoExecute"),
        pytest.param([{"key": "gpu", "effect": "PreferNoSchedule"}], [], True, id="PreferNoSchedule-ignored"),
        pytest.param(
            [{"key": "gpu", "effect": "NoSchedule"}], [{"key": "gpu", "operator": "Exists"}], True, id="tolerated"
        ),
    ],
)
def test_taints(taints: list[dict[str, str]], tolerations: list[dict[str, str]], expected: bool) -> None:
    info = parse_node(node("n1", 4, taints=taints), [GPU])
    assert placement_allows(parse_placement({"tolerations": tolerations}), info) is expected


@pytest.mark.parametrize(
    ("raw", "schedulable"),
    [
        pytest.param(node("n", 4), True, id="ready"),
        pytest.param(node("n", 4, ready=False), False, id="not-ready-condition"),
        pytest.param(node("n", 4, unschedulable=True), False, id="cordoned"),
        pytest.param(
            node("n", 4, taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
            False,
            id="not-ready-taint",
        ),
    ],
)
def test_node_schedulable(raw: dict[str, object], schedulable: bool) -> None:
    assert parse_node(raw, [GPU]).schedulable is schedulable
