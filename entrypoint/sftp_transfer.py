"""File transfers to and from the JARVICE vault over SFTP (asyncssh). I/O only.

JARVICE has no REST upload: its own clients use SFTP to the vault host, user = the JARVICE username,
password = the API key. Every transfer here is:
- concurrent: FILES_IN_FLIGHT files move at once over one session (SFTP requests are pipelined), and
  a large file moves in CHUNK_BYTES blocks that asyncssh splits into parallel requests; at most
  CHUNKS_IN_MEMORY blocks are held at a time, so memory does not grow with the data. A small file
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
import errno
import functools
import logging
import os
import posixpath
import stat
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, TextIO, TypeVar, cast

import asyncssh

from entrypoint import local_tree, staging
from entrypoint.batched_socket import BatchedTCP
from entrypoint.sftp_session import start_sftp
from jarvice.redaction import Secret

log = logging.getLogger(__name__)
T = TypeVar("T")

# One write or read of this size is split by asyncssh into parallel SFTP requests.
CHUNK_BYTES: Final = 1024 * 1024
# Blocks held in memory at once, over every file in flight: 6 x 1 MiB. asyncssh copies a block a
# few times on its way (requests, packets, encryption): the runner's peak RSS stays under 100 MB with
# eight large files in flight (92 MB measured in the bench's mixed case; 71 MB with 4 x 1 MiB).
CHUNKS_IN_MEMORY: Final = 6
# A file's blocks in flight at once, besides the one going to (or coming from) the disk: three keep a
# single large copy-back's server sending while the pod's disk writes (two left it waiting each time).
BLOCKS_PER_FILE: Final = 3
# Files moving at once: small files are a few round trips each, so they move side by side.
FILES_IN_FLIGHT: Final = 64
PART_SUFFIX: Final = staging.PART_SUFFIX
# An upload this small is one SFTP write request (OpenSSH takes up to 255 KiB), written in place.
IN_PLACE_BYTES: Final = 64 * 1024
# A dropped connection is made again this many times in a row without a byte of progress.
MAX_RECONNECTS: Final = 5
RECONNECT_BASE_SECONDS: Final = 1.0
RECONNECT_CAP_SECONDS: Final = 15.0
CONNECT_TIMEOUT_SECONDS: Final = 15.0
PROGRESS_SECONDS: Final = 2.0
# How many paths a report names (the counts are always whole).
NAMED_PATHS: Final = 20
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

# What a dropped or broken connection raises (a reconnect may help); anything else is final.
_CONNECTION_ERRORS: Final = (asyncssh.DisconnectError, asyncssh.ConnectionLost, ConnectionError, TimeoutError, OSError)


class TransferFailed(Exception):
    """A file could not be transferred or verified (the message names it)."""


class _Stopped(Exception):
    """should_stop() or the deadline: leave what is done, report the rest as not copied."""


@dataclass(frozen=True, slots=True)
class Totals:
    files: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class UploadRoot:
    """One staged path: `local` as the job sees it, read at `real` (see local_tree.resolve_root),
    copied to `vault` (relative to the vault's root). `empty`: a missing checkpoint directory."""

    local: str
    real: str
    vault: str
    empty: bool = False


@dataclass(frozen=True, slots=True)
class DownloadRoot:
    """One stage-out path: the vault copy `vault` back to the pod's `local` path."""

    vault: str
    local: str


@dataclass
class Report:
    copied: int = 0  # files copied and verified
    skipped: int = 0  # files whose copy was already current
    copied_bytes: int = 0
    not_copied: list[str] = field(default_factory=list)  # the first NAMED_PATHS not copied
    refused: int = 0  # files not written because a link was on their way (logged)
    error: str = ""
    stopped: bool = False

    @property
    def complete(self) -> bool:
        return not self.error and not self.stopped


class _Meter:
    """Files and bytes in place (copied or already current), shown every PROGRESS_SECONDS."""

    def __init__(self, direction: str, totals: Totals, *, clock: Callable[[], float], out: TextIO) -> None:
        self.direction, self.totals, self.clock, self.out = direction, totals, clock, out
        self.files = 0
        self.bytes = 0
        self.started = clock()
        self.shown = self.started

    def add(self, *, files: int = 0, size: int = 0) -> None:
        self.files += files
        self.bytes += size
        now = self.clock()
        if now - self.shown >= PROGRESS_SECONDS:
            self.shown = now
            self.show()

    def restart(self) -> None:
        """A new pass after a reconnect counts what is in place again."""
        self.files = self.bytes = 0

    def show(self) -> None:
        line = staging.format_progress(
            self.direction,
            done=self.bytes,
            total=max(self.totals.bytes, self.bytes),
            seconds=self.clock() - self.started,
            files_done=self.files,
            files=max(self.totals.files, self.files),
        )
        print(line, file=self.out, flush=True)


@dataclass
class _Pass:
    """What one operation keeps across reconnects."""

    report: Report
    meter: _Meter
    # The pod's disk, one call at a time in one thread: a file created on a busy disk must not
    # stop the event loop (and every transfer in flight) while it waits.
    disk: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="staging-disk"))
    # Per file in flight: the bytes acknowledged so far (a resume continues there; only this runner's own).
    acked: dict[str, int] = field(default_factory=dict)
    failed_in_a_row: int = 0

    def progress_mark(self) -> tuple[int, int]:
        return self.report.copied, self.report.copied_bytes + sum(self.acked.values())

    async def on_disk(self, call: Callable[..., T], *args: object, **kwargs: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.disk, functools.partial(call, *args, **kwargs))


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
        self.chunks = _BlockMemory()
        if address.known_hosts is None:
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
        self.should_stop = should_stop
        state = _Pass(Report(), _Meter("stage-in", totals, clock=self.clock, out=self.progress_out))
        uploader = _Uploader(self, state, never_staged)
        try:
            return asyncio.run(self._retrying(state, lambda sftp: uploader.run(sftp, roots)))
        finally:
            state.disk.shutdown(wait=True)

    def download(self, roots: Sequence[DownloadRoot], *, should_stop: Callable[[], bool]) -> Report:
        """Make each stage-out path current in the pod from its vault copy (absent copies are logged)."""
        self.should_stop = should_stop
        state = _Pass(Report(), _Meter("copy-back", Totals(), clock=self.clock, out=self.progress_out))
        downloader = _Downloader(self, state)
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
                        return _as_bytes(await held.read(MAX_LEASE_BYTES)).decode(errors="replace")
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
            "password": self.apikey.reveal(),
            "client_keys": None,
            "preferred_auth": "password,keyboard-interactive",
        }

    async def _connect(self) -> asyncssh.SSHClientConnection:
        return await asyncio.wait_for(
            asyncssh.connect(
                self.address.host,
                port=self.address.port,
                known_hosts=self.address.known_hosts,
                agent_path=None,
                encryption_algs=ENCRYPTION_ALGS,
                tunnel=BatchedTCP(),
                **self._login(),
            ),
            timeout=CONNECT_TIMEOUT_SECONDS,
        )

    async def _once(self, work: Callable[[asyncssh.SFTPClient], Awaitable[T]]) -> T:
        async with await self._connect() as conn, await start_sftp(conn) as sftp:
            result = await work(sftp)
        return result

    async def _retrying(self, state: _Pass, work: Callable[[asyncssh.SFTPClient], Awaitable[None]]) -> Report:
        self.chunks = _BlockMemory()  # bound to this operation's event loop
        report = state.report
        reconnects = 0
        while True:
            before = state.progress_mark()
            try:
                async with await self._connect() as conn, await start_sftp(conn) as sftp:
                    await _first_error(work(sftp))
                break
            except _Stopped:
                report.stopped = True
                break
            except TransferFailed as exc:
                report.error = str(exc)
                break
            except local_tree.UnsafePath as exc:
                report.error = str(exc)
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
            report.not_copied = (report.not_copied + sorted(state.acked))[:NAMED_PATHS]
        state.meter.show()
        return report

    def check_stop(self) -> None:
        if self.should_stop():
            raise _Stopped


