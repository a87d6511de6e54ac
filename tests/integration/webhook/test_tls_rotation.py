"""Certificate rotation while requests flow: no request fails, new handshakes see the new cert.

Functional only: how many requests a second flow through a rotation is `make bench`'s (bench/tls_rotation.py)."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography import x509

from devplatform.cluster.pki import issue_cert, make_ca, write_pair
from devplatform.cluster.processes import free_port
from kubeplumbing.tls import ReloadingTLS
from tests.support.clocks import Clock
from tests.support.webhook_app import review_body
from tests.unit.webhook.builders import container, pod
from webhook.app import create_app
from webhook.settings import Settings
from webhook.sync import CacheSync


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
    # Requests each worker completed; a worker on new connections (force_close) handshakes for each one.
    served = [0, 0, 0, 0]

    async def load(worker: int) -> None:
        connector = aiohttp.TCPConnector(ssl=client_ctx, force_close=worker % 2 == 0)
        async with aiohttp.ClientSession(connector=connector) as session:
            while not done.is_set():
                try:
                    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                        if resp.status != 200:
                            failures.append(f"status {resp.status}")
                        await resp.read()
                    served[worker] += 1
                except (aiohttp.ClientError, OSError) as exc:
                    failures.append(repr(exc))

    async def every_worker_served(more_than: list[int]) -> None:
        """Until each worker completed more requests than `more_than` says (10 s at most)."""
        deadline = asyncio.get_running_loop().time() + 10
        while any(count <= floor for count, floor in zip(served, more_than, strict=True)):
            assert asyncio.get_running_loop().time() < deadline, (served, more_than, failures[:3])
            await asyncio.sleep(0.01)

    try:
        workers = [asyncio.create_task(load(i)) for i in range(len(served))]
        await every_worker_served([2] * len(served))  # both kinds of connections flow
        before = await served_serial()
        second = issue_cert(ca, common_name="second", ip_addresses=["127.0.0.1"], server=True)
        write_pair(second, cert_path=tls_dir / "tls.crt", key_path=tls_dir / "tls.key")
        assert tls.reload() is True
        assert tls.reload() is False  # unchanged files: nothing to do
        rotated_at = list(served)
        # Open connections keep serving, new ones handshake with the new cert: each worker goes on.
        await every_worker_served([count + 2 for count in rotated_at])
        after = await served_serial()
        done.set()
        await asyncio.gather(*workers)
    finally:
        done.set()
        await runner.cleanup()
    assert failures == []
    assert before == _serial(first.cert_pem)
    assert after == _serial(second.cert_pem)
