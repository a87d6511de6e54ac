"""The NetworkPolicy as a user ends up with it (docs/install.md's overlay patch applied) against the real
API server: accepted with strict field validation, and the control-plane CIDR is where it belongs.

Whether traffic is actually filtered depends on the cluster's network plugin; the local platform's
bridge plugin enforces no NetworkPolicy, so that part is the plugin's, not tested here.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from devplatform import manifests
from devplatform.cluster import controlplane

INSTALL_DOC = manifests.REPO_ROOT / "docs" / "install.md"


def _overlay_with_documented_patch(tmp_path: Path) -> Path:
    (patch,) = re.findall(r"# network-policy-patch\n(.*?)```", INSTALL_DOC.read_text(), flags=re.DOTALL)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(manifests.DEPLOY_DIR, overlay)  # kustomize takes a base by relative path only
    (overlay / "kustomization.yaml").write_text(
        f"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {base}\n" + patch
    )
    return overlay


def test_patched_network_policy_is_accepted_by_the_api_server(
    control_plane: controlplane.ControlPlane, tmp_path: Path
) -> None:
    objs = manifests.render_kustomize(
        control_plane.bin_dir / controlplane.KUBECTL, directory=_overlay_with_documented_patch(tmp_path)
    )
    policy = manifests.find_object(objs, kind="NetworkPolicy")
    namespace = manifests.find_object(objs, kind="Namespace")
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    result = control_plane.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-", input=json.dumps(policy), check=False
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr
    stored = json.loads(result.stdout)["spec"]
    assert stored["ingress"][0]["from"] == stored["egress"][0]["to"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
