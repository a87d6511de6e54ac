"""A follower hands a review to the leader, unchanged, over one keep-alive HTTPS connection (I/O).

The leader presents the same serving certificate as every replica (one cert-manager Secret), so
the follower verifies it against that Secret's CA and the Service's DNS name, not the pod IP.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import aiohttp

log = logging.getLogger(__name__)

# Marks a review that already went through one replica: the receiver decides or refuses, it never
# forwards again (no loops while the Lease changes hands).
FORWARDED_HEADER = "X-Nimbix-Burst-Forwarded-By"


class ForwardFailed(Exception):
    """The leader did not answer with a review (down, not the leader any more, or too slow)."""


def build_client_context(ca_file: Path, *, client_cert: Path | None, client_key: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if client_cert is not None and client_key is not None:
        # For leaders that verify client certificates: a peer shows the replicas' own certificate.
        context.load_cert_chain(client_cert, client_key)
    return context


class Forwarder:
    def __init__(self, *, context: ssl.SSLContext, server_hostname: str, identity: str) -> None:
        self._context = context
        self._server_hostname = server_hostname
        self._identity = identity
        self._session: aiohttp.ClientSession | None = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # One connection per leader kept alive: a forward costs a request, not a handshake.
            connector = aiohttp.TCPConnector(limit_per_host=16, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def forward(self, url: str, body: bytes, *, timeout: float) -> bytes:
        """POST the review body to `url`/mutate; the leader's JSON answer, or ForwardFailed."""
        session = self._session_for_loop()
        try:
            async with session.post(
                url.rstrip("/") + "/mutate",
                data=body,
                headers={"Content-Type": "application/json", FORWARDED_HEADER: self._identity},
                ssl=self._context,
                server_hostname=self._server_hostname or None,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                payload = await response.read()
                if response.status != 200:
                    raise ForwardFailed(f"leader {url} answered HTTP {response.status}: {payload[:200]!r}")
                return payload
        except (TimeoutError, aiohttp.ClientError, ssl.SSLError, OSError) as exc:
            raise ForwardFailed(f"leader {url} unreachable: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
