"""--client-ca-file over real TLS: only a client with a certificate from that CA may call /mutate.

The kubelet's HTTPS probes and Prometheus present no client certificate, so /healthz, /readyz and
/metrics keep answering them; /mutate refuses them with a 403 that says what to configure.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp import web

from devplatform.cluster.pki import KeyPair, issue_cert, make_ca, write_pair
from devplatform.cluster.processes import free_port
from kubeplumbing.tls import ReloadingTLS
from tests.support.clocks import Clock
from tests.support.webhook_app import review_body, write_serving_cert
from tests.unit.webhook.builders import container, pod
from webhook.app import create_app
from webhook.settings import parse_settings
from webhook.sync import CacheSync

BODY = review_body(pod(container(gpus=1)))


@dataclass
class Server:
    url: str
    serving_ca_pem: bytes
    client_ca: KeyPair
    client_ca_file: Path
    tls: ReloadingTLS
    tmp: Path

    def client_context(self, client: KeyPair | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.serving_ca_pem.decode())
        if client is not None:
            cert, key = self.tmp / f"client-{id(client)}.crt", self.tmp / f"client-{id(client)}.key"
            write_pair(client, cert_path=cert, key_path=key)
            context.load_cert_chain(cert, key)
        return context

    async def post(self, client: KeyPair | None, path: str = "/mutate") -> tuple[int, Any]:
        connector = aiohttp.TCPConnector(ssl=self.client_context(client), force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            if path == "/mutate":
                response = await session.post(self.url + path, data=BODY, headers={"Content-Type": "application/json"})
            else:
                response = await session.get(self.url + path)
            async with response:
                if response.content_type == "application/json":
                    return response.status, await response.json()
                return response.status, await response.text()


def _client_cert(ca: KeyPair, name: str = "kube-apiserver-webhook-client") -> KeyPair:
    return issue_cert(ca, common_name=name, client=True)


@contextlib.asynccontextmanager
async def _serving(tmp_path: Path, synced: CacheSync, clock: Clock) -> AsyncIterator[Server]:
    tls_dir = tmp_path / "tls"
    serving_ca_pem = write_serving_cert(tls_dir)
    client_ca = make_ca("apiserver-webhook-client-ca")
    client_ca_file = tmp_path / "client-ca.crt"
    client_ca_file.write_bytes(client_ca.cert_pem)
    settings = parse_settings(["--tls-dir", str(tls_dir), "--client-ca-file", str(client_ca_file)], {})
    assert settings.client_ca_file == client_ca_file
    tls = ReloadingTLS(tls_dir, client_ca_files=[client_ca_file])
    runner = web.AppRunner(create_app(settings, cache=synced.cache, sync=synced, clock=clock))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls.context).start()
    try:
        yield Server(f"https://127.0.0.1:{port}", serving_ca_pem, client_ca, client_ca_file, tls, tmp_path)
    finally:
        await runner.cleanup()


@pytest.fixture
async def server(tmp_path: Path, synced: CacheSync, clock: Clock) -> AsyncIterator[Server]:
    async with _serving(tmp_path, synced, clock) as serving:
        yield serving


def test_on_uvloop_the_client_certificate_is_seen(tmp_path: Path, synced: CacheSync, clock: Clock) -> None:
    """The webhook serves on uvloop (webhook.app.serve): its TLS transport must hand the verified
    client certificate over as asyncio's does, or every review would be refused (or none)."""

    async def scenario() -> tuple[int, int]:
        async with _serving(tmp_path, synced, clock) as serving:
            assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
            with_cert, _ = await serving.post(_client_cert(serving.client_ca))
            without, _ = await serving.post(None)
            return with_cert, without

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(scenario()) == (200, 403)


async def test_a_client_certificate_from_the_ca_may_mutate(server: Server) -> None:
    status, answer = await server.post(_client_cert(server.client_ca))
    assert status == 200, answer
    assert answer["response"]["uid"] == "req-1"


async def test_without_a_client_certificate_mutate_is_refused_but_probes_and_metrics_answer(server: Server) -> None:
    status, answer = await server.post(None)
    assert status == 403
    assert "client certificate" in answer["error"] and "AdmissionConfiguration" in answer["error"]
    for path in ("/healthz", "/readyz", "/metrics"):
        status, _ = await server.post(None, path)
        assert status == 200, path
    _, metrics = await server.post(None, "/metrics")
    assert 'nimbix_burst_admission_errors_total{kind="unauthenticated"} 1.0' in metrics


async def test_a_client_certificate_from_another_ca_fails_the_handshake(server: Server) -> None:
    stranger = _client_cert(make_ca("some-other-ca"))
    with pytest.raises(aiohttp.ClientError):
        await server.post(stranger)


async def test_a_rotated_client_ca_is_trusted_after_reload(server: Server) -> None:
    new_ca = make_ca("apiserver-webhook-client-ca-2")
    with pytest.raises(aiohttp.ClientError):
        await server.post(_client_cert(new_ca))
    server.client_ca_file.write_bytes(new_ca.cert_pem + server.client_ca.cert_pem)
    assert server.tls.reload() is True
    assert server.tls.reload() is False
    status, _ = await server.post(_client_cert(new_ca))
    assert status == 200
    status, _ = await server.post(_client_cert(server.client_ca))
    assert status == 200


async def test_without_client_ca_any_client_may_mutate(tmp_path: Path, synced: CacheSync, clock: Clock) -> None:
    tls_dir = tmp_path / "tls"
    serving_ca_pem = write_serving_cert(tls_dir)
    settings = parse_settings(["--tls-dir", str(tls_dir)], {})
    tls = ReloadingTLS(tls_dir)
    assert settings.client_ca_file is None and not tls.verifies_clients
    runner = web.AppRunner(create_app(settings, cache=synced.cache, sync=synced, clock=clock))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls.context).start()
    try:
        server = Server(f"https://127.0.0.1:{port}", serving_ca_pem, make_ca("unused"), tmp_path / "x", tls, tmp_path)
        status, _ = await server.post(None)
        assert status == 200
    finally:
        await runner.cleanup()
