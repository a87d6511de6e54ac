"""reinvocationPolicy: IfNeeded through the real kube-apiserver.

A second mutating webhook (a tiny aiohttp server in this test, registered after ours by name) puts a
GPU on every container of a pod nimbix-burst has already burst. The API server then calls our webhook
again, which must strip exactly those GPUs; the pod is stored without any.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from devplatform.cluster import addons
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.pki import issue_cert, make_ca, write_pair
from devplatform.cluster.processes import free_port
from tests.support.gpus import GPU

PAUSE = "registry.k8s.io/pause:3.10"


class GpuAdder:
    """A later webhook: adds one GPU to every container of a pod nimbix-burst decided remote.

    It acts only on decided pods, so if it were called before ours the test would fail instead of
    passing without a reinvocation."""

    def __init__(self, run_dir: Path) -> None:
        self.calls = 0
        self.ca = make_ca("gpu-adder-ca")
        pair = issue_cert(self.ca, common_name="gpu-adder", ip_addresses=["127.0.0.1"], server=True)
        write_pair(pair, cert_path=run_dir / "tls.crt", key_path=run_dir / "tls.key")
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.load_cert_chain(run_dir / "tls.crt", run_dir / "tls.key")
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _mutate(self, request: web.Request) -> web.Response:
        self.calls += 1
        body = await request.json()
        pod = body["request"]["object"]
        ops: list[dict[str, Any]] = []
        if (pod["metadata"].get("annotations") or {}).get("nimbix-burst.io/decision") == "remote":
            for list_name in ("containers", "initContainers"):
                for i, container in enumerate(pod["spec"].get(list_name) or []):
                    ops += _add_gpu_ops(f"/spec/{list_name}/{i}", container)
        response: dict[str, Any] = {"uid": body["request"]["uid"], "allowed": True}
        if ops:
            response |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        answer = web.json_response(review)
        # No keep-alive: an idle connection the API server pooled would outlive stop() and its loop,
        # and its transport, collected during a later test, fails that test (unraisable ResourceWarning).
        answer.force_close()
        return answer

    def start(self) -> None:
        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/mutate", self._mutate)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self._tls).start()

        self._thread.start()
        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(timeout=10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def configuration(self, name: str, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},  # sorts after "nimbix-burst...": called after ours
            "webhooks": [
                {
                    "name": "add-gpu.test.nimbix-burst.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 5,
                    "reinvocationPolicy": "Never",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self.port}/mutate",
                        "caBundle": base64.b64encode(self.ca.cert_pem).decode(),
                    },
                    "rules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                    ],
                    # Only this test's namespace: other tests' pods never see it.
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                }
            ],
        }


def _add_gpu_ops(base: str, container: dict[str, Any]) -> list[dict[str, Any]]:
    resources = container.get("resources") or {}
    if not resources:
        return [{"op": "add", "path": f"{base}/resources", "value": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}}]
    ops: list[dict[str, Any]] = []
    for source in ("limits", "requests"):
        if source in resources:
            ops.append({"op": "add", "path": f"{base}/resources/{source}/nvidia.com~1gpu", "value": "1"})
        else:
            ops.append({"op": "add", "path": f"{base}/resources/{source}", "value": {GPU: "1"}})
    return ops


@pytest.fixture
def burst_webhook(control_plane: ControlPlane) -> Iterator[addons.WebhookProcess]:
    run_dir = control_plane.run_dir / f"webhook-reinvocation-{uuid.uuid4().hex[:6]}"
    with addons.registered_webhook(control_plane, run_dir, name_suffix="-reinvocation") as hook:
        yield hook


@pytest.fixture
def gpu_adder(control_plane: ControlPlane, namespace: str) -> Iterator[GpuAdder]:
    run_dir = control_plane.run_dir / f"gpu-adder-{uuid.uuid4().hex[:6]}"
    run_dir.mkdir()
    adder = GpuAdder(run_dir)
    adder.start()
    config = adder.configuration(f"zz-gpu-adder-{uuid.uuid4().hex[:6]}", namespace)
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(config))
    try:
        yield adder
    finally:
        control_plane.kubectl(
            "delete", "mutatingwebhookconfiguration", config["metadata"]["name"], "--ignore-not-found"
        )
        adder.stop()


def test_gpus_a_later_webhook_adds_to_a_burst_pod_are_stripped(
    control_plane: ControlPlane, namespace: str, burst_webhook: addons.WebhookProcess, gpu_adder: GpuAdder
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reinvoked", "namespace": namespace, "labels": {"task-type": "Nimbix"}},
        "spec": {
            # No node carries this label: nowhere to run the GPU here, so the pod bursts.
            "nodeSelector": {"nimbix-burst-test/nowhere": namespace},
            "initContainers": [{"name": "fetch", "image": PAUSE, "resources": {"requests": {"cpu": "2"}}}],
            "containers": [
                {"name": "app", "image": PAUSE, "resources": {"limits": {GPU: "2", "cpu": "8"}}},
                {"name": "log", "image": PAUSE},
            ],
        },
    }
    result = control_plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body))
    pod = json.loads(result.stdout)

    assert gpu_adder.calls >= 1
    annotations = pod["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/decision"] == "remote"
    spec = pod["spec"]
    for container in spec["containers"] + spec["initContainers"]:
        for source in ("requests", "limits"):
            assert GPU not in container.get("resources", {}).get(source, {}), container["name"]
    app, log = spec["containers"]
    env = {c["name"]: {e["name"]: e.get("value") for e in c.get("env", [])} for c in (app, log)}
    assert env["app"]["NUM_GPUS"] == "2"  # from the first rewrite, not the GPU added later
    assert env["log"]["REMOTE"] == "1" and env["log"]["NUM_GPUS"] == "1"  # asked for a GPU: goes remote
    assert spec["initContainers"][0]["resources"]["requests"] == {"cpu": "2"}
    audit = json.loads(annotations["nimbix-burst.io/original-resources"])
    assert audit["containers"]["app"]["limits"][GPU] == "2"
    assert set(audit["reinvoked"]["containers"]) == {"app", "log"}
    assert set(audit["reinvoked"]["initContainers"]) == {"fetch"}
    assert "removed GPU requests added after this pod was burst" in result.stderr