async def _first_error(work: Awaitable[None]) -> None:
    """Run `work`; an exception group from its task group is raised as its first real error."""
    try:
        await work
    except BaseExceptionGroup as group:
        errors = [e for e in _leaves(group) if not isinstance(e, asyncio.CancelledError)]
        stopped = [e for e in errors if isinstance(e, _Stopped)]
        raise (stopped or errors or [group])[0] from None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for error in group.exceptions:
        found += _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    return found


async def _pool(items: AsyncIterator[T], handle: Callable[[T], Awaitable[None]]) -> None:
    """`handle` each item, FILES_IN_FLIGHT at a time, reading `items` only as fast as they are handled."""
    queue: asyncio.Queue[T | None] = asyncio.Queue(maxsize=2 * FILES_IN_FLIGHT)

    async def worker() -> None:
        while (item := await queue.get()) is not None:
            await handle(item)

    async with asyncio.TaskGroup() as group:
        for _ in range(FILES_IN_FLIGHT):
            group.create_task(worker())
        async for item in items:
            await queue.put(item)
        for _ in range(FILES_IN_FLIGHT):
            await queue.put(None)


class _BlockMemory:
    """The blocks held in memory at once: CHUNKS_IN_MEMORY. A small file's block (at most
    IN_PLACE_BYTES) is not counted: FILES_IN_FLIGHT of them are 4 MiB, and counting them would
    let only CHUNKS_IN_MEMORY small files move at once."""

    def __init__(self) -> None:
        self.slots = asyncio.Semaphore(CHUNKS_IN_MEMORY)

    async def acquire(self, length: int) -> None:
        if length > IN_PLACE_BYTES:
            await self.slots.acquire()

    def release(self, length: int) -> None:
        if length > IN_PLACE_BYTES:
            self.slots.release()

    def locked(self) -> bool:
        return self.slots.locked()

    @contextlib.asynccontextmanager
    async def hold(self, length: int) -> AsyncIterator[None]:
        await self.acquire(length)
        try:
            yield
        finally:
            self.release(length)


