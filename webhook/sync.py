"""Applies list results and watch events (raw JSON) to the ClusterCache. Pure: no I/O, no logging;
it returns the problems with skipped objects and the watcher logs them.

The watcher, the tests and the benchmarks all feed the cache through this one path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.cache import ClusterCache
from webhook.model import ObjectError, parse_namespace, parse_node, parse_pod
from webhook.types import NamespaceBudget, NodeInfo, PodInfo

Kind = Literal["nodes", "pods", "namespaces"]
KINDS: tuple[Kind, ...] = ("nodes", "pods", "namespaces")
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(slots=True)
class SyncState:
    # Namespaces carry the burst budgets: a replica must not decide before it knows them.
    synced: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(KINDS, False))
    last_contact: float = 0.0  # last successful list, event or bookmark, of any kind
    # Per kind: the first failure of its current outage. Ready needs every kind healthy, or a
    # recovered node watch would hide a pod watch that has not caught up yet.
    broken_since: dict[str, float] = field(default_factory=dict)
    skipped_objects: int = 0  # objects whose shape we could not use (logged by the caller)


@dataclass(slots=True)
class ParsedList:
    nodes: list[NodeInfo] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)
    namespaces: list[tuple[str, NamespaceBudget | None]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class CacheSync:
    def __init__(self, cache: ClusterCache, *, clock: Callable[[], float]) -> None:
        self.cache = cache
        self.state = SyncState()
        self._clock = clock

    @property
    def fully_synced(self) -> bool:
        return all(self.state.synced.values())

    def apply_list(self, kind: Kind, items: Iterable[Mapping[str, Any]]) -> list[str]:
        """Replace everything of `kind` with a full list; returns problems with skipped objects."""
        parsed = ParsedList()
        self.parse_page(kind, items, into=parsed)
        self.apply_parsed(kind, parsed)
        return parsed.problems

    def parse_page(self, kind: Kind, items: Iterable[Mapping[str, Any]], *, into: ParsedList) -> None:
        """Parse one page of a list into `into`. Touches no cache state, so the watcher runs it in its
        worker thread page by page and drops the raw JSON at once: holding every raw page of a large
        cluster (150k pods) until the list ends cost about a gigabyte."""
        resources = self.cache.gpu_resources
        for raw in items:
            try:
                if kind == "nodes":
                    into.nodes.append(parse_node(raw, resources))
                elif kind == "namespaces":
                    into.namespaces.append(parse_namespace(raw))
                else:
                    _uid(raw)
                    pod = parse_pod(raw, resources)
                    if pod is not None:  # None: the pod holds nothing accounting needs
                        into.pods.append(pod)
            except ObjectError as exc:
                into.problems.append(f"{kind[:-1]} {_name(raw)}: {exc}")

    def apply_parsed(self, kind: Kind, parsed: ParsedList) -> None:
        if kind == "nodes":
            self.cache.replace_nodes(parsed.nodes)
        elif kind == "namespaces":
            self.cache.replace_namespaces(parsed.namespaces)
        else:
            self.cache.replace_pods(parsed.pods)
        self.state.synced[kind] = True
        self.state.skipped_objects += len(parsed.problems)
        self.mark_contact(kind)

    def apply_event(self, kind: Kind, event_type: str, raw: Mapping[str, Any]) -> str | None:
        """Apply one watch event; returns a problem description when the object was skipped."""
        self.mark_contact(kind)
        resources = self.cache.gpu_resources
        try:
            if kind == "nodes":
                if event_type == "DELETED":
                    self.cache.delete_node(_name(raw))
                else:
                    self.cache.upsert_node(parse_node(raw, resources))
                return None
            if kind == "namespaces":
                if event_type == "DELETED":
                    self.cache.delete_namespace(_name(raw))
                else:
                    self.cache.upsert_namespace(*parse_namespace(raw))
                return None
            uid = _uid(raw)
            if event_type == "DELETED":
                self.cache.delete_pod(uid)
                return None
            pod = parse_pod(raw, resources)
            if pod is None:
                # Nothing accounting needs any more (no GPUs, and finished, unbound or without CPU and
                # memory requests: see parse_pod): drop what an earlier version of it held.
                self.cache.delete_pod(uid)
            else:
                self.cache.upsert_pod(pod)
            return None
        except ObjectError as exc:
            self.state.skipped_objects += 1
            return f"{kind[:-1]} {_name(raw)}: {exc}"

    def mark_contact(self, kind: Kind) -> None:
        self.state.last_contact = self._clock()
        self.state.broken_since.pop(kind, None)

    def mark_broken(self, kind: Kind) -> None:
        self.state.broken_since.setdefault(kind, self._clock())

    def ready(self, *, stale_after: float) -> tuple[bool, str]:
        if not self.fully_synced:
            missing = sorted(k for k, done in self.state.synced.items() if not done)
            return False, "waiting for the first full list of " + " and ".join(missing)
        now = self._clock()
        for kind, since in sorted(self.state.broken_since.items()):
            if now - since > stale_after:
                return False, f"{kind} watch broken for {now - since:.0f}s (limit {stale_after:.0f}s)"
        return True, "ok"


def _meta(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = raw.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _name(raw: Mapping[str, Any]) -> str:
    meta = _meta(raw)
    namespace = meta.get("namespace")
    name = str(meta.get("name", "?"))
    return f"{namespace}/{name}" if namespace else name


def _uid(raw: Mapping[str, Any]) -> str:
    uid = _meta(raw).get("uid")
    if not isinstance(uid, str) or not uid:
        raise ObjectError("metadata.uid is missing")
    return uid


def parse_items(body: Mapping[str, Any]) -> tuple[Sequence[Mapping[str, Any]], str, str]:
    """A List response -> (items, resourceVersion, continue token)."""
    items = body.get("items")
    meta = _meta(body)
    if not isinstance(items, list):
        raise ObjectError("list response has no items")
    return items, str(meta.get("resourceVersion", "")), str(meta.get("continue", "") or "")
