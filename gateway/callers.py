"""Who is asking, and for which pod (I/O around the pure identity and terms rules).

TokenReview answers are kept for a short time by the token's hash (never the token), so a runner's
polls do not each cost a review; a pod read for a submit is always fresh, for a read-only call it may
be a few seconds old."""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from gateway.identity import Caller, NotAuthenticated, caller_from_review
from gateway.kube import KubeAdapter
from gateway.terms import NotDecided, check_pod

MAX_CACHED: Final = 4096


@dataclass(frozen=True, slots=True)
class CallerCacheTiming:
    review_seconds: float = 30.0
    pod_seconds: float = 5.0


class _Bounded(OrderedDict[Any, tuple[float, Any]]):
    def put(self, key: Any, value: Any, until: float) -> None:
        self[key] = (until, value)
        self.move_to_end(key)
        while len(self) > MAX_CACHED:
            self.popitem(last=False)

    def fresh(self, key: Any, now: float) -> Any:
        held = self.get(key)
        if held is None or held[0] <= now:
            return None
        return held[1]


class Callers:
    def __init__(
        self, kube: KubeAdapter, *, audience: str, clock: Callable[[], float], timing: CallerCacheTiming
    ) -> None:
        self._kube = kube
        self._audience = audience
        self._clock = clock
        self._timing = timing
        self._reviews = _Bounded()
        self._pods = _Bounded()

    async def authenticate(self, token: str) -> Caller:
        if not token:
            raise NotAuthenticated("no token: give the pod's projected token as the API key")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        caller = self._reviews.fresh(key, now)
        if isinstance(caller, Caller):
            return caller
        review = await asyncio.to_thread(self._kube.review_token, token, audience=self._audience)
        caller = caller_from_review(review, audience=self._audience)
        self._reviews.put(key, caller, now + self._timing.review_seconds)
        return caller

    async def pod(self, caller: Caller, *, fresh: bool) -> dict[str, Any]:
        """The caller's pod, checked to be its own, labelled and decided remote; else NotDecided."""
        now = self._clock()
        key = (caller.namespace, caller.pod_name, caller.pod_uid)
        pod = None if fresh else self._pods.fresh(key, now)
        if pod is None:
            pod = await asyncio.to_thread(self._kube.get_pod, caller.namespace, caller.pod_name)
            if pod is None:
                raise NotDecided("the token's pod is gone")
            self._pods.put(key, pod, now + self._timing.pod_seconds)
        check_pod(pod, caller)
        return dict(pod)
