"""Composition root: settings -> logging -> TLS -> cache + watcher -> aiohttp server."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web
from pythonjsonlogger.json import JsonFormatter

from webhook.app import METRICS, create_app, serve
from webhook.cache import ClusterCache
from webhook.settings import Settings, SettingsError, parse_settings
from webhook.sync import CacheSync
from webhook.tls import ReloadingTLS
from webhook.watching import Watcher, load_api_client

log = logging.getLogger("webhook")


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter("{asctime}{levelname}{name}{message}", style="{", timestamp=False))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The kubernetes client logs request bodies at DEBUG; keep them out of our logs.
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)


async def _build(settings: Settings, tls: ReloadingTLS) -> web.Application:
    clock = time.monotonic
    cache = ClusterCache(
        gpu_resources=settings.gpu_resources,
        clock=clock,
        reservation_ttl=settings.reservation_ttl_seconds,
        scheduler_names=settings.scheduler_names,
        max_reservations=settings.max_reservations,
        max_reservations_per_namespace=settings.max_reservations_per_namespace,
    )
    sync = CacheSync(cache, clock=clock)
    watcher = Watcher(load_api_client(settings.kubeconfig), sync, loop=asyncio.get_running_loop())
    app: web.Application

    async def reload_tls() -> None:
        await tls.watch(settings.tls_reload_seconds, on_reload=app[METRICS].tls_reloads.inc)

    app = create_app(settings, cache=cache, sync=sync, clock=clock, background=(watcher.run, reload_tls))
    return app


def _client_ca_files(settings: Settings) -> tuple[Path, ...]:
    """Who may call /mutate: the API server's client CA and, with leader election, the replicas'
    own CA (a follower forwards reviews to the leader showing the shared serving certificate)."""
    if settings.client_ca_file is None:
        return ()
    peers = (settings.leader_election.peer_ca_file,) if settings.leader_election is not None else ()
    return (settings.client_ca_file, *peers)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except SettingsError as exc:
        print(exc, file=sys.stderr)  # noqa: T201 - before logging exists, the message is the output
        return 2
    configure_logging(settings.log_level)
    tls = ReloadingTLS(settings.tls_dir, client_ca_files=_client_ca_files(settings))
    log.info(
        "webhook starting",
        extra={"host": settings.host, "port": settings.port, "gpu_resources": list(settings.gpu_resources)},
    )
    serve(_build(settings, tls), host=settings.host, port=settings.port, ssl_context=tls.context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
