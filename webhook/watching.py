"""List-then-watch of nodes, pods and namespaces into the cache (the only module that imports kubernetes).

The kubernetes client is synchronous, so each kind runs its list/watch loop in a worker thread
and hands parsed batches to the event loop, which is the cache's only writer. Responses are read
raw (`_preload_content=False`) and parsed with json: the client's model classes would cost far
more than the accounting itself on a large cluster.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from webhook.sync import KINDS, CacheSync, Kind, ParsedList, parse_items

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = 500
# The server ends each watch after this long; re-watching from the last resourceVersion is cheap
# and bounds how long a silently dead connection can go unnoticed.
WATCH_SECONDS = 60
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = WATCH_SECONDS + 15.0
BACKOFF_START, BACKOFF_CAP = 0.2, 30.0


class _Gone(Exception):
    """410: our resourceVersion is too old; a fresh list is needed."""


def load_api_client(kubeconfig: str) -> Any:
    if kubeconfig:
        return kubernetes.config.new_client_from_config(config_file=kubeconfig)
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


class Watcher:
    def __init__(self, api_client: Any, sync: CacheSync, *, loop: asyncio.AbstractEventLoop) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._sync = sync
        self._loop = loop
        self._stopping = threading.Event()
        self._responses: dict[Kind, Any] = {}

    def _call(self, kind: Kind) -> Callable[..., Any]:
        calls: dict[Kind, Callable[..., Any]] = {
            "nodes": self._core.list_node,
            "pods": self._core.list_pod_for_all_namespaces,
            "namespaces": self._core.list_namespace,
        }
        return calls[kind]

    async def run(self) -> None:
        """Run the watches until cancelled; a crashed loop thread is re-raised here."""
        tasks = [asyncio.create_task(asyncio.to_thread(self._loop_kind, kind)) for kind in KINDS]
        try:
            await asyncio.gather(*tasks)
        finally:
            self.stop()

    def stop(self) -> None:
        self._stopping.set()
        for response in list(self._responses.values()):
            try:
                response.shutdown()  # unblocks a read in progress in the worker thread
            except Exception:  # noqa: BLE001 - best effort at shutdown, any failure is moot
                log.debug("watch response shutdown failed")

    def _apply(self, fn: Callable[[], object]) -> None:
        """Run `fn` on the event loop and wait for it: the loop is the cache's only writer."""

        async def _run() -> object:
            return fn()

        asyncio.run_coroutine_threadsafe(_run(), self._loop).result()

    def _loop_kind(self, kind: Kind) -> None:
        backoff = BACKOFF_START
        resource_version = ""
        while not self._stopping.is_set():
            try:
                if not resource_version:
                    resource_version = self._list(kind)
                resource_version = self._watch(kind, resource_version)
                backoff = BACKOFF_START
            except _Gone:
                log.debug("watch expired, relisting", extra={"kind": kind})
                resource_version = ""
            except Exception as exc:  # noqa: BLE001 - any failure: back off and retry, never die
                if self._stopping.is_set():
                    return
                self._apply(functools.partial(self._sync.mark_broken, kind))
                log.warning("watch failed", extra={"kind": kind, "error": str(exc)[:500], "retry_in": backoff})
                self._stopping.wait(backoff * random.uniform(0.5, 1.0))
                backoff = min(backoff * 2, BACKOFF_CAP)
                resource_version = ""

    def _list(self, kind: Kind) -> str:
        parsed = ParsedList()
        token = ""
        resource_version = ""
        count = 0
        while True:
            response = self._call(kind)(
                limit=LIST_PAGE_SIZE,
                _continue=token or None,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, 60.0),
            )
            page, resource_version, token = parse_items(json.loads(response.data))
            self._sync.parse_page(kind, page, into=parsed)  # pure: safe off the event loop
            count += len(page)
            if not token:
                break
        self._apply(functools.partial(self._sync.apply_parsed, kind, parsed))
        for problem in parsed.problems:
            log.warning("object skipped", extra={"kind": kind, "problem": problem})
        log.info("cache listed", extra={"kind": kind, "count": count, "resource_version": resource_version})
        return resource_version

    def _watch(self, kind: Kind, resource_version: str) -> str:
        response = self._call(kind)(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
        )
        self._responses[kind] = response
        try:
            for line in kubernetes.watch.watch.iter_resp_lines(response):
                if self._stopping.is_set():
                    break
                resource_version = self._handle_event(kind, json.loads(line), resource_version)
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone from exc
            raise
        finally:
            self._responses.pop(kind, None)
            response.release_conn()
        return resource_version

    def _handle_event(self, kind: Kind, event: Mapping[str, Any], resource_version: str) -> str:
        event_type = event.get("type")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            if obj.get("code") == 410:
                raise _Gone
            raise RuntimeError(f"watch error event: {obj.get('message', obj)}")
        new_version = str((obj.get("metadata") or {}).get("resourceVersion", resource_version))
        if event_type == "BOOKMARK":
            self._apply(functools.partial(self._sync.mark_contact, kind))
            return new_version
        problems: list[str | None] = []

        def apply() -> None:
            problems.append(self._sync.apply_event(kind, str(event_type), obj))

        self._apply(apply)
        if problems and problems[0]:
            log.warning("object skipped", extra={"kind": kind, "problem": problems[0]})
        return new_version
