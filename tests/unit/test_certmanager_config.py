"""devplatform.certmanager.config: the command lines, the CRD rewrite and the renewal status.

Oracles come from cert-manager's own conventions: the flags our wrapper binaries define
(devplatform/certmanager/gowrap/cmd/*/main.go), the Helm chart's CRD label templates (v1.16's
deploy/crds), and what `cmctl renew` writes (the Issuing condition, reason ManuallyTriggered).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devplatform.certmanager import config

BIN = Path("/cache/certmanager/v1.20.3-go1.26-abc/bin")
KUBECONFIG = Path("/run/admin.kubeconfig")
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

# The shape of a v1.16 deploy/crds file: Helm control flow in comments, templated label values.
HELM_TEMPLATED_CRD = """\
# {{- include "cert-manager.crd-check" . }}
# START crd {{- if or .Values.crds.enabled .Values.installCRDs }}
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.cert-manager.io
  # START annotations {{- if .Values.crds.keep }}
  annotations:
    helm.sh/resource-policy: keep
  # END annotations {{- end }}
  labels:
    app: '{{ template "cert-manager.name" . }}'
    app.kubernetes.io/name: '{{ template "cert-manager.name" . }}'
    app.kubernetes.io/instance: '{{ .Release.Name }}'
    app.kubernetes.io/component: "crds"
    # Generated labels {{- include "labels" . | nindent 4 }}
spec:
  group: cert-manager.io
  names: {kind: Certificate, plural: certificates, singular: certificate, listKind: CertificateList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          description: "Prose may show a template, e.g. {{ .Values.x }}, and stays as it is."
# END crd {{- end }}
"""

PLAIN_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.20.1
  name: issuers.cert-manager.io
spec:
  group: cert-manager.io
  names: {kind: Issuer, plural: issuers}
  scope: Namespaced
  versions: []
"""


def _flag(argv: list[str], name: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in argv if arg.startswith(f"--{name}=")]
    return value


def test_controller_runs_out_of_cluster_with_the_lifecycle_approver_and_both_signers() -> None:
    argv = config.build_controller_args(BIN, kubeconfig=KUBECONFIG, healthz_port=4321)
    assert argv[0] == str(BIN / "cert-manager-controller")
    assert _flag(argv, "kubeconfig") == str(KUBECONFIG)
    assert _flag(argv, "cluster-resource-namespace") == "cert-manager"
    assert _flag(argv, "healthz-address") == "127.0.0.1:4321"
    controllers = set(_flag(argv, "controllers").split(","))
    assert {
        "issuers",
        "clusterissuers",
        "certificates-trigger",
        "certificates-key-manager",
        "certificates-request-manager",
        "certificates-issuing",
        "certificates-readiness",
        "certificaterequests-approver",
        "certificaterequests-issuer-selfsigned",
        "certificaterequests-issuer-ca",
    } <= controllers
    assert not any("leader-elect" in arg for arg in argv)


def test_cainjector_injects_into_webhook_configurations_from_the_kubeconfig() -> None:
    argv = config.build_cainjector_args(BIN, kubeconfig=KUBECONFIG, healthz_port=4322)
    assert argv[0] == str(BIN / "cert-manager-cainjector")
    assert _flag(argv, "kubeconfig") == str(KUBECONFIG)
    assert _flag(argv, "healthz-address") == "127.0.0.1:4322"
    assert "mutatingwebhookconfiguration" in _flag(argv, "injectables").split(",")
    assert not any("leader-elect" in arg for arg in argv)


def test_templated_label_values_become_a_literal_and_our_labels_are_added() -> None:
    (crd,) = config.build_crds([HELM_TEMPLATED_CRD])
    assert crd["metadata"]["labels"] == {
        "app": "cert-manager",
        "app.kubernetes.io/name": "cert-manager",
        "app.kubernetes.io/instance": "cert-manager",
        "app.kubernetes.io/component": "crds",
        "app.kubernetes.io/managed-by": "nimbix-burst-devplatform",
    }
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["description"].startswith("Prose may show a template")


def test_plain_crds_keep_their_annotations_and_come_sorted_by_name() -> None:
    other = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-a-crd}\n"
    crds = config.build_crds([PLAIN_CRD, other, HELM_TEMPLATED_CRD])
    assert [crd["metadata"]["name"] for crd in crds] == ["certificates.cert-manager.io", "issuers.cert-manager.io"]
    assert crds[1]["metadata"]["annotations"] == {"controller-gen.kubebuilder.io/version": "v0.20.1"}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            PLAIN_CRD.replace("name: issuers.cert-manager.io", "name: '{{ .Release.Name }}-issuers'"), id="name"
        ),
        pytest.param(PLAIN_CRD.replace("group: cert-manager.io", "group: '{{ .Values.group }}'"), id="spec-field"),
    ],
)
def test_a_template_outside_labels_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="Helm template"):
        config.build_crds([text])


