"""JARVICE as the gateway reaches it, with an account's key (I/O).

Every call carries a timeout. The key goes only into the requests made here and is masked in any
text passed on (JARVICE may echo it)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import aiohttp

from gateway.accounts import Account
from gateway.metrics import GatewayMetrics, endpoint_of
from jarvice.redaction import redact

TIMEOUT: Final = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
CHUNK: Final = 64 * 1024


class UpstreamFailed(Exception):
    """JARVICE could not be reached, or answered what is not JSON where JSON was due."""


class Answer:
    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        self.status = status
        self.content_type = content_type
        self.body = body

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise UpstreamFailed(f"JARVICE answered HTTP {self.status} with no JSON") from None


class Upstream:
    def __init__(self, session: aiohttp.ClientSession, metrics: GatewayMetrics | None = None) -> None:
        self._session = session
        self._metrics = metrics

    def _observe(self, endpoint: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.upstream_seconds.labels(endpoint=endpoint_of(endpoint)).observe(time.monotonic() - started)

    @staticmethod
    def _query(account: Account, params: Mapping[str, str]) -> dict[str, str]:
        return {**params, "username": account.username, "apikey": account.apikey.reveal()}

    def mask(self, account: Account, text: str) -> str:
        return redact(text, (account.apikey.reveal(),))

    async def get(self, account: Account, endpoint: str, params: Mapping[str, str]) -> Answer:
        url = f"{account.url}/jarvice/{endpoint}"
        started = time.monotonic()
        try:
            async with self._session.get(url, params=self._query(account, params), timeout=TIMEOUT) as response:
                self._observe(endpoint, started)
                body = await response.read()
                return Answer(response.status, response.content_type, body)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamFailed(self.mask(account, f"{endpoint}: {type(exc).__name__}: {exc}")) from None

    async def stream(self, account: Account, endpoint: str, params: Mapping[str, str]) -> AsyncIterator[Answer | bytes]:
        """The answer's status first, then its body in chunks (an output may be gigabytes)."""
        url = f"{account.url}/jarvice/{endpoint}"
        try:
            async with self._session.get(url, params=self._query(account, params), timeout=TIMEOUT) as response:
                yield Answer(response.status, response.content_type, b"")
                async for chunk in response.content.iter_chunked(CHUNK):
                    yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamFailed(self.mask(account, f"{endpoint}: {type(exc).__name__}: {exc}")) from None

    async def submit(self, account: Account, body: Mapping[str, Any]) -> Answer:
        payload = {**body, "user": {"username": account.username, "apikey": account.apikey.reveal()}}
        started = time.monotonic()
        try:
            async with self._session.post(f"{account.url}/jarvice/submit", json=payload, timeout=TIMEOUT) as response:
                self._observe("submit", started)
                return Answer(response.status, response.content_type, await response.read())
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamFailed(self.mask(account, f"submit: {type(exc).__name__}: {exc}")) from None
