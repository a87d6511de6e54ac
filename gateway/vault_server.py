"""The gateway's SFTP endpoint: a burst pod stages its data through it into its account's vault (I/O).

A pod logs in with its projected token as the password (any username): the token is reviewed as for
the HTTP API (gateway.callers), the pod must be decided remote, and its namespace's account must name
a vault (gateway.accounts). Each SFTP session is then relayed to that vault, logged in with the
account's vault credentials, confined to the pod's directories (gateway.vault_proxy). Nothing but
the `sftp` subsystem is served: no shell, no command, no forwarding.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

import asyncssh
from asyncssh.stream import SSHReader, SSHServerStreamSession, SSHWriter

from gateway.accounts import Accounts, VaultAccess
from gateway.callers import Callers
from gateway.connection_limits import PodConnections, session_refusal
from gateway.identity import NotAuthenticated
from gateway.kube import KubeAdapter
from gateway.sftp_requests import BadPacket, swaps_symlink
from gateway.terms import NotDecided
from gateway.vault_proxy import VaultProxy
from gateway.vault_scope import VaultGrant, controlling_job
from jarvice.batched_socket import BatchedTCP

log = logging.getLogger(__name__)

LOGIN_TIMEOUT_SECONDS: Final = 30.0
KEEPALIVE_SECONDS: Final = 30.0
VAULT_CONNECT_SECONDS: Final = 30.0
# The pod's channel: SSH packets of up to 256 KiB (an SFTP block in one packet: one encryption, one
# decryption, where asyncssh's default 32 KiB makes eight) and a window to match.
CLIENT_WINDOW: Final = 8 * 1024 * 1024
CLIENT_MAX_PACKET: Final = 256 * 1024 + 1024
# AES-GCM first, on both legs, as the runner asks (entrypoint.sftp_transfer.ENCRYPTION_ALGS): one call
# into OpenSSL per SSH packet, where chacha20-poly1305 (asyncssh's first choice) takes four from Python.
ENCRYPTION_ALGS: Final = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)


@dataclass(frozen=True, slots=True)
class VaultSession:
    """What a login was granted: whose directories, on which vault."""

    grant: VaultGrant
    access: VaultAccess
    namespace: str
    pod: str


Authorize = Callable[[str], Awaitable[VaultSession]]


async def granted_job_uid(
    job_uid: Callable[[str, str], str | None], namespace: str, pod: Mapping[str, Any]
) -> str | None:
    """The UID of the Job whose vault directories a pod reaches: the one its controller reference names,
    once that Job is found in the pod's namespace with that UID (`job_uid`: the API server's answer);
    None for any other pod."""
    job = controlling_job(pod)
    if job is not None and await asyncio.to_thread(job_uid, namespace, job[0]) == job[1]:
        return job[1]
    return None


class VaultLogins:
    """A login's token -> its VaultSession, or NotAuthenticated / NotDecided saying why not."""

    def __init__(self, callers: Callers, accounts: Accounts, kube: KubeAdapter) -> None:
        self._callers = callers
        self._accounts = accounts
        self._kube = kube

    async def __call__(self, token: str) -> VaultSession:
        caller = await self._callers.authenticate(token)
        pod = await self._callers.pod(caller, fresh=True)
        account = self._accounts.for_namespace(caller.namespace)
        if account is None:
            raise NotDecided(f"no JARVICE account of this cluster pays for namespace {caller.namespace!r}")
        if account.vault is None:
            raise NotDecided(f"the account {account.name!r} names no vault: the cluster admin adds its 'vault'")
        job_uid = await granted_job_uid(self._kube.job_uid, caller.namespace, pod)
        grant = VaultGrant(pod_uid=caller.pod_uid, job_uid=job_uid)
        return VaultSession(grant=grant, access=account.vault, namespace=caller.namespace, pod=caller.pod_name)


class _Vault(NamedTuple):
    """A client's connection to its vault: the connection, the SFTP session for path checks, the root."""

    connection: asyncssh.SSHClientConnection
    checks: asyncssh.SFTPClient
    root: str


class _LoginServer(asyncssh.SSHServer):
    """One client connection: password logins only, the password being the pod's token."""

    def __init__(self, authorize: Authorize, connections: PodConnections) -> None:
        self._authorize = authorize
        self._connections = connections
        self.session: VaultSession | None = None
        self._admitted = ""  # the pod UID this connection counts against, once logged in
        self.sessions = 0  # the SFTP sessions open on it
        # One connection to the vault for all this client's SFTP sessions (the runner opens several at
        # once; a connection each would cost the vault's handshake round trips each), and one SFTP
        # session on it for the path checks. Opened by the first session, closed with the client's.
        self._vault: asyncio.Future[_Vault] | None = None

    def begin_auth(self, username: str) -> bool:
        return True

    def session_requested(self) -> _SftpOnlySession | bool:
        if self.session is None:
            return False
        refusal = session_refusal(self.sessions)
        if refusal is not None:
            log.warning("vault session refused", extra={**_who(self.session), "reason": refusal})
            return False
        self.sessions += 1
        return _SftpOnlySession(self.session, self)

    async def vault(self, access: VaultAccess) -> _Vault:
        if self._vault is None or (self._vault.done() and self._vault.exception() is not None):
            self._vault = asyncio.ensure_future(_open_vault(access))
        return await asyncio.shield(self._vault)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._connections.release(self._admitted)
            self._admitted = ""
        if self._vault is None:
            return
        if not self._vault.done():
            self._vault.cancel()
        elif self._vault.exception() is None:
            self._vault.result().connection.close()

    def password_auth_supported(self) -> bool:
        return True

    async def validate_password(self, username: str, password: str) -> bool:
        try:
            session = await self._authorize(password)
        except (NotAuthenticated, NotDecided) as exc:
            log.warning("vault login refused", extra={"reason": str(exc)})
            return False
        except Exception as exc:  # noqa: BLE001 - the API server unreachable: refused, said why
            log.warning("vault login failed", extra={"reason": str(exc), "error": type(exc).__name__})
            return False
        if not self._admitted:  # a second password on one connection counts once
            refusal = self._connections.admit(session.grant.pod_uid)
            if refusal is not None:
                log.warning("vault login refused", extra={**_who(session), "reason": refusal})
                return False
            self._admitted = session.grant.pod_uid
        self.session = session
        log.info("vault login", extra={**_who(session), "vault": session.access.host})
        return True


