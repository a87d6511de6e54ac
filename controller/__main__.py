"""Composition root: settings -> logging -> API client -> store + watch -> Lease -> loops -> HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import requests
from aiohttp import web

from controller import identity, stranding
from controller.app import create_app, every
from controller.gatewayjobs import GatewayAccess, GatewayJobs
from controller.homecomer import Homecomer
from controller.keptreporter import INTERVAL_SECONDS as KEPT_INTERVAL_SECONDS
from controller.keptreporter import KeptReporter
from controller.kube import Kube, PodFeed
from controller.machinerates import MachineRates
from controller.metrics import Metrics
from controller.mover import Mover
from controller.reaping import Reaper
from controller.rebursting import Reburster
from controller.recording import JobRecorder
from controller.settings import Credentials, Settings, SettingsError, parse_settings
from controller.spendkeeping import SpendKeeper
from controller.stopping import Stopper
from controller.store import PodStore
from jarvice import client
from kubeplumbing.background import BackgroundTask
from kubeplumbing.lease import KubernetesLeases, LeaseElector
from kubeplumbing.logs import configure_logging
from kubeplumbing.watching import ListWatch, load_api_client

log = logging.getLogger("controller")

# The reaper's JARVICE calls: short per-call timeouts and a small outage budget, so one round never
# blocks for long; the next round simply tries again.
JARVICE_CONNECT_TIMEOUT, JARVICE_READ_TIMEOUT = 5.0, 30.0
JARVICE_RETRY = client.RetryPolicy(base_seconds=1.0, cap_seconds=10.0, outage_seconds=30.0)


def _jarvice_client(credentials: Credentials, session: requests.Session) -> client.JarviceClient:
    return client.JarviceClient(
        base_url=credentials.api_url,
        username=credentials.username,
        apikey=credentials.apikey,
        session=session,
        connect_timeout=JARVICE_CONNECT_TIMEOUT,
        read_timeout=JARVICE_READ_TIMEOUT,
        retry=JARVICE_RETRY,
        sleep=time.sleep,
        clock=time.monotonic,
        rng=random.Random(),
    )


async def _build(settings: Settings) -> web.Application:
    api_client = load_api_client(settings.kubeconfig)
    store = PodStore(clock=time.monotonic)
    watcher = ListWatch(api_client, "pods", PodFeed(store))
    elector = LeaseElector(
        KubernetesLeases(load_api_client(settings.kubeconfig)),  # its own pool: renewals never queue behind the watch
        namespace=settings.lease_namespace,
        name=settings.lease_name,
        identity=settings.identity,
        url="",  # nobody forwards to the controller
        timing=settings.lease_timing,
        clock=time.monotonic,
        on_started_leading=lambda _handed: None,
        export_handover=lambda: (),
        # A replica whose pod watch has not listed, or broke, would see every job as orphaned (the reaper
        # skips its rounds then) and strands nothing: it leaves the lead to one that sees the cluster.
        fit_to_lead=lambda: store.fresh(stale_after=settings.watch_stale_seconds),
    )

    def is_leader() -> bool:
        return elector.standing() == "leader"

    metrics = Metrics(is_leader=is_leader)
    kube = Kube(api_client, reporting_instance=settings.identity)

    async def watch() -> None:
        await asyncio.to_thread(watcher.run)

    background: list[BackgroundTask] = [watch, elector.run]
    # Outputs a burst pod's copy-back left in the vault: an Event on the pod and its Job (no JARVICE call).
    kept = KeptReporter(
        store=store, kube=kube, metrics=metrics, is_leader=is_leader, stale_after=settings.watch_stale_seconds
    )
    background.append(every(KEPT_INTERVAL_SECONDS, kept.round, name="kept-in-vault"))
    came_home: set[str] = set()  # Job UIDs a pod came home for: the homecomer adds, the re-burster reads
    if settings.reburst:
        reburster = Reburster(
            store=store,
            kube=kube,
            policy=stranding.Policy(threshold=settings.stranded_seconds, cap=settings.reburst_cap),
            metrics=metrics,
            is_leader=is_leader,
            wall_clock=time.time,  # lastTransitionTime is the API server's wall clock
            came_home=came_home,
        )
        background.append(every(settings.scan_seconds, reburster.scan, name="reburst"))
    session = requests.Session()
    # The cluster identity tells this cluster's jobs from others': read once, the reaper and the
    # spend record wait for it (and a gauge says while it is not known).
    cluster_known = asyncio.Event()
    cluster_holder: list[str] = []
    reaping = settings.reap_orphans and settings.credentials is not None

    async def know_cluster() -> None:
        cluster = await identity.resolve_cluster_identity(
            kube.read_namespace_uid,
            name=settings.cluster_name,
            on_failure=metrics.errors.labels(kind="kubernetes-identity").inc,
        )
        cluster_holder.append(cluster)
        metrics.cluster.labels(cluster=cluster).set(1)
        metrics.cluster_identity_known.set(1)
        metrics.reaper_running.set(1 if reaping and not settings.orphan_dry_run else 0)
        log.info("cluster identity", extra={"cluster": cluster, "cluster_name": settings.cluster_name})
        cluster_known.set()

    metrics.cluster_identity_known.set(0)
    metrics.reaper_running.set(0)
    background.append(know_cluster)
    if reaping and settings.credentials is not None:
        credentials = settings.credentials

        async def reap() -> None:
            await cluster_known.wait()
            reaper = Reaper(
                store=store,
                jarvice=_jarvice_client(credentials, session),
                kube=kube,
                cluster=cluster_holder[0],
                grace=settings.orphan_grace_seconds,
                interval=settings.orphan_interval_seconds,
                dry_run=settings.orphan_dry_run,
                stale_after=settings.watch_stale_seconds,
                metrics=metrics,
                is_leader=is_leader,
                clock=time.monotonic,
                wall_clock=time.time,  # deletionTimestamp is the API server's wall clock
            )
            await every(settings.orphan_interval_seconds, reaper.round, name="reap")()

        background.append(reap)
    else:
        log.warning("orphan reaper off", extra={"reason": settings.reap_disabled_reason})
    gateway_session = requests.Session()  # its own: the stopper's loop runs in its own worker thread
    access = (
        GatewayAccess(settings.gateway_url, settings.gateway_ca_file, settings.gateway_token_file)
        if settings.gateway_url
        else None
    )
    if access is not None:

        async def stop_unaccounted() -> None:
            await cluster_known.wait()
            stopper = Stopper(
                store=store,
                jobs=GatewayJobs(access, session=gateway_session, read_file=_read_file),
                kube=kube,
                namespace=settings.lease_namespace,
                cluster=cluster_holder[0],
                dry_run=settings.orphan_dry_run,
                stale_after=settings.watch_stale_seconds,
                metrics=metrics,
                is_leader=is_leader,
                orphans_reaped=reaping,
            )
            await every(settings.orphan_interval_seconds, stopper.round, name="stop-unaccounted")()

        background.append(stop_unaccounted)
    else:
        log.warning("unaccounted jobs not stopped", extra={"reason": "no gateway (CONTROLLER_GATEWAY_URL)"})
    rates_session = requests.Session()  # its own: the loops that cost jobs list the machines from their threads
    machine_rates = (
        MachineRates(
            fetch=_jarvice_client(settings.credentials, rates_session).fetch_machines,
            refresh=settings.machines_refresh_seconds,
            clock=time.monotonic,
            on_error=metrics.errors.labels(kind="jarvice-machines").inc,
        )
        if settings.credentials is not None
        else None
    )
    spend_session = requests.Session()  # its own: each loop runs in its own worker thread
    if settings.credentials is not None and machine_rates is not None:
        keeper = SpendKeeper(
            store=store,
            jarvice=_jarvice_client(settings.credentials, spend_session),
            kube=kube,
            namespace=settings.lease_namespace,
            cluster=lambda: cluster_holder[0] if cluster_holder else None,
            metrics=metrics,
            is_leader=is_leader,
            interval=settings.spend_interval_seconds,
            refresh=settings.spend_refresh_seconds,
            rates=machine_rates,
            stale_after=settings.watch_stale_seconds,
            clock=time.monotonic,
            wall_clock=time.time,
        )
        background.append(every(settings.spend_interval_seconds, keeper.round, name="spend"))
    else:
        log.warning("spend record off", extra={"reason": "no JARVICE credentials"})
    homecoming_session = requests.Session()  # its own: each loop runs in its own worker thread
    if settings.homecoming and settings.credentials is not None:
        homecoming_client = _jarvice_client(settings.credentials, homecoming_session)
        homecomer = Homecomer(
            store=store,
            jarvice=homecoming_client,
            kube=kube,
            metrics=metrics,
            is_leader=is_leader,
            interval=settings.homecoming_seconds,
            stale_after=settings.watch_stale_seconds,
            # Running burst jobs of pods that opted in move home from their checkpoints (same loop, same client).
            mover=Mover(
                jarvice=homecoming_client,
                kube=kube,
                metrics=metrics,
                # The checkpoint's age, read in the vault by the gateway (none without one: not known).
                checkpoints=GatewayJobs(access, session=homecoming_session, read_file=_read_file)
                if access is not None
                else None,
            ),
            came_home=came_home,
        )
        background.append(every(settings.homecoming_seconds, homecomer.round, name="homecoming"))
    records_session = requests.Session()  # its own: the reaper's runs in another worker thread
    if settings.job_events and settings.credentials is not None and machine_rates is not None:
        recorder = JobRecorder(
            store=store,
            jarvice=_jarvice_client(settings.credentials, records_session),
            kube=kube,
            metrics=metrics,
            is_leader=is_leader,
            interval=settings.job_events_interval_seconds,
            cost_refresh=settings.cost_refresh_seconds,
            rates=machine_rates,
            stale_after=settings.watch_stale_seconds,
            clock=time.monotonic,
            wall_clock=time.time,  # JARVICE's job times are Unix seconds
        )
        background.append(every(settings.job_events_interval_seconds, recorder.round, name="job-records"))
    else:
        log.warning("job events off", extra={"reason": settings.job_events_disabled_reason})

    async def stop() -> None:
        await elector.release()  # the next leader takes over in one Lease round, not a whole duration
        watcher.stop()
        session.close()
        records_session.close()
        spend_session.close()
        rates_session.close()
        homecoming_session.close()
        gateway_session.close()

    log.info(
        "controller starting",
        extra={
            "identity": settings.identity,
            "lease": settings.lease_name,
            "namespace": settings.lease_namespace,
            "reburst": settings.reburst,
            "stranded_s": settings.stranded_seconds,
            "reburst_cap": settings.reburst_cap,
            "reap_orphans": settings.reap_orphans,
            "orphan_dry_run": settings.orphan_dry_run,
            "orphan_grace_s": settings.orphan_grace_seconds,
            "orphan_interval_s": settings.orphan_interval_seconds,
            "cluster_name": settings.cluster_name,
            "job_events": settings.job_events,
            "job_events_interval_s": settings.job_events_interval_seconds,
            "homecoming": settings.homecoming,
            "gateway": settings.gateway_url,
        },
    )
    return create_app(
        store=store,
        metrics=metrics,
        stale_after=settings.watch_stale_seconds,
        background=tuple(background),
        on_stop=stop,
    )


def _read_file(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ, read_file=_read_file)
    except SettingsError as exc:
        print(exc, file=sys.stderr)  # noqa: T201 - before logging exists, the message is the output
        return 2
    configure_logging(settings.log_level)
    web.run_app(
        _build(settings), host=settings.host, port=settings.port, access_log=None, print=None, shutdown_timeout=10
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
