"""File transfers to and from the JARVICE vault over SFTP (asyncssh). I/O only.

JARVICE has no REST upload: its own clients use SFTP to the vault host, user = the JARVICE username,
password = the API key. Every transfer here is:
- concurrent: FILES_IN_FLIGHT files move at once over one session (SFTP requests are pipelined), and
  a large file moves in CHUNK_BYTES blocks that asyncssh splits into parallel requests; at most
  CHUNKS_IN_MEMORY blocks (more for a far vault) are held at a time, so memory does not grow with the data. A small file
  (IN_PLACE_BYTES) is one round trip after its open: write, time and close (or read and close) are
  sent together, and the SSH connection sends a loop turn's packets at once (batched_socket);
- streamed: the trees are walked one directory at a time on both sides (local `os.scandir`, remote
  `readdir`), so a million files take the memory of one directory's listing;
- incremental: a file whose copy already has its size and modification time (seconds, as SFTP
  carries it) is skipped; a copy gets the source's time only once it is whole;
- never trusting a partial file: a file is written to `<name>.nbpart`, its size checked, its time
  set, and only then renamed into place (a small upload, and a copied-back file of one block new to
  the pod, are written in place with their time set last, so a copy cut short never looks current).
  After a dropped connection (made again up to MAX_RECONNECTS times without progress) a file resumes
  from the bytes this runner saw acknowledged; a partial file left by an earlier runner is written
  again from the start;
- reported: a progress line (files, bytes, rate, ETA) on stderr every PROGRESS_SECONDS.

Stopping early (`should_stop`, polled between blocks) is not a failure: the report says what was done.
The API key is passed to asyncssh only; it is never logged.
"""

import asyncio
import contextlib
import logging
import posixpath
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TextIO, TypeVar

import asyncssh

from entrypoint import local_tree, vault_files, vault_settings
from entrypoint.sftp_session import Activity, start_sftp
from entrypoint.transfer_pass import (
    IN_PLACE_BYTES,
    NAMED_PATHS,
    DiskError,
    DownloadRoot,
    Meter,
    Pass,
    Report,
    Stopped,
    Totals,
    TransferFailed,
    UploadRoot,
    as_bytes,
    first_error,
)
from entrypoint.vault_download import Downloader
from entrypoint.vault_upload import Uploader
from jarvice.batched_socket import BatchedTCP
from jarvice.redaction import Secret

__all__ = ["IN_PLACE_BYTES", "DownloadRoot", "Report", "Totals", "TransferFailed", "UploadRoot", "VaultTransfer"]

log = logging.getLogger(__name__)
T = TypeVar("T")
# A dropped connection is made again this many times in a row without a byte of progress.
MAX_RECONNECTS: Final = 5
RECONNECT_BASE_SECONDS: Final = 1.0
RECONNECT_CAP_SECONDS: Final = 15.0
CONNECT_TIMEOUT_SECONDS: Final = 15.0
# A vault that stops answering is noticed within a minute and handled like a dropped connection:
# SSH keepalives (the server's SSH layer gone quiet) and a watch on the SFTP requests (its file
# server gone quiet while SSH still answers).
KEEPALIVE_SECONDS: Final = 15.0
KEEPALIVE_COUNT: Final = 3
REQUEST_TIMEOUT_SECONDS: Final = 45.0
# How often the watch looks (and polls should_stop, so a signal is seen while a request waits).
WATCH_SECONDS: Final = 1.0
# A lease file is a line of JSON; more than this is not one of ours. Created or read again this many
# times when it is released between the two.
MAX_LEASE_BYTES: Final = 4096
LEASE_TRIES: Final = 3

# AES-GCM first: one call into OpenSSL per SSH packet, where chacha20-poly1305 (asyncssh's first
# choice) takes four from Python; staging many small files is that per-packet cost. The rest of
# asyncssh's choices follow, for a server without AES-GCM.
ENCRYPTION_ALGS: Final = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)


class VaultStalled(ConnectionError):
    """The vault answered nothing for REQUEST_TIMEOUT_SECONDS: handled as a dropped connection."""


# What a dropped or broken connection raises (a reconnect may help); anything else is final.
_CONNECTION_ERRORS: Final = (asyncssh.DisconnectError, asyncssh.ConnectionLost, ConnectionError, TimeoutError, OSError)