def _who(session: VaultSession) -> dict[str, str]:
    return {"namespace": session.namespace, "pod": session.pod}


async def connect_vault(access: VaultAccess) -> asyncssh.SSHClientConnection:
    """The account's vault, its host key checked against the accounts file's."""
    keys = [asyncssh.import_private_key(access.private_key.reveal())] if access.private_key is not None else None
    return await asyncssh.connect(
        access.host,
        access.port,
        username=access.username,
        password=access.password.reveal() if access.password is not None else None,
        client_keys=keys,
        known_hosts=asyncssh.import_known_hosts(access.known_hosts_line()),
        agent_path=None,
        config=[],
        connect_timeout=VAULT_CONNECT_SECONDS,
        tunnel=BatchedTCP(),
        encryption_algs=ENCRYPTION_ALGS,
        keepalive_interval=KEEPALIVE_SECONDS,
    )


async def _open_vault(access: VaultAccess) -> _Vault:
    vault = await connect_vault(access)
    try:
        checks = await vault.start_sftp_client()
        root = await checks.realpath(b".")
        return _Vault(vault, checks, root.decode("utf-8", "surrogateescape"))
    except BaseException:
        vault.close()
        raise


async def _relay(
    session: VaultSession, login: _LoginServer, channel: asyncssh.SSHServerChannel[bytes], stream: _SftpStream
) -> None:
    connection = channel.get_connection()
    try:
        vault, checks, root = await login.vault(session.access)
        writer, reader, _ = await vault.open_session(subsystem="sftp", encoding=None)

        async def resolve(path: str) -> str:
            answer = await checks.realpath(path.encode("utf-8", "surrogateescape"))
            return answer.decode("utf-8", "surrogateescape")

        proxy = VaultProxy(
            session.grant,
            client=stream,
            vault=(reader, writer),
            resolve=resolve,
            root=root,
            client_swaps=swaps_symlink(str(connection.get_extra_info("client_version", ""))),
            vault_swaps=swaps_symlink(str(vault.get_extra_info("server_version", ""))),
        )
        try:
            await proxy.run()
        finally:
            writer.close()
    except (OSError, asyncssh.Error, BadPacket) as exc:
        log.warning(
            "vault session ended",
            extra={"namespace": session.namespace, "pod": session.pod, "reason": str(exc), "error": type(exc).__name__},
        )
    except Exception as exc:  # noqa: BLE001 - a task of its own: unlogged, the pod would see only a closed channel
        log.error(
            "vault session failed",
            extra={"namespace": session.namespace, "pod": session.pod, "reason": str(exc), "error": type(exc).__name__},
        )
    finally:
        channel.exit(0)


_SftpStream = tuple["asyncssh.SSHReader[bytes]", "asyncssh.SSHWriter[bytes]"]


class _SftpOnlySession(SSHServerStreamSession[bytes]):
    """A session channel that serves the `sftp` subsystem by relaying it: no shell, no command."""

    def __init__(self, session: VaultSession, login: _LoginServer) -> None:
        super().__init__(None)
        self._vault_session = session
        self._login = login

    def shell_requested(self) -> bool:
        return False

    def exec_requested(self, command: str) -> bool:
        return False

    def subsystem_requested(self, subsystem: str) -> bool:
        return subsystem == "sftp"

    def connection_lost(self, exc: Exception | None) -> None:
        self._login.sessions -= 1
        super().connection_lost(exc)

    def session_started(self) -> None:
        channel = self._chan
        assert channel is not None and self._conn is not None
        channel.set_encoding(None)
        self._encoding = None
        stream = (SSHReader[bytes](self, channel), SSHWriter[bytes](self, channel))
        self._conn.create_task(_relay(self._vault_session, self._login, channel, stream))  # type: ignore[arg-type]


async def start_vault_server(
    *, host: str, port: int, host_key_file: Path, authorize: Authorize, connections: PodConnections | None = None
) -> asyncssh.SSHAcceptor:
    """Listen for burst pods' SFTP sessions; close the acceptor to stop. `connections`: what each pod holds
    (gateway.connection_limits; a fresh count when not given)."""
    held = connections if connections is not None else PodConnections()
    logging.getLogger("asyncssh").setLevel(logging.WARNING)  # its INFO is a line per SSH step
    return await asyncssh.listen(
        host,
        port,
        server_host_keys=[str(host_key_file)],
        server_factory=lambda: _LoginServer(authorize, held),
        encoding=None,
        agent_forwarding=False,
        x11_forwarding=False,
        allow_pty=False,
        line_editor=False,
        encryption_algs=ENCRYPTION_ALGS,
        tunnel=BatchedTCP(),
        window=CLIENT_WINDOW,
        max_pktsize=CLIENT_MAX_PACKET,
        login_timeout=LOGIN_TIMEOUT_SECONDS,
        keepalive_interval=KEEPALIVE_SECONDS,
    )
