"""The controller's only kubernetes importer: the pod watch and the few writes it makes (I/O).

Responses are read raw (`_preload_content=False`) and parsed with json, as the webhook does.
Every call carries a timeout. The client is synchronous: callers run these from worker threads.
"""

from __future__ import annotations

import datetime
import json
import logging
import random
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from controller.model import ANNOTATION_STRANDED_SINCE, PodView, ReapView
from controller.store import PodStore
from entrypoint import contract

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = 500
# The server ends each watch after this long; re-watching from the last resourceVersion is cheap
# and bounds how long a silently dead connection can go unnoticed.
WATCH_SECONDS = 60
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = WATCH_SECONDS + 15.0
CALL_TIMEOUT = (5.0, 15.0)
BACKOFF_START, BACKOFF_CAP = 0.2, 30.0
HTTP_FORBIDDEN, HTTP_NOT_FOUND, HTTP_CONFLICT, HTTP_GONE, HTTP_INVALID = 403, 404, 409, 410, 422
EVENT_SOURCE = "nimbix-burst-controller"


class PodChangedOrGone(Exception):
    """The pod is not the one we read any more: it went away, or it changed since."""


class PodGone(PodChangedOrGone):
    """404: the pod is not there."""


class PodChanged(PodChangedOrGone):
    """The API server refused a write guarded by what we read: 409 (a resourceVersion or uid
    precondition failed) or, for a patch carrying the pod's uid, 422 (another pod of that name)."""


class Forbidden(Exception):
    """403: the controller's ServiceAccount may not do this (its RBAC is missing or out of date)."""


def _raise_if_changed_or_gone(exc: ApiException, pod: PodView | ReapView, *, changed: tuple[int, ...]) -> None:
    """Translate a refused write to `pod`: 404 is PodGone, a status in `changed` PodChanged; any
    other status is left to the caller to re-raise."""
    where = f"pod {pod.namespace}/{pod.name}"
    if exc.status == HTTP_NOT_FOUND:
        raise PodGone(f"{where} went away ({exc.status})") from exc
    if exc.status in changed:
        raise PodChanged(f"{where} changed ({exc.status})") from exc


class _Expired(Exception):
    """410: our resourceVersion is too old; a fresh list is needed."""


