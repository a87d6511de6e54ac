"""The Lease elector (kubeplumbing.lease) against an in-memory Lease with the API server's compare-and-swap:
releasing while a renewal is in flight, conflicts on release, and who may take or keep the Lease."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubeplumbing import leadership
from kubeplumbing.leadership import HandedOver
from kubeplumbing.lease import RELEASE_ATTEMPTS
from tests.support.leases import TIMING, InMemoryLease, Replica, until

RESERVATION = HandedOver(
    reservation_id="r1", namespace="ns", node="gpu-a", requests={"nvidia.com/gpu": 1}, expires_in=60.0
)


@pytest.fixture
def lease() -> InMemoryLease:
    return InMemoryLease()


@pytest.fixture
def running() -> Iterator[list[asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()


async def test_release_waits_for_a_renewal_in_flight_and_hands_the_reservations_over(
    lease: InMemoryLease, running: list[asyncio.Task[None]]
) -> None:
    replica = Replica(lease, "a", reservations=[RESERVATION])
    running.append(asyncio.create_task(replica.elector.run()))
    await until(lambda: replica.elector.standing() == "leader")
    renewal_held, release_arrived = threading.Event(), threading.Event()
    held_at_version: list[int] = []

    def renewal_lands_first(body: dict[str, Any]) -> None:
        if body["spec"]["holderIdentity"] and not renewal_held.is_set():  # the next renewal: held in flight
            held_at_version.append(lease.version)
            renewal_held.set()
            release_arrived.wait(timeout=0.5)
        elif not body["spec"]["holderIdentity"]:  # a release: it reaches the API server after that renewal
            release_arrived.set()
            deadline = time.monotonic() + 0.5
            while lease.version == held_at_version[0] and time.monotonic() < deadline:
                time.sleep(0.005)

    lease.on_replace = renewal_lands_first
    await until(renewal_held.is_set)
    await replica.elector.release()
    assert lease.record.holder == ""
    assert leadership.decode_handover(lease.record.handover) == [RESERVATION]
    assert replica.elector.standing() == "candidate"


async def test_a_release_that_keeps_conflicting_is_retried_then_reported(
    lease: InMemoryLease, running: list[asyncio.Task[None]], caplog: pytest.LogCaptureFixture
) -> None:
    replica = Replica(lease, "a", reservations=[RESERVATION])
    running.append(asyncio.create_task(replica.elector.run()))
    await until(lambda: replica.elector.standing() == "leader")
    releases: list[int] = []

    def someone_else_writes_first(body: dict[str, Any]) -> None:
        if not body["spec"]["holderIdentity"]:
            releases.append(1)
            with lease.lock:  # a renewal of ours, or any writer: the release's read is stale again
                lease.version += 1
                assert lease.body is not None
                lease.body["metadata"]["resourceVersion"] = str(lease.version)

    lease.on_replace = someone_else_writes_first
    with caplog.at_level(logging.WARNING, logger="kubeplumbing.lease"):
        await replica.elector.release()
    assert len(releases) == RELEASE_ATTEMPTS
    assert lease.record.holder == "a"  # not released: the next leader waits out the lease duration
    [line] = [r for r in caplog.records if r.getMessage() == "lease not released: reservations not handed over"]
    assert (line.lease, line.identity, line.reservations, line.attempts) == ("leader", "a", 1, RELEASE_ATTEMPTS)  # type: ignore[attr-defined]
    assert "modified" in line.error  # type: ignore[attr-defined]


async def test_a_follower_stopping_writes_nothing(lease: InMemoryLease, running: list[asyncio.Task[None]]) -> None:
    leader, follower = Replica(lease, "a"), Replica(lease, "b")
    running.append(asyncio.create_task(leader.elector.run()))
    await until(lambda: leader.elector.standing() == "leader")
    running.append(asyncio.create_task(follower.elector.run()))
    await until(lambda: follower.elector.standing() == "follower")
    writers: list[str] = []
    lease.on_replace = lambda body: writers.append(body["spec"]["holderIdentity"])
    await follower.elector.release()
    await asyncio.sleep(TIMING.retry * 3)
    assert lease.record.holder == "a"
    assert set(writers) == {"a"}  # only the leader's renewals
    assert follower.elector.standing() == "candidate"


async def test_a_replica_whose_cache_is_not_fit_never_takes_the_lease(
    lease: InMemoryLease, running: list[asyncio.Task[None]]
) -> None:
    replica = Replica(lease, "a")
    replica.fit = False
    running.append(asyncio.create_task(replica.elector.run()))
    await asyncio.sleep(TIMING.retry * 10)
    assert lease.body is None  # not even created
    assert replica.elector.standing() == "candidate"
    replica.fit = True
    await until(lambda: replica.elector.standing() == "leader")


async def test_a_leader_whose_cache_goes_stale_hands_the_lease_and_its_reservations_to_a_fit_replica(
    lease: InMemoryLease, running: list[asyncio.Task[None]], caplog: pytest.LogCaptureFixture
) -> None:
    stale, healthy = Replica(lease, "a", reservations=[RESERVATION]), Replica(lease, "b")
    running.append(asyncio.create_task(stale.elector.run()))
    await until(lambda: stale.elector.standing() == "leader")
    running.append(asyncio.create_task(healthy.elector.run()))
    await until(lambda: healthy.elector.standing() == "follower")
    with caplog.at_level(logging.INFO, logger="kubeplumbing.lease"):
        stale.fit = False
        await until(lambda: healthy.elector.standing() == "leader")
    assert healthy.adopted == [RESERVATION]
    await until(lambda: stale.elector.standing() == "follower")
    assert stale.elector.stepped_down == 1  # taken over because it was released, not because it expired
    [line] = [r for r in caplog.records if r.getMessage() == "stopped leading: cache not fit to decide"]
    assert line.reason == "pods watch broken for 61s (limit 60s)"  # type: ignore[attr-defined]
    stale.fit = True  # fit again: a follower while the other leads
    rounds = stale.rounds
    await until(lambda: stale.rounds >= rounds + 3)  # rounds in which it could have taken the lease, fit
    assert (stale.elector.standing(), lease.record.holder) == ("follower", "b")
