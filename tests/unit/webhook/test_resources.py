import gc
import time
from decimal import Decimal

import pytest

from tests.unit.webhook.builders import GPU, container, pod
from webhook import resources
from webhook.resources import (
    QUANTITY_CEILING,
    QUANTITY_MEMO_MAX_CHARS,
    QuantityError,
    effective_gpus,
    effective_request,
    parse_device_count,
    parse_quantity,
)

# CPU time of this thread, not wall time: waiting for a core on a loaded machine does not count. The
# old parser spent seconds on these quantities; the capped one takes microseconds.
FAST_CPU_SECONDS = 0.05

# Kubernetes caps a quantity's magnitude at 2^63-1 (resource.Quantity docs, "no quantity may
# represent a number greater than 2^63-1 in magnitude ... will be capped"): written out here, not
# taken from the code under test.
CAP = Decimal(9223372036854775807)
NANO = Decimal("1e-9")


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
        ("1E3", Decimal(1000)),
        ("1e-3", Decimal("0.001")),
        ("1e+3", Decimal(1000)),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+2", Decimal(2)),
        ("-2", Decimal(-2)),
        ("0.5Gi", Decimal(2**29)),
        ("100n", Decimal("1e-7")),
        ("3u", Decimal("3e-6")),
        ("2E", Decimal(2 * 10**18)),
        ("007", Decimal(7)),
        ("1e0005", Decimal(100000)),
        ("0", Decimal(0)),
        ("0e999999999999", Decimal(0)),
        (1.5, Decimal("1.5")),
        (" 4 ", Decimal(4)),
    ],
)
def test_parse_quantity(raw: object, expected: Decimal) -> None:
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("1e299999", CAP, id="huge-exponent"),
        pytest.param("1e9999999", CAP, id="exponent-beyond-decimal-emax"),
        pytest.param("1e" + "9" * 5000, CAP, id="exponent-with-5000-digits"),
        pytest.param("-1e299999", -CAP, id="huge-negative"),
        pytest.param("9223372036854775807", CAP, id="exactly-the-cap"),
        pytest.param("9223372036854775808", CAP, id="one-over-the-cap"),
        pytest.param("1" + "0" * 200_000, CAP, id="200k-digit-run"),
        pytest.param("0" * 200_000 + "3", Decimal(3), id="200k-leading-zeros"),
        pytest.param("8Ei", CAP, id="binary-suffix-over-the-cap"),
        pytest.param("9999999999P", CAP, id="decimal-suffix-over-the-cap"),
        pytest.param(10**30, CAP, id="json-integer-over-the-cap"),
        pytest.param(1e300, CAP, id="json-float-over-the-cap"),
        # Finer than a nano-unit rounds up to one (as the API server does: "0.1m" becomes "1m").
        pytest.param("1e-299999", NANO, id="tiny-exponent"),
        pytest.param("1e-" + "9" * 5000, NANO, id="tiny-exponent-5000-digits"),
        pytest.param("0." + "0" * 200_000 + "1", NANO, id="200k-fraction-digits"),
        pytest.param("1.0000000001", Decimal("1.000000001"), id="rounds-up-below-nano"),
        pytest.param("1.0000000000000", Decimal(1), id="trailing-zeros-are-exact"),
    ],
)
def test_absurd_quantities_are_capped_in_microseconds(raw: object, expected: Decimal) -> None:
    gc.collect()  # a full collection of the test process's objects must not land in the parse being timed
    started = time.thread_time()
    assert parse_quantity(raw) == expected
    assert time.thread_time() - started < FAST_CPU_SECONDS
    assert CAP == QUANTITY_CEILING


@pytest.mark.parametrize(
    "raw", ["1e299999", "1e9999999", "1" + "0" * 200_000, "1e" + "9" * 5000, "8Ei", "18446744073709551616"]
)
def test_absurd_device_counts_are_no_node_sized_and_fast(raw: str) -> None:
    gc.collect()  # a full collection of the test process's objects must not land in the parse being timed
    started = time.thread_time()
    assert parse_device_count(raw) == 2**63 - 1
    assert time.thread_time() - started < FAST_CPU_SECONDS


