"""Serving TLS with hot reload of a cert-manager Secret mounted as a directory.

Mounted Secrets give no reliable file events, so the files are re-read on a timer and reloaded
into the SAME SSLContext when their bytes change: new handshakes present the new certificate,
open connections keep theirs, and no request fails (checked by the rotation test).

Optionally the context also asks clients for a certificate signed by given CAs (the API server's
webhook client certificate). It is asked for, not required, at the TLS layer: the kubelet's HTTPS
probes and Prometheus present none, so /healthz, /readyz and /metrics must still handshake; the app
then refuses /mutate to a client without a verified certificate. A certificate that is presented but
not signed by a trusted CA fails the handshake.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

# Handshake round trips an in-memory TLS 1.2/1.3 handshake needs at most (it takes two or three).
_HANDSHAKE_ROUNDS = 8


def _fingerprint(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


class ReloadingTLS:
    def __init__(self, tls_dir: Path, *, client_ca_files: Sequence[Path] = ()) -> None:
        self.tls_dir = tls_dir
        self.client_ca_files = tuple(client_ca_files)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_ca_files:
            self.context.verify_mode = ssl.CERT_OPTIONAL
        self._fingerprint = ""
        self._ca_fingerprint = ""
        self.reloads = 0
        self.reload()

    @property
    def verifies_clients(self) -> bool:
        return bool(self.client_ca_files)

    def reload(self) -> bool:
        """Load the files if they changed; True when a new certificate (or CA bundle) is in use."""
        fingerprint = _fingerprint([self.tls_dir / "tls.crt", self.tls_dir / "tls.key"])
        ca_fingerprint = _fingerprint(self.client_ca_files) if self.client_ca_files else ""
        if (fingerprint, ca_fingerprint) == (self._fingerprint, self._ca_fingerprint):
            return False
        if fingerprint != self._fingerprint:
            self.context.load_cert_chain(self.tls_dir / "tls.crt", self.tls_dir / "tls.key")
            self._fingerprint = fingerprint
        if ca_fingerprint != self._ca_fingerprint:
            # OpenSSL can only add to a context's trust store: a rotated CA is trusted from the next
            # handshake, and one removed from the file stays trusted until the process restarts.
            for path in self.client_ca_files:
                self.context.load_verify_locations(cafile=path)
            self._ca_fingerprint = ca_fingerprint
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


def find_serving_problem(tls_dir: Path, *, ca_file: Path, server_name: str) -> str | None:
    """Why a client that trusts ``ca_file`` would refuse this webhook's serving certificate when it
    connects to ``server_name``, or None when it would accept it.

    Those clients are the API server (it trusts the registration's caBundle) and the other replicas
    forwarding to the leader (they trust the peer CA): a certificate they refuse means every review
    fails and, with failurePolicy Ignore, every pod is admitted unchanged. The check is a real TLS
    handshake between this certificate and such a client, in memory.
    """
    try:
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(tls_dir / "tls.crt", tls_dir / "tls.key")
    except (OSError, ssl.SSLError) as exc:
        return f"cannot load {tls_dir / 'tls.crt'} with {tls_dir / 'tls.key'}: {exc}"
    try:
        client = ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        return f"cannot load the CA {ca_file}: {exc}"
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_end = client.wrap_bio(to_client, to_server, server_hostname=server_name)
    server_end = server.wrap_bio(to_server, to_client, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(_HANDSHAKE_ROUNDS):
        for side, end in (("client", client_end), ("server", server_end)):
            if done[side]:
                continue
            try:
                end.do_handshake()
                done[side] = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError as exc:
                return f"{tls_dir / 'tls.crt'} is not trusted by {ca_file} for {server_name}: {exc.verify_message}"
            except ssl.SSLError as exc:
                return f"a TLS handshake with {tls_dir / 'tls.crt'} for {server_name} failed: {exc}"
        if all(done.values()):
            return None
    return f"a TLS handshake with {tls_dir / 'tls.crt'} for {server_name} did not finish"