class PodWatcher:
    """List, then watch, every pod in the cluster into the store; re-list on 410 or failure."""

    def __init__(self, api_client: Any, store: PodStore) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._store = store
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
        """In a worker thread, until stop()."""
        backoff = BACKOFF_START
        resource_version = ""
        while not self._stopping.is_set():
            try:
                if not resource_version:
                    resource_version = self._list()
                resource_version = self._watch(resource_version)
                backoff = BACKOFF_START
            except _Expired:
                log.debug("watch expired, relisting", extra={"kind": "pods"})
                resource_version = ""
            except Exception as exc:  # noqa: BLE001 - any failure: back off and retry, never die
                if self._stopping.is_set():
                    return
                self._store.mark_broken()
                log.warning("watch failed", extra={"kind": "pods", "error": str(exc)[:500], "retry_in": backoff})
                self._stopping.wait(backoff * random.uniform(0.5, 1.0))
                backoff = min(backoff * 2, BACKOFF_CAP)
                resource_version = ""

    def _list(self) -> str:
        items: list[Mapping[str, Any]] = []
        token = ""
        while True:
            response = self._core.list_pod_for_all_namespaces(
                limit=LIST_PAGE_SIZE,
                _continue=token or None,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, 60.0),
            )
            page = json.loads(response.data)
            items.extend(page.get("items") or ())
            metadata = page.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            if not token:
                resource_version = str(metadata.get("resourceVersion") or "")
                break
        self._store.replace(items)
        log.info("pods listed", extra={"count": len(items), "resource_version": resource_version})
        return resource_version

    def _watch(self, resource_version: str) -> str:
        response = self._core.list_pod_for_all_namespaces(
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
                event = json.loads(line)
                event_type, obj = event.get("type"), event.get("object") or {}
                if event_type == "ERROR":
                    if obj.get("code") == HTTP_GONE:
                        raise _Expired
                    raise RuntimeError(f"watch error event: {obj.get('message', obj)}")
                resource_version = str((obj.get("metadata") or {}).get("resourceVersion", resource_version))
                if event_type == "BOOKMARK":
                    self._store.mark_contact()
                else:
                    self._store.apply(str(event_type), obj)
        except ApiException as exc:
            if exc.status == HTTP_GONE:
                raise _Expired from exc
            raise
        finally:
            self._response = None
            response.release_conn()
        return resource_version


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kube:
    """The writes (and the reads right before them) the controller makes."""

    def __init__(self, api_client: Any, *, reporting_instance: str) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._batch = kubernetes.client.BatchV1Api(api_client)
        self._instance = reporting_instance

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            response = self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                raise PodGone(f"pod {namespace}/{name} not found") from exc
            raise
        parsed: Mapping[str, Any] = json.loads(response.data)
        return parsed

    def read_namespace_uid(self, name: str) -> str:
        """The namespace's metadata.uid ("" if it has none); raises Forbidden on 403."""
        try:
            response = self._core.read_namespace(name, _preload_content=False, _request_timeout=CALL_TIMEOUT)
        except ApiException as exc:
            if exc.status == HTTP_FORBIDDEN:
                raise Forbidden(f"get namespace {name} is forbidden") from exc
            raise
        parsed: Mapping[str, Any] = json.loads(response.data)
        return str((parsed.get("metadata") or {}).get("uid") or "")

    def record_job_ended(self, pod: ReapView) -> None:
        """Merge our job-state annotation onto exactly the pod we saw: the UID in the patch makes
        the API server refuse it (422 "field is immutable") for another pod of the same name."""
        body = {
            "metadata": {
                "uid": pod.uid,
                "annotations": {contract.ANNOTATION_JOB_STATE: contract.JOB_STATE_ENDED},
            }
        }
        try:
            self._core.patch_namespaced_pod(
                pod.name, pod.namespace, body, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            _raise_if_changed_or_gone(exc, pod, changed=(HTTP_CONFLICT, HTTP_INVALID))
            raise

    def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            response = self._batch.read_namespaced_job(
                name, namespace, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return None
            raise
        parsed: Mapping[str, Any] = json.loads(response.data)
        return parsed

    def delete_pod(self, pod: PodView) -> None:
        """Delete exactly the pod we read: a precondition on uid and resourceVersion makes the API
        server refuse (409) if anything changed it since, a bind included."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": pod.uid, "resourceVersion": pod.resource_version},
        }
        try:
            self._core.delete_namespaced_pod(
                pod.name, pod.namespace, body=body, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            _raise_if_changed_or_gone(exc, pod, changed=(HTTP_CONFLICT,))
            raise

    def annotate_stranded(self, pod: PodView, *, since: str) -> None:
        """Merge-patch our annotation, guarded by the resourceVersion we decided on."""
        body = {
            "metadata": {"resourceVersion": pod.resource_version, "annotations": {ANNOTATION_STRANDED_SINCE: since}}
        }
        try:
            self._core.patch_namespaced_pod(
                pod.name, pod.namespace, body, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            _raise_if_changed_or_gone(exc, pod, changed=(HTTP_CONFLICT,))
            raise

    def record_event(
        self,
        *,
        namespace: str,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        event_type: str = "Warning",
    ) -> None:
        """A core/v1 Event, shown by `kubectl describe` of the involved object."""
        now = _now_rfc3339()
        name = f"{involved['name']}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name[:253], "namespace": namespace},
            "involvedObject": {**involved, "namespace": namespace},
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": EVENT_SOURCE},
            "reportingComponent": EVENT_SOURCE,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._core.create_namespaced_event(namespace, body, _preload_content=False, _request_timeout=CALL_TIMEOUT)
