"""A lean aiohttp client for the local kube-apiserver, as cluster admin (bench I/O only).

The kubernetes Python client spends more time building model objects than the API server spends
answering, which would hide what is being measured (a pod CREATE's latency) and make filling a
1,000-node cluster slow. This client sends prepared JSON and reads raw bytes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

REQUEST_TIMEOUT_SECONDS = 60.0
MERGE_PATCH = "application/merge-patch+json"


class KubeApiError(RuntimeError):
    pass


def load_admin_credentials(kubeconfig: Path) -> tuple[str, bytes, bytes, bytes]:
    """(server, CA PEM, client cert PEM, client key PEM) from a kubeconfig with embedded data
    (what devplatform/cluster writes; JSON is YAML)."""
    config = json.loads(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    return (
        str(cluster["server"]),
        base64.b64decode(cluster["certificate-authority-data"]),
        base64.b64decode(user["client-certificate-data"]),
        base64.b64decode(user["client-key-data"]),
    )


def build_ssl_context(ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
        cert, key = Path(tmp) / "client.crt", Path(tmp) / "client.key"
        cert.write_bytes(cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        context.load_cert_chain(str(cert), str(key))
    return context


class KubeApi:
    def __init__(self, kubeconfig: Path, *, connections: int = 32) -> None:
        server, ca, cert, key = load_admin_credentials(kubeconfig)
        self.server = server.rstrip("/")
        self._context = build_ssl_context(ca, cert, key)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        connector = aiohttp.TCPConnector(ssl=self._context, limit=self._connections)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self, method: str, path: str, *, body: bytes | None = None, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        if self._session is None:
            raise RuntimeError("use KubeApi as an async context manager")
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        async with self._session.request(method, self.server + path, data=body, headers=headers) as response:
            return response.status, await response.read()

    async def create(self, path: str, obj: Mapping[str, Any]) -> float:
        """POST one object; returns the round-trip seconds. Raises on anything but 201."""
        body = json.dumps(obj).encode()
        began = time.perf_counter()
        status, payload = await self.request("POST", path, body=body)
        elapsed = time.perf_counter() - began
        if status != 201:
            raise KubeApiError(f"POST {path}: HTTP {status}: {payload[:300]!r}")
        return elapsed

    async def get_json(self, path: str) -> Any:
        status, payload = await self.request("GET", path)
        if status != 200:
            raise KubeApiError(f"GET {path}: HTTP {status}: {payload[:300]!r}")
        return json.loads(payload)


async def run_bounded(jobs: Sequence[Callable[[], Awaitable[object]]], *, concurrency: int) -> None:
    """Run every job with at most `concurrency` at once; the first failure is raised."""
    queue = list(reversed(jobs))

    async def worker() -> None:
        while queue:
            job = queue.pop()
            await job()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
