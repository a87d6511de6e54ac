"""Where the API objects the dev platform and the e2e tier read are (``ControlPlane.read``): a GET through one
kept client instead of a ``kubectl get -o json`` process per look, which on a 2-core machine running four
e2e sessions cost a process start and a kubeconfig parse each time a wait looked.

Pure: paths and the shape of what a read returns; the client is the control plane's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    prefix: str  # the API group's version path
    namespaced: bool


# By kubectl's plural name (and the aliases the callers use), only the kinds something here reads.
RESOURCES: Mapping[str, Resource] = {
    "pods": Resource("/api/v1", True),
    "events": Resource("/api/v1", True),
    "persistentvolumeclaims": Resource("/api/v1", True),
    "configmaps": Resource("/api/v1", True),
    "resourcequotas": Resource("/api/v1", True),
    "nodes": Resource("/api/v1", False),
    "namespaces": Resource("/api/v1", False),
    "jobs": Resource("/apis/batch/v1", True),
    "deployments": Resource("/apis/apps/v1", True),
    "leases": Resource("/apis/coordination.k8s.io/v1", True),
    "certificates": Resource("/apis/cert-manager.io/v1", True),
    "mutatingwebhookconfigurations": Resource("/apis/admissionregistration.k8s.io/v1", False),
}
ALIASES: Mapping[str, str] = {
    "pod": "pods",
    "configmap": "configmaps",
    "resourcequota": "resourcequotas",
    "pvc": "persistentvolumeclaims",
    "node": "nodes",
    "namespace": "namespaces",
    "job": "jobs",
    "lease": "leases",
    "deployment": "deployments",
    "certificates.cert-manager.io": "certificates",
    "mutatingwebhookconfiguration": "mutatingwebhookconfigurations",
}


def build_path(resource: str, *, name: str | None = None, namespace: str | None = None) -> str:
    """The URL path of one object (``name``) or of the list; a namespaced kind needs ``namespace``."""
    plural = ALIASES.get(resource, resource)
    known = RESOURCES.get(plural)
    if known is None:
        raise ValueError(f"no API path known for {resource!r}")
    if known.namespaced and not namespace:
        raise ValueError(f"{resource} is namespaced: give a namespace")
    path = known.prefix
    if known.namespaced:
        path += f"/namespaces/{quote(str(namespace), safe='')}"
    path += f"/{plural}"
    if name is not None:
        path += f"/{quote(name, safe='')}"
    return path


def build_query(*, labels: str | None = None, fields: str | None = None) -> list[tuple[str, str]]:
    query = []
    if labels:
        query.append(("labelSelector", labels))
    if fields:
        query.append(("fieldSelector", fields))
    return query


def as_kubectl_prints(document: dict[str, Any]) -> dict[str, Any]:
    """A document as ``kubectl get -o json`` shows it: without ``metadata.managedFields`` (kubectl hides them),
    and a list's items with their ``kind`` and ``apiVersion`` (the API says them once, for the list)."""
    document.get("metadata", {}).pop("managedFields", None)
    kind = str(document.get("kind", ""))
    if not kind.endswith("List") or "items" not in document:
        return document
    for item in document["items"] or []:
        item.get("metadata", {}).pop("managedFields", None)
        item.setdefault("kind", kind.removesuffix("List"))
        item.setdefault("apiVersion", document.get("apiVersion", ""))
    return document


def parse_warnings(headers: list[str]) -> list[str]:
    """The texts of the API server's ``Warning`` headers (RFC 7234: ``299 - "text"``, quotes and backslashes
    escaped), as kubectl prints each after ``Warning: ``."""
    texts = []
    for header in headers:
        code, _, rest = header.partition(" ")
        _agent, _, quoted = rest.partition(" ")
        if code != "299" or not (quoted.startswith('"') and quoted.endswith('"')):
            texts.append(header)  # not the API server's form: shown as it came
            continue
        texts.append(re.sub(r"\\(.)", r"\1", quoted[1:-1]))
    return texts
