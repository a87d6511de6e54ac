"""The Helm chart (charts/nimbix-burst) rendered by the project-built helm: with default values it
renders the very objects `kubectl kustomize deploy/` does (Helm's labels aside), `helm lint` is
clean, the values schema turns typos into errors, and each value lands where it should."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs

from devplatform import gotools, helmchart, manifests
from devplatform.cluster import controlplane, gatewayssh, install, nodeconfig


@pytest.fixture(scope="module")
def helm() -> Path:
    return gotools.ensure_tool("helm")


@pytest.fixture(scope="module")
def kubectl() -> Path:
    return controlplane.ensure_binaries() / "kubectl"


def _find(objects: Sequence[Mapping[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    return manifests.find_object(objects, kind=kind, name=name)


def _settings(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The webhook's settings ConfigMap (the other one holds the GPU model mapping)."""
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap" and "WEBHOOK_PORT" in o.get("data", {})]
    return dict(configmap)


def _webhook_container(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = _find(objects, "Deployment", "nimbix-burst-webhook")["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def test_default_values_render_what_kustomize_renders(helm: Path, kubectl: Path) -> None:
    kustomize = manifests.render_kustomize(kubectl)
    chart = helmchart.render(helm)
    assert helmchart.find_render_differences(kustomize, chart) == []
    assert len(chart) == len(kustomize) - 1  # all but the Namespace


def test_the_comparison_sees_a_changed_setting(helm: Path, kubectl: Path) -> None:
    kustomize = manifests.render_kustomize(kubectl)
    chart = helmchart.render(helm, values={"webhook": {"env": {"WEBHOOK_OVER_BUDGET": "deny"}}})
    differences = helmchart.find_render_differences(kustomize, chart)
    # The setting moves the ConfigMap to another content-hash name, and every reference with it.
    assert any(
        line.startswith("only in kustomize: ConfigMap/nimbix-burst/nimbix-burst-webhook-") for line in differences
    )
    assert any(
        line.startswith("only in the chart: ConfigMap/nimbix-burst/nimbix-burst-webhook-") for line in differences
    )
    assert any(
        line.startswith("Deployment/nimbix-burst/nimbix-burst-webhook: .spec.template.spec.containers[0].envFrom")
        for line in differences
    )


def test_helm_lint_is_clean(helm: Path) -> None:
    result = helmchart.run_helm(helm, "lint", "--strict", str(helmchart.CHART_DIR))
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"webhook": {"replicass": 3}}, "replicass"),
        ({"webhook": {"env": {"WEBHOOK_OVERBUDGET": "deny"}}}, "WEBHOOK_OVERBUDGET"),
        ({"webhook": {"env": {"WEBHOOK_OVER_BUDGET": "maybe"}}}, "WEBHOOK_OVER_BUDGET"),
        ({"webhook": {"env": {"WEBHOOK_PORT": 8443}}}, "WEBHOOK_PORT"),
        ({"webhook": {"failurePolicy": "ignore"}}, "failurePolicy"),
        ({"controller": {"env": {"CONTROLLER_REAP_ORPHANS": "yes"}}}, "CONTROLLER_REAP_ORPHANS"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"networkPolicy": {"apiServerCIDRs": []}}, "apiServerCIDRs"),
        ({"gateway": {"replica": 2}}, "replica"),
        ({"gateway": {"clusterIP": "gateway.local"}}, "clusterIP"),
        ({"webhook": {"env": {"WEBHOOK_GATEWAY_URL": "http://nimbix-burst-gateway"}}}, "WEBHOOK_GATEWAY_URL"),
    ],
    ids=[
        "unknown-key",
        "unknown-setting",
        "bad-budget-policy",
        "port-not-a-string",
        "lowercase-policy",
        "bad-reaper-mode",
        "bad-pull-policy",
        "no-cidr",
        "unknown-gateway-key",
        "gateway-address-not-an-ip",
        "gateway-url-not-https",
    ],
)
def test_the_schema_rejects_typos(helm: Path, values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(helmchart.HelmError, match="values don't meet the specifications of the schema") as error:
        helmchart.render(helm, values=values)
    assert complaint in str(error.value)


def test_a_changed_setting_renames_the_configmap_and_every_reference(helm: Path) -> None:
    objects = helmchart.render(helm, values={"webhook": {"env": {"WEBHOOK_LOG_LEVEL": "DEBUG"}}})
    name = _settings(objects)["metadata"]["name"]
    assert name != _settings(helmchart.render(helm))["metadata"]["name"]
    assert _webhook_container(objects)["envFrom"][0]["configMapRef"]["name"] == name
    controller = _find(objects, "Deployment", "nimbix-burst-controller")["spec"]["template"]["spec"]["containers"][0]
    cluster_name = next(e for e in controller["env"] if e["name"] == "NIMBIX_BURST_CLUSTER_NAME")
    assert cluster_name["valueFrom"]["configMapKeyRef"]["name"] == name


def test_gpu_resources_set_both_the_setting_and_the_match_condition(helm: Path) -> None:
    objects = helmchart.render(helm, values={"webhook": {"gpuResources": ["amd.com/gpu"]}})
    assert _settings(objects)["data"]["WEBHOOK_GPU_RESOURCES"] == "amd.com/gpu"
    expression = _find(objects, "MutatingWebhookConfiguration")["webhooks"][0]["matchConditions"][0]["expression"]
    assert expression.count("'amd.com/gpu' in c.resources.limits") == 2
    assert "nvidia.com/gpu" not in expression


def test_a_gpu_model_mapping_is_mounted_under_its_own_content_hash(helm: Path) -> None:
    mapping = {"Tesla-T4": ["ng1"], "NVIDIA-A100-SXM4-80GB": ["ng1a", "ng8"]}
    objects = helmchart.render(helm, values={"webhook": {"gpuModels": mapping}})
    (configmap,) = [o for o in objects if o["metadata"]["name"].startswith("nimbix-burst-gpu-models-")]
    assert yaml.safe_load(configmap["data"]["gpu-models.yaml"]) == mapping
    default = _find(helmchart.render(helm), "Deployment", "nimbix-burst-webhook")["spec"]["template"]["spec"]
    spec = _find(objects, "Deployment", "nimbix-burst-webhook")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "gpu-models")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert volume != next(v for v in default["volumes"] if v["name"] == "gpu-models")
    with pytest.raises(helmchart.HelmError, match="gpuModels"):
        helmchart.render(helm, values={"webhook": {"gpuModels": {"Tesla-T4": "ng1"}}})


