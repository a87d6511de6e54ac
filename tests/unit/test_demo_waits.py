"""How the demo, dev-up and the e2e tier wait for a condition: quick re-checks at first, then at most one a
second (a probe is often a kubectl process), and a last probe at the deadline."""

from __future__ import annotations

import itertools

import pytest

from devplatform import demo_pods
from tests.support.clocks import Clock


def test_the_pauses_grow_from_the_first_to_the_cap_and_stay_there() -> None:
    pauses = list(itertools.islice(demo_pods.poll_intervals(), 8))
    assert pauses[0] == demo_pods.POLL_INTERVAL_SECONDS
    assert pauses == sorted(pauses)
    assert pauses[-2:] == [demo_pods.POLL_INTERVAL_MAX_SECONDS] * 2
    assert all(later <= earlier * demo_pods.POLL_INTERVAL_GROWTH for earlier, later in itertools.pairwise(pauses))


@pytest.mark.parametrize(
    ("true_at_probe", "timeout", "probes", "outcome"),
    [
        (1, 10.0, 1, "found"),
        (4, 10.0, 4, "found"),
        (None, 2.0, 6, "timeout"),  # 0.2 + 0.3 + 0.45 + 0.675 + the 0.375 left, then the probe at the deadline
        (None, 0.0, 1, "timeout"),
    ],
    ids=["at-once", "fourth-probe", "never", "no-time-at-all"],
)
def test_a_wait_probes_until_true_or_its_deadline(
    true_at_probe: int | None, timeout: float, probes: int, outcome: str
) -> None:
    clock = Clock()
    seen: list[float] = []

    def probe() -> str | None:
        seen.append(clock())
        return "ready" if len(seen) == true_at_probe else None

    if outcome == "found":
        assert demo_pods.wait_for(probe, what="x", timeout=timeout, clock=clock, sleep=clock.sleep) == "ready"
    else:
        with pytest.raises(TimeoutError, match=f"no x after {timeout:g} s"):
            demo_pods.wait_for(probe, what="x", timeout=timeout, clock=clock, sleep=clock.sleep)
        assert seen[-1] >= seen[0] + timeout
    assert len(seen) == probes
