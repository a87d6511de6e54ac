"""Uploads to the vault (stage-in): the staged trees walked one directory at a time, what is not
current in the vault sent, FILES_IN_FLIGHT files at a time. I/O only."""

import asyncio
import contextlib
import errno
import logging
import os
import posixpath
import stat
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

import asyncssh

from entrypoint import local_tree, vault_files
from entrypoint.transfer_pass import (
    CHUNK_BYTES,
    IN_PLACE_BYTES,
    DiskError,
    LocalFailure,
    Pass,
    TransferFailed,
    UploadRoot,
    pipelined,
    pool,
    remote_listing,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Put:
    local: str  # the path as the job sees it (for reports)
    real: str  # where it is read
    vault: str
    size: int
    mtime: int
    mode: int  # the permissions the vault's copy gets
    identity: tuple[int, int]  # (device, inode) as walked: a file swapped in since is not read
    new: bool = False  # the vault had nothing at its path when its directory was listed


class Uploader:
    def __init__(self, state: Pass, never_staged: frozenset[str]) -> None:
        self.state, self.never_staged = state, never_staged

    async def run(self, sftp: asyncssh.SFTPClient, roots: Sequence[UploadRoot]) -> None:
        self.state.report.skipped = 0
        await pool(self._todo(sftp, roots), self._put)

    async def _todo(self, sftp: asyncssh.SFTPClient, roots: Sequence[UploadRoot]) -> AsyncIterator[Put]:
        """What is not current in the vault, one directory at a time (links and directories made here)."""
        for root in roots:
            self.state.check_stop()
            if root.empty:
                await sftp.makedirs(root.vault, exist_ok=True)
                continue
            single = local_tree.root_file(root.local, root.real)
            if single is not None:
                parent = posixpath.dirname(root.vault)
                await sftp.makedirs(parent, exist_ok=True)
                have = await remote_listing(sftp, parent)
                put = self._wanted(single, root.local, root.real, root.vault, have.get(posixpath.basename(root.vault)))
                if put is not None:
                    yield put
                continue
            for directory in local_tree.walk_tree(root.local, root.real):
                self.state.check_stop()
                relative = directory.path[len(root.local) :]
                target = root.vault + relative
                await _make_dir(sftp, target)
                have = await remote_listing(sftp, target)
                for entry in directory.entries:  # the pod's file where the vault has a directory
                    if entry.kind == "file" and (kind := have.get(entry.name)) and stat.S_ISDIR(kind[2]):
                        await sftp.rmtree(f"{target}/{entry.name}")
                        del have[entry.name]
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
    ) -> Iterable[Put]:
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
    ) -> Put | None:
        """The upload of one file, None when it is never staged or its vault copy is current."""
        if real in self.never_staged:
            log.warning("not staging the JARVICE credentials", extra={"path": local})
            return None
        if vault_files.is_part_name(entry.name):
            log.warning("not staging a partial file left by an interrupted copy", extra={"path": local})
            return None
        mtime = vault_files.sftp_time(entry.mtime_ns)
        mode = vault_files.file_mode(entry.mode)
        if (
            copy is not None
            and stat.S_ISREG(copy[2])
            and vault_files.is_current(size=entry.size, mtime=mtime, copy=(copy[0], copy[1]))
            and vault_files.file_mode(copy[2]) == mode
        ):
            self.state.report.skipped += 1
            self.state.meter.add(files=1, size=entry.size)
            return None
        return Put(local, real, vault, entry.size, mtime, mode, (entry.device, entry.inode), new=copy is None)

    async def _put(self, item: Put) -> None:
        try:
            if item.size <= IN_PLACE_BYTES:
                await self._put_small(self.state.next_lane(), item)
            else:
                await self._put_blocks(self.state.lanes, item)
        except asyncssh.SFTPError as exc:
            if isinstance(exc, asyncssh.SFTPConnectionLost):
                raise
            raise TransferFailed(f"{item.local}: the vault refused it: {exc.reason}") from exc

    async def _put_blocks(self, lanes: Sequence[asyncssh.SFTPClient], item: Put) -> None:
        # A larger file goes through a partial file of the runner's own beside it, created
        # exclusively (a stale one is removed first) and renamed only once whole. Its blocks go
        # round the lanes (block k on lane k mod n), each lane's handle opened when first used.
        sftp = lanes[0]
        head, name = posixpath.split(item.vault)
        target = posixpath.join(head, vault_files.part_name(name))
        key = self.state.resume_key(item.local, item.size, item.mtime)
        offset = self.state.acked[key]
        try:
            fd = await self.state.on_disk(local_tree.open_for_reading, item.real, item.identity)
        except DiskError as exc:
            del self.state.acked[key]
            _vanished(item, exc)
            return
        writes: deque[tuple[int, int, asyncio.Task[int]]] = deque()
        handles: dict[int, asyncssh.SFTPClientFile] = {}
        try:
            async with await _open_part(sftp, target, resume=offset > 0) as dst:
                handles[0] = dst
                ahead = offset
                # The next block is read and sent while one is in flight, when a block's memory is
                # free; what is acknowledged in order is what a resume may skip.
                while ahead < item.size or writes:
                    self.state.check_stop()
                    while ahead < item.size and (not writes or self.state.takes_block(writes)):
                        length = min(CHUNK_BYTES, item.size - ahead)
                        await self.state.chunks.acquire(length)
                        try:
                            chunk = await self._read(item, fd, length, ahead)
                        except BaseException:
                            self.state.chunks.release(length)
                            raise
                        lane = (ahead // CHUNK_BYTES) % len(lanes)
                        if lane not in handles:
                            handles[lane] = await lanes[lane].open(target, "r+b", encoding=None)
                        writes.append((ahead, length, asyncio.ensure_future(handles[lane].write(chunk, ahead))))
                        ahead += length
                    at, length, write = writes.popleft()
                    try:
                        await write
                    finally:
                        self.state.chunks.release(length)
                    offset = at + length
                    self.state.acked[key] = offset
                    self.state.meter.add(size=length)
                for lane in [lane for lane in handles if lane]:  # their writes are all acknowledged
                    await handles.pop(lane).close()
                await dst.setstat(_attrs(item))
        except BaseException:
            for _at, length, write in writes:
                write.cancel()
                self.state.chunks.release(length)
            raise
        finally:
            for lane in [lane for lane in handles if lane]:
                with contextlib.suppress(asyncssh.Error, OSError):
                    await handles[lane].close()
            await self.state.on_disk(os.close, fd)
        await sftp.posix_rename(target, item.vault)
        del self.state.acked[key]
        self.state.report.copied += 1
        self.state.report.copied_bytes += item.size
        self.state.meter.add(files=1)

    async def _read(self, item: Put, fd: int, length: int, at: int) -> bytes:
        try:
            chunk = await self.state.on_disk(os.pread, fd, length, at)
        except DiskError as exc:
            raise LocalFailure(f"{item.local} cannot be read: {exc}") from exc
        if len(chunk) != length:
            raise TransferFailed(
                f"{item.local}: {at + len(chunk)} of {item.size} bytes could be read (the file"
                " changed while it was sent?); it will be sent again"
            )
        return chunk

    async def _put_small(self, sftp: asyncssh.SFTPClient, item: Put) -> None:
        # A file sent in one write request is written in place: the request lands whole or not at
        # all, and the copy gets its source's time only after it, so a copy cut short is never
        # current. Read in one trip to the disk; the write, the time and the close go out together
        # (the server does a handle's requests in order), one round trip after the open.
        try:
            data = await self.state.on_disk(local_tree.read_small, item.real, item.size, item.identity)
        except DiskError as exc:
            _vanished(item, exc)
            return
        if len(data) != item.size:
            raise TransferFailed(
                f"{item.local}: {len(data)} of {item.size} bytes could be read (the file changed while it"
                " was sent?); it will be sent again"
            )
        self.state.check_stop()
        dst = await open_small(sftp, item)
        writes = [dst.write(data, 0)] if data else []
        await pipelined(*writes, dst.setstat(_attrs(item)), dst.close())
        self.state.report.copied += 1
        self.state.report.copied_bytes += item.size
        self.state.meter.add(files=1, size=item.size)


async def open_small(sftp: asyncssh.SFTPClient, item: Put) -> asyncssh.SFTPClientFile:
    """A file the vault did not have is created exclusively: it follows no link, so a confined vault
    (the gateway) checks only its directory, where an open that may truncate what is there waits for
    the file's own path to be resolved (a round trip to the vault per file). Something made at its
    name since the listing: opened as any other. block_size=0: one request per call, without
    asyncssh's parallel-I/O tasks."""
    if item.new:
        with contextlib.suppress(asyncssh.SFTPFailure):  # it exists now (EEXIST is SFTP v3's FAILURE)
            return await sftp.open(item.vault, "xb", encoding=None, block_size=0)
    return await sftp.open(item.vault, "wb", encoding=None, block_size=0)


def _attrs(item: Put) -> asyncssh.SFTPAttrs:
    """What a whole copy gets last: the source's permissions and time (one request)."""
    return asyncssh.SFTPAttrs(permissions=item.mode, atime=item.mtime, mtime=item.mtime)


async def _open_part(sftp: asyncssh.SFTPClient, target: str, *, resume: bool) -> asyncssh.SFTPClientFile:
    """The vault's partial file: this runner's own, resumed, or created exclusively after a stale
    one is removed (the removal and the creation sent together)."""
    if resume:
        return await sftp.open(target, "r+b", encoding=None)
    removed, opened = await asyncio.gather(
        sftp.remove(target), sftp.open(target, "xb", encoding=None), return_exceptions=True
    )
    if isinstance(removed, BaseException) and not isinstance(removed, asyncssh.SFTPNoSuchFile):
        raise removed
    if isinstance(opened, BaseException):
        raise opened
    return opened


async def _make_dir(sftp: asyncssh.SFTPClient, path: str) -> None:
    """The vault directory `path` and its parents; what the vault holds in the way (a file or a link
    an earlier stage-in left where the pod now has a directory) is removed."""
    try:
        await sftp.makedirs(path, exist_ok=True)
        return
    except asyncssh.SFTPFailure:
        pass
    head = ""
    for name in path.split("/"):
        head = f"{head}/{name}" if head else name
        try:
            attrs = await sftp.lstat(head)
        except asyncssh.SFTPNoSuchFile:
            break
        if not stat.S_ISDIR(attrs.permissions or 0):
            await sftp.remove(head)
            break
    await sftp.makedirs(path, exist_ok=True)


def _vanished(item: Put, exc: DiskError) -> None:
    """A file that could not be opened: gone, a link or another file now (logged, not staged), or
    one the runner may not read (the stage-in ends, naming it)."""
    if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ESTALE):
        raise LocalFailure(f"{item.local} cannot be read: {exc}") from exc
    # Removed, or replaced by a link or another file, since the walk: not data to stage now.
    log.warning("not staging a file that changed into a link or vanished", extra={"path": item.local})


async def _put_link(sftp: asyncssh.SFTPClient, vault: str, target: str, have: tuple[int, int, int] | None) -> None:
    if have is not None:
        if stat.S_ISLNK(have[2]) and await sftp.readlink(vault) == target:
            return
        if stat.S_ISDIR(have[2]):
            await sftp.rmtree(vault)
        else:
            await sftp.remove(vault)
    await sftp.symlink(target, vault)
