"""The election rules (kubeplumbing.leadership): who may take the Lease, who decides, what is handed over."""

from __future__ import annotations

import pytest

from kubeplumbing import leadership
from kubeplumbing.leadership import HandedOver, LeaseRecord, LeaseTiming, Observation

TIMING = LeaseTiming(duration=8.0, renew_deadline=5.0, retry=0.5)


def record(holder: str, rv: str = "1", *, duration: float = 8.0, handover: str = "") -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        duration=duration,
        transitions=3,
        resource_version=rv,
        leader_url="https://a:8443",
        handover=handover,
    )


@pytest.mark.parametrize(
    ("retry", "deadline", "duration"),
    [(0.0, 5.0, 8.0), (5.0, 5.0, 8.0), (0.5, 8.0, 8.0), (0.5, 9.0, 8.0)],
)
def test_timing_must_be_ordered(retry: float, deadline: float, duration: float) -> None:
    with pytest.raises(ValueError, match="lease timing must satisfy"):
        LeaseTiming(duration=duration, renew_deadline=deadline, retry=retry)


def test_observation_keeps_first_seen_time_until_the_record_changes() -> None:
    first = leadership.observe(None, record("a", "1"), now=10.0)
    same = leadership.observe(first, record("a", "1"), now=15.0)
    renewed = leadership.observe(same, record("a", "2"), now=16.0)
    assert (first.seen_at, same.seen_at, renewed.seen_at) == (10.0, 10.0, 16.0)


@pytest.mark.parametrize(
    ("lease", "seen_at", "now", "expected"),
    [
        (None, 0.0, 0.0, True),  # no Lease yet: create it
        (record(""), 0.0, 0.0, True),  # released: free at once
        (record("me"), 0.0, 100.0, True),  # ours: renew
        (record("other"), 10.0, 17.9, False),  # live holder
        (record("other"), 10.0, 18.0, True),  # not renewed for a whole duration: expired
        (record("other", duration=30.0), 10.0, 18.0, False),  # the holder's own duration counts
    ],
)
def test_may_acquire(lease: LeaseRecord | None, seen_at: float, now: float, expected: bool) -> None:
    observation = Observation(record=lease, seen_at=seen_at)
    assert leadership.may_acquire(observation, identity="me", now=now) is expected


@pytest.mark.parametrize(
    ("lease", "last_renewed", "now", "expected"),
    [
        (record("me"), 10.0, 14.9, "leader"),
        (record("me"), 10.0, 15.0, "candidate"),  # renewals failing: stop deciding before anyone may take over
        (record("me"), None, 10.0, "candidate"),
        (record("other"), None, 12.0, "follower"),
        (record("other"), None, 30.0, "candidate"),  # holder expired
        (record(""), None, 10.0, "candidate"),
        (None, None, 10.0, "candidate"),
    ],
)
def test_standing(lease: LeaseRecord | None, last_renewed: float | None, now: float, expected: str) -> None:
    observation = Observation(record=lease, seen_at=10.0)
    got = leadership.standing(observation, identity="me", last_renewed=last_renewed, now=now, timing=TIMING)
    assert got == expected


def test_renew_deadline_ends_our_lead_before_a_follower_may_take_over() -> None:
    # The safety argument: our "leader" ends at renew_deadline after the last renewal, a follower's
    # takeover starts no earlier than `duration` after it saw that renewal (at the earliest, when it
    # was made). At no instant may both hold: checked every 50 ms over twice the Lease's duration.
    renewed_at = 10.0
    seen_by_the_follower = Observation(record=record("me"), seen_at=renewed_at)
    we_lead, follower_may_take = [], []
    for step in range(int(2 * TIMING.duration / 0.05)):
        now = renewed_at + step * 0.05
        leading = (
            leadership.standing(seen_by_the_follower, identity="me", last_renewed=renewed_at, now=now, timing=TIMING)
            == "leader"
        )
        taking = leadership.may_acquire(seen_by_the_follower, identity="other", now=now)
        assert not (leading and taking), now
        we_lead.append(leading)
        follower_may_take.append(taking)
    assert any(we_lead) and any(follower_may_take)  # both phases happen: the check above is not vacuous


