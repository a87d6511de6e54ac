"""The Helm chart without cert-manager on the real node, the way docs/helm.md has a user do it: the
page's own commands ("Without cert-manager: a certificate you bring": openssl makes a CA and the
webhook's and the gateway's serving certificates, `kubectl create secret tls`, `helm install
--set certManager.enabled=false --set-file tls.caBundle=ca.crt --set gateway.tlsSecretName=...
--wait`) run as written in bash (the certificates also name the gateway's fixed address: no DNS
here), then a labelled GPU pod bursts to the JARVICE emulator through the installed webhook and
gateway. And the TLS setups that cannot work fail the install:
no Secret at once (a template check), a certificate the CA did not sign at `--wait` (the webhook
pods exit at start saying why), instead of admitting every pod unchanged.

No cert-manager object takes part: the chart renders no Issuer or Certificate and no cainjector
annotation, so the registration's caBundle and the pods' TLS are only the files the recipe made
(cert-manager, if another module of the session started it, has nothing to act on). Like
test_helm_chart.py, each test uninstalls its release and deletes the namespace before the installed
add-on's modules install theirs (conftest.INSTALLED_ADDON_MODULES run last).
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devplatform import demo, gotools, helmchart
from devplatform.cluster import addons, install, processes
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.node import RealNode
from devplatform.cluster.pki import issue_cert, make_ca, write_pair
from tests.support.real_node_pods import burst_pod, create, get_pod, wait_finished

REPO_ROOT = Path(__file__).resolve().parents[2]
HELM_PAGE = REPO_ROOT / "docs" / "helm.md"
RECIPE_HEADING = "### Without cert-manager: a certificate you bring"
# This cluster runs no DNS: burst pods call the gateway at its fixed address, which the recipe's
# certificates must then name too (the one local change made to the page's commands).
RECIPE_SAN = "DNS:nimbix-burst-%s.nimbix-burst.svc"
LOCAL_SAN = f"{RECIPE_SAN},IP:{install.GATEWAY_SERVICE_IP}"
SERVICE_NAME = f"nimbix-burst-webhook.{helmchart.NAMESPACE}.svc"
GATEWAY_NAME = f"nimbix-burst-gateway.{helmchart.NAMESPACE}.svc"
DECISION = "nimbix-burst.io/decision"
REFUSAL = "serving certificate not trusted by its CA"
# A broken install fails at helm's --wait timeout: long enough for the pods to start and exit.
BROKEN_INSTALL_TIMEOUT_SECONDS = 60
LEADER_WAIT_SECONDS = 60.0
RECIPE_TIMEOUT_SECONDS = helmchart.HELM_TIMEOUT_SECONDS + 60


def read_recipe(page: str) -> list[str]:
    """The ```sh blocks of the page's bring-your-own-certificate section, in order."""
    section = page.split(RECIPE_HEADING, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


@pytest.fixture(scope="module")
def helm() -> Path:
    return gotools.ensure_tool("helm")


@pytest.fixture
def release_namespace(control_plane: ControlPlane, real_node: RealNode, helm: Path) -> Iterator[str]:
    """docs/helm.md step 1 (the labelled namespace) with the API server published for the pods; after
    the test: helm uninstall (if installed) and the namespace deleted, as the page's Uninstall says."""
    install.publish_apiserver_endpoint(control_plane, real_node)
    install.create_release_namespace(control_plane)
    try:
        yield helmchart.NAMESPACE
    finally:
        if _installed(helm, control_plane):  # a failed install leaves a release too
            install.uninstall(control_plane, helm=helm)
        else:
            _delete_namespace(control_plane)


def _installed(helm: Path, plane: ControlPlane) -> bool:
    try:
        return bool(helmchart.read_history(helm, plane.kubeconfig_path))
    except helmchart.HelmError:
        return False


def _delete_namespace(plane: ControlPlane) -> None:
    plane.kubectl("delete", "namespace", helmchart.NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s")


def _tools_dir(tmp_path: Path, plane: ControlPlane, helm: Path) -> Path:
    """A directory for PATH with `kubectl` and `helm` as the page runs them (the project-built ones)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "kubectl").symlink_to(plane.bin_dir / "kubectl")
    (tools / "helm").symlink_to(helm)
    return tools


def test_the_documented_recipe_installs_without_cert_manager_and_a_pod_bursts(
    control_plane: ControlPlane,
    real_node: RealNode,
    helm: Path,
    release_namespace: str,
    ns: str,
    node_emulator: addons.EmulatorProcess,
    tmp_path: Path,
) -> None:
    plane = control_plane
    blocks = read_recipe(HELM_PAGE.read_text())
    assert len(blocks) == 2, "the page's recipe: the openssl commands, then the Secret and helm install"
    work = tmp_path / "user"
    work.mkdir()
    (work / "charts").symlink_to(REPO_ROOT / "charts")  # the page runs from a checkout
    # The page's step 4, for this machine: the image from the node, pods on the real node.
    (work / "my-values.yaml").write_text(json.dumps(install.read_chart_values(real_node)))
    # Step 2: the gateway's accounts, the emulator paying for every namespace.
    accounts = demo.build_gateway_accounts(
        node_emulator, namespace=release_namespace, name=install.GATEWAY_ACCOUNTS_SECRET
    )
    plane.kubectl("apply", "-f", "-", input=json.dumps(accounts))
    assert RECIPE_SAN in blocks[0], "the recipe's certificates: the Services' names"
    blocks[0] = blocks[0].replace(RECIPE_SAN, LOCAL_SAN)
    env = processes.build_child_environment(None)
    env["PATH"] = f"{_tools_dir(tmp_path, plane, helm)}:{env['PATH']}"
    env["KUBECONFIG"] = str(plane.kubeconfig_path)
    for block in blocks:
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=RECIPE_TIMEOUT_SECONDS,
            check=False,
        )
        assert ran.returncode == 0, f"{block}\nfailed ({ran.returncode}):\n{ran.stdout}\n{ran.stderr}"

    # Installed without cert-manager: the registration carries the recipe's CA, nothing injects one.
    registration = json.loads(
        plane.kubectl("get", "mutatingwebhookconfiguration", install.WEBHOOK_CONFIGURATION, "-o", "json").stdout
    )
    assert "cert-manager.io/inject-ca-from" not in registration["metadata"].get("annotations", {})
    ca_bundle = registration["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(ca_bundle) == (work / "ca.crt").read_bytes()
    serving = {pod["metadata"]["name"] for pod in install.read_serving_pods(plane, install.APP_SELECTOR)}
    assert len(serving) == install.REPLICAS
    demo.wait_for(
        lambda: install.read_lease_holder(plane, install.LEASE) in serving,
        what="a webhook replica holding the Lease",
        timeout=LEADER_WAIT_SECONDS,
    )

    # A labelled GPU pod bursts: decided remote by the installed webhook, run by the emulator through
    # the gateway, which serves the recipe's certificate and which the pod trusts by the recipe's CA.
    name = f"byo-tls-{uuid.uuid4().hex[:6]}"
    create(plane, ns, burst_pod(name, 'echo "burst without cert-manager"', node_emulator))
    pod = get_pod(plane, ns, name)
    assert pod["metadata"].get("annotations", {}).get(DECISION) == "remote"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["JARVICE_API_URL"] == f"https://{install.GATEWAY_SERVICE_IP}" and not env.get("JARVICE_APIKEY")
    finished = wait_finished(plane, ns, name)
    assert finished["status"]["phase"] == "Succeeded"
    assert "burst without cert-manager" in plane.kubectl("logs", "-n", ns, name).stdout


def _values_without_cert_manager(real_node: RealNode, ca_pem: bytes) -> dict[str, Any]:
    values = install.read_chart_values(real_node)
    gateway = {**values["gateway"], "tlsSecretName": "nimbix-burst-gateway-tls"}
    return {**values, "certManager": {"enabled": False}, "tls": {"caBundle": ca_pem.decode()}, "gateway": gateway}


def test_without_the_secret_the_install_fails_at_once_saying_so(
    control_plane: ControlPlane, real_node: RealNode, helm: Path, release_namespace: str
) -> None:
    values = _values_without_cert_manager(real_node, make_ca("byo-ca").cert_pem)
    with pytest.raises(helmchart.HelmError) as failed:
        helmchart.install(helm, control_plane.kubeconfig_path, values=values, timeout_seconds=30)
    assert f"Secret {release_namespace}/nimbix-burst-webhook-tls not found" in str(failed.value)
    assert control_plane.kubectl("get", "mutatingwebhookconfiguration", "nimbix-burst", check=False).returncode != 0


def test_a_certificate_the_ca_did_not_sign_fails_the_install_and_the_pods_say_why(
    control_plane: ControlPlane, real_node: RealNode, helm: Path, release_namespace: str, tmp_path: Path
) -> None:
    plane = control_plane
    given_ca, other_ca = make_ca("the-ca-given-to-helm"), make_ca("the-ca-that-signed")
    serving = issue_cert(other_ca, common_name="nimbix-burst-webhook", dns_names=[SERVICE_NAME], server=True)
    write_pair(serving, cert_path=tmp_path / "tls.crt", key_path=tmp_path / "tls.key")
    plane.kubectl(
        "-n", release_namespace, "create", "secret", "tls", "nimbix-burst-webhook-tls",
        f"--cert={tmp_path / 'tls.crt'}", f"--key={tmp_path / 'tls.key'}",
    )  # fmt: skip
    # The gateway's, as it should be: only the webhook's certificate is wrong.
    gateway = issue_cert(given_ca, common_name="nimbix-burst-gateway", dns_names=[GATEWAY_NAME], server=True)
    write_pair(gateway, cert_path=tmp_path / "gateway.crt", key_path=tmp_path / "gateway.key")
    plane.kubectl(
        "-n", release_namespace, "create", "secret", "tls", "nimbix-burst-gateway-tls",
        f"--cert={tmp_path / 'gateway.crt'}", f"--key={tmp_path / 'gateway.key'}",
    )  # fmt: skip
    values = _values_without_cert_manager(real_node, given_ca.cert_pem)
    with pytest.raises(helmchart.HelmError):
        helmchart.install(helm, plane.kubeconfig_path, values=values, timeout_seconds=BROKEN_INSTALL_TIMEOUT_SECONDS)
    assert install.read_serving_pods(plane, install.APP_SELECTOR) == []

    def refusal_logged() -> str:
        logs = ""
        for which in ("--previous=true", "--previous=false"):  # restarted, or exited and not yet restarted
            logs += plane.kubectl(
                "-n", release_namespace, "logs", "-l", install.APP_SELECTOR, which, "--tail=20", check=False
            ).stdout
        # The JSON log line, whatever kubectl puts before it (a pod prefix when it reads several pods).
        return next((line[line.index("{") :] for line in logs.splitlines() if REFUSAL in line and "{" in line), "")

    line = json.loads(demo.wait_for(refusal_logged, what="the webhook's refusal in its log", timeout=30))
    assert "unable to get local issuer certificate" in line["problem"]
    assert line["server_name"] == SERVICE_NAME