class VaultTransfer:
    """One vault's SFTP session per operation; every operation reconnects as needed."""

    def __init__(
        self,
        address: vault_settings.VaultSettings,
        *,
        username: str,
        apikey: Secret | Callable[[], Secret],
        clock: Callable[[], float],
        progress_out: TextIO,
    ) -> None:
        self.address = address
        self.username = username
        # The key as it is at each login: a projected token (through the gateway) is refreshed.
        self.apikey: Callable[[], Secret] = apikey if callable(apikey) else (lambda: apikey)
        self.clock = clock
        self.progress_out = progress_out
        self.encryption_algs: Sequence[str] = ENCRYPTION_ALGS
        if address.known_hosts is None and address.host_key is None:
            log.warning(
                "the vault's host key is not checked: set NIMBIX_BURST_VAULT_KNOWN_HOSTS",
                extra={"host": address.host, "port": address.port},
            )

    # --- the operations ------------------------------------------------------------------------

    def upload(
        self,
        roots: Sequence[UploadRoot],
        *,
        totals: Totals,
        never_staged: frozenset[str],
        should_stop: Callable[[], bool],
    ) -> Report:
        """Make each root's tree current in the vault (files, inside links, directories)."""
        meter = Meter("stage-in", totals, clock=self.clock, out=self.progress_out)
        state = Pass(Report(), meter, should_stop=should_stop)
        uploader = Uploader(state, never_staged)
        try:
            return asyncio.run(self._retrying(state, lambda sftp: uploader.run(sftp, roots)))
        finally:
            state.disk.shutdown(wait=True)

    def download(self, roots: Sequence[DownloadRoot], *, should_stop: Callable[[], bool]) -> Report:
        """Make each stage-out path current in the pod from its vault copy (absent copies are logged)."""
        meter = Meter("copy-back", Totals(), clock=self.clock, out=self.progress_out)
        state = Pass(Report(), meter, should_stop=should_stop)
        downloader = Downloader(state)
        try:
            return asyncio.run(self._retrying(state, lambda sftp: downloader.run(sftp, roots)))
        finally:
            state.disk.shutdown(wait=True)

    def remove_tree(self, root: str) -> None:
        async def remove(sftp: asyncssh.SFTPClient) -> None:
            if await sftp.exists(root):
                await sftp.rmtree(root)

        asyncio.run(self._once(remove))

    # --- a lease: one small file, created only where none is (the vault's O_EXCL) ---------------

    def take_lease(self, path: str, text: str) -> str | None:
        """Create `path` holding `text` unless it exists: None when created, else what it holds."""

        async def take(sftp: asyncssh.SFTPClient) -> str | None:
            await sftp.makedirs(posixpath.dirname(path), exist_ok=True)
            for _ in range(LEASE_TRIES):
                try:
                    async with sftp.open(path, "xb", encoding=None) as created:
                        await created.write(text.encode())
                    return None
                except asyncssh.SFTPError:
                    pass  # it exists (SFTP v3 says only "failure"): read it
                try:
                    async with sftp.open(path, "rb", encoding=None) as held:
                        return as_bytes(await held.read(MAX_LEASE_BYTES)).decode(errors="replace")
                except asyncssh.SFTPNoSuchFile:
                    continue  # released in between: try to create it again
            raise TransferFailed(f"{path}: neither created nor readable")

        return asyncio.run(self._once(take))

    def write_file(self, path: str, text: str) -> None:
        async def write(sftp: asyncssh.SFTPClient) -> None:
            async with sftp.open(path, "wb", encoding=None) as out:
                await out.write(text.encode())

        asyncio.run(self._once(write))

    def remove_file(self, path: str) -> None:
        async def remove(sftp: asyncssh.SFTPClient) -> None:
            with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                await sftp.remove(path)

        asyncio.run(self._once(remove))

    # --- sessions ------------------------------------------------------------------------------

    def _login(self) -> dict[str, object]:
        """How the session logs in: the JARVICE user, the API key as password."""
        return {
            "username": self.username,
            "password": self.apikey().reveal(),
            "client_keys": None,
            "preferred_auth": "password,keyboard-interactive",
        }

    def _known_hosts(self) -> str | asyncssh.SSHKnownHosts | None:
        line = self.address.known_hosts_line()
        return asyncssh.import_known_hosts(line) if line is not None else self.address.known_hosts

    async def _connect(self) -> asyncssh.SSHClientConnection:
        return await asyncio.wait_for(
            asyncssh.connect(
                self.address.host,
                port=self.address.port,
                known_hosts=self._known_hosts(),
                agent_path=None,
                encryption_algs=self.encryption_algs,
                tunnel=BatchedTCP(),
                keepalive_interval=KEEPALIVE_SECONDS,
                keepalive_count_max=KEEPALIVE_COUNT,
                **self._login(),
            ),
            timeout=CONNECT_TIMEOUT_SECONDS,
        )

    async def _watched(
        self, state: Pass, conn: asyncssh.SSHClientConnection, work: Callable[[asyncssh.SFTPClient], Awaitable[None]]
    ) -> None:
        """`work` on a session of `conn`, beside a watch that ends it when the vault has answered
        nothing for REQUEST_TIMEOUT_SECONDS (VaultStalled: a reconnect follows) or should_stop()."""
        activity = Activity(asyncio.get_running_loop().time)

        async def watch() -> None:
            while True:
                await asyncio.sleep(WATCH_SECONDS)
                state.check_stop()
                silent = activity.silent_for()
                if silent > REQUEST_TIMEOUT_SECONDS:
                    conn.abort()
                    raise VaultStalled(f"the vault answered no request for {silent:.0f} s")

        async with contextlib.AsyncExitStack() as lanes, asyncio.TaskGroup() as group:
            watcher = group.create_task(watch())  # a vault that stalls while sessions open too
            first = await lanes.enter_async_context(await start_sftp(conn, activity))
            clock = asyncio.get_running_loop().time
            started = clock()
            await first.stat(".")  # one round trip: how far the vault is
            rtt = clock() - started
            # Across a WAN a channel's window (the server's: 2 MiB on OpenSSH) caps what one
            # session has in flight: a far vault gets more sessions, and more blocks per file.
            depth = vault_files.transfer_depth(rtt)
            state.blocks_per_file = depth.blocks_per_file
            state.chunks.widen(depth.blocks_in_memory)
            # Opened side by side: one round trip for all of them, not one each.
            opened = await asyncio.gather(*(start_sftp(conn, activity) for _ in range(depth.sessions - 1)))
            more = [await lanes.enter_async_context(session) for session in opened]
            state.lanes = [first, *more]
            log.info(
                "vault round trip measured",
                extra={"rtt_ms": round(rtt * 1000, 1), "sessions": depth.sessions, "blocks": depth.blocks_per_file},
            )
            try:
                await work(state.lanes[0])
            finally:
                watcher.cancel()

    async def _once(self, work: Callable[[asyncssh.SFTPClient], Awaitable[T]]) -> T:
        async with await self._connect() as conn, await start_sftp(conn) as sftp:
            result = await work(sftp)
        return result

    async def _retrying(self, state: Pass, work: Callable[[asyncssh.SFTPClient], Awaitable[None]]) -> Report:
        report = state.report
        reconnects = 0
        while True:
            before = state.progress_mark()
            try:
                async with await self._connect() as conn:
                    await first_error(self._watched(state, conn, work))
                break
            except Stopped:
                report.stopped = True
                break
            except TransferFailed as exc:
                report.error = str(exc)
                break
            except local_tree.UnsafePath as exc:
                report.error = str(exc)
                break
            except (local_tree.LocalFailure, DiskError) as exc:
                report.error, report.failed_locally = str(exc), True
                break
            except asyncssh.PermissionDenied as exc:
                report.error = f"the vault refused the JARVICE credentials: {exc.reason}"
                break
            except asyncssh.SFTPError as exc:
                report.error = f"the vault answered: {exc.reason}"
                break
            except _CONNECTION_ERRORS as exc:
                progressed = state.progress_mark() != before
                state.failed_in_a_row = 0 if progressed else state.failed_in_a_row + 1
                if state.failed_in_a_row > MAX_RECONNECTS:
                    report.error = f"the vault connection failed {state.failed_in_a_row} times in a row: {exc}"
                    break
                reconnects += 1
                delay = min(RECONNECT_CAP_SECONDS, RECONNECT_BASE_SECONDS * 2 ** max(0, state.failed_in_a_row - 1))
                log.warning(
                    "vault connection lost; resuming",
                    extra={
                        "error": str(exc),
                        "reconnects": reconnects,
                        "in_a_row": state.failed_in_a_row,
                        "delay": delay,
                    },
                )
                await asyncio.sleep(delay)
                report.skipped = 0  # the next pass finds them again
                state.meter.restart()
        if not report.complete:
            report.not_copied = (report.not_copied + sorted(key[0] for key in state.acked))[:NAMED_PATHS]
        state.meter.show()
        return report
