"""The controller's view of the cluster's pods, fed by the watch (state, no I/O).

Every pod gets a small `ReapView` (the orphan reaper must know of every pod whose container can
still follow a JARVICE job, even one whose `task-type` label was removed); the fuller `PodView`
is kept only for labeled pods, which are the ones that can be stranded. The watch thread writes,
the loops read: a lock keeps them apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.jobrecords import BurstPod, parse_burst_pod
from controller.keptoutputs import KeptPod, parse_kept_pod
from controller.model import PodView, ReapView, parse_pod, parse_reap_view


class PodStore:
    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._reap_views: dict[str, ReapView] = {}
        self._labeled: dict[str, PodView] = {}
        self._burst: dict[str, BurstPod] = {}  # the pods decided remote, with our job annotations
        self._kept: dict[str, KeptPod] = {}  # finished burst pods with outputs in the vault, not yet reported
        self._listed = False
        self._broken_since: float | None = None

    # ----- written by the watch -------------------------------------------------------------

    def replace(self, objs: Iterable[Mapping[str, Any]]) -> None:
        objs = list(objs)
        views = [parse_pod(obj) for obj in objs]
        reap_views = [parse_reap_view(obj) for obj in objs]
        burst = [b for b in map(parse_burst_pod, objs) if b is not None and b.uid]
        kept = [k for k in map(parse_kept_pod, objs) if k is not None]
        with self._lock:
            self._reap_views = {v.uid: v for v in reap_views if v.uid}
            self._burst = {b.uid: b for b in burst}
            self._kept = {k.uid: k for k in kept}
            self._labeled = {v.uid: v for v in views if v.uid and v.labeled}
            self._listed = True
            self._broken_since = None

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        view = parse_pod(obj)
        if not view.uid:
            return
        reap_view = parse_reap_view(obj)
        burst = parse_burst_pod(obj)
        kept = parse_kept_pod(obj)
        with self._lock:
            self._broken_since = None
            if event_type == "DELETED":
                self._reap_views.pop(view.uid, None)
                self._labeled.pop(view.uid, None)
                self._burst.pop(view.uid, None)
                self._kept.pop(view.uid, None)
                return
            self._reap_views[view.uid] = reap_view
            if burst is not None:
                self._burst[view.uid] = burst
            else:
                self._burst.pop(view.uid, None)
            if kept is not None:
                self._kept[view.uid] = kept
            else:
                self._kept.pop(view.uid, None)
            if view.labeled:
                self._labeled[view.uid] = view
            else:
                self._labeled.pop(view.uid, None)

    def mark_broken(self) -> None:
        with self._lock:
            if self._broken_since is None:
                self._broken_since = self._clock()

    def mark_contact(self) -> None:
        with self._lock:
            self._broken_since = None

    # ----- read by the loops ----------------------------------------------------------------

    def fresh(self, *, stale_after: float) -> tuple[bool, str]:
        """Whether the store may be trusted: listed once, and the watch not broken for long."""
        with self._lock:
            if not self._listed:
                return False, "pods not listed yet"
            if self._broken_since is not None and self._clock() - self._broken_since >= stale_after:
                return False, f"pod watch broken for {self._clock() - self._broken_since:.0f}s"
            return True, "ok"

    def reap_views(self) -> dict[str, ReapView]:
        """Every pod by UID, as of now (a copy: the views themselves never change)."""
        with self._lock:
            return dict(self._reap_views)

    def burst_pods(self) -> list[BurstPod]:
        """The pods decided remote, as of now."""
        with self._lock:
            return list(self._burst.values())

    def kept_pods(self) -> list[KeptPod]:
        """The finished burst pods whose outputs stayed in the vault and are not reported yet, as of now."""
        with self._lock:
            return list(self._kept.values())

    def labeled(self) -> list[PodView]:
        with self._lock:
            return list(self._labeled.values())