def _certificate(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "c", "namespace": "ns", "generation": 3, "resourceVersion": "42"},
        "spec": {"secretName": "s"},
        "status": {"conditions": conditions},
    }


READY = {"type": "Ready", "status": "True", "reason": "Ready", "observedGeneration": 3}


@pytest.mark.parametrize(
    "conditions",
    [
        pytest.param([READY], id="ready"),
        pytest.param([READY, {"type": "Issuing", "status": "False", "reason": "Failed"}], id="failed-issuing"),
        pytest.param([], id="no-status-yet"),
    ],
)
def test_renewal_sets_issuing_true_like_cmctl(conditions: list[dict[str, Any]]) -> None:
    certificate = _certificate(conditions)
    original = copy.deepcopy(certificate)
    updated = config.build_renewal_status(certificate, now=NOW)
    assert certificate == original
    issuing = [c for c in updated["status"]["conditions"] if c["type"] == "Issuing"]
    assert issuing == [
        {
            "type": "Issuing",
            "status": "True",
            "reason": "ManuallyTriggered",
            "message": "Certificate re-issuance manually triggered",
            "lastTransitionTime": "2026-01-02T03:04:05Z",
            "observedGeneration": 3,
        }
    ]
    others = [c for c in updated["status"]["conditions"] if c["type"] != "Issuing"]
    assert others == [c for c in conditions if c["type"] != "Issuing"]
    # An update, not a blind overwrite: the version the change was based on goes with it.
    assert updated["metadata"]["resourceVersion"] == "42"
    assert updated["spec"] == original["spec"]


def test_renewal_while_already_issuing_keeps_the_transition_time() -> None:
    issuing = {"type": "Issuing", "status": "True", "reason": "Renewing", "lastTransitionTime": "2025-12-31T00:00:00Z"}
    updated = config.build_renewal_status(_certificate([READY, issuing]), now=NOW)
    (condition,) = [c for c in updated["status"]["conditions"] if c["type"] == "Issuing"]
    assert condition["lastTransitionTime"] == "2025-12-31T00:00:00Z"


@pytest.mark.parametrize(
    ("conditions", "generation", "expected"),
    [
        pytest.param([READY], 3, True, id="ready-current"),
        pytest.param([READY], 4, False, id="ready-for-an-older-generation"),
        pytest.param([{**READY, "status": "False"}], 3, False, id="not-ready"),
        pytest.param([], 3, False, id="no-conditions"),
        pytest.param([{"type": "Ready", "status": "True"}], 3, True, id="ready-without-observed-generation"),
    ],
)
def test_is_ready(conditions: list[dict[str, Any]], generation: int, expected: bool) -> None:
    obj = _certificate(conditions)
    obj["metadata"]["generation"] = generation
    assert config.is_ready(obj) is expected


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        pytest.param([READY], False, id="ready-settled"),
        pytest.param([READY, {"type": "Issuing", "status": "True", "reason": "Issuing"}], True, id="in-flight"),
        pytest.param([READY, {"type": "Issuing", "status": "False", "reason": "Failed"}], False, id="failed"),
        pytest.param([], False, id="no-status-yet"),
    ],
)
def test_is_issuing_only_while_the_condition_is_true(conditions: list[dict[str, Any]], expected: bool) -> None:
    assert config.is_issuing(_certificate(conditions)) is expected
