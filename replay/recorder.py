"""The replay's own watch: list, then watch nodes and pods, stamping every state with the
monotonic time it arrived (I/O). Independent of the webhook's watcher (webhook/watching.py).

Each kind runs in its own thread. Raw JSON, parsed by replay.history: the kubernetes client's
model classes would cost more than everything else the replay does per event.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import kubernetes
from kubernetes.client.exceptions import ApiException

from replay import history
from replay.history import Observation

log = logging.getLogger(__name__)

Kind = Literal["nodes", "pods"]
LIST_PAGE_SIZE = 500
# One watch call lasts this long before the server ends it; the replay then re-watches from the
# last resourceVersion. Longer than one policy's replay, so usually there is a single call.
WATCH_SECONDS = 900
CONNECT_TIMEOUT = 5.0
HTTP_GONE = 410
RETRY_SECONDS = 0.5


class _Gone(Exception):
    pass


class Recorder:
    def __init__(
        self,
        core: Any,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_pod: Callable[[Observation], None] | None = None,
    ) -> None:
        self._core = core
        self._clock = clock
        self._on_pod = on_pod
        self._lock = threading.Lock()
        self._observations: list[Observation] = []
        self._stopping = threading.Event()
        self._synced = {"nodes": threading.Event(), "pods": threading.Event()}
        self._threads: list[threading.Thread] = []
        self._responses: dict[Kind, Any] = {}
        self._known: dict[Kind, set[str]] = {"nodes": set(), "pods": set()}
        self.errors: list[str] = []
        # The live state of pods, for progress lines: key -> (bound node, GPUs requested).
        self.live_pods: dict[str, tuple[str, int]] = {}

    def start(self) -> None:
        for kind in ("nodes", "pods"):
            thread = threading.Thread(target=self._loop, args=(kind,), name=f"recorder-{kind}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_synced(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for kind, event in self._synced.items():
            if not event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"replay watch: no complete list of {kind} after {timeout:g}s: {self.errors[-3:]}")

    def stop(self) -> None:
        self._stopping.set()
        for response in list(self._responses.values()):
            try:
                response.shutdown()
            except Exception:  # noqa: BLE001 - unblocking a read at shutdown; any failure is moot
                log.debug("watch shutdown failed")
        for thread in self._threads:
            thread.join(timeout=10)

    def observations(self) -> list[Observation]:
        with self._lock:
            return sorted(self._observations, key=lambda o: o.at)

    def count_pods(self, prefix: str) -> tuple[int, int]:
        """(bound, unbound) pods requesting GPUs whose key starts with `prefix`."""
        with self._lock:
            states = [v for k, v in self.live_pods.items() if k.startswith(prefix) and v[1] > 0]
        bound = sum(1 for node, _ in states if node)
        return bound, len(states) - bound

    # -- internals ----------------------------------------------------------------------------------

    def _call(self, kind: Kind) -> Callable[..., Any]:
        call: Callable[..., Any] = self._core.list_node if kind == "nodes" else self._core.list_pod_for_all_namespaces
        return call

    def _loop(self, kind: Kind) -> None:
        version = ""
        while not self._stopping.is_set():
            try:
                if not version:
                    version = self._list(kind)
                    self._synced[kind].set()
                version = self._watch(kind, version)
            except _Gone:
                version = ""
            except Exception as error:  # noqa: BLE001 - keep watching; the gap is reported
                if self._stopping.is_set():
                    return
                self.errors.append(f"{kind}: {error}"[:300])
                version = ""
                self._stopping.wait(RETRY_SECONDS)

    def _record(self, observation: Observation) -> None:
        with self._lock:
            self._observations.append(observation)
            if observation.kind == "pod" and observation.pod is not None:
                self.live_pods[observation.name] = (observation.pod.node, observation.pod.requests.get(history.GPU, 0))
            elif observation.kind == "pod-deleted":
                self.live_pods.pop(observation.name, None)
        if self._on_pod is not None and observation.kind in ("pod", "pod-deleted"):
            self._on_pod(observation)

    def _observe(self, kind: Kind, event_type: str, raw: Mapping[str, Any], at: float) -> None:
        version = history.resource_version(raw)
        if kind == "nodes":
            name = str((raw.get("metadata") or {}).get("name", ""))
            if event_type == "DELETED":
                self._known[kind].discard(name)
                self._record(Observation(at, "node-deleted", name, version=version))
            else:
                self._known[kind].add(name)
                self._record(Observation(at, "node", name, node=history.parse_node(raw), version=version))
            return
        key = history.pod_key(raw)
        if event_type == "DELETED":
            self._known[kind].discard(key)
            self._record(Observation(at, "pod-deleted", key, version=version))
        else:
            self._known[kind].add(key)
            self._record(Observation(at, "pod", key, pod=history.parse_pod(raw), version=version))

    def _list(self, kind: Kind) -> str:
        items: list[Mapping[str, Any]] = []
        token = ""
        while True:
            response = self._call(kind)(
                limit=LIST_PAGE_SIZE, _continue=token or None, _preload_content=False, _request_timeout=60.0
            )
            body = json.loads(response.data)
            items += body.get("items") or []
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                break
        at = self._clock()
        listed: set[str] = set()
        for raw in items:
            self._observe(kind, "ADDED", raw, at)
            listed.add(str((raw.get("metadata") or {}).get("name")) if kind == "nodes" else history.pod_key(raw))
        for gone in self._known[kind] - listed:  # only after a 410 re-list
            self._known[kind].discard(gone)
            self._record(Observation(at, "node-deleted" if kind == "nodes" else "pod-deleted", gone))
        return str((body.get("metadata") or {}).get("resourceVersion", ""))

    def _watch(self, kind: Kind, version: str) -> str:
        response = self._call(kind)(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, WATCH_SECONDS + 30.0),
        )
        self._responses[kind] = response
        try:
            for line in kubernetes.watch.watch.iter_resp_lines(response):
                if self._stopping.is_set():
                    break
                at = self._clock()
                event = json.loads(line)
                raw = event.get("object") or {}
                event_type = str(event.get("type"))
                if event_type == "ERROR":
                    if raw.get("code") == HTTP_GONE:
                        raise _Gone
                    raise RuntimeError(f"watch error: {raw.get('message', raw)}")
                version = str((raw.get("metadata") or {}).get("resourceVersion", version))
                if event_type != "BOOKMARK":
                    self._observe(kind, event_type, raw, at)
        except ApiException as error:
            if error.status == HTTP_GONE:
                raise _Gone from error
            raise
        finally:
            self._responses.pop(kind, None)
            response.release_conn()
        return version