def _may_add(chunks: _BlockMemory, in_flight: deque[tuple[int, int, asyncio.Task[T]]]) -> bool:
    """Whether a file with blocks `in_flight` takes one more: at most BLOCKS_PER_FILE, and only a
    block's memory that is free now (waiting for a second one could wait on a file waiting for us)."""
    return len(in_flight) < BLOCKS_PER_FILE and not chunks.locked()


def _as_bytes(data: str | bytes) -> bytes:
    # Files are opened with encoding=None, so reads are bytes; asyncssh types them as AnyStr.
    if isinstance(data, str):
        raise TransferFailed("the SFTP file was opened in text mode")
    return data


def _mtime_seconds(ns: int) -> int:
    return ns // 1_000_000_000


# --- uploads -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Put:
    local: str  # the path as the job sees it (for reports)
    real: str  # where it is read
    vault: str
    size: int
    mtime: int


class _Uploader:
    def __init__(self, transfer: VaultTransfer, state: _Pass, never_staged: frozenset[str]) -> None:
        self.transfer, self.state, self.never_staged = transfer, state, never_staged

    async def run(self, sftp: asyncssh.SFTPClient, roots: Sequence[UploadRoot]) -> None:
        self.state.report.skipped = 0
        await _pool(self._todo(sftp, roots), lambda item: self._put(sftp, item))

    async def _todo(self, sftp: asyncssh.SFTPClient, roots: Sequence[UploadRoot]) -> AsyncIterator[_Put]:
        """What is not current in the vault, one directory at a time (links and directories made here)."""
        for root in roots:
            self.transfer.check_stop()
            if root.empty:
                await sftp.makedirs(root.vault, exist_ok=True)
                continue
            single = local_tree.root_file(root.local, root.real)
            if single is not None:
                parent = posixpath.dirname(root.vault)
                await sftp.makedirs(parent, exist_ok=True)
                have = await _remote_listing(sftp, parent)
                put = self._wanted(single, root.local, root.real, root.vault, have.get(posixpath.basename(root.vault)))
                if put is not None:
                    yield put
                continue
            for directory in local_tree.walk_tree(root.local, root.real):
                self.transfer.check_stop()
                relative = directory.path[len(root.local) :]
                target = root.vault + relative
                await sftp.makedirs(target, exist_ok=True)
                have = await _remote_listing(sftp, target)
                links = [e for e in directory.entries if e.kind == "link"]
                for link in links:
                    await _put_link(sftp, f"{target}/{link.name}", link.target, have.get(link.name))
                files = [e for e in directory.entries if e.kind == "file"]
                for item in self._compare(directory.path, directory.real, target, files, have):
                    yield item

    def _compare(
        self,
        local_dir: str,
        real_dir: str,
        vault_dir: str,
        files: Iterable[local_tree.LocalEntry],
        have: dict[str, tuple[int, int, int]],
    ) -> Iterable[_Put]:
        for entry in files:
            put = self._wanted(
                entry,
                f"{local_dir}/{entry.name}",
                os.path.join(real_dir, entry.name),
                f"{vault_dir}/{entry.name}",
                have.get(entry.name),
            )
            if put is not None:
                yield put

    def _wanted(
        self, entry: local_tree.LocalEntry, local: str, real: str, vault: str, copy: tuple[int, int, int] | None
    ) -> _Put | None:
        """The upload of one file, None when it is never staged or its vault copy is current."""
        if real in self.never_staged:
            log.warning("not staging the JARVICE credentials", extra={"path": local})
            return None
        mtime = _mtime_seconds(entry.mtime_ns)
        if (
            copy is not None
            and stat.S_ISREG(copy[2])
            and staging.is_current(size=entry.size, mtime=mtime, copy=(copy[0], copy[1]))
        ):
            self.state.report.skipped += 1
            self.state.meter.add(files=1, size=entry.size)
            return None
        return _Put(local, real, vault, entry.size, mtime)

    async def _put(self, sftp: asyncssh.SFTPClient, item: _Put) -> None:
        if item.size <= IN_PLACE_BYTES:
            await self._put_small(sftp, item)
            return
        # A larger file goes through `<name>.nbpart`, renamed only once whole.
        target = item.vault + PART_SUFFIX
        offset = self.state.acked.get(item.local, 0)
        try:
            fd = await self.state.on_disk(local_tree.open_for_reading, item.real)
        except OSError as exc:
            _vanished(item, exc)
            return
        self.state.acked[item.local] = offset
        writes: deque[tuple[int, int, asyncio.Task[int]]] = deque()
        try:
            async with sftp.open(target, "r+b" if offset else "wb", encoding=None) as dst:
                ahead = offset
                # The next block is read and sent while one is in flight, when a block's memory is
                # free; what is acknowledged in order is what a resume may skip.
                while ahead < item.size or writes:
                    self.transfer.check_stop()
                    while ahead < item.size and (not writes or _may_add(self.transfer.chunks, writes)):
                        length = min(CHUNK_BYTES, item.size - ahead)
                        await self.transfer.chunks.acquire(length)
                        try:
                            chunk = await self.state.on_disk(os.pread, fd, length, ahead)
                            if len(chunk) != length:
                                raise TransferFailed(
                                    f"{item.local}: {ahead + len(chunk)} of {item.size} bytes could be read (the file"
                                    " changed while it was sent?); it will be sent again"
                                )
                        except BaseException:
                            self.transfer.chunks.release(length)
                            raise
                        writes.append((ahead, length, asyncio.ensure_future(dst.write(chunk, ahead))))
                        ahead += length
                    at, length, write = writes.popleft()
                    try:
                        await write
                    finally:
                        self.transfer.chunks.release(length)
                    offset = at + length
                    self.state.acked[item.local] = offset
                    self.state.meter.add(size=length)
                await dst.utime((item.mtime, item.mtime))
        except BaseException:
            for _at, length, write in writes:
                write.cancel()
                self.transfer.chunks.release(length)
            raise
        finally:
            await self.state.on_disk(os.close, fd)
        await sftp.posix_rename(target, item.vault)
        del self.state.acked[item.local]
        self.state.report.copied += 1
        self.state.report.copied_bytes += item.size
        self.state.meter.add(files=1)

    async def _put_small(self, sftp: asyncssh.SFTPClient, item: _Put) -> None:
        # A file sent in one write request is written in place: the request lands whole or not at
        # all, and the copy gets its source's time only after it, so a copy cut short is never
        # current. Read in one trip to the disk; the write, the time and the close go out together
        # (the server does a handle's requests in order), one round trip after the open.
        try:
            data = await self.state.on_disk(local_tree.read_small, item.real, item.size)
        except OSError as exc:
            _vanished(item, exc)
            return
        if len(data) != item.size:
            raise TransferFailed(
                f"{item.local}: {len(data)} of {item.size} bytes could be read (the file changed while it"
                " was sent?); it will be sent again"
            )
        self.transfer.check_stop()
        # block_size=0: one request per call, without asyncssh's parallel-I/O tasks.
        dst = await sftp.open(item.vault, "wb", encoding=None, block_size=0)
        writes = [dst.write(data, 0)] if data else []
        await _pipelined(*writes, dst.utime((item.mtime, item.mtime)), dst.close())
        self.state.report.copied += 1
        self.state.report.copied_bytes += item.size
        self.state.meter.add(files=1, size=item.size)


