"""The install's gateway SSH host key and its kustomization over the overlay (devplatform.cluster.gatewayssh)."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import yaml  # type: ignore[import-untyped]

from devplatform.cluster import gatewayssh


def test_the_host_key_is_an_openssh_key_pair_the_gateway_and_the_runner_read() -> None:
    key = gatewayssh.make_host_key()
    private = asyncssh.import_private_key(key.private_openssh)
    public = asyncssh.import_public_key(key.public)
    assert private.export_public_key("openssh").decode().split()[:2] == key.public.split()[:2]
    assert public.algorithm == b"ssh-ed25519"
    assert gatewayssh.make_host_key().public != key.public  # one per install


def test_the_kustomization_adds_the_secret_and_the_webhooks_two_settings(tmp_path: Path) -> None:
    overlay = tmp_path / "repo" / "overlay"
    overlay.mkdir(parents=True)
    directory = tmp_path / "run" / "addon-install"
    key = gatewayssh.write_install_dir(directory, overlay, namespace="nimbix-burst", sftp="10.0.0.53:2222")
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../../repo/overlay"]
    (secret,) = kustomization["secretGenerator"]
    assert (secret["name"], secret["namespace"], secret["options"]) == (
        gatewayssh.SECRET,
        "nimbix-burst",
        {"disableNameSuffixHash": True},
    )
    assert (directory / "ssh_host_key").read_text() == key.private_openssh
    assert (directory / "ssh_host_key").stat().st_mode & 0o077 == 0  # the key is the install's alone
    (settings,) = kustomization["configMapGenerator"]
    assert settings["behavior"] == "merge"
    assert settings["literals"] == [
        "WEBHOOK_GATEWAY_SFTP=10.0.0.53:2222",
        f"WEBHOOK_GATEWAY_SSH_HOST_KEY={key.public}",
    ]


def test_the_kustomization_names_replicas_only_when_asked() -> None:
    def build(replicas: dict[str, int] | None) -> dict[str, object]:
        return gatewayssh.build_install_kustomization(
            "../overlay", namespace="n", sftp="s", public_key="k", replicas=replicas
        )

    assert "replicas" not in build(None)
    assert "replicas" not in build({})  # the overlay's own (deploy/'s two) stand
    assert build({"a": 1, "b": 1})["replicas"] == [{"name": "a", "count": 1}, {"name": "b", "count": 1}]
