from decimal import Decimal

import pytest

from tests.unit.webhook.builders import GPU, container, pod
from webhook.resources import QuantityError, effective_gpus, effective_request, parse_quantity


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", Decimal(1)),
        (2, Decimal(2)),
        ("500m", Decimal("0.5")),
        ("64Gi", Decimal(64 * 2**30)),
        ("1k", Decimal(1000)),
        ("1.5", Decimal("1.5")),
        ("1e3", Decimal(1000)),
    ],
)
def test_parse_quantity(raw: object, expected: Decimal) -> None:
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize("raw", ["", "abc", "1Zi", None, True, [], "--1"])
def test_parse_quantity_rejects(raw: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(raw)


SIDECAR = "Always"


@pytest.mark.parametrize(
    ("spec_pod", "expected"),
    [
        pytest.param(pod(container(gpus=2)), 2, id="one-container"),
        pytest.param(pod(container("a", gpus=1), container("b", gpus=3)), 4, id="containers-sum"),
        pytest.param(pod(container(limits={GPU: "2"})), 2, id="limits-only"),
        pytest.param(pod(container(requests={GPU: "2"})), 2, id="requests-only"),
        pytest.param(pod(container(gpus=1), init=[container("i", gpus=4)]), 4, id="init-larger-than-app"),
        pytest.param(pod(container(gpus=3), init=[container("i", gpus=2)]), 3, id="app-larger-than-init"),
        pytest.param(
            pod(container(gpus=1), init=[container("s", gpus=1, restart_policy=SIDECAR)]), 2, id="sidecar-adds"
        ),
        pytest.param(
            pod(
                container(gpus=1),
                init=[container("s", gpus=1, restart_policy=SIDECAR), container("i", gpus=3)],
            ),
            4,
            id="init-after-sidecar-adds-sidecar",
        ),
        pytest.param(
            pod(
                container(gpus=1),
                init=[container("i", gpus=3), container("s", gpus=1, restart_policy=SIDECAR)],
            ),
            3,
            id="init-before-sidecar-does-not",
        ),
        pytest.param(pod(container(gpus=1), overhead={GPU: "1"}), 2, id="overhead"),
        pytest.param(pod(container()), 0, id="no-gpu"),
    ],
)
def test_effective_gpu_request(spec_pod: dict[str, object], expected: int) -> None:
    assert effective_request(spec_pod["spec"], GPU) == expected  # type: ignore[arg-type]


def test_effective_gpus_multiple_resource_names() -> None:
    legacy = "alpha.kubernetes.io/nvidia-gpu"
    spec = pod(container("a", gpus=1), container("b", gpus=2, resource=legacy))["spec"]
    assert effective_gpus(spec, [GPU, legacy]) == {GPU: 1, legacy: 2}
    assert effective_gpus(spec, [GPU]) == {GPU: 1}