def _vanished(item: _Put, exc: OSError) -> None:
    """A file that could not be opened: gone or a link now (logged, not staged), or a failure."""
    if exc.errno not in (errno.ENOENT, errno.ELOOP):
        raise TransferFailed(f"{item.local} cannot be read: {exc.strerror}") from exc
    # Removed, or replaced by a link, since the walk: not data to stage now.
    log.warning("not staging a file that changed into a link or vanished", extra={"path": item.local})


async def _pipelined(*requests: Awaitable[object]) -> list[object]:
    """SFTP requests sent at once (in this order) and awaited together: their results, or the
    first error once every one has its answer."""
    results = await asyncio.gather(*requests, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def _put_link(sftp: asyncssh.SFTPClient, vault: str, target: str, have: tuple[int, int, int] | None) -> None:
    if have is not None:
        if stat.S_ISLNK(have[2]) and await sftp.readlink(vault) == target:
            return
        if stat.S_ISDIR(have[2]):
            await sftp.rmtree(vault)
        else:
            await sftp.remove(vault)
    await sftp.symlink(target, vault)


async def _remote_listing(sftp: asyncssh.SFTPClient, directory: str) -> dict[str, tuple[int, int, int]]:
    """One vault directory: name -> (size, mtime in seconds, mode); links are not followed."""
    found: dict[str, tuple[int, int, int]] = {}
    try:
        async for entry in sftp.scandir(directory):
            name = str(entry.filename)
            if name not in (".", ".."):
                attrs = entry.attrs
                found[name] = (attrs.size or 0, int(attrs.mtime or 0), attrs.permissions or 0)
    except asyncssh.SFTPNoSuchFile:
        pass
    return found


# --- downloads -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Get:
    writer: local_tree.BeneathWriter
    relative: str  # below the writer's root
    vault: str
    size: int
    mtime: int
    fresh: bool = False  # nothing had its name in the pod when listed: written in place if still so

    @property
    def local(self) -> str:
        return f"{self.writer.root}/{self.relative}"


class _Downloader:
    def __init__(self, transfer: VaultTransfer, state: _Pass) -> None:
        self.transfer, self.state = transfer, state

    async def run(self, sftp: asyncssh.SFTPClient, roots: Sequence[DownloadRoot]) -> None:
        writers: list[local_tree.BeneathWriter] = []
        self.state.report.skipped = 0
        try:
            await _pool(self._todo(sftp, roots, writers), lambda item: self._get(sftp, item))
        finally:
            # After every disk call queued before (one thread, in order): no descriptor is in use.
            for writer in writers:
                await self.state.on_disk(writer.close)

    async def _todo(
        self, sftp: asyncssh.SFTPClient, roots: Sequence[DownloadRoot], writers: list[local_tree.BeneathWriter]
    ) -> AsyncIterator[_Get]:
        for root in roots:
            self.transfer.check_stop()
            try:
                attrs = await sftp.lstat(root.vault)
            except asyncssh.SFTPNoSuchFile:
                log.warning(
                    "the job wrote nothing at a stage-out path", extra={"path": root.local, "vault_path": root.vault}
                )
                continue
            mode = attrs.permissions or 0
            try:
                writer = await self.state.on_disk(
                    local_tree.BeneathWriter, root.local if stat.S_ISDIR(mode) else os.path.dirname(root.local)
                )
            except local_tree.UnsafePath as exc:
                self._refuse(root.local, exc)
                continue
            writers.append(writer)
            if stat.S_ISREG(mode):
                name = os.path.basename(root.local)
                have = (await self.state.on_disk(writer.list_dir, "")).get(name)
                get = _Get(writer, name, root.vault, attrs.size or 0, int(attrs.mtime or 0), fresh=have is None)
                if not self._is_current(get, have):
                    yield get
                continue
            if not stat.S_ISDIR(mode):
                log.warning(
                    "not copying back a stage-out path that is no file or directory in the vault",
                    extra={"path": root.local},
                )
                continue
            pending = [""]
            while pending:
                self.transfer.check_stop()
                relative_dir = pending.pop()
                directory = f"{root.vault}/{relative_dir}".rstrip("/")
                try:  # one trip to the disk per directory: what is there already
                    here = await self.state.on_disk(writer.list_dir, relative_dir)
                except local_tree.UnsafePath as exc:
                    self._refuse(f"{root.local}/{relative_dir}", exc)
                    continue
                listing = await _remote_listing(sftp, directory)
                for name in sorted(listing):
                    size, mtime, mode = listing[name]
                    relative = f"{relative_dir}/{name}".lstrip("/")
                    if stat.S_ISDIR(mode):
                        pending.append(relative)
                    elif stat.S_ISREG(mode) and not name.endswith(PART_SUFFIX):
                        have = here.get(name)
                        get = _Get(writer, relative, f"{directory}/{name}", size, mtime, fresh=have is None)
                        if not self._is_current(get, have):
                            yield get
                    # links the job made in the vault are not copied back: they could lead anywhere

    def _refuse(self, path: str, exc: local_tree.UnsafePath) -> None:
        log.warning("not copying back through a symbolic link", extra={"path": path, "error": str(exc)})
        self.state.report.refused += 1
        if len(self.state.report.not_copied) < NAMED_PATHS:
            self.state.report.not_copied.append(path)

    def _is_current(self, item: _Get, have: tuple[int, int, int] | None) -> bool:
        """Whether the pod already holds the vault's copy (same size and time); counted as done."""
        if have is None or not stat.S_ISREG(have[2]):
            return False
        if not staging.is_current(size=have[0], mtime=have[1], copy=(item.size, item.mtime)):
            return False
        self.state.report.skipped += 1
        self.state.meter.add(files=1, size=item.size)
        return True

    async def _get(self, sftp: asyncssh.SFTPClient, item: _Get) -> None:
        # Each trip to the disk's thread wakes the event loop: a file of one block makes one.
        offset = self.state.acked.get(item.local, 0)
        self.state.acked[item.local] = offset
        fd: int | None = None
        if offset == 0 and item.size <= CHUNK_BYTES:
            try:
                async with self.transfer.chunks.hold(item.size):
                    self.transfer.check_stop()
                    data = await _read_whole(sftp, item)
                    await self.state.on_disk(_write_whole, item, data)
            except local_tree.UnsafePath as exc:
                del self.state.acked[item.local]
                self._refuse(item.local, exc)
                return
            del self.state.acked[item.local]
            self.state.report.copied += 1
            self.state.report.copied_bytes += item.size
            self.state.meter.add(files=1, size=item.size)
            return
        try:
            reads: deque[tuple[int, int, asyncio.Task[str | bytes]]] = deque()
            try:
                async with sftp.open(item.vault, "rb", encoding=None) as src:
                    ahead = offset

                    async def ask_ahead() -> None:
                        # The size listed is read, no more (a read past the end is wasted requests);
                        # a block more only when a block's memory is free.
                        nonlocal ahead
                        while ahead < item.size and (not reads or _may_add(self.transfer.chunks, reads)):
                            length = min(CHUNK_BYTES, item.size - ahead)
                            await self.transfer.chunks.acquire(length)
                            reads.append((ahead, length, asyncio.ensure_future(src.read(length, ahead))))
                            ahead += length

                    while ahead < item.size or reads:
                        self.transfer.check_stop()
                        await ask_ahead()
                        at, length, read = reads.popleft()
                        try:
                            chunk = _as_bytes(await read)
                            if len(chunk) != length:
                                changed = "the vault's copy changed while it was read; it will be fetched again"
                                raise TransferFailed(f"{item.local}: {changed}")
                            # The next block is asked for before this one goes to the disk: the
                            # server keeps sending while the disk writes (it stalled for each write).
                            await ask_ahead()
                            fd = await self.state.on_disk(_write_part, item, fd, chunk, at)
                        finally:
                            self.transfer.chunks.release(length)
                        offset = at + len(chunk)
                        self.state.acked[item.local] = offset
                        self.state.meter.add(size=len(chunk))
            except BaseException:
                for _at, length, read in reads:
                    read.cancel()
                    self.transfer.chunks.release(length)
                if fd is not None:
                    await self.state.on_disk(os.close, fd)
                raise
            await self.state.on_disk(_finish_part, item, fd, offset)
        except local_tree.UnsafePath as exc:
            del self.state.acked[item.local]
            self._refuse(item.local, exc)
            return
        del self.state.acked[item.local]
        self.state.report.copied += 1
        self.state.report.copied_bytes += item.size
        self.state.meter.add(files=1)


async def _read_whole(sftp: asyncssh.SFTPClient, item: _Get) -> bytes:
    """A vault file of at most one block. One within a single read request (IN_PLACE_BYTES) is read
    and closed together, one round trip after the open; a larger one in asyncssh's parallel reads."""
    small = item.size <= IN_PLACE_BYTES
    src = await sftp.open(item.vault, "rb", encoding=None, block_size=0 if small else -1)
    if not small:
        async with src:
            return _as_bytes(await src.read(item.size, 0))
    if not item.size:
        await src.close()
        return b""
    data, _closed = await _pipelined(src.read(item.size, 0), src.close())
    return _as_bytes(cast(bytes, data))


def _write_part(item: _Get, fd: int | None, data: bytes, offset: int) -> int:
    """Write `data` at `offset` of the item's partial file, opened (and cut to `offset`) if `fd` is None."""
    if fd is None:
        fd = item.writer.open_part(item.relative, resume=offset > 0)
        os.ftruncate(fd, offset)
    try:
        os.pwrite(fd, data, offset)
    except OSError as exc:  # a full disk is no connection problem: it ends the copy-back, saying where
        os.close(fd)
        raise TransferFailed(f"{item.local} cannot be written: {exc.strerror}") from exc
    return fd


def _write_whole(item: _Get, data: bytes) -> None:
    """A file of one block, in one trip to the disk. New to the pod: written in place, the vault's
    time set last (a copy cut short never looks current, and no earlier version is lost). Else its
    partial file is written, checked and renamed into place."""
    if item.fresh and len(data) == item.size and _write_new(item, data):
        return
    fd = _write_part(item, None, data, 0) if data else None
    _finish_part(item, fd, len(data))


def _write_new(item: _Get, data: bytes) -> bool:
    """Write `data` as a file new to the pod; False (nothing written) when its name has been taken."""
    fd = item.writer.create_new(item.relative)
    if fd is None:
        return False
    try:
        if os.pwrite(fd, data, 0) != len(data):
            raise TransferFailed(f"{item.local}: the disk took part of it; it will be fetched again")
        os.utime(fd, (item.mtime, item.mtime))
    except OSError as exc:  # a full disk is no connection problem: it ends the copy-back, saying where
        raise TransferFailed(f"{item.local} cannot be written: {exc.strerror}") from exc
    finally:
        os.close(fd)
    return True


def _finish_part(item: _Get, fd: int | None, offset: int) -> None:
    """Close the partial file and rename it into place with the vault's time, if whole."""
    if fd is None:  # an empty file, or a resume that had nothing left to read
        fd = item.writer.open_part(item.relative, resume=offset > 0)
        os.ftruncate(fd, offset)
    try:
        written = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if written != item.size:
        item.writer.discard_part(item.relative)
        raise TransferFailed(
            f"{item.local}: {written} bytes arrived, the vault held {item.size} (the job still writing?);"
            " it will be fetched again"
        )
    item.writer.commit(item.relative, mtime=item.mtime)
