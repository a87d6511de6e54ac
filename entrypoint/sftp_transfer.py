"""File transfers to and from the JARVICE vault over SFTP (asyncssh). I/O only.

JARVICE has no REST upload: its own clients use SFTP to the vault host, user = the JARVICE username,
password = the API key. Every transfer here is:
- streamed in CHUNK_BYTES blocks (the runner has 128Mi; a file is never held whole);
- resumable: a file is written to `<name>.nbpart` and continued from what is there after a dropped
  connection (the connection is made again, up to MAX_RECONNECTS times without progress);
- verified: size and SHA-256 of what arrived are compared with the source's before the partial file
  is renamed into place (an upload is read back from the vault; a download is read back from disk);
- reported: a progress line (bytes, rate, ETA) on stderr every PROGRESS_SECONDS.

Stopping early (`should_stop`, polled between blocks) is not a failure: the report says what was done.
The API key is passed to asyncssh only; it is never logged.
"""

import asyncio
import hashlib
import logging
import posixpath
import stat
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final, TextIO, TypeVar

import asyncssh

from entrypoint import staging
from jarvice.redaction import Secret

log = logging.getLogger(__name__)
T = TypeVar("T")

# asyncssh splits one read or write of this size into parallel SFTP requests, so a block is one
# pipelined round trip. Measured on the emulator: 1 MiB moves as fast as 4 MiB (~11 MiB/s, CPU-bound
# on SSH's encryption) with a peak RSS of 61 MB against 85 MB for the whole runner.
CHUNK_BYTES: Final = 1024 * 1024
PART_SUFFIX: Final = ".nbpart"
# A dropped connection is made again this many times in a row without a byte of progress.
MAX_RECONNECTS: Final = 5
RECONNECT_BASE_SECONDS: Final = 1.0
RECONNECT_CAP_SECONDS: Final = 15.0
CONNECT_TIMEOUT_SECONDS: Final = 15.0
PROGRESS_SECONDS: Final = 2.0

# What a dropped or broken connection raises (a reconnect may help); anything else is final.
_CONNECTION_ERRORS: Final = (asyncssh.DisconnectError, asyncssh.ConnectionLost, ConnectionError, TimeoutError, OSError)


class TransferFailed(Exception):
    """A file could not be transferred or verified (the message names it)."""


class _Stopped(Exception):
    """should_stop() or the deadline: leave what is done, report the rest as not copied."""


@dataclass(frozen=True, slots=True)
class Upload:
    local: Path
    vault: str  # relative to the vault's root
    size: int


@dataclass
class Report:
    done: list[str] = field(default_factory=list)  # the local paths copied and verified
    left: list[str] = field(default_factory=list)  # not copied (stopped, or failed: see `error`)
    digests: dict[str, str] = field(default_factory=dict)  # local path -> SHA-256 of what was copied
    error: str = ""
    stopped: bool = False

    @property
    def complete(self) -> bool:
        return not self.left and not self.error


class _Meter:
    """Bytes in place: whole files done, plus the current file's offset (a resume restarts it there)."""

    def __init__(self, direction: str, total: int, *, clock: Callable[[], float], out: TextIO) -> None:
        self.direction, self.total, self.clock, self.out = direction, total, clock, out
        self.files_done = 0
        self.current = 0
        self.started = clock()
        self.shown = self.started

    @property
    def done(self) -> int:
        return self.files_done + self.current

    def file_done(self, size: int) -> None:
        self.files_done += size
        self.current = 0

    def at(self, offset: int) -> None:
        self.current = offset
        now = self.clock()
        if now - self.shown >= PROGRESS_SECONDS:
            self.shown = now
            self.show()

    def show(self) -> None:
        line = staging.format_progress(
            self.direction, done=self.done, total=self.total, seconds=self.clock() - self.started
        )
        print(line, file=self.out, flush=True)


