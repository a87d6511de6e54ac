"""Tasks that live as long as an aiohttp application (I/O): started with it, stopped with it, and a
crash of one stops the process. The webhook (watches, TLS reload, Lease, reservation sweep) and the
burst controller (pod watch, Lease, scan loops) both run their loops this way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

BackgroundTask = Callable[[], Coroutine[Any, Any, None]]


def supervised(
    tasks: Sequence[BackgroundTask], *, on_stop: Callable[[], Coroutine[Any, Any, None]] | None = None
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup_ctx: start `tasks` with the app; on shutdown await `on_stop` first (a leader
    releases its Lease while its loops still run), then cancel and await the tasks.

    If a task crashes (they are built not to), the process stops gracefully and its Deployment
    restarts it: failing loudly beats serving from a cache or loop that silently stopped."""

    async def ctx(_app: web.Application) -> AsyncIterator[None]:
        running = [asyncio.create_task(task()) for task in tasks]

        def crashed(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                log.critical("background task crashed", exc_info=task.exception())
                os.kill(os.getpid(), signal.SIGTERM)

        for task in running:
            task.add_done_callback(crashed)
        yield
        if on_stop is not None:
            await on_stop()
        for task in running:
            task.remove_done_callback(crashed)
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return ctx
