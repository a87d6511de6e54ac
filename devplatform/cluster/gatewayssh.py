"""The gateway's SSH host key for vault staging, as docs/install.md has an administrator make it
("Vault staging through the gateway"): one key for both replicas in the Secret
`nimbix-burst-gateway-ssh`, its public half in the webhook's settings. Here the install makes both at
once: a per-install kustomization over devplatform/overlay that adds the Secret and the two webhook
settings (kustomize's own generators), so the overlay in the repository stays a plain file.

The builders are pure; `write_install_dir` writes what they build.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SECRET = "nimbix-burst-gateway-ssh"
PRIVATE_KEY_FILE = "ssh_host_key"
PUBLIC_KEY_FILE = "ssh_host_key.pub"
SFTP_PORT = 2222  # deploy/gateway.yaml's GATEWAY_SFTP_PORT and its Service's port


@dataclass(frozen=True)
class HostKey:
    private_openssh: str  # what the gateway reads (GATEWAY_SSH_HOST_KEY_FILE)
    public: str  # `ssh-ed25519 AAAA... nimbix-burst-gateway`, what the webhook hands pods


def make_host_key() -> HostKey:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return HostKey(private_openssh=private, public=f"{public.decode()} nimbix-burst-gateway")


def build_install_kustomization(
    overlay: str, *, namespace: str, sftp: str, public_key: str, replicas: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """A kustomization over `overlay` (a path relative to its own directory) adding the host key's Secret
    and the webhook's two staging settings, and `replicas` (pods by Deployment name) where given."""
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [overlay],
        "secretGenerator": [
            {
                "name": SECRET,
                "namespace": namespace,
                "files": [PRIVATE_KEY_FILE, PUBLIC_KEY_FILE],
                "options": {"disableNameSuffixHash": True},  # deploy/gateway.yaml names it as is
            }
        ],
        "configMapGenerator": [
            {
                "name": "nimbix-burst-webhook",
                "namespace": namespace,
                "behavior": "merge",
                "literals": [f"WEBHOOK_GATEWAY_SFTP={sftp}", f"WEBHOOK_GATEWAY_SSH_HOST_KEY={public_key}"],
            }
        ],
    }
    if replicas:
        kustomization["replicas"] = [{"name": name, "count": count} for name, count in replicas.items()]
    return kustomization


def write_install_dir(
    directory: Path, overlay_dir: Path, *, namespace: str, sftp: str, replicas: Mapping[str, int] | None = None
) -> HostKey:
    """A fresh host key and the kustomization over `overlay_dir` in `directory` (private: it holds the key)."""
    key = make_host_key()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    (directory / PRIVATE_KEY_FILE).write_text(key.private_openssh)
    (directory / PRIVATE_KEY_FILE).chmod(0o600)
    (directory / PUBLIC_KEY_FILE).write_text(key.public + "\n")
    overlay = os.path.relpath(overlay_dir, directory)
    kustomization = build_install_kustomization(
        overlay, namespace=namespace, sftp=sftp, public_key=key.public, replicas=replicas
    )
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return key
