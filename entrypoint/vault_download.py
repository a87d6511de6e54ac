"""Downloads from the vault (copy-back): each stage-out path's vault copy walked one directory at a
time, what the pod does not hold written beneath the stage-out path, never through a link. I/O only."""

import asyncio
import logging
import os
import stat
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import cast

import asyncssh

from entrypoint import local_tree, staging
from entrypoint.transfer_pass import (
    CHUNK_BYTES,
    IN_PLACE_BYTES,
    NAMED_PATHS,
    PART_SUFFIX,
    DownloadRoot,
    Pass,
    TransferFailed,
    as_bytes,
    may_add,
    pipelined,
    pool,
    remote_listing,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Get:
    writer: local_tree.BeneathWriter
    relative: str  # below the writer's root
    vault: str
    size: int
    mtime: int
    fresh: bool = False  # nothing had its name in the pod when listed: written in place if still so

    @property
    def local(self) -> str:
        return f"{self.writer.root}/{self.relative}"


class Downloader:
    def __init__(self, state: Pass) -> None:
        self.state = state

    async def run(self, sftp: asyncssh.SFTPClient, roots: Sequence[DownloadRoot]) -> None:
        writers: list[local_tree.BeneathWriter] = []
        self.state.report.skipped = 0
        try:
            await pool(self._todo(sftp, roots, writers), lambda item: self._get(sftp, item))
        finally:
            # After every disk call queued before (one thread, in order): no descriptor is in use.
            for writer in writers:
                await self.state.on_disk(writer.close)

    async def _todo(
        self, sftp: asyncssh.SFTPClient, roots: Sequence[DownloadRoot], writers: list[local_tree.BeneathWriter]
    ) -> AsyncIterator[Get]:
        for root in roots:
            self.state.check_stop()
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
                get = Get(writer, name, root.vault, attrs.size or 0, int(attrs.mtime or 0), fresh=have is None)
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
                self.state.check_stop()
                relative_dir = pending.pop()
                directory = f"{root.vault}/{relative_dir}".rstrip("/")
                try:  # one trip to the disk per directory: what is there already
                    here = await self.state.on_disk(writer.list_dir, relative_dir)
                except local_tree.UnsafePath as exc:
                    self._refuse(f"{root.local}/{relative_dir}", exc)
                    continue
                listing = await remote_listing(sftp, directory)
                for name in sorted(listing):
                    size, mtime, mode = listing[name]
                    relative = f"{relative_dir}/{name}".lstrip("/")
                    if stat.S_ISDIR(mode):
                        pending.append(relative)
                    elif stat.S_ISREG(mode) and not name.endswith(PART_SUFFIX):
                        have = here.get(name)
                        get = Get(writer, relative, f"{directory}/{name}", size, mtime, fresh=have is None)
                        if not self._is_current(get, have):
                            yield get
                    # links the job made in the vault are not copied back: they could lead anywhere

    def _refuse(self, path: str, exc: local_tree.UnsafePath) -> None:
        log.warning("not copying back through a symbolic link", extra={"path": path, "error": str(exc)})
        self.state.report.refused += 1
        if len(self.state.report.not_copied) < NAMED_PATHS:
            self.state.report.not_copied.append(path)

    def _is_current(self, item: Get, have: tuple[int, int, int] | None) -> bool:
        """Whether the pod already holds the vault's copy (same size and time); counted as done."""
        if have is None or not stat.S_ISREG(have[2]):
            return False
        if not staging.is_current(size=have[0], mtime=have[1], copy=(item.size, item.mtime)):
            return False
        self.state.report.skipped += 1
        self.state.meter.add(files=1, size=item.size)
        return True

    async def _get(self, sftp: asyncssh.SFTPClient, item: Get) -> None:
        # Each trip to the disk's thread wakes the event loop: a file of one block makes one.
        offset = self.state.acked.get(item.local, 0)
        self.state.acked[item.local] = offset
        fd: int | None = None
        if offset == 0 and item.size <= CHUNK_BYTES:
            try:
                async with self.state.chunks.hold(item.size):
                    self.state.check_stop()
                    data = await _read_whole(sftp, item)
                    await self.state.on_disk(write_whole, item, data)
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
                        while ahead < item.size and (not reads or may_add(self.state.chunks, reads)):
                            length = min(CHUNK_BYTES, item.size - ahead)
                            await self.state.chunks.acquire(length)
                            reads.append((ahead, length, asyncio.ensure_future(src.read(length, ahead))))
                            ahead += length

                    while ahead < item.size or reads:
                        self.state.check_stop()
                        await ask_ahead()
                        at, length, read = reads.popleft()
                        try:
                            chunk = as_bytes(await read)
                            if len(chunk) != length:
                                changed = "the vault's copy changed while it was read; it will be fetched again"
                                raise TransferFailed(f"{item.local}: {changed}")
                            # The next block is asked for before this one goes to the disk: the
                            # server keeps sending while the disk writes (it stalled for each write).
                            await ask_ahead()
                            fd = await self.state.on_disk(_write_part, item, fd, chunk, at)
                        finally:
                            self.state.chunks.release(length)
                        offset = at + len(chunk)
                        self.state.acked[item.local] = offset
                        self.state.meter.add(size=len(chunk))
            except BaseException:
                for _at, length, read in reads:
                    read.cancel()
                    self.state.chunks.release(length)
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


async def _read_whole(sftp: asyncssh.SFTPClient, item: Get) -> bytes:
    """A vault file of at most one block. One within a single read request (IN_PLACE_BYTES) is read
    and closed together, one round trip after the open; a larger one in asyncssh's parallel reads."""
    small = item.size <= IN_PLACE_BYTES
    src = await sftp.open(item.vault, "rb", encoding=None, block_size=0 if small else -1)
    if not small:
        async with src:
            return as_bytes(await src.read(item.size, 0))
    if not item.size:
        await src.close()
        return b""
    data, _closed = await pipelined(src.read(item.size, 0), src.close())
    return as_bytes(cast(bytes, data))


def _write_part(item: Get, fd: int | None, data: bytes, offset: int) -> int:
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


def write_whole(item: Get, data: bytes) -> None:
    """A file of one block, in one trip to the disk. New to the pod: written in place, the vault's
    time set last (a copy cut short never looks current, and no earlier version is lost). Else its
    partial file is written, checked and renamed into place."""
    if item.fresh and len(data) == item.size and _write_new(item, data):
        return
    fd = _write_part(item, None, data, 0) if data else None
    _finish_part(item, fd, len(data))


def _write_new(item: Get, data: bytes) -> bool:
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


def _finish_part(item: Get, fd: int | None, offset: int) -> None:
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