def test_absurd_cpu_and_memory_requests_stay_bounded() -> None:
    spec = pod(container(limits={"cpu": "1e299999", "memory": "1e9999999"}, requests={"cpu": "1e299999"}))["spec"]
    gc.collect()  # a full collection of the test process's objects must not land in the parse being timed
    started = time.thread_time()
    assert effective_request(spec, "cpu") == CAP
    assert effective_request(spec, "memory") == CAP
    assert time.thread_time() - started < FAST_CPU_SECONDS


@pytest.mark.parametrize(
    "raw",
    [
        "", "abc", "1Zi", None, True, [], "--1", "1.2.3", ".", "+", "1e", "e5", "1e1.5", "1Ki5", "1ki",
        "1e5Ki", "1 Gi", "0x10", "inf", "nan", "Infinity", "1_000", float("inf"), float("nan"), "\u0661",
    ],
)  # fmt: skip
def test_parse_quantity_rejects(raw: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(raw)


def test_parse_quantity_error_says_what_a_quantity_looks_like() -> None:
    with pytest.raises(QuantityError, match=r"'1\.2\.3'.*e\.g\."):
        parse_quantity("1.2.3")


# The memo of short quantity strings: a hit gives what the parser gives, hostile and long input
# included; long strings bypass it, and errors are raised again on every call, never remembered.
MEMO_TABLE = [
    "1", "500m", "64Gi", " 4 ", "0.5Gi", "-2", "1e-3", "0e999999999999", "1e299999", "-1e299999", "8Ei",
    "18446744073709551616", "0.0000000001", "1" + "0" * 31, "1" + "0" * 32, "1" + "0" * 200_000,
    "1e" + "9" * 5000, "9" * 40 + "Ei",
]  # fmt: skip


@pytest.mark.parametrize("raw", MEMO_TABLE)
def test_quantity_memo_gives_what_the_parser_gives(raw: str) -> None:
    uncached = resources._parse_text(raw)
    assert parse_quantity(raw) == uncached  # miss (or a hit left by an earlier test)
    assert parse_quantity(raw) == uncached  # hit
    assert parse_quantity(raw).as_tuple() == uncached.as_tuple()  # same exponent too, not just equal


@pytest.mark.parametrize(
    ("raw", "memoized"),
    [
        pytest.param("7Mi", True, id="short"),
        pytest.param("1" * QUANTITY_MEMO_MAX_CHARS, True, id="at-the-bound"),
        pytest.param("1" * (QUANTITY_MEMO_MAX_CHARS + 1), False, id="one-past-the-bound"),
        pytest.param("1e" + "9" * 5000, False, id="hostile-long"),
        pytest.param(7, False, id="int"),
        pytest.param(1.5, False, id="float"),
    ],
)
def test_quantity_memo_holds_only_short_strings(raw: object, memoized: bool) -> None:
    resources._parse_short_text.cache_clear()
    parse_quantity(raw)
    parse_quantity(raw)
    info = resources._parse_short_text.cache_info()
    assert (info.currsize, info.hits) == ((1, 1) if memoized else (0, 0))


def test_quantity_memo_is_bounded() -> None:
    resources._parse_short_text.cache_clear()
    for i in range(resources.QUANTITY_MEMO_ENTRIES + 100):
        parse_quantity(f"{i}m")
    assert resources._parse_short_text.cache_info().currsize == resources.QUANTITY_MEMO_ENTRIES


@pytest.mark.parametrize("raw", ["1.2.3", "1Zi", "", "inf"])
def test_quantity_memo_does_not_remember_errors(raw: str) -> None:
    resources._parse_short_text.cache_clear()
    for _ in range(2):
        with pytest.raises(QuantityError, match="invalid quantity"):
            parse_quantity(raw)
    assert resources._parse_short_text.cache_info().currsize == 0


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
