"""Where a review is decided when several replicas run: here, at the leader, or nowhere (I/O shell
around one pure routing rule).

- The leader decides every review itself, as long as its cache is fit to decide: nodes, pods and
  namespaces listed, and no watch broken for longer than --watch-stale-seconds (what /readyz says).
  A leader whose cache is not fit decides nothing: it waits like a replica without a leader, and
  its elector hands the Lease to a replica that can (kubeplumbing.lease).
- A follower forwards the review, unchanged, to the leader and relays its answer (its own cache
  need not be fit: the leader's decides).
- A review that was already forwarded is decided only by a fit leader; anyone else refuses it (503)
  and the sender asks again, so a review never travels in a loop while the Lease changes hands.
- Nobody leads (a handover in progress, or a crash until the Lease expires): wait up to the
  budget for a leader; if none appears, a fit replica answers with no local promise (`NoLeader`):
  the caller then decides without reserving local GPUs, since nobody can check that they are still
  free. A replica that is not fit cannot decide even that (it does not know the burst budgets or
  the free GPUs): it answers as an unready replica would (`Unready`, HTTP 503), and the API server
  applies the webhook's failurePolicy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from kubeplumbing.leadership import Standing
from webhook.forwarding import ForwardFailed

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05

Action = Literal["decide", "forward", "refuse", "wait", "no-leader", "unready"]


def route(*, standing: Standing, cache_ready: bool, forwarded: bool, leader_url: str, time_left: float) -> Action:
    """The one routing rule, pure. `cache_ready`: this replica's cache is synced and fresh."""
    if standing == "leader" and cache_ready:
        return "decide"
    if forwarded:
        return "refuse"
    if time_left <= 0:
        return "no-leader" if cache_ready else "unready"
    if standing == "follower" and leader_url:
        return "forward"
    return "wait"


class Elector(Protocol):
    def standing(self) -> Standing: ...

    def leader_url(self) -> str: ...


class Forwarding(Protocol):
    async def forward(self, url: str, body: bytes, *, timeout: float) -> bytes: ...

    async def close(self) -> None: ...


# Whether this replica's cache may decide, and if not why (CacheSync.ready under its lock).
CacheReadiness = Callable[[], tuple[bool, str]]


@dataclass(frozen=True, slots=True)
class DecideHere:
    pass


@dataclass(frozen=True, slots=True)
class Relayed:
    body: bytes


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


@dataclass(frozen=True, slots=True)
class NoLeader:
    reason: str


@dataclass(frozen=True, slots=True)
class Unready:
    reason: str


Outcome = DecideHere | Relayed | Refused | NoLeader | Unready


class ReplicaRouter:
    def __init__(
        self,
        elector: Elector,
        forwarder: Forwarding,
        *,
        budget: float,
        forward_timeout: float,
        cache_ready: CacheReadiness,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._elector = elector
        self._forwarder = forwarder
        self._budget = budget
        self._forward_timeout = forward_timeout
        self._cache_ready = cache_ready
        self._clock = clock
        # Plain numbers, read by /metrics (webhook.metrics): only the event loop touches them.
        self.forwarded = 0
        self.forward_failures = 0
        self.leaderless = 0  # reviews no leader answered within the budget

    async def close(self) -> None:
        await self._forwarder.close()

    def leading(self) -> bool:
        """Whether this replica decides: it holds the Lease and its cache is fit to decide."""
        return self._elector.standing() == "leader" and self._cache_ready()[0]

    async def place(self, body: bytes, *, forwarded_by: str) -> Outcome:
        deadline = self._clock() + self._budget
        last_error = ""
        while True:
            time_left = deadline - self._clock()
            ready, unready_reason = self._cache_ready()
            action = route(
                standing=self._elector.standing(),
                cache_ready=ready,
                forwarded=bool(forwarded_by),
                leader_url=self._elector.leader_url(),
                time_left=time_left,
            )
            if action == "decide":
                return DecideHere()
            if action == "refuse":
                return Refused(reason=f"not a leader fit to decide (review forwarded by {forwarded_by})")
            if action == "unready":
                self.leaderless += 1
                return Unready(reason=f"no leader answered within {self._budget:g}s{last_error}, and {unready_reason}")
            if action == "no-leader":
                self.leaderless += 1
                return NoLeader(reason=f"no leader answered within {self._budget:g}s{last_error}")
            if action == "forward":
                url = self._elector.leader_url()
                try:
                    answer = await self._forwarder.forward(url, body, timeout=min(self._forward_timeout, time_left))
                except ForwardFailed as exc:
                    self.forward_failures += 1
                    last_error = f" (last: {exc})"
                    log.warning("forward to leader failed", extra={"leader": url, "error": str(exc)[:300]})
                else:
                    self.forwarded += 1
                    return Relayed(body=answer)
            await asyncio.sleep(min(POLL_SECONDS, max(time_left, 0.0)))
