"""Nodes, pods and namespaces, listed then watched into the cache (I/O): the cache's feeds for
kubeplumbing's list-then-watch loop, which owns the API calls, the re-list on 410 and the backoff.

Each kind's loop runs in a worker thread, which parses what it reads and applies it to the cache
itself, holding the cache's lock (CacheSync.lock) that the event loop holds around each admission.
Handing every event to the loop instead cost a loop wake-up and two thread switches: about 220 µs of
CPU per event on a 2-core VM, a quarter of the webhook's CPU per created pod while it only watches
(issue 15). Lists and events are parsed with orjson: the client's model classes would cost far more
than the accounting itself on a large cluster.

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
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import orjson

from kubeplumbing.watching import ListPages, ListWatch
from webhook.sync import KINDS, CacheSync, Kind, ParsedList, PodChange, RecentPods, parse_items

log = logging.getLogger(__name__)
T = TypeVar("T")

# Pods whose last change is remembered, so a repeat is not applied again: a created pod's
# events come within seconds, so this covers minutes of creates at any realistic rate (<3 MB: measured
# 1.2 MB of entries, plus the uids of pods the cache does not hold).
RECENT_PODS = 16_384


class Watcher:
    """The cache's list-then-watch loops, one per kind, each in a worker thread."""

    def __init__(self, api_client: Any, sync: CacheSync) -> None:
        self._loops = [ListWatch(api_client, kind, _feed(kind, sync), decode=_decode) for kind in KINDS]

    async def run(self) -> None:
        """Run the watches until cancelled; a crashed loop thread is re-raised here."""
        tasks = [asyncio.create_task(asyncio.to_thread(loop.run)) for loop in self._loops]
        try:
            await asyncio.gather(*tasks)
        finally:
            self.stop()

    def stop(self) -> None:
        for loop in self._loops:
            loop.stop()


def _feed(kind: Kind, sync: CacheSync) -> _CacheFeed:
    return _PodFeed(sync) if kind == "pods" else _CacheFeed(kind, sync)


class _CacheFeed:
    """One kind's share of the cache, as its loop keeps it in step (kubeplumbing.watching.Feed)."""

    def __init__(self, kind: Kind, sync: CacheSync) -> None:
        self._kind = kind
        self._sync = sync

    def _apply(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the cache under its lock: the loop decides under the same lock, so a decision
        never sees half of a change."""
        with self._sync.lock:
            return fn()

    def relist(self, list_pages: ListPages) -> str:
        kind = self._kind
        parsed = ParsedList()
        count = 0

        def read_page(data: bytes) -> tuple[str, str]:
            nonlocal count
            page, resource_version, token = parse_items(_decode(data))
            self._sync.parse_page(kind, page, into=parsed)  # pure: needs no lock
            count += len(page)
            return resource_version, token

        resource_version = list_pages(read_page)
        self._apply(functools.partial(self._apply_list, parsed, resource_version))
        # What a list fills the cache with lives until the next list (150k pods: ~270k tracked
        # objects). Frozen, the collector stops walking it in every full collection (issue 15).
        gc.freeze()
        _return_free_heap()
        self._listed()
        for problem in parsed.problems:
            log.warning("object skipped", extra={"kind": kind, "problem": problem})
        log.info("cache listed", extra={"kind": kind, "count": count, "resource_version": resource_version})
        return resource_version

    def _apply_list(self, parsed: ParsedList, resource_version: str) -> None:
        self._sync.apply_parsed(self._kind, parsed)
        self._sync.note_version(self._kind, resource_version)

    def _listed(self) -> None:
        """After a list has replaced this kind in the cache."""

    def apply_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        problem = self._apply(functools.partial(self._apply_event, event_type, obj))
        if problem:
            log.warning("object skipped", extra={"kind": self._kind, "problem": problem})

    def _apply_event(self, event_type: str, obj: Mapping[str, Any]) -> str | None:
        problem = self._sync.apply_event(self._kind, event_type, obj)
        self._sync.note_version(self._kind, _version(obj))
        return problem

    def mark_contact(self) -> None:
        self._apply(functools.partial(self._sync.mark_contact, self._kind))

    def mark_broken(self) -> None:
        self._apply(functools.partial(self._sync.mark_broken, self._kind))


class _PodFeed(_CacheFeed):
    """Pods: an event that changes nothing the cache holds is not applied, only counted as contact."""

    def __init__(self, sync: CacheSync) -> None:
        super().__init__("pods", sync)
        self._recent_pods = RecentPods(RECENT_PODS)  # owned by the pods worker thread

    def _listed(self) -> None:
        self._recent_pods.clear()  # the list replaced the cache's pods: what was handed over no longer says

    def apply_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        change = self._sync.parse_pod_event(event_type, obj)  # pure: parsed before the lock is taken
        version = _version(obj)
        if isinstance(change, PodChange) and self._recent_pods.unchanged(change):
            self._apply(functools.partial(self._contact_at, version))  # no change, but contact
            return
        self._apply(functools.partial(self._apply_pod_change, change, version))
        if isinstance(change, str):
            log.warning("object skipped", extra={"kind": "pods", "problem": change})

    def _contact_at(self, version: object) -> None:
        self._sync.mark_contact("pods")
        self._sync.note_version("pods", version)

    def _apply_pod_change(self, change: PodChange | str, version: object) -> None:
        self._sync.apply_pod_change(change)
        self._sync.note_version("pods", version)


def _version(obj: Mapping[str, Any]) -> object:
    return (obj.get("metadata") or {}).get("resourceVersion")


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
