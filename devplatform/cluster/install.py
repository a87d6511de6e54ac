"""Installs nimbix-burst into the local cluster the way a user installs it (docs/install.md, "Install in a
cluster"): ``kubectl apply -k devplatform/overlay`` (deploy/ plus local-only patches), after
cert-manager, then the install page's checks: Certificates Ready, the caBundle injected, the webhook
Deployment's two pods Running and Ready on the real node, one of them holding the leader Lease, and
every other Deployment of the base (the burst controller, the JARVICE gateway) rolled out.

    cm = certmanager.install(plane)              # the prerequisite (the caller owns its processes)
    installed = install.install_addon(plane, real_node)
    install.uninstall(plane)                     # docs/install.md's order: the registration first

or with the Helm chart (charts/nimbix-burst, docs/helm.md) and the same local-only changes as values:

    installed = install.install_addon(plane, real_node, helm=gotools.ensure_tool("helm"))
    install.uninstall(plane, helm=helm)          # helm uninstall, then the namespace

The webhook pods reach the API server as any in-cluster client does: the ``kubernetes`` Service's
ClusterIP (10.0.0.1:443, a SAN of the apiserver's certificate), which kube-proxy on the real node
translates to its endpoint. The control plane publishes no endpoint of its own (it advertises
127.0.0.1, which no pod can reach), so ``publish_apiserver_endpoint`` writes one: the node's bridge
gateway and the apiserver's port (the apiserver listens on all addresses).

The pure builders and checks come first; the I/O below them only gathers inputs and applies outputs.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml  # type: ignore[import-untyped]  # PyYAML (a kubernetes client dependency) ships no stubs
from kubernetes.client.exceptions import ApiException

from devplatform import helmchart
from devplatform.cluster import gatewayssh, nodeconfig
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.node import RealNode

OVERLAY_DIR = Path(__file__).resolve().parents[1] / "overlay"
OVERLAY_GPU_MODELS = "gpu-models.yaml"  # the emulator's machines by GPU model (the overlay's mapping)
NAMESPACE = "nimbix-burst"
# The burst controller's JARVICE account (deploy/controller.yaml mounts it; optional there).
CONTROLLER_SECRET = "nimbix-burst-controller-jarvice"
DEPLOYMENT = "nimbix-burst-webhook"
APP_SELECTOR = "app.kubernetes.io/name=nimbix-burst-webhook"
LEASE = "nimbix-burst-webhook-leader"
# The gateway's JARVICE accounts (deploy/gateway.yaml mounts it; optional there).
GATEWAY_ACCOUNTS_SECRET = "nimbix-burst-gateway-accounts"
GATEWAY_DEPLOYMENT = "nimbix-burst-gateway"
CONTROLLER_DEPLOYMENT = "nimbix-burst-controller"
# The gateway Service's fixed address (no cluster DNS here): devplatform/overlay patches it in, the
# chart gets it as gateway.clusterIP.
GATEWAY_SERVICE_IP = "10.0.0.53"
WEBHOOK_CONFIGURATION = "nimbix-burst"
REPLICAS = 2  # pods of each Deployment of the add-on, as deploy/ ships it
ADDON_DEPLOYMENTS = (DEPLOYMENT, CONTROLLER_DEPLOYMENT, GATEWAY_DEPLOYMENT)
# The `kubernetes` Service's port name; its targetPort is the apiserver's --secure-port.
APISERVER_PORT_NAME = "https"
ENDPOINT_SLICE_NAME = "kubernetes-real-node"
ENDPOINT_SLICE_MANAGER = "nimbix-burst-devplatform"
CERT_MANAGER_CRD = "certificates.cert-manager.io"
# Cold start on a busy 2-core machine: the pods start in ~10 s, the watch cache lists in a second or
# two; cert-manager issues in about one. Generous, but bounded.
INSTALL_TIMEOUT_SECONDS = 180.0
UNINSTALL_TIMEOUT_SECONDS = 120.0
POLL_SECONDS = 0.5
KUBECTL_TIMEOUT_SECONDS = 60.0


class InstallError(RuntimeError):
    """The add-on did not install; the message says which check was still failing and why."""


@dataclass(frozen=True, slots=True)
class InstallTimings:
    """Seconds from the start of install_addon until each check first passed."""

    applied_seconds: float
    certificates_seconds: float
    ca_bundle_seconds: float
    pods_ready_seconds: float
    lease_seconds: float
    all_deployments_seconds: float


@dataclass(frozen=True, slots=True)
class Installed:
    namespace: str
    pods: tuple[str, ...]
    leader: str
    node: str
    timings: InstallTimings


@dataclass(frozen=True, slots=True)
class PodState:
    name: str
    node: str
    phase: str
    ready: bool
    terminating: bool


# -- pure ---------------------------------------------------------------------------------------------


def build_apiserver_endpoint_slice(*, address: str, port: int) -> dict[str, Any]:
    """An EndpointSlice for Service default/kubernetes: its ClusterIP leads to ``address:port``.

    The Service has no selector, so no controller owns its endpoints; the label names the Service
    for kube-proxy and managed-by tells controllers to leave the slice alone."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": ENDPOINT_SLICE_NAME,
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": ENDPOINT_SLICE_MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": APISERVER_PORT_NAME, "port": port, "protocol": "TCP"}],
    }


