"""The option checks both programs read their port and Lease timing through."""

from __future__ import annotations

import pytest

from kubeplumbing.leadership import LeaseTiming
from kubeplumbing.options import OptionValues
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)


@pytest.mark.parametrize(
    ("text", "port", "problems"),
    [
        pytest.param("8443", 8443, [], id="ok"),
        pytest.param("1", 1, [], id="lowest"),
        pytest.param("65535", 65535, [], id="highest"),
        pytest.param("65536", 65536, ["--port: must be at most 65535, got 65536"], id="too-high"),
        pytest.param("0", 0, ["--port: must be at least 1, got 0"], id="too-low"),
        pytest.param("https", 1, ["--port: 'https' is not a whole number"], id="not-a-number"),
    ],
)
def test_port(text: str, port: int, problems: list[str]) -> None:
    values = OptionValues({"port": text})
    assert values.port() == port
    assert values.problems == problems


def _timing(duration: str, deadline: str, retry: str) -> OptionValues:
    return OptionValues(
        {"lease_duration_seconds": duration, "lease_renew_deadline_seconds": deadline, "lease_retry_seconds": retry}
    )


def test_lease_timing_that_fits() -> None:
    values = _timing("15", "10", "2")
    assert values.lease_timing() == LeaseTiming(duration=15, renew_deadline=10, retry=2)
    assert values.problems == []


@pytest.mark.parametrize(
    ("duration", "deadline", "retry", "problem", "timing"),
    [
        pytest.param("8", "10", "2", "--lease-*-seconds: lease timing must satisfy", None, id="deadline-past-duration"),
        pytest.param("15", "10", "20", "--lease-*-seconds: lease timing must satisfy", None, id="retry-past-deadline"),
        # Too small, yet in order: the problem is the number's, and the timing is as given.
        pytest.param(
            "15",
            "10",
            "0.01",
            "--lease-retry-seconds: must be at least 0.05, got 0.01",
            LeaseTiming(duration=15, renew_deadline=10, retry=0.01),
            id="retry-too-small",
        ),
    ],
)
def test_lease_timing_refused(
    duration: str, deadline: str, retry: str, problem: str, timing: LeaseTiming | None
) -> None:
    values = _timing(duration, deadline, retry)
    assert values.lease_timing() == timing
    assert len(values.problems) == 1 and values.problems[0].startswith(problem), values.problems