class VaultTransfer:
    """One vault's SFTP session per operation; every operation reconnects as needed."""

    def __init__(
        self,
        address: staging.VaultSettings,
        *,
        username: str,
        apikey: Secret,
        clock: Callable[[], float],
        progress_out: TextIO,
    ) -> None:
        self.address = address
        self.username = username
        self.apikey = apikey
        self.clock = clock
        self.should_stop: Callable[[], bool] = lambda: False  # per operation
        self.progress_out = progress_out
        if address.known_hosts is None:
            log.warning(
                "the vault's host key is not checked: set NIMBIX_BURST_VAULT_KNOWN_HOSTS",
                extra={"host": address.host, "port": address.port},
            )

    # --- the operations ------------------------------------------------------------------------

    def upload(self, files: Sequence[Upload], *, dirs: Sequence[str], should_stop: Callable[[], bool]) -> Report:
        """Upload `files` (and make the vault directories `dirs`, for empty directories)."""
        self.should_stop = should_stop
        return asyncio.run(self._retrying([f.local for f in files], self._upload_all(files, dirs)))

    def list_files(self, root: str) -> list[tuple[str, int]] | None:
        """Every file under the vault path `root` (itself if a file) with its size; None if absent."""
        return asyncio.run(self._once(lambda sftp: _walk_remote(sftp, root)))

    def download(self, files: Sequence[tuple[str, Path, int]], *, should_stop: Callable[[], bool]) -> Report:
        """Download (vault path, local path, size) triples."""
        self.should_stop = should_stop
        return asyncio.run(self._retrying([local for _, local, _ in files], self._download_all(files)))

    def remove_tree(self, root: str) -> None:
        async def remove(sftp: asyncssh.SFTPClient) -> None:
            if await sftp.exists(root):
                await sftp.rmtree(root)

        asyncio.run(self._once(remove))

    # --- sessions ------------------------------------------------------------------------------

    async def _connect(self) -> asyncssh.SSHClientConnection:
        return await asyncio.wait_for(
            asyncssh.connect(
                self.address.host,
                port=self.address.port,
                username=self.username,
                password=self.apikey.reveal(),
                known_hosts=self.address.known_hosts,
                client_keys=None,
                agent_path=None,
                preferred_auth="password,keyboard-interactive",
            ),
            timeout=CONNECT_TIMEOUT_SECONDS,
        )

    async def _once(self, work: Callable[[asyncssh.SFTPClient], Awaitable[T]]) -> T:
        async with await self._connect() as conn, conn.start_sftp_client() as sftp:
            result = await work(sftp)
        return result

    async def _retrying(self, paths: Sequence[Path], work: "_Work") -> Report:
        report = Report()
        failures = reconnects = 0
        while True:
            before = len(report.done), work.meter_done()
            try:
                async with await self._connect() as conn, conn.start_sftp_client() as sftp:
                    await work.run(sftp, report)
                break
            except _Stopped:
                report.stopped = True
                break
            except TransferFailed as exc:
                report.error = str(exc)
                break
            except asyncssh.PermissionDenied as exc:
                report.error = f"the vault refused the JARVICE credentials: {exc.reason}"
                break
            except _CONNECTION_ERRORS as exc:
                progressed = (len(report.done), work.meter_done()) != before
                failures = 0 if progressed else failures + 1
                if failures > MAX_RECONNECTS:
                    report.error = f"the vault connection failed {failures} times in a row: {exc}"
                    break
                reconnects += 1
                delay = min(RECONNECT_CAP_SECONDS, RECONNECT_BASE_SECONDS * 2 ** max(0, failures - 1))
                log.warning(
                    "vault connection lost; resuming",
                    extra={"error": str(exc), "reconnects": reconnects, "in_a_row": failures, "delay": delay},
                )
                await asyncio.sleep(delay)
            except asyncssh.SFTPError as exc:
                report.error = f"the vault answered: {exc.reason}"
                break
        work.finish()
        report.left = [str(p) for p in paths if str(p) not in report.done]
        return report

    # --- uploads -------------------------------------------------------------------------------

    def _upload_all(self, files: Sequence[Upload], dirs: Sequence[str]) -> "_Work":
        meter = _Meter("stage-in", sum(f.size for f in files), clock=self.clock, out=self.progress_out)

        async def run(sftp: asyncssh.SFTPClient, report: Report) -> None:
            for directory in dirs:
                await sftp.makedirs(directory, exist_ok=True)
            for item in files:
                if str(item.local) in report.done:
                    continue
                digest = await self._put(sftp, item, meter)
                report.done.append(str(item.local))
                report.digests[str(item.local)] = digest

        return _Work(run, meter)

    def _check_stop(self) -> None:
        if self.should_stop():
            raise _Stopped

    async def _put(self, sftp: asyncssh.SFTPClient, item: Upload, meter: _Meter) -> str:
        part = item.vault + PART_SUFFIX
        await sftp.makedirs(posixpath.dirname(item.vault) or ".", exist_ok=True)
        have = await _remote_size(sftp, part)
        if have is None or have > item.size:
            have = 0
        digest = hashlib.sha256()
        with item.local.open("rb") as src:
            _hash_prefix(src, digest, have)
            meter.at(have)
            async with sftp.open(part, "r+b" if have else "wb", encoding=None) as dst:
                offset = have
                while chunk := src.read(CHUNK_BYTES):
                    self._check_stop()
                    await dst.write(chunk, offset)
                    offset += len(chunk)
                    digest.update(chunk)
                    meter.at(offset)
        expected = digest.hexdigest()
        size, arrived = await _hash_remote(sftp, part)
        if size != item.size or arrived != expected:
            await sftp.remove(part)
            raise TransferFailed(
                f"{item.local}: the vault holds {size} bytes (sha256 {arrived[:12]}), sent {item.size}"
                f" (sha256 {expected[:12]}); it will be sent again from the start"
            )
        await sftp.posix_rename(part, item.vault)
        meter.file_done(item.size)
        return expected

    # --- downloads -----------------------------------------------------------------------------

    def _download_all(self, files: Sequence[tuple[str, Path, int]]) -> "_Work":
        meter = _Meter("copy-back", sum(size for _, _, size in files), clock=self.clock, out=self.progress_out)

        async def run(sftp: asyncssh.SFTPClient, report: Report) -> None:
            for vault, local, size in files:
                if str(local) in report.done:
                    continue
                digest = await self._get(sftp, vault, local, size, meter)
                report.done.append(str(local))
                report.digests[str(local)] = digest

        return _Work(run, meter)

    async def _get(self, sftp: asyncssh.SFTPClient, vault: str, local: Path, size: int, meter: _Meter) -> str:
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(local.name + PART_SUFFIX)
        have = part.stat().st_size if part.exists() else 0
        if have > size:
            have = 0
        digest = hashlib.sha256()
        with part.open("r+b" if have else "wb") as dst:
            _hash_prefix(dst, digest, have)
            meter.at(have)
            dst.seek(have)
            dst.truncate()
            async with sftp.open(vault, "rb", encoding=None) as src:
                offset = have
                while True:
                    self._check_stop()
                    chunk = _as_bytes(await src.read(CHUNK_BYTES, offset))
                    if not chunk:
                        break
                    dst.write(chunk)
                    offset += len(chunk)
                    digest.update(chunk)
                    meter.at(offset)
            dst.flush()
        expected = digest.hexdigest()
        with part.open("rb") as written:
            check = hashlib.sha256()
            _hash_prefix(written, check, part.stat().st_size)
        now = await _remote_size(sftp, vault)
        if part.stat().st_size != now or check.hexdigest() != expected:
            part.unlink()
            raise TransferFailed(
                f"{local}: {part.stat().st_size if part.exists() else 0} bytes written, the vault holds {now};"
                " it will be fetched again from the start"
            )
        part.replace(local)
        meter.file_done(size)
        return expected


