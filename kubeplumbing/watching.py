"""The API client, and the one list-then-watch loop that the webhook and the controller run (I/O).

A loop keeps one kind of object in step: it lists every object (page by page), then watches from the
list's resourceVersion, and re-watches from the last resourceVersion the server sent (an event's or
a bookmark's) each time a watch ends. A 410 (the version is too old) means a fresh list; any other
failure marks its Feed broken and lists again after a jittered, doubling backoff. What is kept in
step, and how a list page is read, is the Feed's: the webhook's cache, the controller's pod store.

The kubernetes client is synchronous, so a loop runs in a worker thread, and `stop()` (from any
thread) unblocks a watch read in progress. Responses are read raw (`_preload_content=False`) and
parsed by the caller's decoder: the client's model classes cost far more than the parsing.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

import kubernetes
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = 500
LIST_READ_TIMEOUT = 60.0  # one page of 500 objects, on a loaded API server
# The server ends each watch after this long; re-watching from the last resourceVersion is cheap
# and bounds how long a silently dead connection can go unnoticed.
WATCH_SECONDS = 60
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = WATCH_SECONDS + 15.0
BACKOFF_START, BACKOFF_CAP = 0.2, 30.0
HTTP_GONE = 410

CoreKind = Literal["nodes", "pods", "namespaces", "jobs"]
# The list call of each kind (of every namespace), which also watches with watch=True: its API class, its method.
_LIST_CALLS: dict[CoreKind, tuple[str, str]] = {
    "nodes": ("CoreV1Api", "list_node"),
    "pods": ("CoreV1Api", "list_pod_for_all_namespaces"),
    "namespaces": ("CoreV1Api", "list_namespace"),
    "jobs": ("BatchV1Api", "list_job_for_all_namespaces"),
}

# Reads one page of a list: its body -> (the list's resourceVersion, the continue token; "" on the last page).
ReadPage = Callable[[bytes], tuple[str, str]]
# Lists every object, handing each page to a ReadPage; returns the last page's resourceVersion.
ListPages = Callable[[ReadPage], str]


class Expired(Exception):
    """410 Gone: our resourceVersion is too old; a fresh list is needed."""


class Feed(Protocol):
    """What one loop keeps in step, and how: called from the loop's worker thread."""

    def relist(self, list_pages: ListPages) -> str:
        """Replace what is held with a full list, read through `list_pages`; return its resourceVersion."""
        ...

    def apply_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED event."""
        ...

    def mark_contact(self) -> None:
        """A bookmark: the watch is alive, though nothing changed."""
        ...

    def mark_broken(self) -> None:
        """The loop failed and backs off: what is held may grow stale."""
        ...


def load_api_client(kubeconfig: str) -> Any:
    """A client for the API server: from a kubeconfig file, or in-cluster (the ServiceAccount) when "" ."""
    if kubeconfig:
        return kubernetes.config.new_client_from_config(config_file=kubeconfig)
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


class ListWatch:
    """List, then watch, every object of one kind into a Feed; re-list on 410 or failure. `run()`
    in a worker thread, until `stop()`."""

    def __init__(
        self,
        api_client: Any,
        kind: CoreKind,
        feed: Feed,
        *,
        decode: Callable[[bytes | str], Any] = json.loads,
    ) -> None:
        api, method = _LIST_CALLS[kind]
        self._call: Callable[..., Any] = getattr(getattr(kubernetes.client, api)(api_client), method)
        self._kind = kind
        self._feed = feed
        self._decode = decode
        self._stopping = threading.Event()
        self._response: Any = None

    def stop(self) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks a read in progress in the worker thread
            except Exception:  # noqa: BLE001 - best effort at shutdown, any failure is moot
                log.debug("watch response shutdown failed")

    def run(self) -> None:
        backoff = BACKOFF_START
        resource_version = ""
        while not self._stopping.is_set():
            try:
                if not resource_version:
                    resource_version = self._feed.relist(self._list_pages)
                resource_version = self._watch(resource_version)
                backoff = BACKOFF_START
            except Expired:
                log.debug("watch expired, relisting", extra={"kind": self._kind})
                resource_version = ""
            except Exception as exc:  # noqa: BLE001 - any failure: back off and retry, never die
                if self._stopping.is_set():
                    return
                self._feed.mark_broken()
                log.warning("watch failed", extra={"kind": self._kind, "error": str(exc)[:500], "retry_in": backoff})
                self._stopping.wait(backoff * random.uniform(0.5, 1.0))
                backoff = min(backoff * 2, BACKOFF_CAP)
                resource_version = ""

    def _list_pages(self, read_page: ReadPage) -> str:
        token = ""
        while True:
            response = self._call(
                limit=LIST_PAGE_SIZE,
                _continue=token or None,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, LIST_READ_TIMEOUT),
            )
            resource_version, token = read_page(response.data)
            if not token:
                return resource_version

    def _watch(self, resource_version: str) -> str:
        response = self._call(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
        )
        self._response = response
        try:
            for line in kubernetes.watch.watch.iter_resp_lines(response):
                if self._stopping.is_set():
                    break
                event = self._decode(line)
                event_type, obj = event.get("type"), event.get("object") or {}
                if event_type == "ERROR":
                    if obj.get("code") == HTTP_GONE:
                        raise Expired
                    raise RuntimeError(f"watch error event: {obj.get('message', obj)}")
                resource_version = str((obj.get("metadata") or {}).get("resourceVersion", resource_version))
                if event_type == "BOOKMARK":
                    self._feed.mark_contact()
                else:
                    self._feed.apply_event(str(event_type), obj)
        except ApiException as exc:
            if exc.status == HTTP_GONE:
                raise Expired from exc
            raise
        finally:
            self._response = None
            response.release_conn()
        return resource_version
