"""watching.py with the real kubernetes client against a scripted list/watch server over HTTP:
410 Gone on the watch leads to a fresh list, bookmarks keep the cache fresh, dropped watches resume.
(The real API server is exercised end to end in tests/e2e/test_webhook.py.)"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes
from aiohttp import web
from aiohttp.test_utils import TestServer

from jarvice.gpubudget import ANNOTATION_MAX_REMOTE_GPUS, NamespaceBudget
from tests.unit.webhook.builders import container, node, pod
from webhook.cache import ClusterCache
from webhook.sync import CacheSync
from webhook.watching import Watcher


def _with_uid(raw: dict[str, Any], uid: str) -> dict[str, Any]:
    raw["metadata"]["uid"] = uid
    return raw


def _namespace(name: str, budget: str) -> dict[str, Any]:
    return {"kind": "Namespace", "metadata": {"name": name, "annotations": {ANNOTATION_MAX_REMOTE_GPUS: budget}}}


class ScriptedApiServer:
    """Lists return the current objects; the first pod watch answers 410, later ones stream events."""

    def __init__(self) -> None:
        self.nodes = [node("a", 4)]
        self.pods: list[dict[str, Any]] = []
        self.namespaces = [_namespace("team", "4")]
        self.requests: list[str] = []
        self.pod_watches = 0
        self.closing = asyncio.Event()
        self.send_later = asyncio.Event()  # set by a test: one more pod event on the open watch
        self.later_sent = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self.handle)
        app.router.add_get("/api/v1/pods", self.handle)
        app.router.add_get("/api/v1/namespaces", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        kind = request.path.rsplit("/", 1)[1]
        watch = request.query.get("watch") in ("true", "True", "1")
        self.requests.append(f"{'watch' if watch else 'list'} {kind} rv={request.query.get('resourceVersion', '')}")
        if not watch:
            items = {"nodes": self.nodes, "pods": self.pods, "namespaces": self.namespaces}[kind]
            return web.json_response({"kind": "List", "metadata": {"resourceVersion": "10"}, "items": items})
        response = web.StreamResponse()
        await response.prepare(request)
        if kind == "namespaces":
            # A budget lowered, another set then deleted, a third added: each event reaches the cache.
            await self._event(response, "MODIFIED", _namespace("team", "2"))
            await self._event(response, "ADDED", _namespace("other", "x"))
            await self._event(response, "DELETED", _namespace("other", "x"))
            await self._event(response, "ADDED", _namespace("last", "0"))
        if kind == "pods":
            self.pod_watches += 1
            if self.pod_watches == 1:
                # The server no longer has our resourceVersion: an ERROR event with code 410.
                self.pods = [_with_uid(pod(container(gpus=4), name="late", node_name="a", phase="Running"), "u-late")]
                await self._event(response, "ERROR", {"kind": "Status", "code": 410, "message": "too old"})
                return response
            bound = _with_uid(pod(container(gpus=1), name="new", node_name="a", phase="Running"), "u-new")
            bound["metadata"]["resourceVersion"] = "12"
            await self._event(response, "BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "11"}})
            await self._event(response, "ADDED", bound)
            await self.send_later.wait()
            later = _with_uid(pod(container(gpus=2), name="later", node_name="a", phase="Running"), "u-later")
            await self._event(response, "ADDED", later)
            self.later_sent.set()
        # Hold the watch open like the real server, until the test ends.
        await asyncio.wait_for(self.closing.wait(), timeout=30)
        return response

    @staticmethod
    async def _event(response: web.StreamResponse, event_type: str, obj: dict[str, Any]) -> None:
        await response.write((json.dumps({"type": event_type, "object": obj}) + "\n").encode())


class Watching:
    """A Watcher on a fresh cache, watching the scripted server, until the block ends."""

    def __init__(self, api: ScriptedApiServer) -> None:
        self.api = api
        self.cache = ClusterCache(gpu_resources=("nvidia.com/gpu",), clock=time.monotonic, reservation_ttl=60)
        self.sync = CacheSync(self.cache, clock=time.monotonic)

    async def __aenter__(self) -> Watching:
        self._server = TestServer(self.api.app(), host="127.0.0.1")
        await self._server.start_server()
        configuration = kubernetes.client.Configuration()
        configuration.host = str(self._server.make_url("")).rstrip("/")
        self._client = kubernetes.client.ApiClient(configuration)
        self._watcher = Watcher(self._client, self.sync)
        self._task = asyncio.create_task(self._watcher.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.api.closing.set()
        self._task.cancel()
        self._watcher.stop()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._server.close()
        self._client.close()

    async def until(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not done():
            await asyncio.sleep(0.05)
        assert done()


async def test_gone_relists_and_events_apply() -> None:
    api = ScriptedApiServer()
    async with Watching(api) as watching:
        cache, sync = watching.cache, watching.sync
        await watching.until(lambda: "u-new" in cache.pods() and cache.budget("last") is not None)
        assert sync.fully_synced
        assert cache.budget("team") == NamespaceBudget(limit=2)
        assert cache.budget("other") is None
        assert cache.budget("last") == NamespaceBudget(limit=0)
        assert cache.budgeted_namespaces == 2
        # The pod that appeared while our resourceVersion was stale came in through the re-list.
        assert set(cache.pods()) == {"u-late", "u-new"}
        assert cache.free("a")["nvidia.com/gpu"] == -1  # 4 + 1 bound on a 4-GPU node: overcommitted, shown
        pod_requests = [r for r in api.requests if " pods " in r]
        assert pod_requests[:3] == ["list pods rv=", "watch pods rv=10", "list pods rv="], api.requests
        assert sync.ready(stale_after=5) == (True, "ok")


async def test_listed_objects_are_frozen_out_of_the_collector() -> None:
    """What a list brings lives until the next list: gc.freeze() after each one keeps the collector
    from walking the whole cache (a large cluster's millions of objects) on every full collection."""
    gc.unfreeze()
    try:
        async with Watching(ScriptedApiServer()) as watching:
            await watching.until(lambda: watching.sync.fully_synced)
            node = watching.cache.node("a")
            assert node is not None
            frozen = gc.get_freeze_count()
            assert frozen > 0
            assert not gc.is_tracked(node) or all(node is not obj for obj in gc.get_objects(generation=2))
    finally:
        gc.unfreeze()  # the test process's other objects go back to the collector


class CountedLock:
    """The cache's lock, counting the threads blocked on it: a watch thread waiting here has read its event
    and holds it, so a test can wait for that instead of sleeping."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counting = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        with self._counting:
            return self._waiting

    def acquire(self) -> bool:
        with self._counting:
            self._waiting += 1
        try:
            return self._lock.acquire()
        finally:
            with self._counting:
                self._waiting -= 1

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


async def test_events_wait_for_the_cache_lock() -> None:
    """The watch threads apply what they read themselves, under CacheSync.lock, which the loop holds
    around each admission: an event that arrives during one changes nothing until it is done."""
    api = ScriptedApiServer()
    watching = Watching(api)
    lock = CountedLock()
    watching.sync.lock = lock  # type: ignore[assignment]
    async with watching:
        cache = watching.cache
        # Every event but the later pod's applied: from here only that one can want the lock.
        await watching.until(lambda: "u-new" in cache.pods() and cache.budget("last") is not None)
        # An admission in progress holds the lock from before the event is sent until the watch thread
        # has read it and waits for the lock. (Taking the lock only once the event was written raced with
        # the watch thread, which could apply it first.)
        lock.acquire()
        try:
            api.send_later.set()
            await asyncio.wait_for(api.later_sent.wait(), timeout=10)  # written: on its way to the watch thread
            await watching.until(lambda: lock.waiting == 1)  # the watch thread read it and waits
            assert "u-later" not in cache.pods()
        finally:
            lock.release()
        await watching.until(lambda: "u-later" in cache.pods())
        assert cache.free("a")["nvidia.com/gpu"] == -3


async def test_view_versions_follow_lists_and_events() -> None:
    """Each decision is logged with the resourceVersions its view holds (a replay tells a decision
    made on a view that lagged the cluster from one the view got wrong): a list's, then each event's."""
    api = ScriptedApiServer()
    async with Watching(api) as watching:
        cache, sync = watching.cache, watching.sync
        # The pods' event and the nodes' list come on watches of their own, in either order.
        await watching.until(lambda: "u-new" in cache.pods() and sync.view_versions()[1] != 0)
        assert sync.view_versions() == (12, 10)  # the pod event's object, the nodes' list
        api.send_later.set()
        await watching.until(lambda: "u-later" in cache.pods())
        assert sync.view_versions() == (0, 10)  # an event without a numeric version says "unknown", not the old one
