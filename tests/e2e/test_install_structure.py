"""The shipped install (`deploy/`, `images/webhook/Dockerfile`) as the project-built kubectl renders it
(`kubectl kustomize`): structure and cross-references. It lives in the e2e tier because building that
kubectl builds Kubernetes on a cold machine; what the API server itself accepts is checked in
test_manifests.py. cert-manager's kinds cannot be checked there (no cert-manager CRDs), so their
fields are checked here against cert-manager's v1 API reference."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from controller import settings as controller_settings
from devplatform import manifests
from devplatform.cluster import controlplane
from devplatform.manifests import Manifest
from jarvice import contract
from tests.support.dockerfiles import dockerfile_user_id
from webhook import settings as webhook_settings

NAMESPACE = "nimbix-burst"
APP = "nimbix-burst-webhook"
CONTROLLER = "nimbix-burst-controller"
GATEWAY = "nimbix-burst-gateway"
GPU_MODELS = "nimbix-burst-gpu-models"  # the ConfigMap of the GPU model mapping (docs/gpu-models.md)
GPU_RESOURCES = ("nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu")

# Every setting `python -m webhook` reads from the environment (its flags' defaults), minus KUBECONFIG,
# which stays unset in a cluster so that the in-cluster config is used, and the downward-API identity.
WEBHOOK_SETTINGS = frozenset(var for _flag, var, _default, _help in webhook_settings.OPTIONS) - {
    "KUBECONFIG",
    "POD_NAME",
    "POD_NAMESPACE",
    "POD_IP",
}

# --- cert-manager.io/v1, from its API reference (cert-manager.io/docs/reference/api-docs/) and
# --- pkg/apis/certmanager/v1/types_{certificate,issuer}.go. Unknown fields are pruned by the CRD's
# --- structural schema, so a misspelt field would silently do nothing: hence whitelists.
CERTIFICATE_SPEC_FIELDS = frozenset(
    {
        "additionalOutputFormats", "commonName", "dnsNames", "duration", "emailAddresses",
        "encodeUsagesInRequest", "ipAddresses", "isCA", "issuerRef", "keystores", "literalSubject",
        "nameConstraints", "otherNames", "privateKey", "renewBefore", "renewBeforePercentage",
        "revisionHistoryLimit", "secretName", "secretTemplate", "subject", "uris", "usages",
    }
)  # fmt: skip
CERTIFICATE_REQUIRED_FIELDS = frozenset({"secretName", "issuerRef"})
# A Certificate needs at least one subject or SAN (cert-manager's validating webhook).
CERTIFICATE_IDENTITY_FIELDS = frozenset(
    {"commonName", "literalSubject", "dnsNames", "uris", "emailAddresses", "ipAddresses", "otherNames"}
)
ISSUER_REF_FIELDS = frozenset({"name", "kind", "group"})
PRIVATE_KEY_FIELDS = frozenset({"rotationPolicy", "encoding", "algorithm", "size"})
ROTATION_POLICIES = frozenset({"Never", "Always"})
KEY_ENCODINGS = frozenset({"PKCS1", "PKCS8"})
KEY_SIZES = {"RSA": frozenset({2048, 4096, 8192}), "ECDSA": frozenset({256, 384, 521}), "Ed25519": None}
SUBJECT_FIELDS = frozenset(
    {
        "organizations", "countries", "organizationalUnits", "localities", "provinces",
        "streetAddresses", "postalCodes", "serialNumber",
    }
)  # fmt: skip
KEY_USAGES = frozenset(
    {
        "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
        "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
        "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
        "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
    }
)  # fmt: skip
ISSUER_TYPES = frozenset({"acme", "ca", "selfSigned", "vault", "venafi"})
CA_ISSUER_FIELDS = frozenset({"secretName", "crlDistributionPoints", "ocspServers", "issuingCertificateURLs"})
SELF_SIGNED_ISSUER_FIELDS = frozenset({"crlDistributionPoints"})
MIN_DURATION = timedelta(hours=1)
MIN_RENEW_BEFORE = timedelta(minutes=5)


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kubectl() -> Path:
    """The project-built kubectl (devplatform/cluster/build-controlplane.sh; instant when cached)."""
    return controlplane.ensure_binaries() / controlplane.KUBECTL


@pytest.fixture(scope="module")
def objs(kubectl: Path) -> list[Manifest]:
    return manifests.render_kustomize(kubectl)


@pytest.fixture(scope="module")
def deployment(objs: list[Manifest]) -> Manifest:
    return manifests.find_object(objs, kind="Deployment", name=APP)


@pytest.fixture(scope="module")
def pod_spec(deployment: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def container(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec["containers"]
    result: dict[str, Any] = only
    return result


@pytest.fixture(scope="module")
def settings(objs: list[Manifest], container: Mapping[str, Any]) -> dict[str, str]:
    """The webhook's environment, from the ConfigMap the container's envFrom names."""
    (source,) = container["envFrom"]
    config_map = manifests.find_object(objs, kind="ConfigMap", name=source["configMapRef"]["name"])
    data: dict[str, str] = config_map["data"]
    return data


@pytest.fixture(scope="module")
def webhook(objs: list[Manifest]) -> dict[str, Any]:
    config = manifests.find_object(objs, kind=manifests.WEBHOOK_CONFIGURATION_KIND)
    (pods,) = [w for w in config["webhooks"] if w["name"] == manifests.PODS_WEBHOOK]
    result: dict[str, Any] = pods
    return result


@pytest.fixture(scope="module")
def certificates(objs: list[Manifest]) -> dict[str, Manifest]:
    return {c["metadata"]["name"]: c for c in manifests.find_objects(objs, kind="Certificate")}


@pytest.fixture(scope="module")
def issuers(objs: list[Manifest]) -> dict[str, Manifest]:
    return {i["metadata"]["name"]: i for i in manifests.find_objects(objs, kind="Issuer")}


@pytest.fixture(scope="module")
def serving_certificate(
    certificates: Mapping[str, Manifest], objs: list[Manifest], pod_spec: Mapping[str, Any]
) -> Manifest:
    """The Certificate whose Secret the Deployment mounts."""
    (tls_volume,) = [v for v in pod_spec["volumes"] if "secret" in v]
    (cert,) = [c for c in certificates.values() if c["spec"]["secretName"] == tls_volume["secret"]["secretName"]]
    return cert


# --- the kustomize build ------------------------------------------------------------------------


def test_kustomize_builds_the_install(objs: list[Manifest]) -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objs)
    config_maps = [name for kind, name in kinds if kind == "ConfigMap"]
    assert [(k, n) for k, n in kinds if k != "ConfigMap"] == sorted(
        [
            ("Namespace", NAMESPACE),
            ("ServiceAccount", APP),
            ("ClusterRole", APP),
            ("ClusterRoleBinding", APP),
            ("Role", f"{APP}-leader"),
            ("RoleBinding", f"{APP}-leader"),
            ("PriorityClass", APP),
            ("Deployment", APP),
            ("Service", APP),
            ("PodDisruptionBudget", APP),
            ("Issuer", "nimbix-burst-selfsigned"),
            ("Issuer", "nimbix-burst-ca"),
            ("Certificate", "nimbix-burst-ca"),
            ("Certificate", "nimbix-burst-webhook"),
            ("MutatingWebhookConfiguration", "nimbix-burst"),
            ("NetworkPolicy", APP),
            ("ValidatingAdmissionPolicy", "nimbix-burst-budget"),
            ("ValidatingAdmissionPolicyBinding", "nimbix-burst-budget"),
            ("ValidatingAdmissionPolicy", "nimbix-burst-pod-marks"),
            ("ValidatingAdmissionPolicyBinding", "nimbix-burst-pod-marks"),
            ("ServiceAccount", CONTROLLER),
            ("ClusterRole", CONTROLLER),
            ("ClusterRoleBinding", CONTROLLER),
            ("Role", f"{CONTROLLER}-leader"),
            ("RoleBinding", f"{CONTROLLER}-leader"),
            ("Deployment", CONTROLLER),
            ("ValidatingAdmissionPolicy", f"{CONTROLLER}-dry-runs-only"),
            ("ValidatingAdmissionPolicyBinding", f"{CONTROLLER}-dry-runs-only"),
            # The JARVICE gateway (deploy/gateway.yaml): the only holder of the account keys.
            ("ServiceAccount", GATEWAY),
            ("ClusterRole", GATEWAY),
            ("ClusterRoleBinding", GATEWAY),
            ("Role", GATEWAY),
            ("RoleBinding", GATEWAY),
            ("Certificate", GATEWAY),
            ("Service", GATEWAY),
            ("Deployment", GATEWAY),
        ]
    )
    # Generated with a content hash, so a change of the settings or of the GPU model mapping rolls the Deployment.
    assert len(config_maps) == 2
    assert re.fullmatch(rf"{GPU_MODELS}-[a-z0-9]{{10}}", config_maps[0])  # sorted: gpu-models before webhook
    assert re.fullmatch(rf"{APP}-[a-z0-9]{{10}}", config_maps[1])


def test_the_only_write_is_the_webhooks_own_lease_and_it_reads_only_the_spend_record(objs: list[Manifest]) -> None:
    role = manifests.find_object(objs, kind="Role", name=f"{APP}-leader")
    granted = {
        (g, r, v, tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    lease = ("coordination.k8s.io", "leases")
    own = (f"{APP}-leader",)
    spend = ("", "configmaps", "get", ("nimbix-burst-spend",))
    assert granted == {(*lease, "create", ()), (*lease, "get", own), (*lease, "update", own), spend}
    binding = manifests.find_object(objs, kind="RoleBinding", name=f"{APP}-leader")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": APP, "namespace": NAMESPACE}]
    settings = (manifests.REPO_ROOT / "deploy" / "webhook.env").read_text()
    assert f"WEBHOOK_LEASE_NAME={APP}-leader\n" in settings


def test_namespaced_objects_live_in_the_webhook_namespace(objs: list[Manifest]) -> None:
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in objs:
        expected = None if obj["kind"] in cluster_scoped else NAMESPACE
        assert obj["metadata"].get("namespace") == expected, obj["kind"]


def test_examples_are_not_part_of_the_install(objs: list[Manifest]) -> None:
    assert not [o for o in objs if o["kind"] in {"Job", "Secret"}]


# --- RBAC ---------------------------------------------------------------------------------------


def test_cluster_role_reads_pods_nodes_namespaces_and_jobs_and_nothing_else(objs: list[Manifest]) -> None:
    # namespaces: their nimbix-burst.io/max-remote-gpus annotation is the burst budget.
    role = manifests.find_object(objs, kind="ClusterRole", name=APP)
    granted = set()
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, URLs
        granted |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    reads = {("", r) for r in ("pods", "nodes", "namespaces")} | {("batch", "jobs")}  # jobs: gang sizes
    assert granted == {(g, r, v) for g, r in reads for v in ("get", "list", "watch")}
    assert "aggregationRule" not in role


def test_cluster_role_is_bound_to_the_deployments_service_account(
    objs: list[Manifest], pod_spec: Mapping[str, Any]
) -> None:
    binding = manifests.find_object(objs, kind="ClusterRoleBinding", name=APP)
    role = manifests.find_object(objs, kind="ClusterRole", name=APP)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod_spec["serviceAccountName"], "namespace": NAMESPACE}
    ]
    manifests.find_object(objs, kind="ServiceAccount", name=pod_spec["serviceAccountName"])


# --- Deployment ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("pod.runAsNonRoot", True),
        ("pod.seccompProfile.type", "RuntimeDefault"),
        ("container.allowPrivilegeEscalation", False),
        ("container.readOnlyRootFilesystem", True),
        ("container.capabilities.drop", ["ALL"]),
    ],
    ids=str,
)
def test_deployment_security_context(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any], path: str, expected: object
) -> None:
    where, *keys = path.split(".")
    value: Any = (pod_spec if where == "pod" else container)["securityContext"]
    for key in keys:
        value = value[key]
    assert value == expected


def test_deployment_runs_as_the_images_numeric_non_root_user(pod_spec: Mapping[str, Any]) -> None:
    uid = pod_spec["securityContext"]["runAsUser"]
    assert isinstance(uid, int)
    assert uid > 0
    assert uid == dockerfile_user_id()
    assert "capabilities" not in pod_spec["securityContext"]
    assert not pod_spec.get("hostNetwork") and not pod_spec.get("hostPID")


def test_tls_secret_is_mounted_as_a_directory_where_the_webhook_reads_it(
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    settings: Mapping[str, str],
    serving_certificate: Manifest,
) -> None:
    (tls_volume,) = [v for v in pod_spec["volumes"] if "secret" in v]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == tls_volume["name"]]
    assert "subPath" not in mount and "subPathExpr" not in mount  # subPath mounts never see a renewal
    assert mount["readOnly"] is True
    assert mount["mountPath"] == settings["WEBHOOK_TLS_DIR"]
    assert "items" not in tls_volume["secret"]  # tls.crt and tls.key keep their cert-manager names
    assert tls_volume["secret"]["secretName"] == serving_certificate["spec"]["secretName"]


def test_the_gpu_model_mapping_is_mounted_where_the_webhook_reads_it_and_ships_empty(
    objs: list[Manifest], pod_spec: Mapping[str, Any], container: Mapping[str, Any], settings: Mapping[str, str]
) -> None:
    (volume,) = [v for v in pod_spec["volumes"] if v["name"] == "gpu-models"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "gpu-models"]
    config_map = manifests.find_object(objs, kind="ConfigMap", name=volume["configMap"]["name"])
    assert config_map["metadata"]["name"].startswith(f"{GPU_MODELS}-")
    (key,) = config_map["data"]
    assert settings["WEBHOOK_GPU_MODELS_FILE"] == f"{mount['mountPath']}/{key}"
    # Shipped empty: no pod goes to a machine nobody mapped (docs/gpu-models.md).
    assert yaml.safe_load(config_map["data"][key]) == {}


def test_every_mounted_volume_is_read_only_or_scratch(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any]
) -> None:
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    for mount in container["volumeMounts"]:
        assert mount.get("readOnly") is True or "emptyDir" in volumes[mount["name"]], mount


def test_deployment_is_highly_available(objs: list[Manifest], deployment: Manifest) -> None:
    spec = deployment["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    spread_keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert "kubernetes.io/hostname" in spread_keys
    for constraint in pod["topologySpreadConstraints"]:
        assert _selects(constraint["labelSelector"], pod_labels)
    (anti,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert _selects(anti["podAffinityTerm"]["labelSelector"], pod_labels)
    pdb = manifests.find_object(objs, kind="PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["minAvailable"] < spec["replicas"]  # or no voluntary eviction could ever proceed
    assert _selects(pdb["spec"]["selector"], pod_labels)


def test_priority_class_is_our_own_and_never_preempts(objs: list[Manifest], pod_spec: Mapping[str, Any]) -> None:
    name = pod_spec["priorityClassName"]
    assert not name.startswith("system-")  # often confined to kube-system by ResourceQuota
    priority_class = manifests.find_object(objs, kind="PriorityClass", name=name)
    assert priority_class["preemptionPolicy"] == "Never"
    assert priority_class["globalDefault"] is False
    assert 0 < priority_class["value"] < 1_000_000_000  # user range; above it is reserved for system-*


def test_probes_use_https_on_the_webhook_port(container: Mapping[str, Any], settings: Mapping[str, str]) -> None:
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        assert ports[get["port"]] == int(settings["WEBHOOK_PORT"])


def test_container_has_cpu_and_memory_requests_and_limits(container: Mapping[str, Any]) -> None:
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}


def test_container_runs_the_image_entrypoint_with_settings_from_the_config_map(
    container: Mapping[str, Any], settings: Mapping[str, str]
) -> None:
    assert "command" not in container and "args" not in container  # the image's ENTRYPOINT
    # Only the replica's identity from the downward API (leader election); settings come from the ConfigMap.
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]} == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_IP": "status.podIP",
    }
    assert set(settings) <= WEBHOOK_SETTINGS
    assert "KUBECONFIG" not in settings
    assert tuple(settings["WEBHOOK_GPU_RESOURCES"].split(",")) == GPU_RESOURCES


def test_service_sends_443_to_the_webhook_port(
    objs: list[Manifest], deployment: Manifest, container: Mapping[str, Any], settings: Mapping[str, str]
) -> None:
    service = manifests.find_object(objs, kind="Service", name=APP)
    (port,) = service["spec"]["ports"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port["port"] == 443
    assert ports[port["targetPort"]] == int(settings["WEBHOOK_PORT"])
    assert _selects({"matchLabels": service["spec"]["selector"]}, deployment["spec"]["template"]["metadata"]["labels"])


# --- MutatingWebhookConfiguration ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("admissionReviewVersions", ["v1"]),
        ("sideEffects", "None"),
        ("failurePolicy", "Ignore"),  # explicit; the API default is Fail (see docs/_parts/install.md)
        ("reinvocationPolicy", "IfNeeded"),
        ("matchPolicy", "Equivalent"),
    ],
    ids=str,
)
def test_webhook_fields(webhook: Mapping[str, Any], field: str, expected: object) -> None:
    assert webhook[field] == expected


def test_webhook_timeout_is_small(webhook: Mapping[str, Any]) -> None:
    assert 1 <= webhook["timeoutSeconds"] <= 10


def test_webhook_sees_pod_creates_only(webhook: Mapping[str, Any]) -> None:
    assert webhook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]


def test_webhook_sees_only_pods_labelled_for_bursting(webhook: Mapping[str, Any]) -> None:
    assert webhook["objectSelector"] == {"matchLabels": {contract.LABEL_TASK_TYPE: contract.LABEL_TASK_TYPE_VALUE}}


def test_webhook_skips_kube_system_and_its_own_namespace(webhook: Mapping[str, Any]) -> None:
    selector = webhook["namespaceSelector"]
    assert "matchLabels" not in selector
    (expression,) = selector["matchExpressions"]
    assert expression["key"] == "kubernetes.io/metadata.name"
    assert expression["operator"] == "NotIn"
    assert {"kube-system", NAMESPACE} <= set(expression["values"])


def test_webhook_match_condition_names_every_gpu_resource(
    webhook: Mapping[str, Any], settings: Mapping[str, str]
) -> None:
    (condition,) = webhook["matchConditions"]
    expression = condition["expression"]
    for resource in settings["WEBHOOK_GPU_RESOURCES"].split(","):
        # Once for containers, once for init containers.
        assert expression.count(f"'{resource}' in c.resources.limits") == 2, resource
    assert "object.spec.containers" in expression
    assert "has(object.spec.initContainers)" in expression


def test_webhook_calls_the_service_and_trusts_the_serving_certificates_ca(
    objs: list[Manifest], webhook: Mapping[str, Any], container: Mapping[str, Any], serving_certificate: Manifest
) -> None:
    service = manifests.find_object(objs, kind="Service", name=APP)
    config = manifests.find_object(objs, kind=manifests.WEBHOOK_CONFIGURATION_KIND)
    (port,) = service["spec"]["ports"]
    assert webhook["clientConfig"] == {
        "service": {
            "name": service["metadata"]["name"],
            "namespace": NAMESPACE,
            "path": "/mutate",
            "port": port["port"],
        }
    }
    assert config["metadata"]["annotations"][manifests.CA_INJECTION_ANNOTATION] == (
        f"{NAMESPACE}/{serving_certificate['metadata']['name']}"
    )
    service_dns = f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert {service_dns, f"{service_dns}.cluster.local"} <= set(serving_certificate["spec"]["dnsNames"])


def test_webhook_configuration_for_url_swaps_only_the_address(objs: list[Manifest]) -> None:
    shipped = manifests.find_object(objs, kind=manifests.WEBHOOK_CONFIGURATION_KIND)
    config = manifests.webhook_configuration_for_url(
        objs, url="https://127.0.0.1:9443/mutate", ca_bundle_pem=b"PEM", name_suffix="-e2e"
    )
    assert config["metadata"]["name"] == "nimbix-burst-e2e"
    assert manifests.CA_INJECTION_ANNOTATION not in config["metadata"].get("annotations", {})
    assert len(config["webhooks"]) == len(shipped["webhooks"]) == 2  # pods, and Jobs (their podFailurePolicy)
    for webhook, shipped_webhook in zip(config["webhooks"], shipped["webhooks"], strict=True):
        assert webhook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate", "caBundle": "UEVN"}
        assert {k: v for k, v in webhook.items() if k != "clientConfig"} == {
            k: v for k, v in shipped_webhook.items() if k != "clientConfig"
        }
        assert "url" not in shipped_webhook["clientConfig"]  # the input is not modified


# --- NetworkPolicy ------------------------------------------------------------------------------

# TEST-NET-1 (RFC 5737): a placeholder that matches no real address, so an install that skipped
# setting the control-plane CIDR fails visibly (the webhook never becomes ready) instead of open.
PLACEHOLDER_CIDR = "192.0.2.0/24"
INSTALL_DOC = manifests.REPO_ROOT / "docs" / "install.md"


@pytest.fixture(scope="module")
def network_policy(objs: list[Manifest]) -> Manifest:
    return manifests.find_object(objs, kind="NetworkPolicy", name=APP)


def _peers(rule_peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert rule_peers, "an empty from/to allows everyone"
    return rule_peers


def test_network_policy_isolates_the_webhook_pods_both_ways(network_policy: Manifest, deployment: Manifest) -> None:
    spec = network_policy["spec"]
    assert _selects(spec["podSelector"], deployment["spec"]["template"]["metadata"]["labels"])
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]


def test_network_policy_ingress_is_the_api_server_the_replicas_and_monitoring_on_the_webhook_port(
    network_policy: Manifest, deployment: Manifest, container: Mapping[str, Any]
) -> None:
    ingress = network_policy["spec"]["ingress"]
    port_names = {p["name"] for p in container["ports"]}
    for rule in ingress:
        assert rule["ports"] == [{"port": "https", "protocol": "TCP"}]  # the webhook's port, nothing else
        assert "https" in port_names
    api_server, replicas, monitoring = (_peers(rule["from"]) for rule in ingress)
    assert api_server == [{"ipBlock": {"cidr": PLACEHOLDER_CIDR}}]
    assert replicas == [{"podSelector": network_policy["spec"]["podSelector"]}]
    assert monitoring == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def test_network_policy_egress_is_the_api_server_dns_and_the_replicas_only(network_policy: Manifest) -> None:
    api_server, dns, replicas = network_policy["spec"]["egress"]
    assert _peers(api_server["to"]) == [{"ipBlock": {"cidr": PLACEHOLDER_CIDR}}]
    assert {(p["port"], p["protocol"]) for p in api_server["ports"]} == {(443, "TCP"), (6443, "TCP")}
    (dns_peer,) = _peers(dns["to"])
    assert dns_peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    assert dns_peer["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert _peers(replicas["to"]) == [{"podSelector": network_policy["spec"]["podSelector"]}]
    assert replicas["ports"] == [{"port": "https", "protocol": "TCP"}]


def test_documented_overlay_sets_the_control_plane_cidr_in_both_places(kubectl: Path, tmp_path: Path) -> None:
    """The kustomize patch docs/install.md gives for the control-plane CIDR, applied as a user would."""
    text = INSTALL_DOC.read_text()
    (patch,) = re.findall(r"# network-policy-patch\n(.*?)```", text, flags=re.DOTALL)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(manifests.DEPLOY_DIR, overlay)  # kustomize takes a base by relative path only
    (overlay / "kustomization.yaml").write_text(
        f"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {base}\n" + patch
    )
    policy = manifests.find_object(manifests.render_kustomize(kubectl, directory=overlay), kind="NetworkPolicy")
    api_in = policy["spec"]["ingress"][0]["from"]
    api_out = policy["spec"]["egress"][0]["to"]
    assert api_in == api_out
    cidrs = [peer["ipBlock"]["cidr"] for peer in api_in]
    assert cidrs and PLACEHOLDER_CIDR not in cidrs


# --- cert-manager -------------------------------------------------------------------------------


def test_cert_manager_objects_use_the_v1_api(objs: list[Manifest]) -> None:
    for obj in objs:
        if obj["kind"] in {"Issuer", "ClusterIssuer", "Certificate"}:
            assert obj["apiVersion"] == "cert-manager.io/v1"


@pytest.mark.parametrize("name", ["nimbix-burst-ca", "nimbix-burst-webhook"])
def test_certificate_fields_are_known_to_cert_manager(certificates: Mapping[str, Manifest], name: str) -> None:
    spec = certificates[name]["spec"]
    assert set(spec) <= CERTIFICATE_SPEC_FIELDS
    assert set(spec) >= CERTIFICATE_REQUIRED_FIELDS
    assert set(spec) & CERTIFICATE_IDENTITY_FIELDS
    assert set(spec["issuerRef"]) <= ISSUER_REF_FIELDS
    assert spec["issuerRef"].get("kind", "Issuer") in {"Issuer", "ClusterIssuer"}
    assert spec["issuerRef"].get("group", "cert-manager.io") == "cert-manager.io"
    assert set(spec.get("subject", {})) <= SUBJECT_FIELDS
    assert set(spec.get("usages", [])) <= KEY_USAGES
    assert isinstance(spec.get("isCA", False), bool)
    key = spec["privateKey"]
    assert set(key) <= PRIVATE_KEY_FIELDS
    assert key["rotationPolicy"] in ROTATION_POLICIES  # explicit: the default changed in cert-manager 1.18
    assert key.get("encoding", "PKCS1") in KEY_ENCODINGS
    sizes = KEY_SIZES[key.get("algorithm", "RSA")]
    assert sizes is None or key.get("size") in sizes | {None}
    duration = _go_duration(spec["duration"])
    renew_before = _go_duration(spec["renewBefore"])
    assert duration >= MIN_DURATION
    assert MIN_RENEW_BEFORE <= renew_before < duration


@pytest.mark.parametrize("name", ["nimbix-burst-selfsigned", "nimbix-burst-ca"])
def test_issuer_fields_are_known_to_cert_manager(issuers: Mapping[str, Manifest], name: str) -> None:
    spec = issuers[name]["spec"]
    (issuer_type,) = spec  # exactly one issuer type
    assert issuer_type in ISSUER_TYPES
    if issuer_type == "ca":
        assert "secretName" in spec["ca"]
        assert set(spec["ca"]) <= CA_ISSUER_FIELDS
    if issuer_type == "selfSigned":
        assert set(spec["selfSigned"]) <= SELF_SIGNED_ISSUER_FIELDS


def test_issuer_chain_is_self_signed_root_then_ca_then_serving_certificate(
    certificates: Mapping[str, Manifest], issuers: Mapping[str, Manifest], serving_certificate: Manifest
) -> None:
    serving = serving_certificate["spec"]
    assert serving.get("isCA", False) is False
    ca_issuer = issuers[serving["issuerRef"]["name"]]["spec"]["ca"]
    (ca_certificate,) = [c["spec"] for c in certificates.values() if c["spec"]["secretName"] == ca_issuer["secretName"]]
    assert ca_certificate["isCA"] is True
    assert "selfSigned" in issuers[ca_certificate["issuerRef"]["name"]]["spec"]
    for spec in (serving, ca_certificate):
        assert spec["issuerRef"].get("kind", "Issuer") == "Issuer"  # namespaced, next to the Secrets


def test_certificate_rotation_never_changes_trust_and_serving_keys_rotate(
    certificates: Mapping[str, Manifest], serving_certificate: Manifest
) -> None:
    serving = serving_certificate["spec"]
    (ca,) = [c["spec"] for c in certificates.values() if c["spec"].get("isCA")]
    assert serving["privateKey"]["rotationPolicy"] == "Always"
    # The CA keeps its key, so leaves signed before and after a CA renewal verify against either CA cert.
    assert ca["privateKey"]["rotationPolicy"] == "Never"
    # The serving Secret (and the injected caBundle) moves to a renewed CA before the old one expires.
    assert _go_duration(ca["renewBefore"]) > _go_duration(serving["duration"])
    assert "server auth" in serving["usages"]


# --- helpers ------------------------------------------------------------------------------------


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s|ms)")
_GO_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _go_duration(text: str) -> timedelta:
    """A Go time.ParseDuration string (the units cert-manager durations use) as a timedelta."""
    parts = _GO_DURATION_PART.findall(text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a Go duration: {text!r}"
    return timedelta(seconds=sum(float(n) * _GO_DURATION_UNITS[u] for n, u in parts))


# --- the burst controller (deploy/controller.yaml) -----------------------------------------------


def _grants(role: Mapping[str, Any]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {
        (g, r, v, tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_controller_cluster_role_is_least_privilege(objs: list[Manifest]) -> None:
    role = manifests.find_object(objs, kind="ClusterRole", name=CONTROLLER)
    # create: only with dryRun=All, to ask the webhook whether a queued burst pod could come home
    pods = {("", "pods", v, ()) for v in ("get", "list", "watch", "patch", "create")}
    # a move is an eviction (DisruptionTarget, which the Job's podFailurePolicy ignores), never a delete
    pods |= {("", "pods/eviction", "create", ())}
    events = {("", "events", v, ()) for v in ("create", "patch")}
    identity = {("", "namespaces", "get", ("kube-system",))}  # the cluster identity: kube-system's UID
    caps = {("", "namespaces", v, ()) for v in ("list", "watch")}  # the namespaces' cost caps, for the metrics
    # before a pod comes or moves home: whether its claims' volumes mount on any node
    volumes = {("", resource, "get", ()) for resource in ("persistentvolumeclaims", "persistentvolumes")}
    assert _grants(role) == pods | events | identity | caps | volumes | {("batch", "jobs", "get", ())}
    assert "aggregationRule" not in role
    binding = manifests.find_object(objs, kind="ClusterRoleBinding", name=CONTROLLER)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CONTROLLER}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}]


def test_controller_lease_role_is_its_own_lease_only(objs: list[Manifest]) -> None:
    role = manifests.find_object(objs, kind="Role", name=f"{CONTROLLER}-leader")
    lease, own = ("coordination.k8s.io", "leases"), (f"{CONTROLLER}-leader",)
    spend = {("", "configmaps", "create", ()), ("", "configmaps", "get", ("nimbix-burst-spend",))}
    spend |= {("", "configmaps", "update", ("nimbix-burst-spend",))}  # the spend record, its one write
    assert _grants(role) == {(*lease, "create", ()), (*lease, "get", own), (*lease, "update", own)} | spend
    binding = manifests.find_object(objs, kind="RoleBinding", name=f"{CONTROLLER}-leader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}]


def test_controller_deployment_runs_two_hardened_replicas_of_the_webhook_image(
    objs: list[Manifest], container: Mapping[str, Any]
) -> None:
    deployment = manifests.find_object(objs, kind="Deployment", name=CONTROLLER)
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == CONTROLLER
    manifests.find_object(objs, kind="ServiceAccount", name=CONTROLLER)
    (ctl,) = spec["containers"]
    assert ctl["image"] == container["image"]  # one image, two programs
    assert ctl["command"] == ["python", "-m", "controller"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert ctl["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    secrets = {v["secret"]["secretName"]: v["secret"] for v in spec["volumes"] if "secret" in v}
    assert set(secrets) == {"nimbix-burst-controller-jarvice", "nimbix-burst-gateway-tls"}
    # Without credentials the reaper is off, not the controller; without the gateway the stopper is.
    assert all(secret["optional"] is True for secret in secrets.values())
    assert secrets["nimbix-burst-gateway-tls"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # never its key


def test_the_controller_and_the_webhook_read_one_cluster_name(objs: list[Manifest]) -> None:
    """Job labels carry the identity the webhook makes; the reaper acts only on its own: both must be
    made from the same --cluster-name, so there is one place to set it (webhook.env)."""
    webhook = manifests.find_object(objs, kind="Deployment", name=APP)
    (webhook_config,) = [
        source["configMapRef"]["name"]
        for c in webhook["spec"]["template"]["spec"]["containers"]
        for source in c.get("envFrom", ())
        if "configMapRef" in source
    ]
    controller = manifests.find_object(objs, kind="Deployment", name=CONTROLLER)
    (ctl,) = controller["spec"]["template"]["spec"]["containers"]
    (name,) = [e for e in ctl["env"] if e["name"] == "NIMBIX_BURST_CLUSTER_NAME"]
    assert name["valueFrom"]["configMapKeyRef"] == {
        "name": webhook_config,
        "key": "NIMBIX_BURST_CLUSTER_NAME",
        "optional": True,
    }
    settings = (manifests.REPO_ROOT / "deploy" / "webhook.env").read_text()
    assert re.search(r"^NIMBIX_BURST_CLUSTER_NAME=", settings, re.MULTILINE)


def test_controller_settings_in_the_deployment_are_valid(objs: list[Manifest]) -> None:
    deployment = manifests.find_object(objs, kind="Deployment", name=CONTROLLER)
    (ctl,) = deployment["spec"]["template"]["spec"]["containers"]
    literal = {e["name"]: e["value"] for e in ctl["env"] if "value" in e}
    assert not {"JARVICE_APIKEY", "JARVICE_USERNAME"} & set(literal)  # credentials only from the Secret's files
    (mount,) = [m for m in ctl["volumeMounts"] if m["name"] == "jarvice"]
    assert literal["JARVICE_APIKEY_FILE"].startswith(mount["mountPath"] + "/")
    files = {literal["JARVICE_USERNAME_FILE"]: "alice", literal["JARVICE_APIKEY_FILE"]: "key"}
    env = {**literal, "POD_NAME": "controller-0", "POD_NAMESPACE": NAMESPACE}
    settings = controller_settings.parse_settings([], env, read_file=lambda path: files[path])
    assert settings.reburst and settings.reap_orphans and not settings.orphan_dry_run
    assert (settings.stranded_seconds, settings.reburst_cap) == (120, 3)
    assert settings.lease_name == f"{CONTROLLER}-leader"
    ports = {p["name"]: p["containerPort"] for p in ctl["ports"]}
    assert ports["metrics"] == settings.port