def test_lease_body_is_a_compare_and_swap_on_the_read_version() -> None:
    body = leadership.build_lease_body(
        name="l", namespace="ns", identity="me", url="https://me:8443", timing=TIMING,
        previous=record("other", "42", handover="[]"), now_rfc3339="2026-01-01T00:00:00.000000Z",
    )  # fmt: skip
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["metadata"]["annotations"] == {leadership.ANNOTATION_LEADER_URL: "https://me:8443"}
    assert body["spec"]["holderIdentity"] == "me"
    assert body["spec"]["leaseTransitions"] == 4
    assert body["spec"]["acquireTime"] == body["spec"]["renewTime"]


def test_renewal_keeps_acquire_time_and_transitions() -> None:
    body = leadership.build_lease_body(
        name="l", namespace="ns", identity="me", url="u", timing=TIMING, previous=record("me", "7"),
        now_rfc3339="2026-01-01T00:00:01.000000Z",
    )  # fmt: skip
    assert "acquireTime" not in body["spec"]
    assert body["spec"]["leaseTransitions"] == 3


def test_release_empties_the_holder_and_carries_the_reservations() -> None:
    body = leadership.build_release_body(record("me", "9"), name="l", namespace="ns", handover="[1]")
    assert body["spec"]["holderIdentity"] == ""
    assert body["metadata"]["resourceVersion"] == "9"
    assert body["metadata"]["annotations"][leadership.ANNOTATION_HANDOVER] == "[1]"
    released = leadership.parse_lease(body)
    assert leadership.may_acquire(Observation(record=released, seen_at=0.0), identity="next", now=0.0)


def test_handover_round_trips_and_drops_malformed_entries() -> None:
    items = [
        HandedOver(reservation_id="r1", namespace="ns", node="n1", requests={"nvidia.com/gpu": 2}, expires_in=90.0),
        HandedOver(reservation_id="r2", namespace="", node="n2", requests={"cpu": 500}, expires_in=1.5),
    ]
    assert leadership.decode_handover(leadership.encode_handover(items)) == items
    bad = (
        '[{"id":"x"},5,{"id":"r","ns":"n","node":"a","req":{"g":1.5},"ttl":3},'
        '{"id":"r","ns":"n","node":"a","req":{},"ttl":-1}]'
    )
    assert leadership.decode_handover(bad) == []
    assert leadership.decode_handover("not json") == []
    assert leadership.decode_handover('{"a":1}') == []


def test_parse_lease_reads_absent_fields_as_empty() -> None:
    parsed = leadership.parse_lease({"metadata": {"resourceVersion": "5"}, "spec": {}})
    assert parsed == LeaseRecord(
        holder="", duration=0.0, transitions=0, resource_version="5", leader_url="", handover=""
    )


@pytest.mark.parametrize(
    ("lease", "seen_at", "now", "fit", "expected"),
    [
        pytest.param(None, 0.0, 0.0, True, "take", id="no-lease-fit"),
        pytest.param(None, 0.0, 0.0, False, "watch", id="no-lease-unfit-never-creates"),
        pytest.param(record(""), 0.0, 0.0, True, "take", id="free-fit"),
        pytest.param(record(""), 0.0, 0.0, False, "watch", id="free-unfit-never-takes"),
        pytest.param(record("me"), 0.0, 1.0, True, "take", id="ours-fit-renews"),
        pytest.param(record("me"), 0.0, 1.0, False, "step-down", id="ours-unfit-releases"),
        pytest.param(record("other"), 10.0, 12.0, True, "watch", id="live-holder"),
        pytest.param(record("other"), 10.0, 12.0, False, "watch", id="live-holder-unfit"),
        pytest.param(record("other"), 10.0, 18.0, True, "take", id="expired-fit"),
        pytest.param(record("other"), 10.0, 18.0, False, "watch", id="expired-unfit-never-takes"),
    ],
)
def test_plan_round(lease: LeaseRecord | None, seen_at: float, now: float, fit: bool, expected: str) -> None:
    observation = Observation(record=lease, seen_at=seen_at)
    assert leadership.plan_round(observation, identity="me", now=now, fit=fit) == expected
