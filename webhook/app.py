"""The aiohttp application: /mutate, /healthz, /readyz, /metrics, /drain, and its background tasks."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import orjson
import uvloop
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubeplumbing.background import BackgroundTask, supervised
from webhook import admission, gang_decision, job_policy
from webhook.cache import ClusterCache
from webhook.forwarding import FORWARDED_HEADER
from webhook.metrics import Metrics
from webhook.replicas import NoLeader, Refused, Relayed, ReplicaRouter, Unready
from webhook.review import AdmissionRequest, MalformedReview, parse_review
from webhook.settings import Settings
from webhook.sync import CacheSync

APP_LOGGER = __name__
log = logging.getLogger(APP_LOGGER)

SETTINGS = web.AppKey("settings", Settings)
CACHE = web.AppKey("cache", ClusterCache)
SYNC = web.AppKey("sync", CacheSync)
METRICS = web.AppKey("metrics", Metrics)
# Present when several replicas run: the Lease holder decides, the others forward to it.
ROUTER = web.AppKey("router", ReplicaRouter)
# Writes the per-admission INFO line (its fields); the composition root gives a direct writer.
AdmissionLog = Callable[[dict[str, Any]], None]
ADMISSION_LOG: web.AppKey[AdmissionLog] = web.AppKey("admission_log")


class Drain:
    """Set by the preStop hook (/drain): every answer closes its connection from then on, so the API
    server, which keeps keep-alive connections to this pod after its endpoint is gone, opens new ones
    to a live replica instead of writing a review into a connection this pod is about to close."""

    def __init__(self) -> None:
        self.active = False


DRAIN = web.AppKey("drain", Drain)
RESERVATION_SWEEP_SECONDS = 5.0
# How often a pod waiting for its Job to reach the watch cache looks again (_job_in_cache).
JOB_POLL_SECONDS = 0.02


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _client_verified(request: web.Request) -> bool:
    """With --client-ca-file, TLS asks for a client certificate but cannot require one (the kubelet's
    probes and Prometheus show none); the handshake has already rejected an untrusted one, so a
    peer certificate here is a verified one."""
    if request.app[SETTINGS].client_ca_file is None:
        return True
    return bool(request.transport is not None and request.transport.get_extra_info("peercert"))


async def _job_in_cache(sync: CacheSync, cache: ClusterCache, pod: Mapping[str, Any], *, seconds: float) -> None:
    """An Indexed Job's pod whose Job the watch has not brought yet waits for it, up to `seconds`: the
    Job controller creates the pods milliseconds after the Job, and without its size the pod would be
    kept local (gang_decision.take_up) with its gang, which then never bursts. The wait is on the watch
    cache, polled; the API server is never asked."""
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return
    deadline = time.monotonic() + seconds
    while True:
        with sync.lock:
            waits = gang_decision.awaits_its_job(meta, cache.gang_index.jobs)
        if not waits or time.monotonic() >= deadline:
            return
        await asyncio.sleep(JOB_POLL_SECONDS)


async def mutate(request: web.Request) -> web.Response:
    app = request.app
    counts = app[METRICS].reviews
    started = time.perf_counter()
    counts.in_flight += 1
    try:
        if not _client_verified(request):
            counts.errors["unauthenticated"] += 1
            log.warning("admission review without a client certificate", extra={"remote": request.remote})
            return _error(
                403,
                "a client certificate signed by the webhook's --client-ca-file is required; configure the "
                "API server's AdmissionConfiguration (kubeConfigFile) to present one",
            )
        if request.content_type != "application/json":
            counts.errors["malformed"] += 1
            return _error(415, f"Content-Type must be application/json, got {request.content_type!r}")
        body = await request.read()
        try:
            review = parse_review(body)
        except MalformedReview as exc:
            counts.errors["malformed"] += 1
            log.warning("malformed admission review", extra={"error": str(exc)[:500]})
            return _error(400, str(exc))
        if review.kind == "Job" and review.group == "batch":  # no cluster state read: any replica answers
            job = job_policy.admit(review, app[SETTINGS].gpu_resources)
            counts.decisions[job.outcome] += 1
            log.info("job admitted", extra={"uid": review.uid, "namespace": review.namespace, "reason": job.reason})
            return web.Response(body=orjson.dumps(job.response), content_type="application/json")
        local_refusal = unready_reason = ""
        router = app.get(ROUTER)
        if router is not None:
            placed = await router.place(body, forwarded_by=request.headers.get(FORWARDED_HEADER, ""))
            if isinstance(placed, Relayed):
                counts.decisions["forwarded"] += 1
                return web.Response(body=placed.body, content_type="application/json")
            if isinstance(placed, Refused):
                counts.errors["not-leader"] += 1
                return _error(503, placed.reason)
            if isinstance(placed, Unready):
                unready_reason = placed.reason
            if isinstance(placed, NoLeader):
                local_refusal = placed.reason
        sync = app[SYNC]
        result = None
        if not unready_reason and review.kind == "Pod":
            await _job_in_cache(sync, app[CACHE], review.object, seconds=app[SETTINGS].job_wait_seconds)
        try:
            if not unready_reason:
                with sync.lock:  # the watch threads apply changes under it: decide and reserve as one
                    # Checked with the decision, under the same lock: only a fit cache decides.
                    ready, reason = sync.ready(stale_after=app[SETTINGS].watch_stale_seconds)
                    view_pods, view_nodes = sync.view_versions()
                    if ready:
                        result = admission.admit(
                            review,
                            cache=app[CACHE],
                            policy=app[SETTINGS].policy,
                            local_refusal=local_refusal,
                            over_budget=app[SETTINGS].over_budget,
                        )
                    else:
                        unready_reason = reason
        except MalformedReview as exc:
            counts.errors["malformed"] += 1
            log.warning("malformed admission review", extra={"uid": review.uid, "error": str(exc)[:500]})
            return _error(400, str(exc))
        except Exception:
            # A bug in the decision must never block pod creation: answer allowed, unchanged.
            counts.errors["internal"] += 1
            counts.decisions["error"] += 1
            log.exception("admission failed", extra={"uid": review.uid, "namespace": review.namespace})
            return web.json_response(admission.build_error_response(review.uid))
        if result is None:  # neither the leader (see ReplicaRouter) nor this replica may decide
            return _unready(request, review, unready_reason)
        elapsed = time.perf_counter() - started
        counts.decisions[result.outcome] += 1
        if result.over_budget:
            counts.over_budget["deny" if result.outcome == "denied" else "local"] += 1
        counts.observe_latency(elapsed)
        if log.isEnabledFor(logging.INFO):  # the line's fields cost time too: built only when it is written
            app[ADMISSION_LOG](
                {
                    "uid": review.uid,
                    "namespace": review.namespace,
                    "pod": review.pod_label,
                    "decision": result.outcome,
                    "reason": result.reason,
                    "node": result.node,
                    "dry_run": review.dry_run,
                    "latency_ms": round(elapsed * 1000, 3),
                    # What the decision saw: the cluster as of these resourceVersions (see sync.py).
                    "view_pods_version": view_pods,
                    "view_nodes_version": view_nodes,
                }
            )
        return web.Response(body=orjson.dumps(result.response), content_type="application/json")
    finally:
        counts.in_flight -= 1


def _unready(request: web.Request, review: AdmissionRequest, reason: str) -> web.Response:
    """This replica cannot decide (its cache is not synced or fresh) and no leader that can answered:
    it answers as an unready replica would, and the API server applies the webhook's failurePolicy
    (Ignore: the pod is admitted unmutated and waits for local GPUs; Fail: the create is refused).
    A guess from an incomplete cache could promise GPUs that are taken or burst past a budget."""
    request.app[METRICS].reviews.errors["unready"] += 1
    log.warning(
        "review not decided: cache not fit to decide",
        extra={"uid": review.uid, "namespace": review.namespace, "pod": review.pod_label, "reason": reason},
    )
    return _error(503, f"this webhook replica cannot decide: {reason}")


def cache_fitness(sync: CacheSync, *, stale_after: float) -> tuple[bool, str]:
    """Whether this replica's cache may decide, and if not why: nodes, pods and namespaces listed and
    no watch broken for longer than `stale_after` (what /readyz says, draining aside)."""
    with sync.lock:
        return sync.ready(stale_after=stale_after)


def log_admission(logger: logging.Logger, fields: dict[str, Any]) -> None:
    logger.info("admission", extra=fields)


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    if request.app[DRAIN].active:
        return web.Response(text="draining: this replica is stopping", status=503)
    ready, reason = cache_fitness(request.app[SYNC], stale_after=request.app[SETTINGS].watch_stale_seconds)
    return web.Response(text=reason, status=200 if ready else 503)


async def drain(request: web.Request) -> web.Response:
    """The preStop hook: close connections after each answer, keep serving for --drain-seconds, then
    let the kubelet send SIGTERM. Harmless if called by anyone else: it only costs new connections."""
    app = request.app
    if not app[DRAIN].active:
        app[DRAIN].active = True
        log.info("draining", extra={"seconds": app[SETTINGS].drain_seconds})
    await asyncio.sleep(app[SETTINGS].drain_seconds)
    return web.Response(text="drained")


async def _close_when_draining(request: web.Request, response: web.StreamResponse) -> None:
    if request.app[DRAIN].active:
        # Headers are already computed when this hook runs: say it to the client and do it.
        response.headers["Connection"] = "close"
        response.force_close()


async def metrics_endpoint(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _sweep_reservations(sync: CacheSync) -> None:
    while True:
        await asyncio.sleep(RESERVATION_SWEEP_SECONDS)
        with sync.lock:
            expired = sync.cache.expire_reservations()
        if expired:
            log.warning("reservations expired without their pod appearing", extra={"count": expired})


def create_app(
    settings: Settings,
    *,
    cache: ClusterCache,
    sync: CacheSync,
    clock: Callable[[], float],
    background: tuple[BackgroundTask, ...] = (),
    admission_log: AdmissionLog | None = None,
) -> web.Application:
    app = web.Application(client_max_size=settings.max_body_bytes)
    app[ADMISSION_LOG] = admission_log or functools.partial(log_admission, log)
    app[SETTINGS] = settings
    app[CACHE] = cache
    app[SYNC] = sync
    app[METRICS] = Metrics(cache, sync, clock)
    app.router.add_post("/mutate", mutate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    app[DRAIN] = Drain()
    app.router.add_get("/drain", drain)
    app.on_response_prepare.append(_close_when_draining)
    app.cleanup_ctx.append(supervised((*background, functools.partial(_sweep_reservations, sync))))
    return app


def serve(
    app: web.Application | Coroutine[Any, Any, web.Application], *, host: str, port: int, ssl_context: Any
) -> None:
    """Serve over HTTPS until SIGTERM/SIGINT. The benchmark's limit server uses this too, so the
    comparison differs only in the handler.

    On uvloop: its event loop and TLS transport are compiled, and asyncio's pure-Python TLS layer
    was a quarter of an empty handler's CPU. Measured side by side on one fake API server (5k nodes),
    it took 10 % off the webhook's CPU per review (issue 15)."""
    web.run_app(
        app,
        host=host,
        port=port,
        ssl_context=ssl_context,
        access_log=None,
        print=None,
        shutdown_timeout=10,
        loop=uvloop.new_event_loop(),
    )
