"""Downloads from the vault (copy-back): each stage-out path's vault copy walked one directory at a
time, what the pod does not hold written beneath the stage-out path, never through a link. I/O only."""

import asyncio
import contextlib
import errno
import logging
import os
import stat
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Final, cast

import asyncssh

from entrypoint import local_tree, vault_files
from entrypoint.transfer_pass import (
    CHUNK_BYTES,
    IN_PLACE_BYTES,
    NAMED_PATHS,
    DiskError,
    DownloadRoot,
    LocalFailure,
    Pass,
    TransferFailed,
    as_bytes,
    pipelined,
    pool,
    remote_listing,
)

log = logging.getLogger(__name__)

# Why an output is refused when the pod holds the other kind of entry at its name.
_A_DIRECTORY: Final = OSError(errno.EISDIR, "the pod holds a directory where the vault holds a file")
_NOT_A_DIRECTORY: Final = OSError(errno.ENOTDIR, "the pod holds a file where the vault holds a directory")


def _link_refusal(path: str) -> local_tree.UnsafePath:
    return local_tree.UnsafePath(f"{path} is a symbolic link; nothing is written through it")


# The pod's volume cannot take more (or at all): the copy-back ends, naming where.
_VOLUME_ERRORS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


@dataclass(frozen=True, slots=True)
class Get:
    writer: local_tree.BeneathWriter
    relative: str  # below the writer's root
    vault: str
    size: int
    mtime: int
    mode: int  # the vault copy's permissions (the pod's copy gets its rwx bits)
    fresh: bool = False  # nothing had its name in the pod when listed: written in place if still so

    @property
    def local(self) -> str:
        return f"{self.writer.root}/{self.relative}"


