"""Serving TLS with hot reload of a cert-manager Secret mounted as a directory.

Mounted Secrets give no reliable file events, so the files are re-read on a timer and reloaded
into the SAME SSLContext when their bytes change: new handshakes present the new certificate,
open connections keep theirs, and no request fails (checked by the rotation test).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def _fingerprint(tls_dir: Path) -> str:
    digest = hashlib.sha256()
    for filename in ("tls.crt", "tls.key"):
        digest.update((tls_dir / filename).read_bytes())
    return digest.hexdigest()


class ReloadingTLS:
    def __init__(self, tls_dir: Path) -> None:
        self.tls_dir = tls_dir
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._fingerprint = ""
        self.reloads = 0
        self.reload()

    def reload(self) -> bool:
        """Load the files if they changed; True when a new certificate is in use."""
        fingerprint = _fingerprint(self.tls_dir)
        if fingerprint == self._fingerprint:
            return False
        self.context.load_cert_chain(self.tls_dir / "tls.crt", self.tls_dir / "tls.key")
        self._fingerprint = fingerprint
        self.reloads += 1
        return True

    async def watch(self, interval: float, *, on_reload: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                if self.reload():
                    on_reload()
                    log.info("tls certificate reloaded", extra={"tls_dir": str(self.tls_dir)})
            except (OSError, ssl.SSLError) as exc:
                # A rotation caught half-written: keep serving the old certificate, retry next tick.
                log.warning("tls certificate reload failed", extra={"error": str(exc)})