# --- helpers over the SFTP session and files ---------------------------------------------------


@dataclass
class _Work:
    run: Callable[[asyncssh.SFTPClient, Report], Awaitable[None]]
    meter: _Meter

    def meter_done(self) -> int:
        return self.meter.done

    def finish(self) -> None:
        if self.meter.total:
            self.meter.show()


def _hash_prefix(handle: BinaryIO, digest: "hashlib._Hash", count: int) -> None:
    """Hash the first `count` bytes of a file opened for reading, in blocks."""
    handle.seek(0)
    left = count
    while left > 0:
        block = handle.read(min(CHUNK_BYTES, left))
        if not block:
            break
        digest.update(block)
        left -= len(block)


def _as_bytes(data: str | bytes) -> bytes:
    # Files are opened with encoding=None, so reads are bytes; asyncssh types them as AnyStr.
    if isinstance(data, str):
        raise TransferFailed("the SFTP file was opened in text mode")
    return data


async def _remote_size(sftp: asyncssh.SFTPClient, path: str) -> int | None:
    try:
        attrs = await sftp.stat(path)
    except asyncssh.SFTPNoSuchFile:
        return None
    return attrs.size


async def _hash_remote(sftp: asyncssh.SFTPClient, path: str) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    async with sftp.open(path, "rb", encoding=None) as src:
        while chunk := _as_bytes(await src.read(CHUNK_BYTES, size)):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


async def _walk_remote(sftp: asyncssh.SFTPClient, root: str) -> list[tuple[str, int]] | None:
    try:
        attrs = await sftp.stat(root)
    except asyncssh.SFTPNoSuchFile:
        return None
    if attrs.permissions is not None and not stat.S_ISDIR(attrs.permissions):
        return [(root, attrs.size or 0)]
    found: list[tuple[str, int]] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        async for entry in sftp.scandir(directory):
            name = str(entry.filename)
            if name in (".", ".."):
                continue
            path = f"{directory}/{name}"
            mode = entry.attrs.permissions or 0
            if stat.S_ISDIR(mode):
                pending.append(path)
            elif stat.S_ISREG(mode) and not name.endswith(PART_SUFFIX):
                found.append((path, entry.attrs.size or 0))
    return sorted(found)
