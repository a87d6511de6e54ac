"""What one vault transfer keeps across reconnects, and the pieces its uploads and downloads share:
the report, the progress meter, the bounded block memory, the pool of files in flight, pipelined
requests and a vault directory's listing. I/O only (asyncio and asyncssh).
"""

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, TextIO, TypeVar

import asyncssh

from entrypoint import vault_files
from entrypoint.local_tree import LocalFailure

T = TypeVar("T")
__all__ = ["LocalFailure"]


# One write or read of this size is split by asyncssh into parallel SFTP requests.
CHUNK_BYTES: Final = 1024 * 1024
# Blocks held in memory at once, over every file in flight: 6 x 1 MiB (more across a WAN, up to
# vault_files.MAX_BLOCKS, for one large file's blocks in flight). asyncssh copies a block a
# few times on its way (requests, packets, encryption): the runner's peak RSS stays under 100 MB with
# eight large files in flight (92 MB measured in the bench's mixed case; 71 MB with 4 x 1 MiB).
CHUNKS_IN_MEMORY: Final = 6
# A file's blocks in flight at once (when the block memory allows) until the round trip is measured
# (vault_files.transfer_depth: three near, far from six up with the round trip, where what is in
# flight sets the pace; on loopback two left the server waiting).
BLOCKS_PER_FILE: Final = 3
# Files moving at once: small files are a few round trips each, so they move side by side.
FILES_IN_FLIGHT: Final = 64
# An upload this small is one SFTP write request (OpenSSH takes up to 255 KiB), written in place.
IN_PLACE_BYTES: Final = 64 * 1024
PROGRESS_SECONDS: Final = 2.0
# How many paths a report names (the counts are always whole).
NAMED_PATHS: Final = 20


class TransferFailed(Exception):
    """A file could not be transferred or verified (the message names it)."""


class DiskError(Exception):
    """The pod's disk refused a call (`error`): the caller names the path. Never taken for a network
    failure (no reconnect can help)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.error = error
        self.errno = error.errno


class Stopped(Exception):
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
    # Outputs the copy-back could not place in the pod (a link on their way, a directory where the
    # vault has a file or the other way round, a name the volume refuses): they stay in the vault.
    refused: int = 0
    kept_in_vault: list[str] = field(default_factory=list)  # the first NAMED_PATHS refused, as vault paths
    error: str = ""
    failed_locally: bool = False  # `error` is the pod's side (LocalFailure), not the vault's
    stopped: bool = False

    @property
    def complete(self) -> bool:
        """Every file is in place: nothing failed, stopped or refused."""
        return not self.error and not self.stopped and not self.refused


class Meter:
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
        line = vault_files.format_progress(
            self.direction,
            done=self.bytes,
            total=max(self.totals.bytes, self.bytes),
            seconds=self.clock() - self.started,
            files_done=self.files,
            files=max(self.totals.files, self.files),
        )
        print(line, file=self.out, flush=True)


class BlockMemory:
    """The blocks held in memory at once: CHUNKS_IN_MEMORY, or more for a far vault (widen). A small
    file's block (at most IN_PLACE_BYTES) is not counted: FILES_IN_FLIGHT of them are 4 MiB, and
    counting them would let only CHUNKS_IN_MEMORY small files move at once."""

    def __init__(self) -> None:
        self.slots = asyncio.Semaphore(CHUNKS_IN_MEMORY)
        self.size = CHUNKS_IN_MEMORY

    def widen(self, size: int) -> None:
        """At least `size` blocks from now on. Never narrower: a reconnect may measure a nearer
        vault, and blocks held then would be counted against the smaller size."""
        for _ in range(size - self.size):
            self.slots.release()
        self.size = max(self.size, size)

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


@dataclass
class Pass:
    """What one operation keeps across reconnects."""

    report: Report
    meter: Meter
    # The pod's disk, one call at a time in one thread: a file created on a busy disk must not
    # stop the event loop (and every transfer in flight) while it waits.
    disk: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="staging-disk"))
    # Per file in flight: the bytes acknowledged so far (a resume continues there; only this runner's own).
    # Keyed by the file's path, size and time: a file that changed between two passes starts again.
    acked: dict[tuple[str, int, int], int] = field(default_factory=dict)
    failed_in_a_row: int = 0
    # Polled between blocks: leave what is done, report the rest as not copied.
    should_stop: Callable[[], bool] = lambda: False
    chunks: BlockMemory = field(default_factory=BlockMemory)

    # The SFTP sessions of the connection (each an SSH channel with a window of its own): a large
    # file's blocks go round them, and small files take turns; set per connection.
    lanes: list[asyncssh.SFTPClient] = field(default_factory=list)
    turn: int = 0
    # A file's blocks in flight at once (vault_files.transfer_depth, from the measured round trip).
    blocks_per_file: int = BLOCKS_PER_FILE

    def next_lane(self) -> asyncssh.SFTPClient:
        self.turn += 1
        return self.lanes[self.turn % len(self.lanes)]

    def takes_block(self, in_flight: deque[tuple[int, int, asyncio.Task[T]]]) -> bool:
        """Whether a file with blocks `in_flight` takes one more (see may_add)."""
        return may_add(self.chunks, in_flight, most=self.blocks_per_file)

    def resume_key(self, path: str, size: int, mtime: int) -> tuple[str, int, int]:
        """The file's key in `acked` (its offset set to where a resume starts: 0 for a new one); an
        earlier version's offset is dropped."""
        key = (path, size, mtime)
        for stale in [k for k in self.acked if k[0] == path and k != key]:
            del self.acked[stale]
        self.acked.setdefault(key, 0)
        return key

    def check_stop(self) -> None:
        if self.should_stop():
            raise Stopped

    def progress_mark(self) -> tuple[int, int]:
        return self.report.copied, self.report.copied_bytes + sum(self.acked.values())

    async def on_disk(self, call: Callable[..., T], *args: object, **kwargs: object) -> T:
        """`call` in the disk's thread; an OSError it raises comes back as a DiskError."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self.disk, functools.partial(call, *args, **kwargs))
        except OSError as exc:
            raise DiskError(exc) from exc


async def first_error(work: Awaitable[None]) -> None:
    """Run `work`; an exception group from its task group is raised as its first real error."""
    try:
        await work
    except BaseExceptionGroup as group:
        errors = [e for e in _leaves(group) if not isinstance(e, asyncio.CancelledError)]
        stopped = [e for e in errors if isinstance(e, Stopped)]
        raise (stopped or errors or [group])[0] from None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for error in group.exceptions:
        found += _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    return found


async def pool(items: AsyncIterator[T], handle: Callable[[T], Awaitable[None]]) -> None:
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


def may_add(chunks: BlockMemory, in_flight: deque[tuple[int, int, asyncio.Task[T]]], *, most: int) -> bool:
    """Whether a file with blocks `in_flight` takes one more: at most `most`, and only a
    block's memory that is free now (waiting for a second one could wait on a file waiting for us)."""
    return len(in_flight) < most and not chunks.locked()


def as_bytes(data: str | bytes) -> bytes:
    # Files are opened with encoding=None, so reads are bytes; asyncssh types them as AnyStr.
    if isinstance(data, str):
        raise TransferFailed("the SFTP file was opened in text mode")
    return data


async def pipelined(*requests: Awaitable[object]) -> list[object]:
    """SFTP requests sent at once (in this order) and awaited together: their results, or the
    first error once every one has its answer."""
    results = await asyncio.gather(*requests, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def remote_listing(sftp: asyncssh.SFTPClient, directory: str) -> dict[str, tuple[int, int, int]]:
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
