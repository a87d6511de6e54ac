"""A tiny fake of the two API server endpoints the webhook's watcher uses (a load-test fixture).

    python -m bench.fake_apiserver --cluster synthetic:5000 --port 8080

Serves GET /api/v1/nodes and /api/v1/pods as paginated lists (limit/continue) of a generated
cluster, and watches that stay open sending a BOOKMARK now and then until their timeoutSeconds.
Plain HTTP on 127.0.0.1: it only feeds the real, unmodified webhook process its initial list, so
the webhook can be load-tested with 5,000 nodes without creating them in etcd. Correctness of the
watch is tested against the real kube-apiserver elsewhere; nothing here is used for that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence

from aiohttp import web

from bench import clusters

RESOURCE_VERSION = "1000"
BOOKMARK_SECONDS = 2.0
MAX_WATCH_SECONDS = 300
DEFAULT_LIMIT = 500
# Pod events per second on each pod watch (0: bookmarks only): MODIFIED events of listed pods,
# unchanged for accounting as most real pod events (status updates) are, to measure what a
# watched event costs the webhook.
EVENT_TICK_SECONDS = 0.01
POD_EVENT_RATE = web.AppKey("pod_event_rate", float)
STORE = web.AppKey("store", dict[str, list[bytes]])
SERVED = web.AppKey("served", dict[str, int])
TRUE_VALUES = ("true", "True", "1")


def build_list_body(kind: str, items: Sequence[bytes], *, offset: int, limit: int) -> bytes:
    """One page of a List response, with a continue token when more items remain."""
    page = items[offset : offset + limit]
    rest = offset + len(page)
    metadata: dict[str, str] = {"resourceVersion": RESOURCE_VERSION}
    if rest < len(items):
        metadata["continue"] = str(rest)
    head = json.dumps({"kind": kind, "apiVersion": "v1", "metadata": metadata})
    return head[:-1].encode() + b',"items":[' + b",".join(page) + b"]}"


def build_bookmark(kind: str) -> bytes:
    event = {
        "type": "BOOKMARK",
        "object": {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": RESOURCE_VERSION}},
    }
    return json.dumps(event).encode() + b"\n"


async def _serve(request: web.Request, resource: str, kind: str) -> web.StreamResponse:
    query = request.query
    items = request.app[STORE][resource]
    served = request.app[SERVED]
    if query.get("watch") in TRUE_VALUES:
        served[f"{resource}_watches"] = served.get(f"{resource}_watches", 0) + 1
        timeout = int(query.get("timeoutSeconds", "60") or 60)
        rate = request.app[POD_EVENT_RATE] if resource == "pods" else 0.0
        return await _watch(request, kind, timeout=timeout, items=items, rate=rate)
    try:
        limit = int(query.get("limit") or DEFAULT_LIMIT)
        offset = int(query.get("continue") or 0)
    except ValueError:
        return web.json_response({"kind": "Status", "status": "Failure", "code": 400}, status=400)
    served[f"{resource}_pages"] = served.get(f"{resource}_pages", 0) + 1
    body = build_list_body(kind + "List", items, offset=offset, limit=max(1, limit))
    return web.Response(body=body, content_type="application/json")


async def _watch(
    request: web.Request, kind: str, *, timeout: int, items: Sequence[bytes], rate: float
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    deadline = time.monotonic() + min(timeout, MAX_WATCH_SECONDS)
    bookmark = build_bookmark(kind)
    await response.write(bookmark)
    if rate > 0 and items:
        await _send_pod_events(response, items, request.app[SERVED], rate=rate, deadline=deadline)
    while time.monotonic() < deadline:
        await asyncio.sleep(min(BOOKMARK_SECONDS, max(0.0, deadline - time.monotonic())))
        await response.write(bookmark)
    await response.write_eof()
    return response


async def _send_pod_events(
    response: web.StreamResponse, items: Sequence[bytes], served: dict[str, int], *, rate: float, deadline: float
) -> None:
    """MODIFIED events at `rate` per second, one write per event as the API server's watch sends
    them, paced on a 10 ms tick; /healthz counts them as pod_events."""
    began = time.monotonic()
    sent = 0
    while time.monotonic() < deadline:
        due = int((time.monotonic() - began) * rate)
        while sent < due:
            await response.write(b'{"type":"MODIFIED","object":' + items[sent % len(items)] + b"}\n")
            sent += 1
            served["pod_events"] = served.get("pod_events", 0) + 1
        await asyncio.sleep(EVENT_TICK_SECONDS)


async def nodes(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "nodes", "Node")


async def pods(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "pods", "Pod")


async def namespaces(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "namespaces", "Namespace")  # kube-system only: no burst budgets


async def jobs(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "jobs", "Job")  # none: every pod is decided on its own


async def healthz(request: web.Request) -> web.Response:
    store = request.app[STORE]
    body = {"nodes": len(store["nodes"]), "pods": len(store["pods"])}
    served = request.app[SERVED]
    body.update(served)
    return web.json_response(body)


def create_app(node_items: list[bytes], pod_items: list[bytes], *, pod_event_rate: float = 0.0) -> web.Application:
    app = web.Application()
    app[POD_EVENT_RATE] = pod_event_rate
    app[STORE] = {
        "nodes": node_items,
        "pods": pod_items,
        "namespaces": [json.dumps(clusters.KUBE_SYSTEM).encode()],
        "jobs": [],
    }
    served: dict[str, int] = {}
    app[SERVED] = served
    app.router.add_get("/api/v1/nodes", nodes)
    app.router.add_get("/api/v1/pods", pods)
    app.router.add_get("/api/v1/namespaces", namespaces)
    app.router.add_get("/apis/batch/v1/jobs", jobs)
    app.router.add_get("/healthz", healthz)
    return app


def build_kubeconfig(port: int) -> dict[str, object]:
    """A kubeconfig pointing the webhook at the fake (no credentials: the fake asks for none)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": "fake",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fake_apiserver")
    parser.add_argument("--cluster", required=True, help="synthetic:<nodes> or alibaba")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--pod-events-per-second", type=float, default=0.0, help="MODIFIED pod events on each pod watch"
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    node_items, pod_items = clusters.cluster_json(args.cluster)
    print(
        f"generated {len(node_items)} nodes, {len(pod_items)} pods in {time.perf_counter() - began:.1f}s",
        flush=True,
    )
    web.run_app(
        create_app(node_items, pod_items, pod_event_rate=args.pod_events_per_second),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
        shutdown_timeout=1.0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
