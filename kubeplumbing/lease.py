"""The Lease election loop: reads and compare-and-swaps one coordination.k8s.io Lease (I/O).

The rules are in `kubeplumbing.leadership`; this adapter only talks to the API server, from a worker
thread (the kubernetes client is synchronous), and never while an admission request waits: a
review only asks `standing()`, which reads memory.

Why our own loop and not `kubernetes.leaderelection`: that module locks a ConfigMap rather than a
Lease, cannot release on shutdown (a rolling update would leave the webhook leaderless for a whole
lease duration), cannot be cancelled, and calls `logging.basicConfig` on import.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import kubernetes
from kubernetes.client.rest import ApiException

from kubeplumbing import leadership
from kubeplumbing.leadership import HandedOver, LeaseRecord, LeaseTiming, Observation, Standing

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
REQUEST_TIMEOUT = (2.0, 5.0)  # connect, read: well inside the renew deadline
# A release re-reads and retries after a conflict this many times: each conflict is another write
# landing between our read and our write (a renewal of ours in flight, at most one), so more mean
# someone keeps writing the Lease, and the next leader waits out the lease duration instead.
RELEASE_ATTEMPTS = 3
# How long a release waits for a round in flight: one call's whole timeout (it is normally milliseconds).
RELEASE_WAIT_SECONDS = sum(REQUEST_TIMEOUT)


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class _Round:
    observation: Observation
    started: float  # before our write: renewal age is counted conservatively from here
    written: LeaseRecord | None = None  # what we wrote, when we hold the Lease after this round
    handed: list[HandedOver] | None = None  # set when this round made us leader
    plan: leadership.RoundPlan = "take"


class LeaseConflict(Exception):
    """409: someone wrote the Lease since we read it (the compare-and-swap lost)."""


class LeaseApi(Protocol):
    """The three Lease calls the election makes; they raise LeaseConflict on 409."""

    def read(self, namespace: str, name: str) -> LeaseRecord | None: ...

    def create(self, namespace: str, body: dict[str, Any]) -> LeaseRecord: ...

    def replace(self, namespace: str, name: str, body: dict[str, Any]) -> LeaseRecord: ...


class KubernetesLeases:
    """LeaseApi on the kubernetes client (raw JSON: the model classes are not needed)."""

    def __init__(self, api_client: Any) -> None:
        self._api = kubernetes.client.CoordinationV1Api(api_client)

    def read(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            response = self._api.read_namespaced_lease(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return None
            raise
        return leadership.parse_lease(json.loads(response.data))

    def create(self, namespace: str, body: dict[str, Any]) -> LeaseRecord:
        return self._written(
            lambda: self._api.create_namespaced_lease(
                namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        )

    def replace(self, namespace: str, name: str, body: dict[str, Any]) -> LeaseRecord:
        return self._written(
            lambda: self._api.replace_namespaced_lease(
                name, namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        )

    @staticmethod
    def _written(write: Callable[[], Any]) -> LeaseRecord:
        try:
            response = write()
        except ApiException as error:
            if error.status == HTTP_CONFLICT:
                raise LeaseConflict(str(error.reason)) from error
            raise
        return leadership.parse_lease(json.loads(response.data))


@dataclass(frozen=True, slots=True)
class _Release:
    record: LeaseRecord | None  # the Lease after the attempt: our release, or what someone else wrote
    written: bool  # False: the Lease was not ours (any more), or every attempt conflicted
    attempts: int
    conflict: str = ""  # the last conflict, when every attempt lost one


class LeaseElector:
    def __init__(
        self,
        leases: LeaseApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        url: str,
        timing: LeaseTiming,
        clock: Callable[[], float],
        on_started_leading: Callable[[Sequence[HandedOver]], None],
        export_handover: Callable[[], Sequence[HandedOver]],
        fit_to_lead: Callable[[], tuple[bool, str]] = lambda: (True, ""),
    ) -> None:
        """`fit_to_lead`: whether this replica may lead now, and if not why (the webhook: its cache is
        synced and fresh); asked on the loop before each round."""
        self._leases = leases
        self._namespace, self._name = namespace, name
        self.identity, self._url = identity, url
        self._timing, self._clock = timing, clock
        self._on_started_leading = on_started_leading
        self._export_handover = export_handover
        self._fit_to_lead = fit_to_lead
        self._observation: Observation | None = None
        self._last_renewed: float | None = None
        self._stopping = False
        # Held around every Lease write of ours (a round, a release): a release never races a
        # renewal in flight, and it sees what that renewal wrote (and what a takeover adopted).
        self._writing = asyncio.Lock()
        self.started_leading = 0
        self.stepped_down = 0
        self.round_failures = 0
        self.release_failures = 0

    # ----- read by the request path (memory only) ----------------------------------------------

    def standing(self) -> Standing:
        if self._observation is None or self._stopping:
            return "candidate"
        return leadership.standing(
            self._observation,
            identity=self.identity,
            last_renewed=self._last_renewed,
            now=self._clock(),
            timing=self._timing,
        )

    def leader_url(self) -> str:
        """The holder's advertised URL while someone else leads; "" otherwise."""
        record = self._observation.record if self._observation else None
        if record is None or record.holder in ("", self.identity):
            return ""
        return record.leader_url

    # ----- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            try:
                async with self._writing:
                    if self._stopping:  # checked once the lock is ours: a release may have taken it first
                        return
                    fit, unfit_reason = self._fit_to_lead()
                    result = await asyncio.to_thread(self._round, self._observation, fit)
                    self._apply(result)
                    if result.plan == "step-down":
                        await self._step_down(unfit_reason)
            except Exception:  # an API hiccup costs one round; standing() ages a stale lead out
                self.round_failures += 1
                log.warning("lease round failed", extra={"lease": self._name}, exc_info=True)
            await asyncio.sleep(self._timing.retry)

    def _apply(self, result: _Round) -> None:
        """On the loop, the only place our standing changes: a new leader first takes the handed-
        over reservations into the cache, and only then does standing() say "leader". Applied even
        while stopping: a release that waited for this round passes the adopted reservations on."""
        self._observation = result.observation
        if result.written is None:
            return
        if result.handed is not None:
            self.started_leading += 1
            self._on_started_leading(result.handed)
            log.info(
                "started leading",
                extra={"lease": self._name, "identity": self.identity, "handed_over": len(result.handed)},
            )
        self._observation = Observation(record=result.written, seen_at=result.started)
        self._last_renewed = result.started

    def _round(self, previous: Observation | None, fit: bool) -> _Round:
        """In a worker thread: read the Lease and, if we may, write ourselves as holder (CAS)."""
        record = self._leases.read(self._namespace, self._name)
        started = self._clock()
        observation = leadership.observe(previous, record, now=started)
        plan = leadership.plan_round(observation, identity=self.identity, now=started, fit=fit)
        if plan != "take":
            return _Round(observation=observation, started=started, plan=plan)
        body = leadership.build_lease_body(
            name=self._name,
            namespace=self._namespace,
            identity=self.identity,
            url=self._url,
            timing=self._timing,
            previous=record,
            now_rfc3339=_now_rfc3339(),
        )
        try:
            if record is None:
                written = self._leases.create(self._namespace, body)
            else:
                written = self._leases.replace(self._namespace, self._name, body)
        except LeaseConflict:
            return _Round(observation=observation, started=started)  # someone else wrote first
        taking_over = record is None or record.holder != self.identity
        handed = leadership.decode_handover(record.handover if record is not None else "") if taking_over else None
        return _Round(observation=observation, started=started, written=written, handed=handed)

    # ----- giving the Lease up -----------------------------------------------------------------

    async def _step_down(self, reason: str) -> None:
        """We hold the Lease but our cache may not decide (the router already decides nothing here):
        hand it over now, with our reservations, so a replica that sees the cluster leads. The Lease
        stays ours if the release fails; renewals stopped, so it expires after a lease duration."""
        self._last_renewed = None  # standing() stops saying "leader" whatever the release's fate
        if await self._hand_over(why="cache not fit to decide"):
            self.stepped_down += 1
            log.warning(
                "stopped leading: cache not fit to decide",
                extra={"lease": self._name, "identity": self.identity, "reason": reason},
            )

    async def release(self) -> None:
        """Give up the Lease at once, leaving our reservations to the next leader. Idempotent. Waits
        for a round in flight (a renewal writes a new resourceVersion, which our release must carry);
        if that round hangs, releases anyway: the compare-and-swap keeps the two writes apart."""
        if self._stopping:
            return
        self._stopping = True  # no new round; standing() says "candidate": nothing more is decided here
        try:
            await asyncio.wait_for(self._writing.acquire(), RELEASE_WAIT_SECONDS)
        except TimeoutError:
            log.warning("lease round still in flight; releasing anyway", extra={"lease": self._name})
            await self._hand_over(why="stopping")
            return
        try:
            record = self._observation.record if self._observation else None
            if record is not None and record.holder == self.identity:
                await self._hand_over(why="stopping")
        finally:
            self._writing.release()

    async def _hand_over(self, *, why: str) -> bool:
        """Release the Lease with our reservations attached; the caller holds `_writing` (or gave up
        waiting for it). Returns whether the Lease is no longer ours."""
        reservations = self._export_handover()
        handover = leadership.encode_handover(reservations)
        context = {
            "lease": self._name,
            "identity": self.identity,
            "reservations": min(len(reservations), leadership.MAX_HANDOVER_RESERVATIONS),
            "why": why,
        }
        try:
            outcome = await asyncio.to_thread(self._write_release, handover)
        except Exception as exc:  # the API server is unreachable: say what is lost
            self.release_failures += 1
            log.warning(
                "lease not released: reservations not handed over",
                extra={**context, "error": str(exc)[:300]},
                exc_info=True,
            )
            return False
        if outcome.conflict:
            self.release_failures += 1
            log.warning(
                "lease not released: reservations not handed over",
                extra={**context, "attempts": outcome.attempts, "error": outcome.conflict[:300]},
            )
            return False
        self._observation = Observation(record=outcome.record, seen_at=self._clock())
        self._last_renewed = None
        if outcome.written:
            log.info("released lease", extra=context)
        return True

    def _write_release(self, handover: str) -> _Release:
        """In a worker thread: read the Lease and, while it is ours, write the release (CAS); on a
        conflict (a renewal of ours, or anyone's write, landed in between) read again and retry."""
        conflict = ""
        for attempt in range(1, RELEASE_ATTEMPTS + 1):
            record = self._leases.read(self._namespace, self._name)
            if record is None or record.holder != self.identity:
                return _Release(record=record, written=False, attempts=attempt)
            body = leadership.build_release_body(record, name=self._name, namespace=self._namespace, handover=handover)
            try:
                return _Release(
                    record=self._leases.replace(self._namespace, self._name, body), written=True, attempts=attempt
                )
            except LeaseConflict as exc:
                conflict = str(exc) or "conflict"
        return _Release(record=None, written=False, attempts=RELEASE_ATTEMPTS, conflict=conflict)
