"""The controller's pod feed and the few writes it makes (I/O): with kubeplumbing, the only
kubernetes importer of the controller.

Responses are read raw (`_preload_content=False`) and parsed with json. Every call carries a timeout.
The client is synchronous: callers run these from worker threads.
"""

from __future__ import annotations

import datetime
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from controller.model import ANNOTATION_STRANDED_SINCE, PodView, ReapView
from controller.store import PodStore
from jarvice import contract
from kubeplumbing.watching import ListPages

log = logging.getLogger(__name__)

CALL_TIMEOUT = (5.0, 15.0)
HTTP_FORBIDDEN, HTTP_NOT_FOUND, HTTP_CONFLICT, HTTP_INVALID = 403, 404, 409, 422
EVENT_SOURCE = "nimbix-burst-controller"


class PodChangedOrGone(Exception):
    """The pod is not the one we read any more: it went away, or it changed since."""


class PodGone(PodChangedOrGone):
    """404: the pod is not there."""


class PodChanged(PodChangedOrGone):
    """The API server refused a write guarded by what we read: 409 (a resourceVersion or uid
    precondition failed) or, for a patch carrying the pod's uid, 422 (another pod of that name)."""


class ConfigMapChanged(Exception):
    """409: the ConfigMap was written (or created) by someone else since it was read."""


class Forbidden(Exception):
    """403: the controller's ServiceAccount may not do this (its RBAC is missing or out of date)."""


def _raise_if_changed_or_gone(exc: ApiException, namespace: str, name: str, *, changed: tuple[int, ...]) -> None:
    """Translate a refused write to a pod: 404 is PodGone, a status in `changed` PodChanged; any
    other status is left to the caller to re-raise."""
    where = f"pod {namespace}/{name}"
    if exc.status == HTTP_NOT_FOUND:
        raise PodGone(f"{where} went away ({exc.status})") from exc
    if exc.status in changed:
        raise PodChanged(f"{where} changed since it was read ({exc.status})") from exc


class PodFeed:
    """Every pod in the cluster, kept in the store by a list-then-watch loop
    (kubeplumbing.watching.ListWatch over "pods"; called from its worker thread)."""

    def __init__(self, store: PodStore) -> None:
        self._store = store

    def relist(self, list_pages: ListPages) -> str:
        items: list[Mapping[str, Any]] = []

        def read_page(data: bytes) -> tuple[str, str]:
            page = json.loads(data)
            items.extend(page.get("items") or ())
            metadata = page.get("metadata") or {}
            return str(metadata.get("resourceVersion") or ""), str(metadata.get("continue") or "")

        resource_version = list_pages(read_page)
        self._store.replace(items)
        log.info("pods listed", extra={"count": len(items), "resource_version": resource_version})
        return resource_version

    def apply_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        self._store.apply(event_type, obj)

    def mark_contact(self) -> None:
        self._store.mark_contact()

    def mark_broken(self) -> None:
        self._store.mark_broken()


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
            _raise_if_changed_or_gone(exc, pod.namespace, pod.name, changed=(HTTP_CONFLICT, HTTP_INVALID))
            raise

    def patch_pod_json(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        """A JSON patch (its `test` ops make it apply only to the pod as read): a failed test is
        422, a pod gone 404, both PodChangedOrGone."""
        try:
            self._core.patch_namespaced_pod(
                name, namespace, list(ops), _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            _raise_if_changed_or_gone(exc, namespace, name, changed=(HTTP_CONFLICT, HTTP_INVALID))
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

    def read_claim_and_volume(
        self, namespace: str, claim: str
    ) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        """A persistentVolumeClaim and the PersistentVolume bound to it (None for what is not found)."""
        try:
            response = self._core.read_namespaced_persistent_volume_claim(
                claim, namespace, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return None, None
            raise
        found: Mapping[str, Any] = json.loads(response.data)
        name = (found.get("spec") or {}).get("volumeName")
        if not name:
            return found, None
        try:
            response = self._core.read_persistent_volume(name, _preload_content=False, _request_timeout=CALL_TIMEOUT)
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return found, None
            raise
        volume: Mapping[str, Any] = json.loads(response.data)
        return found, volume

    def dry_run_create_pod(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Create `body` with dryRun=All: admission (the webhook included) runs, nothing is stored.
        Returns the pod as admission left it."""
        response = self._core.create_namespaced_pod(
            namespace, body, dry_run="All", _preload_content=False, _request_timeout=CALL_TIMEOUT
        )
        parsed: Mapping[str, Any] = json.loads(response.data)
        return parsed

    def evict_pod(self, pod: PodView) -> None:
        """Evict exactly the pod we read (the Eviction API): the API server marks it DisruptionTarget
        before deleting it, which its Job's podFailurePolicy ignores (kubeplumbing.disruptions): the move
        costs the Job no retry. Preconditions on uid and resourceVersion make it refuse (409) if
        anything changed the pod since, a bind included. A PodDisruptionBudget may refuse it (429):
        raised as is, the pod is looked at again next round."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid, "resourceVersion": pod.resource_version}},
        }
        try:
            self._core.create_namespaced_pod_eviction(
                pod.name, pod.namespace, body, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            _raise_if_changed_or_gone(exc, pod.namespace, pod.name, changed=(HTTP_CONFLICT,))
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
            _raise_if_changed_or_gone(exc, pod.namespace, pod.name, changed=(HTTP_CONFLICT,))
            raise

    def read_configmap(self, namespace: str, name: str) -> tuple[Mapping[str, str], str] | None:
        """The ConfigMap's data and resourceVersion, or None when there is none."""
        try:
            response = self._core.read_namespaced_config_map(
                name, namespace, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return None
            raise
        parsed: Mapping[str, Any] = json.loads(response.data)
        data = parsed.get("data") or {}
        return {str(k): str(v) for k, v in data.items()}, str(
            (parsed.get("metadata") or {}).get("resourceVersion") or ""
        )

    def write_configmap(self, namespace: str, name: str, data: Mapping[str, str], *, resource_version: str) -> None:
        """Create the ConfigMap (`resource_version` ""), or replace the one of that resourceVersion:
        a write planned from an older read is refused (409) and raises ConfigMapChanged."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": EVENT_SOURCE}},
            "data": dict(data),
        }
        try:
            if resource_version:
                body["metadata"]["resourceVersion"] = resource_version
                self._core.replace_namespaced_config_map(
                    name, namespace, body, _preload_content=False, _request_timeout=CALL_TIMEOUT
                )
            else:
                self._core.create_namespaced_config_map(
                    namespace, body, _preload_content=False, _request_timeout=CALL_TIMEOUT
                )
        except ApiException as exc:
            if exc.status == HTTP_CONFLICT:
                raise ConfigMapChanged(f"configmap {namespace}/{name} changed since it was read") from exc
            raise

    def list_namespace_annotations(self) -> dict[str, Mapping[str, str]]:
        """Every namespace's annotations, by name."""
        response = self._core.list_namespace(_preload_content=False, _request_timeout=CALL_TIMEOUT)
        parsed: Mapping[str, Any] = json.loads(response.data)
        namespaces: dict[str, Mapping[str, str]] = {}
        for item in parsed.get("items") or ():
            metadata = item.get("metadata") or {}
            annotations = metadata.get("annotations") or {}
            namespaces[str(metadata.get("name") or "")] = {str(k): str(v) for k, v in annotations.items()}
        return namespaces

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
