"""Requests a second through a serving-certificate rotation, in-process (the webhook app on its
reloading TLS context, loopback, aiohttp clients: half on kept-alive connections, half handshaking for
every request):

    python -m bench.tls_rotation [--seconds 4] [--connections 4]

Prints one JSON document on stdout: requests a second before and after the rotation, and the failures
(the integration test holds the failures to 0; this module measures the rate, which no test bounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench import clusters
from bench.inprocess import new_sync
from devplatform.cluster.pki import KeyPair, issue_cert, make_ca, write_pair
from devplatform.cluster.processes import free_port
from kubeplumbing.tls import ReloadingTLS
from webhook.app import create_app
from webhook.settings import parse_settings


def _serving(ca: KeyPair, name: str, tls_dir: Path) -> None:
    pair = issue_cert(ca, common_name=name, ip_addresses=["127.0.0.1"], server=True)
    write_pair(pair, cert_path=tls_dir / "tls.crt", key_path=tls_dir / "tls.key")


async def measure(tls_dir: Path, *, seconds: float, connections: int) -> dict[str, Any]:
    """Load for `seconds`, the certificate rotated halfway; the rates of each half."""
    ca = make_ca("bench-rotation-ca")
    _serving(ca, "first", tls_dir)
    settings = parse_settings(["--tls-dir", str(tls_dir)], {})
    sync = new_sync(settings.policy)
    raw_nodes, _records = clusters.cluster_sources("synthetic:100")
    sync.apply_list("nodes", list(raw_nodes))
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [clusters.KUBE_SYSTEM])
    tls = ReloadingTLS(tls_dir)
    runner = web.AppRunner(create_app(settings, cache=sync.cache, sync=sync, clock=time.monotonic))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls.context).start()
    client_ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    url = f"https://127.0.0.1:{port}/mutate"
    body = json.dumps(clusters.build_review(clusters.build_review_pod(gpus=1), uid="bench-rotation", dry_run=True))
    done = asyncio.Event()
    served = [0] * connections
    failures: list[str] = []

    async def load(worker: int) -> None:
        connector = aiohttp.TCPConnector(ssl=client_ctx, force_close=worker % 2 == 0)
        async with aiohttp.ClientSession(connector=connector) as session:
            while not done.is_set():
                try:
                    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                        await resp.read()
                        if resp.status != 200:
                            failures.append(f"status {resp.status}")
                            continue
                    served[worker] += 1
                except (aiohttp.ClientError, OSError) as exc:
                    failures.append(repr(exc))

    try:
        workers = [asyncio.create_task(load(i)) for i in range(connections)]
        half = seconds / 2
        await asyncio.sleep(half)
        before = sum(served)
        _serving(ca, "second", tls_dir)
        reloaded = tls.reload()
        await asyncio.sleep(half)
        done.set()
        await asyncio.gather(*workers)
    finally:
        done.set()
        await runner.cleanup()
    after = sum(served) - before
    return {
        "seconds": seconds,
        "connections": connections,
        "reloaded": reloaded,
        "requests_per_s_before": round(before / half, 1),
        "requests_per_s_after": round(after / half, 1),
        "failures": len(failures),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_rotation", description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="how long the load runs (rotated halfway)")
    parser.add_argument("--connections", type=int, default=4, help="concurrent clients (half handshake per request)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-tls-rotation-") as tls_dir:
        result = asyncio.run(measure(Path(tls_dir), seconds=args.seconds, connections=args.connections))
    print(f"    tls rotation: {result}", file=sys.stderr, flush=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
