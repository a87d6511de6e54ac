"""How much of the SFTP endpoint one pod holds (gateway.connection_limits)."""

from __future__ import annotations

from gateway.connection_limits import PodConnections, session_refusal

POD, OTHER = "pod-a", "pod-b"


def test_a_pod_is_refused_past_its_limit_and_admitted_again_once_one_closes() -> None:
    held = PodConnections(limit=2)
    assert held.admit(POD) is None and held.admit(POD) is None
    refusal = held.admit(POD)
    assert refusal is not None and "already holds 2 connections" in refusal
    assert held.admit(OTHER) is None  # another pod is never refused for it
    held.release(POD)
    assert held.admit(POD) is None
    assert (held.held(POD), held.held(OTHER)) == (2, 1)


def test_a_pod_with_nothing_open_is_forgotten() -> None:
    held = PodConnections(limit=1)
    assert held.admit(POD) is None
    held.release(POD)
    held.release(POD)  # a second release never goes below nothing
    assert held.held(POD) == 0 and held.admit(POD) is None


def test_sessions_on_a_connection_are_bounded() -> None:
    assert session_refusal(0, limit=2) is None and session_refusal(1, limit=2) is None
    refusal = session_refusal(2, limit=2)
    assert refusal is not None and "already holds 2 SFTP sessions" in refusal