def parse_server_port(server_url: str) -> int:
    port = urlsplit(server_url).port
    if port is None:
        raise ValueError(f"no port in {server_url!r}")
    return port


def build_chart_values(settings: nodeconfig.NodeSettings, *, gpu_models: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The chart's values for the real node: what devplatform/overlay changes, as values."""
    key, _, rest = nodeconfig.REAL_NODE_TAINT.partition("=")
    value, _, effect = rest.partition(":")
    return helmchart.build_local_values(
        gateway=settings.gateway,
        node_label=nodeconfig.REAL_NODE_LABEL,
        taint={"key": key, "operator": "Equal", "value": value, "effect": effect},
        gpu_models=gpu_models,
        gateway_service_ip=GATEWAY_SERVICE_IP,
    )


def find_overlay_problems(objects: Sequence[Mapping[str, Any]], *, settings: nodeconfig.NodeSettings) -> list[str]:
    """What in the rendered overlay does not fit the real node: every Deployment's pods (the webhook's,
    the burst controller's, the gateway's) must select and tolerate it, and the NetworkPolicy must name its gateway
    (where the API server's calls come from)."""
    problems: list[str] = []
    deployments = {str(o["metadata"]["name"]): o for o in objects if o.get("kind") == "Deployment"}
    if DEPLOYMENT not in deployments:
        problems.append(f"no Deployment {DEPLOYMENT} in the overlay")
    key, _, rest = nodeconfig.REAL_NODE_TAINT.partition("=")
    value, _, effect = rest.partition(":")
    wanted = {"key": key, "operator": "Equal", "value": value, "effect": effect}
    for name, deployment in sorted(deployments.items()):
        spec = deployment["spec"]["template"]["spec"]
        if spec.get("nodeSelector", {}).get(nodeconfig.REAL_NODE_LABEL) != "true":
            problems.append(f"Deployment {name}: its pods do not select {nodeconfig.REAL_NODE_LABEL}=true")
        if wanted not in spec.get("tolerations", []):
            problems.append(f"Deployment {name}: its pods do not tolerate {nodeconfig.REAL_NODE_TAINT}")
    cidr = f"{settings.gateway}/32"
    for policy in (o for o in objects if o.get("kind") == "NetworkPolicy"):
        for direction, peers in (("ingress", "from"), ("egress", "to")):
            blocks = [peer.get("ipBlock", {}).get("cidr") for peer in policy["spec"][direction][0][peers]]
            if cidr not in blocks:
                problems.append(f"NetworkPolicy {direction} rule 0 does not allow {cidr} (has {blocks})")
    return problems


def find_unavailable_deployments(deployments: Sequence[Mapping[str, Any]]) -> list[str]:
    """Deployments whose rollout is not complete (``kubectl rollout status``'s rule: every replica
    updated and available, the latest generation observed)."""
    waiting = []
    for deployment in deployments:
        spec, status = deployment.get("spec", {}), deployment.get("status", {})
        wanted = int(spec.get("replicas", 1))
        done = (
            status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
            and status.get("updatedReplicas", 0) == wanted
            and status.get("availableReplicas", 0) == wanted
            and status.get("replicas", 0) == wanted
        )
        if not done:
            waiting.append(f"{deployment['metadata']['name']}: {status.get('availableReplicas', 0)}/{wanted} available")
    return waiting


def find_unready_certificates(certificates: Sequence[Mapping[str, Any]], *, names: Sequence[str]) -> list[str]:
    """The named Certificates that are missing or not Ready=True, with cert-manager's message."""
    found = {str(c["metadata"]["name"]): c for c in certificates}
    unready = []
    for name in names:
        certificate = found.get(name)
        if certificate is None:
            unready.append(f"{name}: not found")
            continue
        conditions = certificate.get("status", {}).get("conditions", []) or []
        ready = next((c for c in conditions if c.get("type") == "Ready"), None)
        if ready is None or ready.get("status") != "True":
            unready.append(f"{name}: {ready.get('message', '') if ready else 'no Ready condition'}")
    return unready


def list_certificate_names(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The cert-manager Certificates an install renders: the ones to wait for (none without
    cert-manager; no CA of our own with an issuer of yours; no gateway's when it is off)."""
    return [str(o["metadata"]["name"]) for o in objects if o.get("kind") == "Certificate"]


def has_ca_bundle(configuration: Mapping[str, Any]) -> bool:
    webhooks = configuration.get("webhooks", []) or []
    return bool(webhooks) and all(w.get("clientConfig", {}).get("caBundle") for w in webhooks)


def parse_pods(pods: Sequence[Mapping[str, Any]]) -> list[PodState]:
    states = []
    for pod in pods:
        conditions = pod.get("status", {}).get("conditions", []) or []
        states.append(
            PodState(
                name=str(pod["metadata"]["name"]),
                node=str(pod.get("spec", {}).get("nodeName", "")),
                phase=str(pod.get("status", {}).get("phase", "")),
                ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
                terminating=bool(pod["metadata"].get("deletionTimestamp")),
            )
        )
    return states


def find_serving_pods(pods: Sequence[PodState], *, node: str | None = None) -> list[str]:
    """Pods Running and Ready (on ``node``, when given) and not terminating."""
    return sorted(
        p.name
        for p in pods
        if p.phase == "Running" and p.ready and not p.terminating and (node is None or p.node == node)
    )


def parse_lease_holder(lease: Mapping[str, Any]) -> str:
    return str(lease.get("spec", {}).get("holderIdentity") or "")


# -- I/O ----------------------------------------------------------------------------------------------


def publish_apiserver_endpoint(plane: ControlPlane, node: RealNode) -> None:
    """Points the `kubernetes` Service at the apiserver through the node's bridge gateway."""
    body = build_apiserver_endpoint_slice(address=node.gateway_address, port=parse_server_port(plane.server_url))
    _kubectl(plane, "apply", "-f", "-", input=json.dumps(body))


def read_chart_values(node: RealNode) -> dict[str, Any]:
    """``build_chart_values`` with the overlay's GPU model mapping (devplatform/overlay/gpu-models.yaml)."""
    mapping = yaml.safe_load((OVERLAY_DIR / OVERLAY_GPU_MODELS).read_text()) or {}
    if not isinstance(mapping, dict):
        raise InstallError(f"{OVERLAY_DIR / OVERLAY_GPU_MODELS}: not a mapping of GPU model to machine types")
    return build_chart_values(node.settings, gpu_models=mapping)


def render_overlay(plane: ControlPlane, directory: Path = OVERLAY_DIR) -> list[dict[str, Any]]:
    """``kubectl kustomize devplatform/overlay`` (or the install's kustomization over it) as objects."""
    rendered = _kubectl(plane, "kustomize", str(directory))
    return [dict(doc) for doc in yaml.safe_load_all(rendered.stdout) if doc]


def install_addon(
    plane: ControlPlane,
    node: RealNode,
    *,
    timeout: float = INSTALL_TIMEOUT_SECONDS,
    helm: Path | None = None,
    replicas: int = REPLICAS,
) -> Installed:
    """Applies the overlay (or, given ``helm``, installs the chart with ``build_chart_values``) and
    waits for docs/install.md's checks (see the module docstring).

    ``replicas``: pods of each of the add-on's Deployments (the overlay only). The shipped two unless a
    caller asks fewer: the e2e tier runs one of each where a module tests no replicas, to save CPU.

    cert-manager must be installed already (``certmanager.install(plane)``). Raises InstallError with
    the check that was still failing at ``timeout``.
    """
    if helm and replicas != REPLICAS:
        raise ValueError(f"the chart installs {REPLICAS} replicas here, not {replicas}")
    began = time.monotonic()
    deadline = began + timeout
    if _kubectl(plane, "get", "crd", CERT_MANAGER_CRD, check=False).returncode != 0:
        raise InstallError(f"cert-manager is not installed ({CERT_MANAGER_CRD} not found): certmanager.install first")
    values = read_chart_values(node)
    source = f"{helmchart.CHART_DIR} with the local values" if helm else str(OVERLAY_DIR)
    # The overlay, plus the gateway's SSH host key and the webhook's staging settings naming it
    # (docs/install.md's three steps for vault staging through the gateway), made for this install.
    applied_dir = plane.run_dir / "addon-install"
    if not helm:
        override = {} if replicas == REPLICAS else dict.fromkeys(ADDON_DEPLOYMENTS, replicas)
        gatewayssh.write_install_dir(
            applied_dir,
            OVERLAY_DIR,
            namespace=NAMESPACE,
            sftp=f"{GATEWAY_SERVICE_IP}:{gatewayssh.SFTP_PORT}",
            replicas=override,
        )
    rendered = helmchart.render(helm, values=values) if helm else render_overlay(plane, applied_dir)
    problems = find_overlay_problems(rendered, settings=node.settings)
    if problems:
        raise InstallError(f"{source} does not fit the real node: " + "; ".join(problems))
    publish_apiserver_endpoint(plane, node)
    if helm:
        create_release_namespace(plane)
        try:  # returns once cert-manager has issued and every Deployment is rolled out (--wait)
            helmchart.install(helm, plane.kubeconfig_path, values=values)
        except helmchart.HelmError as error:
            raise InstallError(str(error)) from error
    else:
        _kubectl(plane, "apply", "-k", str(applied_dir))
    applied = time.monotonic() - began

    certificate_names = list_certificate_names(rendered)

    def certificates() -> str:
        items = _read(plane, "certificates", namespace=NAMESPACE).get("items", [])
        return "; ".join(find_unready_certificates(items, names=certificate_names))

    _wait(certificates, deadline=deadline, what="Certificates Ready")
    certificates_done = time.monotonic() - began

    def ca_bundle() -> str:
        configuration = _read(plane, "mutatingwebhookconfigurations", WEBHOOK_CONFIGURATION)
        return "" if has_ca_bundle(configuration) else "no caBundle in the MutatingWebhookConfiguration yet"

    _wait(ca_bundle, deadline=deadline, what="caBundle injected")
    ca_bundle_done = time.monotonic() - began

    serving = _wait_webhook_serving(plane, node.name, replicas=replicas, deadline=deadline)
    pods_done = time.monotonic() - began
    leader = _wait_webhook_leader(plane, serving, deadline=deadline)
    lease_done = time.monotonic() - began
    _wait_rollouts(plane, deadline=deadline)
    return Installed(
        namespace=NAMESPACE,
        pods=tuple(serving),
        leader=leader,
        node=node.name,
        timings=InstallTimings(
            applied_seconds=applied,
            certificates_seconds=certificates_done,
            ca_bundle_seconds=ca_bundle_done,
            pods_ready_seconds=pods_done,
            lease_seconds=lease_done,
            all_deployments_seconds=time.monotonic() - began,
        ),
    )


def scale_addon(
    plane: ControlPlane, installed: Installed, *, replicas: int, timeout: float = INSTALL_TIMEOUT_SECONDS
) -> Installed:
    """Every Deployment of the add-on (the overlay's install) scaled to ``replicas`` pods, then the install's
    checks of them again: that many webhook pods serving, one of them the leader, every rollout done."""
    deadline = time.monotonic() + timeout
    _kubectl(plane, "-n", NAMESPACE, "scale", "deployment", *ADDON_DEPLOYMENTS, f"--replicas={replicas}")
    serving = _wait_webhook_serving(plane, installed.node, replicas=replicas, deadline=deadline)
    leader = _wait_webhook_leader(plane, serving, deadline=deadline)
    _wait_rollouts(plane, deadline=deadline)
    return dataclasses.replace(installed, pods=tuple(serving), leader=leader)


def _wait_webhook_serving(plane: ControlPlane, node_name: str, *, replicas: int, deadline: float) -> list[str]:
    serving: list[str] = []

    def pods() -> str:
        nonlocal serving
        states = parse_pods(_read(plane, "pods", namespace=NAMESPACE, labels=APP_SELECTOR).get("items", []))
        serving = find_serving_pods(states, node=node_name)
        if len(serving) == replicas:  # a scale-down is done once the extra pods stopped serving
            return ""
        return f"{len(serving)}/{replicas} Running and Ready on {node_name}: " + ", ".join(
            f"{p.name} {p.phase or 'Pending'} ready={p.ready} node={p.node or '-'}" for p in states
        )

    _wait(pods, deadline=deadline, what="webhook pods Running and Ready")
    return serving


def _wait_webhook_leader(plane: ControlPlane, serving: Sequence[str], *, deadline: float) -> str:
    leader = ""

    def lease() -> str:
        nonlocal leader
        lease = _read(plane, "leases", LEASE, namespace=NAMESPACE)
        leader = parse_lease_holder(lease) if lease else ""
        return "" if leader in serving else f"Lease {LEASE} held by {leader or 'nobody'}"

    _wait(lease, deadline=deadline, what="leader Lease held")
    return leader


def _wait_rollouts(plane: ControlPlane, *, deadline: float) -> None:
    def rollouts() -> str:  # the other Deployments of the base (the burst controller, the gateway)
        items = _read(plane, "deployments", namespace=NAMESPACE).get("items", [])
        return "; ".join(find_unavailable_deployments(items)) if items else "no Deployments yet"

    _wait(rollouts, deadline=deadline, what="every Deployment rolled out")


def uninstall(plane: ControlPlane, *, timeout: float = UNINSTALL_TIMEOUT_SECONDS, helm: Path | None = None) -> None:
    """docs/install.md's uninstall: the registration first (no create waits on a webhook going away),
    then everything else, waiting for the namespace to be gone. Given ``helm``: ``helm uninstall``
    (the chart's objects), then the namespace it was installed into (docs/helm.md)."""
    _kubectl(plane, "delete", "mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "--ignore-not-found")
    if helm is None:
        _kubectl(
            plane, "delete", "-k", str(OVERLAY_DIR), "--ignore-not-found", "--wait=true", f"--timeout={int(timeout)}s"
        )
        return
    try:
        helmchart.uninstall(helm, plane.kubeconfig_path)
    except helmchart.HelmError as error:
        raise InstallError(str(error)) from error
    _kubectl(plane, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", f"--timeout={int(timeout)}s")


def create_release_namespace(plane: ControlPlane) -> None:
    """docs/helm.md's first step: the namespace, with the restricted Pod Security labels the
    kustomize install gives it (Helm keeps its release record there, so the chart cannot own it)."""
    _kubectl(plane, "create", "namespace", NAMESPACE, check=False)  # dev-up created it for a Secret already
    labels = [f"{key}={value}" for key, value in helmchart.NAMESPACE_LABELS.items()]
    _kubectl(plane, "label", "namespace", NAMESPACE, "--overwrite", *labels)


def read_serving_pods(plane: ControlPlane, selector: str) -> list[dict[str, Any]]:
    """The add-on's pods matching ``selector`` that are Running, Ready and not terminating."""
    pods: list[dict[str, Any]] = plane.read("pods", namespace=NAMESPACE, labels=selector)["items"]
    serving = set(find_serving_pods(parse_pods(pods)))
    return [pod for pod in pods if pod["metadata"]["name"] in serving]


def read_lease_holder(plane: ControlPlane, lease: str) -> str:
    return parse_lease_holder(plane.read("leases", lease, namespace=NAMESPACE))


def _read(
    plane: ControlPlane,
    resource: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    labels: str | None = None,
) -> dict[str, Any]:
    """What is there yet, ``{}`` while the API server refuses (a kind not served yet, an object not made yet)."""
    try:
        return plane.read(resource, name, namespace=namespace, labels=labels)
    except ApiException:
        return {}


def _kubectl(
    plane: ControlPlane, *args: str, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [
        str(plane.bin_dir / "kubectl"),
        "--kubeconfig",
        str(plane.kubeconfig_path),
        f"--request-timeout={int(KUBECTL_TIMEOUT_SECONDS)}s",
        *args,
    ]
    try:
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, check=False, timeout=KUBECTL_TIMEOUT_SECONDS + 10
        )
    except subprocess.TimeoutExpired as error:
        raise InstallError(f"kubectl {' '.join(args)}: no answer after {KUBECTL_TIMEOUT_SECONDS:g} s") from error
    if check and result.returncode != 0:
        raise InstallError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _wait(check: Callable[[], str], *, deadline: float, what: str) -> None:
    """Polls ``check`` (which returns "" when done, else why not) until done or ``deadline``."""
    while True:
        problem = check()
        if not problem:
            return
        if time.monotonic() >= deadline:
            raise InstallError(f"{what}: still not done: {problem}")
        time.sleep(POLL_SECONDS)
