"""Applies list results and watch events (raw JSON) to the ClusterCache. Pure: no I/O, no logging;
it returns the problems with skipped objects and the watcher logs them.

The watcher, the tests and the benchmarks all feed the cache through this one path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.cache import ClusterCache
from webhook.gangs import JobInfo, parse_job
from webhook.model import ObjectError, parse_namespace, parse_node, parse_pod
from webhook.types import NamespaceInfo, NodeInfo, PodInfo

Kind = Literal["nodes", "pods", "namespaces", "jobs"]
# What a cache must have listed before it decides. The webhook watches Jobs too (an Indexed Job's
# size makes its pods a gang: webhook.gangs); a cache fed without them decides every pod alone.
KINDS: tuple[Kind, ...] = ("nodes", "pods", "namespaces")
KINDS_WITH_JOBS: tuple[Kind, ...] = (*KINDS, "jobs")
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
    # Per kind: the resourceVersion of the last list or event applied (0 when not a number).
    # Logged with each decision, so a replay can tell a decision made on a view that lagged the
    # cluster from one the view itself got wrong. Opaque to the API; etcd makes it a number.
    versions: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class ParsedList:
    nodes: list[NodeInfo] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)
    namespaces: list[NamespaceInfo] = field(default_factory=list)
    jobs: list[JobInfo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


_UNSEEN = object()


@dataclass(frozen=True, slots=True)
class PodChange:
    """A pod watch event, parsed: the pod's new accounting record, or None to drop what the cache
    holds for it (deleted, or it holds nothing accounting needs any more: see parse_pod)."""

    uid: str
    pod: PodInfo | None
    deleted: bool = False


class RecentPods:
    """The last change handed to the cache for each of the most recently changed pods (bounded,
    least recently changed forgotten first).

    Most MODIFIED events of a pod change nothing accounting reads (the kubelet's status updates:
    conditions, IPs, container states; the deletion timestamp). A change equal to the last one handed
    over for its pod is a no-op for the cache (upsert of an equal record, or delete of an absent one),
    so the watcher need not apply it. Exact as long as every change of a pod reaches
    the cache through the owner of this record, in order, and the record is cleared when a list
    replaces the cache's pods; a pod not remembered is handed over as before."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._last: OrderedDict[str, PodInfo | None] = OrderedDict()

    def unchanged(self, change: PodChange) -> bool:
        """Whether the cache already holds what `change` says; if not, remember `change` as handed over."""
        if change.deleted:
            self._last.pop(change.uid, None)  # a pod is deleted once: nothing to remember
            return False
        last = self._last.get(change.uid, _UNSEEN)
        if last is not _UNSEEN and last == change.pod:
            self._last.move_to_end(change.uid)  # keep the record the cache holds, not its equal copy
            return True
        self._last[change.uid] = change.pod
        self._last.move_to_end(change.uid)
        if len(self._last) > self._capacity:
            self._last.popitem(last=False)
        return False

    def clear(self) -> None:
        self._last.clear()

    def __len__(self) -> int:
        return len(self._last)


class CacheSync:
    def __init__(self, cache: ClusterCache, *, clock: Callable[[], float], kinds: Sequence[Kind] = KINDS) -> None:
        self.cache = cache
        self.kinds = tuple(kinds)
        self.state = SyncState(synced=dict.fromkeys(self.kinds, False))
        self._clock = clock
        # Held by whoever touches the cache or the sync state: the watch threads while they apply
        # what they read, the event loop around each admission (decide + reserve: two admissions
        # must not claim the same GPUs), sweep, scrape and lease handover. Never held across an await.
        self.lock = threading.Lock()

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
                elif kind == "jobs":
                    job = parse_job(raw)
                    if job is not None:  # None: not an Indexed Job, its pods are no gang
                        into.jobs.append(job)
                else:
                    _uid(raw)
                    pod = parse_pod(raw, resources)
                    if pod is not None:  # None: the pod holds nothing accounting needs
                        into.pods.append(pod)
            except ObjectError as exc:
                into.problems.append(f"{kind[:-1]} {_name(raw)}: {exc}")

    def note_version(self, kind: Kind, raw_version: object) -> None:
        """The view now holds `kind` as of this resourceVersion (a list's, or an event's object's)."""
        text = str(raw_version or "")
        self.state.versions[kind] = int(text) if text.isdigit() else 0

    def view_versions(self) -> tuple[int, int]:
        """(pods, nodes): the resourceVersions the view holds those kinds as of."""
        return self.state.versions.get("pods", 0), self.state.versions.get("nodes", 0)

    def apply_parsed(self, kind: Kind, parsed: ParsedList) -> None:
        if kind == "nodes":
            self.cache.replace_nodes(parsed.nodes)
        elif kind == "namespaces":
            self.cache.namespaces.replace(parsed.namespaces)
        elif kind == "jobs":
            self.cache.gang_index.replace_jobs(parsed.jobs)
        else:
            self.cache.replace_pods(parsed.pods)
            self.cache.gang_index.replace_pods(parsed.pods)
        self.state.synced[kind] = True
        self.state.skipped_objects += len(parsed.problems)
        self.mark_contact(kind)

    def apply_event(self, kind: Kind, event_type: str, raw: Mapping[str, Any]) -> str | None:
        """Apply one watch event; returns a problem description when the object was skipped."""
        if kind == "pods":
            change = self.parse_pod_event(event_type, raw)
            self.apply_pod_change(change)
            return change if isinstance(change, str) else None
        self.mark_contact(kind)
        resources = self.cache.gpu_resources
        try:
            if kind == "nodes":
                if event_type == "DELETED":
                    self.cache.delete_node(_name(raw))
                else:
                    self.cache.upsert_node(parse_node(raw, resources))
                return None
            if kind == "jobs":
                self._apply_job(event_type, raw)
                return None
            if event_type == "DELETED":
                self.cache.namespaces.delete(_name(raw))
            else:
                self.cache.namespaces.upsert(parse_namespace(raw))
            return None
        except ObjectError as exc:
            self.state.skipped_objects += 1
            return f"{kind[:-1]} {_name(raw)}: {exc}"

    def _apply_job(self, event_type: str, raw: Mapping[str, Any]) -> None:
        uid = _uid(raw)
        job = None if event_type == "DELETED" else parse_job(raw)
        if job is None:
            self.cache.gang_index.delete_job(uid)
        else:
            self.cache.gang_index.upsert_job(job)

    def parse_pod_event(self, event_type: str, raw: Mapping[str, Any]) -> PodChange | str:
        """A pod watch event -> what it does to the cache, or the problem with a skipped object.
        Touches no cache state, so the watcher runs it in its worker thread."""
        try:
            uid = _uid(raw)
            if event_type == "DELETED":
                return PodChange(uid, None, deleted=True)
            return PodChange(uid, parse_pod(raw, self.cache.gpu_resources))
        except ObjectError as exc:
            return f"pod {_name(raw)}: {exc}"

    def apply_pod_change(self, change: PodChange | str) -> None:
        self.mark_contact("pods")
        if isinstance(change, str):
            self.state.skipped_objects += 1
        else:
            old = self.cache.pods().get(change.uid)
            if change.pod is None:
                self.cache.delete_pod(change.uid)
            else:
                self.cache.upsert_pod(change.pod)
            if (change.pod is not None and change.pod.gang) or (old is not None and old.gang):
                self.cache.gang_index.update(old, change.pod)

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
