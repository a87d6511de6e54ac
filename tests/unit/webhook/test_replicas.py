"""Routing a review between replicas (webhook.replicas.route): the rule as a table."""

from __future__ import annotations

import pytest

from webhook.replicas import route

URL = "https://l:8443"


@pytest.mark.parametrize(
    ("standing", "cache_ready", "forwarded", "leader_url", "time_left", "expected"),
    [
        pytest.param("leader", True, False, "", 1.0, "decide", id="leader"),
        pytest.param("leader", True, True, "", 1.0, "decide", id="leader-forwarded"),
        pytest.param("leader", True, False, "", 0.0, "decide", id="leader-never-gives-up-on-its-own"),
        pytest.param("follower", True, False, URL, 1.0, "forward", id="follower"),
        pytest.param("follower", True, True, URL, 1.0, "refuse", id="never-forward-twice"),
        pytest.param("candidate", True, True, "", 1.0, "refuse", id="candidate-forwarded"),
        pytest.param("follower", True, False, "", 1.0, "wait", id="holder-without-url"),
        pytest.param("candidate", True, False, "", 1.0, "wait", id="handover-in-progress"),
        pytest.param("candidate", True, False, "", 0.0, "no-leader", id="no-leader"),
        pytest.param("follower", True, False, URL, 0.0, "no-leader", id="leader-did-not-answer"),
        # A replica whose cache is not synced or fresh never decides, not even as the Lease holder.
        pytest.param("leader", False, False, "", 1.0, "wait", id="unfit-leader-waits-for-a-fit-one"),
        pytest.param("leader", False, True, "", 1.0, "refuse", id="unfit-leader-refuses-forwarded"),
        pytest.param("leader", False, False, "", 0.0, "unready", id="unfit-leader-out-of-time"),
        pytest.param("follower", False, False, URL, 1.0, "forward", id="unfit-follower-forwards"),
        pytest.param("follower", False, False, URL, 0.0, "unready", id="unfit-follower-out-of-time"),
        pytest.param("candidate", False, False, "", 1.0, "wait", id="unfit-candidate-waits"),
        pytest.param("candidate", False, False, "", 0.0, "unready", id="unfit-candidate-no-promise-at-all"),
        pytest.param("candidate", False, True, "", 1.0, "refuse", id="unfit-candidate-forwarded"),
    ],
)
def test_route(
    standing: str, cache_ready: bool, forwarded: bool, leader_url: str, time_left: float, expected: str
) -> None:
    got = route(
        standing=standing,  # type: ignore[arg-type]
        cache_ready=cache_ready,
        forwarded=forwarded,
        leader_url=leader_url,
        time_left=time_left,
    )
    assert got == expected
