"""The few API server calls the gateway makes (I/O): TokenReview, the caller's pod and namespace, the
ledger ConfigMap and the controller's spend record. The client is synchronous: callers run these in
worker threads. Responses are read raw and parsed with json; every call carries a timeout."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import kubernetes
from kubernetes.client.rest import ApiException

from gateway.identity import build_token_review
from gateway.ledger import CONFIGMAP_NAME, LEDGER_KEY
from kubeplumbing.spendrecord import CONFIGMAP_NAME as SPEND_CONFIGMAP
from kubeplumbing.spendrecord import RECORD_KEY

CALL_TIMEOUT: Final = (5.0, 15.0)
HTTP_NOT_FOUND, HTTP_CONFLICT = 404, 409


class LedgerChanged(Exception):
    """Another replica wrote the ledger since it was read."""


@dataclass(frozen=True, slots=True)
class StoredLedger:
    text: str | None
    resource_version: str | None  # None: there is no ConfigMap yet


class KubeAdapter:
    def __init__(self, api_client: Any, *, namespace: str) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._auth = kubernetes.client.AuthenticationV1Api(api_client)
        self._namespace = namespace

    @staticmethod
    def _json(response: Any) -> Any:
        return json.loads(response.data)

    def review_token(self, token: str, *, audience: str) -> dict[str, Any]:
        body = build_token_review(token, audience=audience)
        result: dict[str, Any] = self._json(
            self._auth.create_token_review(body, _preload_content=False, _request_timeout=CALL_TIMEOUT)
        )
        return result

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return None
            raise
        pod: dict[str, Any] = self._json(response)
        return pod

    def job_uid(self, namespace: str, name: str) -> str | None:
        """The UID of the Job `name` in `namespace`; None when there is none."""
        batch = kubernetes.client.BatchV1Api(self._core.api_client)
        try:
            response = batch.read_namespaced_job(name, namespace, _preload_content=False, _request_timeout=CALL_TIMEOUT)
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return None
            raise
        uid = (self._json(response).get("metadata") or {}).get("uid")
        return uid if isinstance(uid, str) else None

    def namespace_annotations(self, namespace: str) -> dict[str, str]:
        response = self._core.read_namespace(namespace, _preload_content=False, _request_timeout=CALL_TIMEOUT)
        annotations: dict[str, str] = (self._json(response).get("metadata") or {}).get("annotations") or {}
        return annotations

    def _read_configmap(self, name: str) -> dict[str, Any] | None:
        try:
            response = self._core.read_namespaced_config_map(
                name, self._namespace, _preload_content=False, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                return None
            raise
        configmap: dict[str, Any] = self._json(response)
        return configmap

    def read_ledger(self) -> StoredLedger:
        configmap = self._read_configmap(CONFIGMAP_NAME)
        if configmap is None:
            return StoredLedger(text=None, resource_version=None)
        text = (configmap.get("data") or {}).get(LEDGER_KEY)
        return StoredLedger(text=text, resource_version=configmap["metadata"]["resourceVersion"])

    def write_ledger(self, text: str, *, resource_version: str | None) -> None:
        """Create or replace the ledger, refused (LedgerChanged) when someone wrote it since it was read."""
        meta: dict[str, Any] = {"name": CONFIGMAP_NAME, "namespace": self._namespace}
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {LEDGER_KEY: text}}
        try:
            if resource_version is None:
                self._core.create_namespaced_config_map(self._namespace, body, _request_timeout=CALL_TIMEOUT)
            else:
                meta["resourceVersion"] = resource_version
                self._core.replace_namespaced_config_map(
                    CONFIGMAP_NAME, self._namespace, body, _request_timeout=CALL_TIMEOUT
                )
        except ApiException as exc:
            if exc.status == HTTP_CONFLICT:
                raise LedgerChanged from None
            raise

    def read_spend_record(self) -> str | None:
        configmap = self._read_configmap(SPEND_CONFIGMAP)
        if configmap is None:
            return None
        text = (configmap.get("data") or {}).get(RECORD_KEY)
        return text if isinstance(text, str) else None
