"""List-then-watch of nodes, pods and namespaces into the cache (the only module that imports kubernetes).

The kubernetes client is synchronous, so each kind runs its list/watch loop in a worker thread,
which parses what it reads and applies it to the cache itself, holding the cache's lock
(CacheSync.lock) that the event loop holds around each admission. Handing every event to the loop
instead cost a loop wake-up and two thread switches: about 220 µs of CPU per event on a 2-core VM,
a quarter of the webhook's CPU per created pod while it only watches (issue 15). Responses are read
raw (`_preload_content=False`) and parsed with orjson: the client's model classes would cost far
more than the accounting itself on a large cluster.

A pod event changes the cache only when it changes what the cache holds (sync.RecentPods): each
created pod brings an ADDED and several MODIFIED events, most of them status updates accounting
does not read.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import kubernetes
import orjson
from kubernetes.client.rest import ApiException

from webhook.sync import KINDS, CacheSync, Kind, ParsedList, PodChange, RecentPods, parse_items

log = logging.getLogger(__name__)
T = TypeVar("T")

LIST_PAGE_SIZE = 500
# The server ends each watch after this long; re-watching from the last resourceVersion is cheap
# and bounds how long a silently dead connection can go unnoticed.
WATCH_SECONDS = 60
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = WATCH_SECONDS + 15.0
BACKOFF_START, BACKOFF_CAP = 0.2, 30.0
# Pods whose last change is remembered, so a repeat is not applied again: a created pod's
# events come within seconds, so this covers minutes of creates at any realistic rate (<3 MB: measured
# 1.2 MB of entries, plus the uids of pods the cache does not hold).
RECENT_PODS = 16_384


class _Gone(Exception):
    """410: our resourceVersion is too old; a fresh list is needed."""


def load_api_client(kubeconfig: str) -> Any:
    if kubeconfig:
        return kubernetes.config.new_client_from_config(config_file=kubeconfig)
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


class Watcher:
    def __init__(self, api_client: Any, sync: CacheSync) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._sync = sync
        self._stopping = threading.Event()
        self._responses: dict[Kind, Any] = {}
        self._recent_pods = RecentPods(RECENT_PODS)  # owned by the pods worker thread

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

    def _apply(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the cache under its lock: the loop decides under the same lock, so a decision
        never sees half of a change."""
        with self._sync.lock:
            return fn()

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
            page, resource_version, token = parse_items(_decode(response.data))
            self._sync.parse_page(kind, page, into=parsed)  # pure: needs no lock
            count += len(page)
            if not token:
                break
        self._apply(functools.partial(self._sync.apply_parsed, kind, parsed))
        # What a list fills the cache with lives until the next list (150k pods: ~270k tracked
        # objects). Frozen, the collector stops walking it in every full collection (issue 15).
        gc.freeze()
        _return_free_heap()
        if kind == "pods":
            self._recent_pods.clear()  # the list replaced the cache's pods: what was handed over no longer says
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
                resource_version = self._handle_event(kind, _decode(line), resource_version)
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
        if kind == "pods":
            self._handle_pod(str(event_type), obj)
            return new_version
        problem = self._apply(functools.partial(self._sync.apply_event, kind, str(event_type), obj))
        if problem:
            log.warning("object skipped", extra={"kind": kind, "problem": problem})
        return new_version

    def _handle_pod(self, event_type: str, obj: Mapping[str, Any]) -> None:
        change = self._sync.parse_pod_event(event_type, obj)  # pure: parsed before the lock is taken
        if isinstance(change, PodChange) and self._recent_pods.unchanged(change):
            self._apply(functools.partial(self._sync.mark_contact, "pods"))  # no change, but contact
            return
        self._apply(functools.partial(self._sync.apply_pod_change, change))
        if isinstance(change, str):
            log.warning("object skipped", extra={"kind": "pods", "problem": change})


def _decode(data: bytes | str) -> Any:
    """orjson reads a watch line or a list page in under half the stdlib's time; what it refuses
    (integers beyond 64 bits, NaN) goes to the stdlib, so what is read is what always was."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _return_free_heap() -> None:
    """A list's pages and what parsing them made are freed once the cache holds the result, but
    glibc's malloc keeps the freed memory mapped; malloc_trim(0) hands it back to the kernel, so RSS
    says what the cache holds. Elsewhere (musl: no malloc_trim) nothing happens."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)
