"""The Lease election loop: reads and compare-and-swaps one coordination.k8s.io Lease (I/O).

The rules are in `webhook.leadership`; this adapter only talks to the API server, from a worker
thread (the kubernetes client is synchronous), and never while an admission request waits: a
review only asks `standing()`, which reads memory.

Why our own loop and not `kubernetes.leaderelection`: that module locks a ConfigMap rather than a
Lease, cannot release on shutdown (a rolling update would leave the webhook leaderless for a whole
lease duration), cannot be cancelled, and calls `logging.basicConfig` on import.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from webhook import leadership
from webhook.leadership import HandedOver, LeaseRecord, LeaseTiming, Observation, Standing

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
REQUEST_TIMEOUT = (2.0, 5.0)  # connect, read: well inside the renew deadline


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str,
        name: str,
        identity: str,
        url: str,
        timing: LeaseTiming,
        clock: Callable[[], float],
        on_started_leading: Callable[[Sequence[HandedOver]], None],
        export_handover: Callable[[], Sequence[HandedOver]],
    ) -> None:
        self._api = kubernetes.client.CoordinationV1Api(api_client)
        self._namespace, self._name = namespace, name
        self.identity, self._url = identity, url
        self._timing, self._clock = timing, clock
        self._on_started_leading = on_started_leading
        self._export_handover = export_handover
        self._observation: Observation | None = None
        self._last_renewed: float | None = None
        self._released = False
        self.transitions_seen = 0

    # ----- read by the request path (memory only) ----------------------------------------------

    def standing(self) -> Standing:
        if self._observation is None or self._released:
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
        while not self._released:
            try:
                handed = await asyncio.to_thread(self._tick)
                if handed is not None:
                    # On the loop: the callback fills the cache, whose only writer is the loop.
                    self._on_started_leading(handed)
            except Exception:  # an API hiccup costs one round; standing() ages a stale lead out
                log.warning("lease round failed", extra={"lease": self._name}, exc_info=True)
            await asyncio.sleep(self._timing.retry)

    def _read(self) -> LeaseRecord | None:
        try:
            response = self._api.read_namespaced_lease(
                self._name, self._namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return None
            raise
        return leadership.parse_lease(json.loads(response.data))

    def _tick(self) -> list[HandedOver] | None:
        """One round; returns the handed-over reservations when this round made us leader."""
        record = self._read()
        now = self._clock()
        self._observation = leadership.observe(self._observation, record, now=now)
        if self._released or not leadership.may_acquire(self._observation, identity=self.identity, now=now):
            return None
        taking_over = record is None or record.holder != self.identity
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
                written = self._api.create_namespaced_lease(
                    self._namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            else:
                written = self._api.replace_namespaced_lease(
                    self._name, self._namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
        except ApiException as error:
            if error.status == HTTP_CONFLICT:
                return None  # someone else wrote first; the next round reads who
            raise
        mine = leadership.parse_lease(json.loads(written.data))
        self._observation = Observation(record=mine, seen_at=now)
        self._last_renewed = now
        if not taking_over:
            return None
        self.transitions_seen += 1
        handed = leadership.decode_handover(record.handover if record is not None else "")
        log.info("started leading", extra={"lease": self._name, "identity": self.identity, "handed_over": len(handed)})
        return handed

    async def release(self) -> None:
        """Give up the Lease at once, leaving our reservations to the next leader. Idempotent."""
        if self._released:
            return
        self._released = True
        record = self._observation.record if self._observation else None
        if record is None or record.holder != self.identity:
            return
        handover = leadership.encode_handover(self._export_handover())
        body = leadership.build_release_body(record, name=self._name, namespace=self._namespace, handover=handover)
        with contextlib.suppress(ApiException):
            await asyncio.to_thread(
                self._api.replace_namespaced_lease,
                self._name,
                self._namespace,
                body,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            log.info("released lease", extra={"lease": self._name, "identity": self.identity})
