"""The webhook's app as its integration tests drive it: AdmissionReview bodies, the type of
aiohttp's test-client factory, and a serving certificate written as cert-manager mounts it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from devplatform.cluster.pki import issue_cert, make_ca, write_pair

ClientFactory = Callable[[web.Application], Awaitable[TestClient[Any, Any]]]


def write_serving_cert(tls_dir: Path, *, common_name: str = "webhook") -> bytes:
    """Writes tls.crt/tls.key like a mounted cert-manager Secret; returns the CA PEM."""
    ca = make_ca("nimbix-burst-test-ca")
    pair = issue_cert(ca, common_name=common_name, dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True)
    tls_dir.mkdir(parents=True, exist_ok=True)
    write_pair(pair, cert_path=tls_dir / "tls.crt", key_path=tls_dir / "tls.key")
    return ca.cert_pem


def review_body(pod: dict[str, Any], *, uid: str = "req-1", dry_run: bool = False, operation: str = "CREATE") -> str:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ns",
                "operation": operation,
                "object": pod,
                "dryRun": dry_run,
            },
        }
    )
