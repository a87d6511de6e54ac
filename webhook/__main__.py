"""Composition root: settings -> logging -> TLS -> cache + watcher -> aiohttp server."""

from __future__ import annotations

import functools
import importlib.machinery
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from aiohttp import web

from kubeplumbing.background import BackgroundTask
from kubeplumbing.leadership import HandedOver
from kubeplumbing.lease import KubernetesLeases, LeaseElector
from kubeplumbing.logs import configure_logging
from kubeplumbing.tls import ReloadingTLS, find_serving_problem
from kubeplumbing.watching import load_api_client
from webhook import admission
from webhook.admission_log import AdmissionLine
from webhook.app import APP_LOGGER, METRICS, ROUTER, cache_fitness, create_app, serve
from webhook.cache import ClusterCache
from webhook.forwarding import Forwarder, build_client_context
from webhook.replicas import ReplicaRouter
from webhook.settings import LeaderElection, Settings, SettingsError, parse_settings
from webhook.spend_feed import SpendFeed
from webhook.sync import KINDS_WITH_JOBS, CacheSync
from webhook.watching import Watcher

log = logging.getLogger("webhook")


async def _build(settings: Settings, tls: ReloadingTLS) -> web.Application:
    clock = time.monotonic
    cache = ClusterCache(
        gpu_resources=settings.gpu_resources,
        clock=clock,
        reservation_ttl=settings.reservation_ttl_seconds,
        scheduler_names=settings.scheduler_names,
        max_reservations=settings.max_reservations,
        max_reservations_per_namespace=settings.max_reservations_per_namespace,
        max_spend_record_age=settings.spend_max_age_seconds,
        wall_clock=time.time,
    )
    sync = CacheSync(cache, clock=clock, kinds=KINDS_WITH_JOBS)
    api_client = load_api_client(settings.kubeconfig)
    watcher = Watcher(api_client, sync)
    app: web.Application

    async def reload_tls() -> None:
        await tls.watch(settings.tls_reload_seconds, on_reload=app[METRICS].tls_reloads.inc)

    background: list[BackgroundTask] = [watcher.run, reload_tls]
    if settings.spend_namespace:
        spend = SpendFeed(
            api_client, sync, namespace=settings.spend_namespace, poll_seconds=settings.spend_poll_seconds
        )
        background.append(spend.run)
    router: ReplicaRouter | None = None
    elector: LeaseElector | None = None
    if settings.leader_election is not None:
        elector, router = _build_election(settings, settings.leader_election, sync, clock)
        background.append(elector.run)
    app = create_app(
        settings,
        cache=cache,
        sync=sync,
        clock=clock,
        background=tuple(background),
        admission_log=AdmissionLine.for_logger(logging.getLogger(APP_LOGGER)),
    )
    if router is not None and elector is not None:
        app[ROUTER] = router
        app[METRICS].watch_election(router=router, elector=elector)
        on_stop = elector.release  # hand the Lease and our reservations over before we go

        async def release(_app: web.Application) -> None:
            await on_stop()
            await router.close()

        app.on_shutdown.append(release)
    return app


def _build_election(
    settings: Settings, election: LeaderElection, sync: CacheSync, clock: Callable[[], float]
) -> tuple[LeaseElector, ReplicaRouter]:
    def adopt(handed: Sequence[HandedOver]) -> None:
        with sync.lock:
            sync.cache.adopt_reservations(handed)

    def export() -> list[HandedOver]:
        with sync.lock:
            return sync.cache.export_reservations()

    # Only a replica that sees the whole cluster, and sees it now, leads and decides.
    fit = functools.partial(cache_fitness, sync, stale_after=settings.watch_stale_seconds)
    elector = LeaseElector(
        KubernetesLeases(load_api_client(settings.kubeconfig)),
        namespace=election.lease_namespace,
        name=election.lease_name,
        identity=election.identity,
        url=election.advertise_url,
        timing=election.timing,
        clock=clock,
        on_started_leading=adopt,
        export_handover=export,
        fit_to_lead=fit,
    )
    context = build_client_context(
        election.peer_ca_file, client_cert=settings.tls_dir / "tls.crt", client_key=settings.tls_dir / "tls.key"
    )
    forwarder = Forwarder(context=context, server_hostname=election.peer_server_name, identity=election.identity)
    router = ReplicaRouter(
        elector,
        forwarder,
        budget=election.wait_seconds,
        forward_timeout=min(2.0, election.wait_seconds),
        cache_ready=fit,
        clock=clock,
    )
    log.info(
        "leader election on",
        extra={"lease": election.lease_name, "namespace": election.lease_namespace, "identity": election.identity},
    )
    return elector, router


def _client_ca_files(settings: Settings) -> tuple[Path, ...]:
    """Who may call /mutate: the API server's client CA and, with leader election, the replicas'
    own CA (a follower forwards reviews to the leader showing the shared serving certificate)."""
    if settings.client_ca_file is None:
        return ()
    peers = (settings.leader_election.peer_ca_file,) if settings.leader_election is not None else ()
    return (settings.client_ca_file, *peers)


def core_is_compiled() -> bool:
    """Whether the decision core runs compiled (images/webhook/compile-core.sh), as the image ships it,
    or from its .py files (a checkout)."""
    return (admission.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except SettingsError as exc:
        print(exc, file=sys.stderr)  # noqa: T201 - before logging exists, the message is the output
        return 2
    configure_logging(settings.log_level)
    if settings.leader_election is not None:
        # The peer CA is the CA the API server is given too (cert-manager's ca.crt, or the Helm
        # chart's tls.caBundle): a certificate it refuses would leave every pod admitted unchanged.
        election = settings.leader_election
        problem = find_serving_problem(
            settings.tls_dir, ca_file=election.peer_ca_file, server_name=election.peer_server_name
        )
        if problem is not None:
            log.error(
                "serving certificate not trusted by its CA",
                extra={
                    "problem": problem,
                    "ca_file": str(election.peer_ca_file),
                    "server_name": election.peer_server_name,
                },
            )
            return 3
    tls = ReloadingTLS(settings.tls_dir, client_ca_files=_client_ca_files(settings))
    log.info(
        "webhook starting",
        extra={
            "host": settings.host,
            "port": settings.port,
            "gpu_resources": list(settings.gpu_resources),
            "compiled_core": core_is_compiled(),
        },
    )
    serve(_build(settings, tls), host=settings.host, port=settings.port, ssl_context=tls.context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
