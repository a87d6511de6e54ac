"""Pure builders for running cert-manager beside the local control plane: the two command lines,
the CRDs as they are applied, and the status that asks for a renewal.

No I/O here: no subprocess, no files, no clients. ``devplatform.certmanager.installing`` is the shell.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML (a kubernetes client dependency) ships no stubs

CONTROLLER = "cert-manager-controller"
CAINJECTOR = "cert-manager-cainjector"
REQUIRED_BINARIES = (CONTROLLER, CAINJECTOR)

# Where ClusterIssuers keep their Secrets (cert-manager's --cluster-resource-namespace). Created by
# install(); an in-cluster install uses the namespace cert-manager runs in, which this is named after.
CLUSTER_RESOURCE_NAMESPACE = "cert-manager"

# The upstream controllers the controller binary runs: the whole Certificate lifecycle, the
# Issuer/ClusterIssuer status controllers, the approver (without it no CertificateRequest is ever
# signed), and the signers for the two issuer types deploy/certificates.yaml uses. The binary is
# built with exactly these (gowrap/cmd/cert-manager-controller); naming them here makes a missing
# one fail at start instead of silently doing nothing.
CONTROLLERS = (
    "issuers",
    "clusterissuers",
    "certificates-trigger",
    "certificates-key-manager",
    "certificates-request-manager",
    "certificates-issuing",
    "certificates-readiness",
    "certificates-revision-manager",
    "certificaterequests-approver",
    "certificaterequests-issuer-selfsigned",
    "certificaterequests-issuer-ca",
)

# What cainjector injects into: cert-manager's own default set (its --enable-*-injectable flags).
INJECTABLES = (
    "mutatingwebhookconfiguration",
    "validatingwebhookconfiguration",
    "apiservice",
    "customresourcedefinition",
)

# klog verbosity: 2 is cert-manager's "info" level (one line per issuance step), quiet enough to keep.
LOG_VERBOSITY = 2

# Labels the applied CRDs carry instead of the Helm chart's templated ones. The values of any label
# written as a Helm template ('{{ template "cert-manager.name" . }}', '{{ .Release.Name }}') become
# this literal: both resolve to "cert-manager" in a default chart install.
CRD_LABEL_VALUE = "cert-manager"
CRD_LABELS = {
    "app.kubernetes.io/name": CRD_LABEL_VALUE,
    "app.kubernetes.io/instance": CRD_LABEL_VALUE,
    "app.kubernetes.io/managed-by": "nimbix-burst-devplatform",
}
FIELD_MANAGER = "nimbix-burst-devplatform"

# `cmctl renew` sets exactly this condition (cert-manager pkg/apis/certmanager/v1, the Issuing
# condition; cmctl's renew command) and the trigger controller then issues a new certificate.
ISSUING_CONDITION = "Issuing"
RENEWAL_REASON = "ManuallyTriggered"
RENEWAL_MESSAGE = "Certificate re-issuance manually triggered"

# The CRDs are about 1 MB of YAML: libyaml's parser takes a fraction of the pure-Python one's seconds.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_HELM_TEMPLATE = re.compile(r"\{\{.*?\}\}", re.DOTALL)

Manifest = dict[str, Any]


def build_controller_args(
    bin_dir: Path,
    *,
    kubeconfig: Path,
    healthz_port: int,
    cluster_resource_namespace: str = CLUSTER_RESOURCE_NAMESPACE,
    controllers: Sequence[str] = CONTROLLERS,
    verbosity: int = LOG_VERBOSITY,
) -> list[str]:
    """The controller's command line: out of cluster, no leader election (the binary has none)."""
    return [
        str(bin_dir / CONTROLLER),
        f"--kubeconfig={kubeconfig}",
        f"--cluster-resource-namespace={cluster_resource_namespace}",
        f"--controllers={','.join(controllers)}",
        f"--healthz-address=127.0.0.1:{healthz_port}",
        f"--v={verbosity}",
    ]


def build_cainjector_args(
    bin_dir: Path,
    *,
    kubeconfig: Path,
    healthz_port: int,
    injectables: Sequence[str] = INJECTABLES,
    verbosity: int = LOG_VERBOSITY,
) -> list[str]:
    """cainjector's command line: out of cluster, no leader election (the binary has none)."""
    return [
        str(bin_dir / CAINJECTOR),
        f"--kubeconfig={kubeconfig}",
        f"--injectables={','.join(injectables)}",
        f"--healthz-address=127.0.0.1:{healthz_port}",
        f"--v={verbosity}",
    ]


