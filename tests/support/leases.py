"""The Lease election in memory: one Lease written only by compare-and-swap (as the API server
does), a replica's elector over it, an elector whose standing is fixed, and a wait on the loop."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from kubeplumbing import leadership
from kubeplumbing.leadership import HandedOver, LeaseRecord, LeaseTiming, Standing
from kubeplumbing.lease import LeaseConflict, LeaseElector
from tests.support.deadlines import HANG_SECONDS

TIMING = LeaseTiming(duration=0.8, renew_deadline=0.5, retry=0.02)


class InMemoryLease:
    """One Lease, written only by a compare-and-swap on its resourceVersion (as the API server does).
    `on_replace` runs in the writer's thread before each replace: tests hold a write there."""

    def __init__(self) -> None:
        self.body: dict[str, Any] | None = None
        self.version = 0
        self.lock = threading.Lock()
        self.on_replace: Callable[[dict[str, Any]], None] = lambda _body: None

    def read(self, namespace: str, name: str) -> LeaseRecord | None:
        with self.lock:
            return None if self.body is None else leadership.parse_lease(self.body)

    def create(self, namespace: str, body: dict[str, Any]) -> LeaseRecord:
        with self.lock:
            if self.body is not None:
                raise LeaseConflict("exists")
            return self._store(body)

    def replace(self, namespace: str, name: str, body: dict[str, Any]) -> LeaseRecord:
        self.on_replace(body)
        with self.lock:
            if body["metadata"].get("resourceVersion") != str(self.version):
                raise LeaseConflict("the object has been modified")
            return self._store(body)

    def _store(self, body: dict[str, Any]) -> LeaseRecord:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.body = stored
        return leadership.parse_lease(stored)

    @property
    def record(self) -> LeaseRecord:
        assert self.body is not None
        return leadership.parse_lease(self.body)


class Replica:
    def __init__(self, lease: InMemoryLease, identity: str, *, reservations: list[HandedOver] | None = None) -> None:
        self.adopted: list[HandedOver] = []
        self.reservations = list(reservations or [])
        self.fit = True
        self.rounds = 0  # how many times its elector asked whether it may lead: once a round
        self.elector = LeaseElector(
            lease,
            namespace="ns",
            name="leader",
            identity=identity,
            url=f"https://{identity}:8443",
            timing=TIMING,
            clock=time.monotonic,
            on_started_leading=self.adopted.extend,
            export_handover=lambda: self.reservations,
            fit_to_lead=self._fit_to_lead,
        )

    def _fit_to_lead(self) -> tuple[bool, str]:
        self.rounds += 1
        return self.fit, "" if self.fit else "pods watch broken for 61s (limit 60s)"


async def until(predicate: Callable[[], bool], *, timeout: float = HANG_SECONDS) -> None:
    """`predicate()` true, polled; the timeout is a hang guard, never a bound on the elector's speed."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


class FixedElector:
    def __init__(self, standing: Standing, leader_url: str = "") -> None:
        self._standing, self._url = standing, leader_url

    def standing(self) -> Standing:
        return self._standing

    def leader_url(self) -> str:
        return self._url
