"""The plugin's reads of the API server (I/O): the only kubernetes importer of the plugin.

Read-only, JSON parsed from the raw responses, every call with a timeout. The kubeconfig is found
as kubectl finds it (--kubeconfig, else $KUBECONFIG, else ~/.kube/config), and --context picks one
of its contexts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

CALL_TIMEOUT = (5.0, 30.0)
HTTP_NOT_FOUND = 404
# Pods the webhook may have decided: it is only ever called for pods with this label.
BURST_SELECTOR = "task-type=Nimbix"


class ApiError(Exception):
    """A read failed; the message says which and why (kubectl's way: one line, then exit 1)."""


def connect(*, kubeconfig: str, context: str) -> Any:
    try:
        return kubernetes.config.new_client_from_config(config_file=kubeconfig or None, context=context or None)
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise ApiError(f"cannot load the kubeconfig: {exc}") from exc


def _read(call: Any, *args: Any, what: str, **kwargs: Any) -> Any:
    try:
        response = call(*args, _preload_content=False, _request_timeout=CALL_TIMEOUT, **kwargs)
    except ApiException as exc:
        if exc.status == HTTP_NOT_FOUND:
            raise ApiError(f"{what} not found") from exc
        raise ApiError(f"{what}: the API server answered {exc.status} {exc.reason}") from exc
    except Exception as exc:
        raise ApiError(f"{what}: {exc}") from exc
    return json.loads(response.data)


def list_burst_pods(api_client: Any, *, namespace: str) -> list[Mapping[str, Any]]:
    """Pods labelled task-type=Nimbix in `namespace`, or in every namespace when it is ""."""
    core = kubernetes.client.CoreV1Api(api_client)
    if namespace:
        page = _read(core.list_namespaced_pod, namespace, label_selector=BURST_SELECTOR, what="pods")
    else:
        page = _read(core.list_pod_for_all_namespaces, label_selector=BURST_SELECTOR, what="pods")
    return list(page.get("items") or ())


def list_namespaces(api_client: Any) -> list[Mapping[str, Any]]:
    page = _read(kubernetes.client.CoreV1Api(api_client).list_namespace, what="namespaces")
    return list(page.get("items") or ())


def read_pod(api_client: Any, *, namespace: str, name: str) -> Mapping[str, Any]:
    pod: Mapping[str, Any] = _read(
        kubernetes.client.CoreV1Api(api_client).read_namespaced_pod, name, namespace, what=f'pods "{name}"'
    )
    return pod


def current_namespace(*, kubeconfig: str, context: str) -> str:
    """The namespace of the context in use ("default" when it names none), as kubectl picks it."""
    try:
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig or None)
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise ApiError(f"cannot load the kubeconfig: {exc}") from exc
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def read_configmap_data(api_client: Any, *, namespace: str, name: str) -> Mapping[str, str]:
    """The ConfigMap's data (ApiError when it cannot be read, e.g. 403 without the add-on's read role)."""
    core = kubernetes.client.CoreV1Api(api_client)
    obj = _read(core.read_namespaced_config_map, name, namespace, what=f"configmap {namespace}/{name}")
    data = obj.get("data") or {}
    return {str(k): str(v) for k, v in data.items()}