def test_client_ca_secret_mounts_the_ca_and_turns_the_check_on(helm: Path) -> None:
    objects = helmchart.render(helm, values={"webhook": {"clientCASecret": "api-client-ca"}})
    assert _settings(objects)["data"]["WEBHOOK_CLIENT_CA_FILE"] == "/etc/nimbix-burst/client-ca/ca.crt"
    spec = _find(objects, "Deployment", "nimbix-burst-webhook")["spec"]["template"]["spec"]
    assert {"name": "client-ca", "secret": {"secretName": "api-client-ca", "defaultMode": 0o440}} in spec["volumes"]
    mounts = _webhook_container(objects)["volumeMounts"]
    assert {"name": "client-ca", "mountPath": "/etc/nimbix-burst/client-ca", "readOnly": True} in mounts


def test_another_release_namespace_is_excluded_and_named_in_the_certificate(helm: Path) -> None:
    objects = helmchart.render(
        helm, namespace="burst-system", values={"webhook": {"excludedNamespaces": ["kube-system", "gpu-operator"]}}
    )
    webhook = _find(objects, "MutatingWebhookConfiguration")
    (expression,) = webhook["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert expression["values"] == ["kube-system", "gpu-operator", "burst-system"]
    assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "burst-system/nimbix-burst-webhook"
    certificate = _find(objects, "Certificate", "nimbix-burst-webhook")
    assert certificate["spec"]["dnsNames"][0] == "nimbix-burst-webhook.burst-system.svc"
    assert _settings(objects)["data"]["WEBHOOK_PEER_SERVER_NAME"] == "nimbix-burst-webhook.burst-system.svc"
    assert {o["metadata"].get("namespace", "burst-system") for o in objects} == {"burst-system"}


def test_an_issuer_of_your_own_replaces_the_self_signed_ca(helm: Path) -> None:
    issuer = {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp-ca"}
    objects = helmchart.render(helm, values={"certManager": {"issuerRef": issuer}})
    assert [o["kind"] for o in objects].count("Issuer") == 0
    certificates = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Certificate"}
    assert sorted(certificates) == ["nimbix-burst-gateway", "nimbix-burst-webhook"]
    assert all(c["spec"]["issuerRef"] == issuer for c in certificates.values())


def test_a_certificate_you_bring_goes_without_cert_manager(helm: Path) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    objects = helmchart.render(
        helm,
        values={
            "certManager": {"enabled": False},
            "tls": {"secretName": "mine", "caBundle": pem},
            "gateway": {"tlsSecretName": "mine-gateway"},
        },
    )
    assert not [o for o in objects if o["kind"] in {"Issuer", "Certificate"}]
    webhook = _find(objects, "MutatingWebhookConfiguration")
    assert "annotations" not in webhook["metadata"]
    assert base64.b64decode(webhook["webhooks"][0]["clientConfig"]["caBundle"]).decode() == pem
    volumes = _find(objects, "Deployment", "nimbix-burst-webhook")["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["secret"]["secretName"] == "mine"
    with pytest.raises(helmchart.HelmError, match=r"tls\.caBundle"):
        helmchart.render(helm, values={"certManager": {"enabled": False}})


def _peer_ca(objects: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The settings' WEBHOOK_PEER_CA_FILE, and the ConfigMap the webhook mounts at its directory."""
    peer_ca_file = str(_settings(objects)["data"].get("WEBHOOK_PEER_CA_FILE", ""))
    pod = _find(objects, "Deployment", "nimbix-burst-webhook")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volume = mounts.get(peer_ca_file.rsplit("/", 1)[0], "")
    names = [v["configMap"]["name"] for v in pod["volumes"] if v["name"] == volume and "configMap" in v]
    configmap = _find(objects, "ConfigMap", names[0]) if names else {}
    return peer_ca_file, configmap


def test_without_cert_manager_the_replicas_trust_the_ca_given_to_the_api_server(helm: Path) -> None:
    # A Secret made with `kubectl create secret tls` has no ca.crt: the peers' CA comes from tls.caBundle.
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    without = {"certManager": {"enabled": False}, "tls": {"caBundle": pem}, "gateway": {"tlsSecretName": "gw"}}
    peer_ca_file, configmap = _peer_ca(helmchart.render(helm, values=without))
    assert peer_ca_file == "/etc/nimbix-burst/peer-ca/ca.crt"
    assert configmap["data"] == {"ca.crt": pem}
    # Another CA: another ConfigMap name, so the Deployment rolls onto it.
    other = {**without, "tls": {"caBundle": pem.replace("MIIB", "MIIC")}}
    assert _peer_ca(helmchart.render(helm, values=other))[1]["metadata"]["name"] != configmap["metadata"]["name"]
    # With cert-manager the peers read ca.crt from the Secret it writes, as the kustomize install does.
    assert _peer_ca(helmchart.render(helm)) == ("", {})


def test_a_ca_bundle_that_is_not_a_pem_certificate_fails_the_render(helm: Path) -> None:
    encoded = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...").decode()  # base64 of it, as caBundle is in the API
    with pytest.raises(helmchart.HelmError, match=r"tls\.caBundle: not a PEM certificate"):
        helmchart.render(
            helm,
            values={
                "certManager": {"enabled": False},
                "tls": {"caBundle": encoded},
                "gateway": {"tlsSecretName": "gw"},
            },
        )


def test_the_chart_can_create_the_jarvice_secret(helm: Path) -> None:
    values = {
        "controller": {"jarvice": {"create": True, "username": "ada", "apikey": "k3y", "url": "https://j.example/api"}}
    }
    secret = _find(helmchart.render(helm, values=values), "Secret", "nimbix-burst-controller-jarvice")
    assert secret["stringData"] == {"username": "ada", "apikey": "k3y", "url": "https://j.example/api"}
    with pytest.raises(helmchart.HelmError, match=r"controller\.jarvice\.apikey is required"):
        helmchart.render(helm, values={"controller": {"jarvice": {"create": True, "username": "ada"}}})


def test_optional_parts_can_be_left_out(helm: Path) -> None:
    values = {
        "webhook": {"podDisruptionBudget": {"enabled": False}},
        "priorityClass": {"create": False, "name": ""},
        "budgetPolicy": {"enabled": False},
        "podMarksPolicy": {"enabled": False},
        "networkPolicy": {"enabled": False},
        "controller": {"enabled": False},
    }
    kinds = {o["kind"] for o in helmchart.render(helm, values=values)}
    assert kinds.isdisjoint({"PodDisruptionBudget", "PriorityClass", "ValidatingAdmissionPolicy", "NetworkPolicy"})
    names = {o["metadata"]["name"] for o in helmchart.render(helm, values=values)}
    assert "nimbix-burst-controller" not in names


def test_monitoring_renders_the_rule_file_and_the_dashboard(helm: Path) -> None:
    values = {
        "monitoring": {
            "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
            "dashboard": {"enabled": True},
        }
    }
    objects = helmchart.render(helm, values=values)
    rule = _find(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert next(r["alert"] for r in rule["spec"]["groups"][0]["rules"]) == "NimbixBurstWebhookUnavailable"
    dashboard = _find(objects, "ConfigMap", "nimbix-burst-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["nimbix-burst.json"] == (helmchart.CHART_DIR / "monitoring" / "dashboard.json").read_text()


# -- the JARVICE gateway ---------------------------------------------------------------------------------

GATEWAY = "nimbix-burst-gateway"


def _gateway_objects(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects if GATEWAY in o["metadata"]["name"])


def _gateway_pod(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = _find(objects, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    return pod


def test_the_gateway_is_installed_by_default_and_burst_pods_are_pointed_at_it(helm: Path) -> None:
    objects = helmchart.render(helm)
    kinds = ["Certificate", "ClusterRole", "ClusterRoleBinding", "Deployment", "Role", "RoleBinding", "Service"]
    assert _gateway_objects(objects) == [f"{kind}/{GATEWAY}" for kind in [*kinds, "ServiceAccount"]]
    settings = _settings(objects)["data"]
    assert settings["WEBHOOK_GATEWAY_URL"] == "https://nimbix-burst-gateway.nimbix-burst.svc"
    assert settings["WEBHOOK_GATEWAY_CA_FILE"] == "/etc/nimbix-burst/tls/ca.crt"  # cert-manager's ca.crt
    assert settings["WEBHOOK_GATEWAY_AUDIENCE"] == GATEWAY


def test_without_the_gateway_no_gateway_object_is_rendered_and_pods_use_their_namespaces_key(helm: Path) -> None:
    objects = helmchart.render(helm, values={"gateway": {"enabled": False}})
    assert _gateway_objects(objects) == []
    assert _settings(objects)["data"]["WEBHOOK_GATEWAY_URL"] == ""  # every namespace: its jarvice-credentials
    assert _settings(objects)["data"]["WEBHOOK_CREDENTIALS_SECRET"] == "jarvice-credentials"
    # A URL with no gateway to answer it is a contradiction the render refuses, naming both values.
    with pytest.raises(helmchart.HelmError, match=r"WEBHOOK_GATEWAY_URL: .* gateway\.enabled is false"):
        helmchart.render(
            helm, values={"gateway": {"enabled": False}, "webhook": {"env": {"WEBHOOK_GATEWAY_URL": "https://gw"}}}
        )


def test_the_gateway_lives_in_the_release_namespace_and_its_certificate_names_it(helm: Path) -> None:
    objects = helmchart.render(helm, namespace="burst-system")
    certificate = _find(objects, "Certificate", GATEWAY)
    assert certificate["spec"]["dnsNames"] == [
        "nimbix-burst-gateway.burst-system.svc",
        "nimbix-burst-gateway.burst-system.svc.cluster.local",
    ]
    assert "ipAddresses" not in certificate["spec"]
    assert _settings(objects)["data"]["WEBHOOK_GATEWAY_URL"] == "https://nimbix-burst-gateway.burst-system.svc"
    (subject,) = _find(objects, "ClusterRoleBinding", GATEWAY)["subjects"]
    assert subject == {"kind": "ServiceAccount", "name": GATEWAY, "namespace": "burst-system"}
    assert {
        o["metadata"]["namespace"] for o in objects if GATEWAY in o["metadata"]["name"] and "Cluster" not in o["kind"]
    } == {"burst-system"}


def test_the_gateways_values_land_where_they_should(helm: Path) -> None:
    values = {
        "gateway": {
            "replicas": 3,
            "accountsSecret": "team-accounts",
            "clusterIP": "10.96.0.53",
            "resources": {"requests": {"cpu": "100m"}},
            "nodeSelector": {"pool": "system"},
        },
        "webhook": {"env": {"WEBHOOK_GATEWAY_AUDIENCE": "burst-gw"}},
    }
    objects = helmchart.render(helm, values=values)
    deployment = _find(objects, "Deployment", GATEWAY)
    assert deployment["spec"]["replicas"] == 3
    pod = _gateway_pod(objects)
    assert pod["nodeSelector"] == {"pool": "system"}
    accounts = next(v for v in pod["volumes"] if v["name"] == "accounts")
    assert accounts["secret"] == {"secretName": "team-accounts", "defaultMode": 0o440, "optional": True}
    (container,) = pod["containers"]
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "64Mi"}  # merged with the defaults
    # The audience the webhook gives burst pods' tokens is the one the gateway accepts.
    assert {"name": "GATEWAY_AUDIENCE", "value": "burst-gw"} in container["env"]
    # A fixed address: the Service takes it, the certificate names it, burst pods are sent to it.
    assert _find(objects, "Service", GATEWAY)["spec"]["clusterIP"] == "10.96.0.53"
    assert _find(objects, "Certificate", GATEWAY)["spec"]["ipAddresses"] == ["10.96.0.53"]
    assert _settings(objects)["data"]["WEBHOOK_GATEWAY_URL"] == "https://10.96.0.53"
    default_env = _gateway_pod(helmchart.render(helm))["containers"][0]["env"]
    assert "GATEWAY_AUDIENCE" not in {e["name"] for e in default_env}  # the gateway's own default


def test_without_cert_manager_the_gateway_serves_a_certificate_you_bring_and_pods_trust_the_given_ca(
    helm: Path,
) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    values = {"certManager": {"enabled": False}, "tls": {"caBundle": pem}, "gateway": {"tlsSecretName": "gw-tls"}}
    objects = helmchart.render(helm, values=values)
    assert not [o for o in objects if o["kind"] == "Certificate"]
    tls = next(v for v in _gateway_pod(objects)["volumes"] if v["name"] == "tls")
    assert tls["secret"]["secretName"] == "gw-tls"
    # Burst pods are given the CA from tls.caBundle: the file the webhook mounts for its peers.
    gateway_ca_file = _settings(objects)["data"]["WEBHOOK_GATEWAY_CA_FILE"]
    peer_ca_file, configmap = _peer_ca(objects)
    assert gateway_ca_file == peer_ca_file and configmap["data"] == {"ca.crt": pem}
    # No Secret named: the render fails saying what to set (or how to go without the gateway).
    with pytest.raises(
        helmchart.HelmError, match=r"gateway\.tlsSecretName: without cert-manager .* gateway\.enabled=false"
    ):
        helmchart.render(helm, values={**values, "gateway": {}})
    # Without the gateway there is nothing to name.
    assert _gateway_objects(helmchart.render(helm, values={**values, "gateway": {"enabled": False}})) == []


def test_the_local_values_reach_the_gateway_as_the_overlay_does(helm: Path, kubectl: Path) -> None:
    """devplatform/overlay (the kustomize install of make dev-up) and the chart's local values
    (make dev-up INSTALL=helm) give the gateway the same fixed address, certificate and URL."""
    overlay = manifests.render_kustomize(kubectl, directory=install.OVERLAY_DIR)
    chart = helmchart.render(helm, values=install.build_chart_values(nodeconfig.NodeSettings(), gpu_models={}))
    for objects in (overlay, chart):
        assert _find(objects, "Service", GATEWAY)["spec"]["clusterIP"] == install.GATEWAY_SERVICE_IP
        assert _find(objects, "Certificate", GATEWAY)["spec"]["ipAddresses"] == [install.GATEWAY_SERVICE_IP]
        assert _settings(objects)["data"]["WEBHOOK_GATEWAY_URL"] == f"https://{install.GATEWAY_SERVICE_IP}"
    assert install.find_overlay_problems(chart, settings=nodeconfig.NodeSettings()) == []


def test_the_install_waits_for_the_gateways_certificate_when_the_chart_has_one(helm: Path, kubectl: Path) -> None:
    local = install.build_chart_values(nodeconfig.NodeSettings(), gpu_models={})
    names = install.list_certificate_names(helmchart.render(helm, values=local))
    assert names == ["nimbix-burst-ca", "nimbix-burst-webhook", GATEWAY]
    without = helmchart.render(helm, values={**local, "gateway": {"enabled": False}})
    assert install.list_certificate_names(without) == ["nimbix-burst-ca", "nimbix-burst-webhook"]
    overlay = manifests.render_kustomize(kubectl, directory=install.OVERLAY_DIR)
    assert sorted(install.list_certificate_names(overlay)) == sorted(names)


def test_the_controllers_dry_runs_only_policy_names_its_service_account_in_the_release_namespace(helm: Path) -> None:
    objects = helmchart.render(helm, namespace="gpu-burst")
    policy = _find(objects, "ValidatingAdmissionPolicy", "nimbix-burst-controller-dry-runs-only")
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:gpu-burst:nimbix-burst-controller'"
    )
    assert policy["spec"]["validations"][0]["expression"] == "request.dryRun == true"
    binding = _find(objects, "ValidatingAdmissionPolicyBinding", "nimbix-burst-controller-dry-runs-only")
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_installs_kustomization_gives_the_gateway_its_host_key_and_the_webhook_its_staging_settings(
    kubectl: Path, tmp_path: Path
) -> None:
    """make dev-up and the e2e install apply devplatform/overlay through a kustomization of the install's
    own (devplatform.cluster.gatewayssh): the overlay's objects, plus the host key Secret and the two
    webhook settings that name it, rendered by the real kustomize."""
    key = gatewayssh.write_install_dir(
        tmp_path / "addon-install", install.OVERLAY_DIR, namespace=install.NAMESPACE, sftp="10.0.0.53:2222"
    )
    applied = manifests.render_kustomize(kubectl, directory=tmp_path / "addon-install")
    overlay = manifests.render_kustomize(kubectl, directory=install.OVERLAY_DIR)
    secret = _find(applied, "Secret", gatewayssh.SECRET)
    assert base64.b64decode(secret["data"]["ssh_host_key"]).decode() == key.private_openssh
    settings = _settings(applied)["data"]
    assert settings["WEBHOOK_GATEWAY_SFTP"] == "10.0.0.53:2222"
    assert settings["WEBHOOK_GATEWAY_SSH_HOST_KEY"] == key.public
    assert settings["WEBHOOK_GATEWAY_URL"] == _settings(overlay)["data"]["WEBHOOK_GATEWAY_URL"]
    assert len(applied) == len(overlay) + 1  # the Secret; nothing else added or lost
    assert install.find_overlay_problems(applied, settings=nodeconfig.NodeSettings()) == []


def test_the_installs_kustomization_runs_the_replicas_it_is_given_and_the_shipped_two_otherwise(
    kubectl: Path, tmp_path: Path
) -> None:
    """The e2e tier installs one pod of each Deployment where a module is about no replicas; make dev-up
    (no override) installs what deploy/ ships."""

    def replicas(override: dict[str, int]) -> dict[str, int]:
        directory = tmp_path / f"addon-install-{len(override)}"
        gatewayssh.write_install_dir(
            directory, install.OVERLAY_DIR, namespace=install.NAMESPACE, sftp="10.0.0.53:2222", replicas=override
        )
        applied = manifests.render_kustomize(kubectl, directory=directory)
        return {d["metadata"]["name"]: d["spec"]["replicas"] for d in applied if d["kind"] == "Deployment"}

    assert replicas({}) == dict.fromkeys(install.ADDON_DEPLOYMENTS, install.REPLICAS)
    assert replicas(dict.fromkeys(install.ADDON_DEPLOYMENTS, 1)) == dict.fromkeys(install.ADDON_DEPLOYMENTS, 1)
