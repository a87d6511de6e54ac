"""The shipped manifests (`deploy/`) as data, for tests.

`render_kustomize` builds `deploy/` with the kubectl the tests run against. `webhook_configuration_for_url`
turns the shipped MutatingWebhookConfiguration into one that calls a webhook on the host, so the e2e tests
register exactly what a cluster install registers, with only the address and the CA swapped in.
Everything but the kubectl call is pure.
"""

from __future__ import annotations

import base64
import copy
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML (a kubernetes client dependency) ships no stubs

REPO_ROOT = Path(__file__).resolve().parent.parent
DEPLOY_DIR = REPO_ROOT / "deploy"

WEBHOOK_CONFIGURATION_KIND = "MutatingWebhookConfiguration"
# The webhook that decides pods; the configuration's other one (`jobs.nimbix-burst.io`) gives Jobs
# whose pods may burst the podFailurePolicy rule under which the product's moves are free.
PODS_WEBHOOK = "burst.nimbix-burst.io"
CA_INJECTION_ANNOTATION = "cert-manager.io/inject-ca-from"

Manifest = dict[str, Any]


def render_kustomize(kubectl: Path, *, directory: Path = DEPLOY_DIR) -> list[Manifest]:
    """`kubectl kustomize <directory>`, parsed into one dict per object, in output order."""
    result = subprocess.run(
        [str(kubectl), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory} failed: {result.stderr.strip()}")
    return parse_manifests(result.stdout)


def parse_manifests(text: str) -> list[Manifest]:
    """Multi-document YAML to a list of objects; empty documents are dropped."""
    objects: list[Manifest] = []
    for document in yaml.safe_load_all(text):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise ValueError(f"not a Kubernetes object: {document!r}")
        objects.append(document)
    return objects


def find_objects(objs: Iterable[Mapping[str, Any]], *, kind: str) -> list[Manifest]:
    """Every object of `kind` (deep copies, so callers may edit them)."""
    return [copy.deepcopy(dict(obj)) for obj in objs if obj.get("kind") == kind]


def find_object(objs: Iterable[Mapping[str, Any]], *, kind: str, name: str | None = None) -> Manifest:
    """The one object of `kind` (and `name`, if given); an error if there is not exactly one."""
    found = [obj for obj in find_objects(objs, kind=kind) if name is None or obj["metadata"]["name"] == name]
    if len(found) != 1:
        what = kind if name is None else f"{kind}/{name}"
        raise LookupError(f"expected exactly one {what}, found {len(found)}")
    return found[0]


def webhook_configuration_for_url(
    objs: Sequence[Mapping[str, Any]],
    *,
    url: str,
    ca_bundle_pem: bytes,
    name_suffix: str = "",
) -> Manifest:
    """The shipped MutatingWebhookConfiguration, calling `url` and trusting `ca_bundle_pem`.

    Each webhook's `clientConfig.service` is replaced by `url` and `caBundle` is set; the cert-manager CA
    injection annotation is dropped (there is no cainjector to fill it in, and it would overwrite ours);
    `name_suffix` is appended to the configuration's name so several copies can coexist. Every other
    field (rules, selectors, matchConditions, failurePolicy, timeouts) is what `deploy/` ships.
    """
    config = find_object(objs, kind=WEBHOOK_CONFIGURATION_KIND)
    metadata: dict[str, Any] = config["metadata"]
    metadata["name"] = metadata["name"] + name_suffix
    annotations: dict[str, str] = metadata.get("annotations", {})
    annotations.pop(CA_INJECTION_ANNOTATION, None)
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    ca_bundle = base64.b64encode(ca_bundle_pem).decode("ascii")
    for webhook in config["webhooks"]:
        webhook["clientConfig"] = {"url": url, "caBundle": ca_bundle}
    return config