class Downloader:
    def __init__(self, state: Pass) -> None:
        self.state = state

    async def run(self, sftp: asyncssh.SFTPClient, roots: Sequence[DownloadRoot]) -> None:
        writers: list[local_tree.BeneathWriter] = []
        report = self.state.report
        report.skipped = report.refused = 0  # each pass finds them again
        report.not_copied.clear()
        report.kept_in_vault.clear()
        try:
            await pool(self._todo(sftp, roots, writers), self._get)
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
            except (local_tree.UnsafePath, DiskError) as exc:
                self._refuse(root.local, root.vault, exc)
                continue
            writers.append(writer)
            if stat.S_ISREG(mode):
                name = os.path.basename(root.local)
                try:
                    have = (await self.state.on_disk(writer.list_dir, "")).get(name)
                except DiskError as exc:
                    self._refuse(root.local, root.vault, exc)
                    continue
                size, mtime = attrs.size or 0, int(attrs.mtime or 0)
                get = Get(writer, name, root.vault, size, mtime, attrs.permissions or 0, fresh=have is None)
                if self._placeable(get, have) and not self._is_current(get, have):
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
                except (local_tree.UnsafePath, DiskError) as exc:
                    self._refuse(f"{root.local}/{relative_dir}", directory, exc)
                    continue
                listing = await remote_listing(sftp, directory)
                for name in sorted(listing):
                    size, mtime, mode = listing[name]
                    relative = f"{relative_dir}/{name}".lstrip("/")
                    have = here.get(name)
                    if stat.S_ISDIR(mode):
                        if have is None or stat.S_ISDIR(have[2]):
                            pending.append(relative)
                            continue
                        local = f"{root.local}/{relative}"
                        why = _link_refusal(local) if stat.S_ISLNK(have[2]) else _NOT_A_DIRECTORY
                        self._refuse(local, f"{directory}/{name}", why)
                    elif stat.S_ISREG(mode) and not vault_files.is_part_name(name):
                        get = Get(writer, relative, f"{directory}/{name}", size, mtime, mode, fresh=have is None)
                        if self._placeable(get, have) and not self._is_current(get, have):
                            yield get
                    # links the job made in the vault are not copied back: they could lead anywhere

    def _placeable(self, item: Get, have: tuple[int, int, int] | None) -> bool:
        """Whether the pod has no directory where the vault has this file (refused if it has)."""
        if have is not None and stat.S_ISDIR(have[2]):
            self._refuse(item.local, item.vault, _A_DIRECTORY)
            return False
        return True

    def _refuse(self, path: str, vault: str, exc: Exception) -> None:
        """An output the pod cannot take: named in the log and the report, left in the vault."""
        if isinstance(exc, local_tree.UnsafePath):
            log.warning("not copying back through a symbolic link", extra={"path": path, "vault_path": vault})
        else:
            log.warning(
                "an output cannot be placed in the pod; it stays in the vault",
                extra={"path": path, "vault_path": vault, "error": str(exc)},
            )
        report = self.state.report
        report.refused += 1
        if len(report.not_copied) < NAMED_PATHS:
            report.not_copied.append(path)
            report.kept_in_vault.append(vault)

    def _is_current(self, item: Get, have: tuple[int, int, int] | None) -> bool:
        """Whether the pod already holds the vault's copy (same size, time and permissions); counted as done."""
        if have is None or not stat.S_ISREG(have[2]):
            return False
        if not vault_files.is_current(size=have[0], mtime=have[1], copy=(item.size, item.mtime)):
            return False
        if vault_files.file_mode(have[2]) != vault_files.file_mode(item.mode):
            return False
        self.state.report.skipped += 1
        self.state.meter.add(files=1, size=item.size)
        return True

    async def _get(self, item: Get) -> None:
        key = self.state.resume_key(item.local, item.size, item.mtime)
        try:
            if self.state.acked[key] == 0 and item.size <= CHUNK_BYTES:
                await self._get_whole(self.state.next_lane(), item)
            else:
                await self._get_blocks(self.state.lanes, item, key)
        except (local_tree.UnsafePath, DiskError, _Unsettled) as exc:
            del self.state.acked[key]
            if isinstance(exc, _Unsettled):  # its partial file is of a version that is gone
                await self.state.on_disk(item.writer.discard_part, item.relative)
            if isinstance(exc, DiskError) and exc.errno in _VOLUME_ERRORS:
                raise LocalFailure(f"{item.local} cannot be written: {exc}") from exc
            self._refuse(item.local, item.vault, exc)
            return
        del self.state.acked[key]
        self.state.report.copied += 1
        self.state.report.copied_bytes += item.size
        self.state.meter.add(files=1, size=item.size if item.size <= CHUNK_BYTES else 0)

    async def _get_whole(self, sftp: asyncssh.SFTPClient, item: Get) -> None:
        """A file of one block: read (and looked at again), then written in one trip to the disk."""
        async with self.state.chunks.hold(item.size):
            self.state.check_stop()
            data = await _read_whole(sftp, item)
            await self.state.on_disk(write_whole, item, data)

    async def _get_blocks(self, lanes: Sequence[asyncssh.SFTPClient], item: Get, key: tuple[str, int, int]) -> None:
        """A file of more than one block, its blocks read round the lanes (block k on lane k mod n)."""
        offset = self.state.acked[key]
        fd: int | None = None
        reads: deque[tuple[int, int, asyncio.Task[str | bytes]]] = deque()
        handles: dict[int, asyncssh.SFTPClientFile] = {}
        try:
            async with lanes[0].open(item.vault, "rb", encoding=None) as src:
                handles[0] = src
                ahead = offset

                async def ask_ahead() -> None:
                    # The size listed is read, no more (a read past the end is wasted requests);
                    # a block more only when a block's memory is free.
                    nonlocal ahead
                    while ahead < item.size and (not reads or self.state.takes_block(reads)):
                        length = min(CHUNK_BYTES, item.size - ahead)
                        await self.state.chunks.acquire(length)
                        lane = (ahead // CHUNK_BYTES) % len(lanes)
                        if lane not in handles:
                            handles[lane] = await lanes[lane].open(item.vault, "rb", encoding=None)
                        reads.append((ahead, length, asyncio.ensure_future(handles[lane].read(length, ahead))))
                        ahead += length

                while ahead < item.size or reads:
                    self.state.check_stop()
                    await ask_ahead()
                    at, length, read = reads.popleft()
                    try:
                        chunk = as_bytes(await read)
                        if len(chunk) != length:
                            raise _Unsettled(f"{item.local}: the vault's copy changed while it was read")
                        # The next block is asked for before this one goes to the disk: the
                        # server keeps sending while the disk writes (it stalled for each write).
                        await ask_ahead()
                        fd = await self.state.on_disk(_write_part, item, fd, chunk, at)
                    finally:
                        self.state.chunks.release(length)
                    offset = at + len(chunk)
                    self.state.acked[key] = offset
                    self.state.meter.add(size=len(chunk))
                _check_settled(item, await src.stat())
        except BaseException:
            for _at, length, read in reads:
                read.cancel()
                self.state.chunks.release(length)
            if fd is not None:
                await self.state.on_disk(os.close, fd)
            raise
        finally:
            for lane in [lane for lane in handles if lane]:
                with contextlib.suppress(asyncssh.Error, OSError):
                    await handles[lane].close()
        await self.state.on_disk(_finish_part, item, fd, offset)


class _Unsettled(Exception):
    """The vault's copy changed while it was read (the job still writing): the pod's file is left as
    it is, the vault's stays."""


def _check_settled(item: Get, attrs: asyncssh.SFTPAttrs) -> None:
    """The second look: the vault's copy, once read, still has the size and time it was listed with."""
    if (attrs.size, int(attrs.mtime or 0)) != (item.size, item.mtime):
        raise _Unsettled(f"{item.local}: the vault's copy changed while it was read")


async def _read_whole(sftp: asyncssh.SFTPClient, item: Get) -> bytes:
    """A vault file of at most one block, looked at again once read (see _check_settled). One
    within a single read request (IN_PLACE_BYTES) is read, looked at and closed together, one round
    trip after the open; a larger one in asyncssh's parallel reads."""
    small = item.size <= IN_PLACE_BYTES
    src = await sftp.open(item.vault, "rb", encoding=None, block_size=0 if small else -1)
    if not small:
        async with src:
            data = as_bytes(await src.read(item.size, 0))
            _check_settled(item, await src.stat())
            return data
    reads = [src.read(item.size, 0)] if item.size else []
    *got, attrs, _closed = await pipelined(*reads, src.stat(), src.close())
    _check_settled(item, cast(asyncssh.SFTPAttrs, attrs))
    return as_bytes(cast(bytes, got[0])) if got else b""


def _write_part(item: Get, fd: int | None, data: bytes, offset: int) -> int:
    """Write `data` at `offset` of the item's partial file, opened (and cut to `offset`) if `fd` is None."""
    if fd is None:
        fd = item.writer.open_part(item.relative, resume=offset > 0)
        os.ftruncate(fd, offset)
    try:
        os.pwrite(fd, data, offset)
    except OSError:
        os.close(fd)
        raise
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
    """Write `data` as a file new to the pod; False (nothing written) when its name has been taken.
    A write that fails removes the file: nothing truncated is left under its real name."""
    fd = item.writer.create_new(item.relative)
    if fd is None:
        return False
    try:
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(errno.ENOSPC, "the disk took part of it")
        os.fchmod(fd, vault_files.file_mode(item.mode))
        os.utime(fd, (item.mtime, item.mtime))
    except OSError:
        item.writer.remove(item.relative)
        raise
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
        os.fchmod(fd, vault_files.file_mode(item.mode))
    finally:
        os.close(fd)
    if written != item.size:
        item.writer.discard_part(item.relative)
        raise TransferFailed(
            f"{item.local}: {written} bytes arrived, the vault held {item.size} (the job still writing?);"
            " it will be fetched again"
        )
    try:
        item.writer.commit(item.relative, mtime=item.mtime)
    except OSError:
        item.writer.discard_part(item.relative)
        raise
