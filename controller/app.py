"""The controller's HTTP side (/healthz, /readyz, /metrics) and its background loops (I/O)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controller.metrics import Metrics
from controller.store import PodStore
from kubeplumbing.background import BackgroundTask, supervised

log = logging.getLogger(__name__)

METRICS = web.AppKey("metrics", Metrics)
STORE = web.AppKey("store", PodStore)
STALE_AFTER = web.AppKey("stale_after", float)


def every(seconds: float, step: Callable[[], float | None], *, name: str) -> BackgroundTask:
    """A loop that runs the synchronous `step` in a worker thread every `seconds` (or after the
    delay the step returns); a failing step is logged and the loop goes on (the steps catch their
    own expected failures)."""

    async def loop() -> None:
        while True:
            delay = seconds
            try:
                asked = await asyncio.to_thread(step)
                delay = seconds if asked is None else asked
            except Exception:
                log.exception("controller loop step failed", extra={"loop": name})
            await asyncio.sleep(delay)

    return loop


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    fresh, reason = request.app[STORE].fresh(stale_after=request.app[STALE_AFTER])
    return web.Response(text=reason, status=200 if fresh else 503)


async def metrics_endpoint(request: web.Request) -> web.Response:
    return web.Response(
        body=generate_latest(request.app[METRICS].registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def create_app(
    *,
    store: PodStore,
    metrics: Metrics,
    stale_after: float,
    background: tuple[BackgroundTask, ...],
    on_stop: Callable[[], Coroutine[Any, Any, None]],
) -> web.Application:
    app = web.Application()
    app[STORE] = store
    app[METRICS] = metrics
    app[STALE_AFTER] = stale_after
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    app.cleanup_ctx.append(supervised(background, on_stop=on_stop))
    return app
