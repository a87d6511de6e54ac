"""Certificate rotation while requests flow: no request fails, new handshakes see the new cert."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography import x509

from devplatform.cluster.pki import issue_cert, make_ca, write_pair
from devplatform.cluster.processes import free_port
from tests.support.clocks import Clock
from tests.support.webhook_app import review_body
from tests.unit.webhook.builders import container, pod
from webhook.app import create_app
from webhook.settings import Settings
from webhook.sync import CacheSync
from webhook.tls import ReloadingTLS


def _serial(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


async def test_rotation_under_load(tmp_path: Path, settings: Settings, synced: CacheSync, clock: Clock) -> None:
    ca = make_ca("rotation-ca")
    tls_dir = settings.tls_dir
    first = issue_cert(ca, common_name="first", ip_addresses=["127.0.0.1"], server=True)
    write_pair(first, cert_path=tls_dir / "tls.crt", key_path=tls_dir / "tls.key")
    tls = ReloadingTLS(tls_dir)
    runner = web.AppRunner(create_app(settings, cache=synced.cache, sync=synced, clock=clock))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls.context).start()
    client_ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    url = f"https://127.0.0.1:{port}/mutate"
    body = review_body(pod(container(gpus=1), labels={"app": "x"}))

    async def served_serial() -> int:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()
        return x509.load_der_x509_certificate(der).serial_number

    failures: list[str] = []
    done = asyncio.Event()

    async def load(force_close: bool) -> int:
        count = 0
        connector = aiohttp.TCPConnector(ssl=client_ctx, force_close=force_close)
        async with aiohttp.ClientSession(connector=connector) as session:
            while not done.is_set():
                try:
                    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                        if resp.status != 200:
                            failures.append(f"status {resp.status}")
                        await resp.read()
                    count += 1
                except (aiohttp.ClientError, OSError) as exc:
                    failures.append(repr(exc))
        return count

    try:
        workers = [asyncio.create_task(load(force_close=i % 2 == 0)) for i in range(4)]
        await asyncio.sleep(0.5)
        before = await served_serial()
        second = issue_cert(ca, common_name="second", ip_addresses=["127.0.0.1"], server=True)
        write_pair(second, cert_path=tls_dir / "tls.crt", key_path=tls_dir / "tls.key")
        assert tls.reload() is True
        assert tls.reload() is False  # unchanged files: nothing to do
        await asyncio.sleep(0.5)
        after = await served_serial()
        done.set()
        counts = await asyncio.gather(*workers)
    finally:
        await runner.cleanup()
    assert failures == []
    assert sum(counts) > 20
    assert before == _serial(first.cert_pem)
    assert after == _serial(second.cert_pem)
