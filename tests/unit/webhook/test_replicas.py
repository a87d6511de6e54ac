"""Routing a review between replicas (webhook.replicas.route): the rule as a table."""

from __future__ import annotations

import pytest

from webhook.replicas import route


@pytest.mark.parametrize(
    ("standing", "forwarded", "leader_url", "time_left", "expected"),
    [
        ("leader", False, "", 1.0, "decide"),
        ("leader", True, "", 1.0, "decide"),  # a forwarded review reached the leader
        ("leader", False, "", 0.0, "decide"),  # the leader never gives up on its own reviews
        ("follower", False, "https://l:8443", 1.0, "forward"),
        ("follower", True, "https://l:8443", 1.0, "refuse"),  # never forward twice: the sender retries
        ("candidate", True, "", 1.0, "refuse"),
        ("follower", False, "", 1.0, "wait"),  # a holder that advertised no URL yet
        ("candidate", False, "", 1.0, "wait"),  # handover in progress
        ("candidate", False, "", 0.0, "no-leader"),
        ("follower", False, "https://l:8443", 0.0, "no-leader"),
    ],
)
def test_route(standing: str, forwarded: bool, leader_url: str, time_left: float, expected: str) -> None:
    assert route(standing=standing, forwarded=forwarded, leader_url=leader_url, time_left=time_left) == expected  # type: ignore[arg-type]