def build_crds(texts: Iterable[str]) -> list[Manifest]:
    """The CustomResourceDefinitions in ``texts`` (YAML files from the module's deploy/crds/),
    ready to apply: Helm-templated label values replaced by a literal and our labels added.

    Other documents are dropped. A template left anywhere else (a name, a schema field; schema
    descriptions are prose and not looked at) is an error: no literal would be right for it.
    """
    crds: list[Manifest] = []
    for text in texts:
        for document in yaml.load_all(text, Loader=_YAML_LOADER):  # a safe loader, C or Python
            if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
                continue
            crds.append(_rewrite_crd(document))
    return sorted(crds, key=lambda crd: str(crd["metadata"]["name"]))


def build_namespace(name: str) -> Manifest:
    """The Namespace ``name``, labelled like the CRDs."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(CRD_LABELS)}}


def build_apply_list(objects: Sequence[Mapping[str, Any]]) -> Manifest:
    """One ``v1/List`` of ``objects``, for a single ``kubectl apply -f -``."""
    return {"apiVersion": "v1", "kind": "List", "items": [dict(obj) for obj in objects]}


def build_renewal_status(certificate: Mapping[str, Any], *, now: datetime) -> Manifest:
    """The Certificate with its status asking for re-issuance, as ``cmctl renew`` writes it:
    condition ``Issuing=True`` (reason ManuallyTriggered) for the current generation.

    Send it back with a status update (PUT .../status): it keeps ``metadata.resourceVersion``, so a
    concurrent change makes the update fail rather than be overwritten.
    """
    updated = copy.deepcopy(dict(certificate))
    status = updated.setdefault("status", {})
    generation = updated["metadata"].get("generation")
    condition: dict[str, Any] = {
        "type": ISSUING_CONDITION,
        "status": "True",
        "reason": RENEWAL_REASON,
        "message": RENEWAL_MESSAGE,
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    conditions = [c for c in status.get("conditions", []) if c.get("type") != ISSUING_CONDITION]
    previous = [c for c in status.get("conditions", []) if c.get("type") == ISSUING_CONDITION]
    # Like cert-manager's SetCertificateCondition: an unchanged status keeps its transition time.
    if previous and previous[0].get("status") == "True" and "lastTransitionTime" in previous[0]:
        condition["lastTransitionTime"] = previous[0]["lastTransitionTime"]
    status["conditions"] = [*conditions, condition]
    return updated


def find_condition(obj: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    """The status condition of ``condition_type`` on a cert-manager object, if any."""
    for condition in obj.get("status", {}).get("conditions", []):
        if condition.get("type") == condition_type:
            return dict(condition)
    return None


def is_issuing(certificate: Mapping[str, Any]) -> bool:
    """True while a Certificate has ``Issuing=True``: an issuance is in flight. A renewal asked for
    then merges into it (the condition is already set) and yields no certificate of its own."""
    condition = find_condition(certificate, ISSUING_CONDITION)
    return condition is not None and condition.get("status") == "True"


def is_ready(obj: Mapping[str, Any]) -> bool:
    """True when a Certificate (or Issuer) has ``Ready=True`` for its current generation."""
    condition = find_condition(obj, "Ready")
    if condition is None or condition.get("status") != "True":
        return False
    observed = condition.get("observedGeneration")
    return observed is None or observed == obj.get("metadata", {}).get("generation")


def _rewrite_crd(crd: Mapping[str, Any]) -> Manifest:
    rewritten = copy.deepcopy(dict(crd))
    metadata = rewritten.setdefault("metadata", {})
    labels = {
        str(key): CRD_LABEL_VALUE if _HELM_TEMPLATE.search(str(value)) else str(value)
        for key, value in (metadata.get("labels") or {}).items()
    }
    metadata["labels"] = {**labels, **CRD_LABELS}
    annotations = {
        str(key): str(value)
        for key, value in (metadata.get("annotations") or {}).items()
        if not _HELM_TEMPLATE.search(str(value))
    }
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    leftover = _find_template(rewritten)
    if leftover is not None:
        raise ValueError(f"CRD {metadata.get('name')!r}: Helm template left at {leftover}")
    return rewritten


def _find_template(value: Any, path: str = "") -> str | None:
    if isinstance(value, str):
        return path or "." if _HELM_TEMPLATE.search(value) else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "description":
                continue
            found = _find_template(item, f"{path}.{key}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_template(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None
