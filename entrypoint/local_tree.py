"""The pod's side of staging: reading the staged trees without following a link out of them, and
writing copied-back files without writing through a link or outside the stage-out path. I/O only.

- **Reading (stage-in).** A tree is walked one directory at a time (`os.scandir`, never following a
  link), so a million files take the memory of one directory's listing. A symbolic link whose target
  (as the kernel resolves it) lies inside the staged tree is staged as a link; any other is skipped
  and named in the log. A staged path that is itself a link is followed only when it stays inside
  the directory that holds it (how the kubelet lays out configMap and Secret files); a file is
  opened with O_NOFOLLOW.
- **Writing (copy-back).** The stage-out path is opened from `/` one component at a time with
  O_NOFOLLOW, and every file below it is reached by `openat`-style calls (`dir_fd=`) on each
  component, so a link anywhere on the way (planted in the volume, or swapped in meanwhile) makes
  that file fail instead of redirecting the write.
"""

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from entrypoint import staging, vault_files

log = logging.getLogger(__name__)

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Directory descriptors kept open while copying back (a directory's files arrive together).
_OPEN_DIRS: Final = 64

EntryKind = Literal["file", "link"]


@dataclass(frozen=True, slots=True)
class LocalEntry:
    name: str
    kind: EntryKind
    size: int = 0
    mtime_ns: int = 0
    target: str = ""  # a link's text
    mode: int = 0
    device: int = 0  # with the inode: the file as walked (one swapped in since is not read)
    inode: int = 0


@dataclass(frozen=True, slots=True)
class LocalDir:
    """One directory of a staged tree: `path` as the job sees it, `real` where it is read."""

    path: str
    real: str
    entries: tuple[LocalEntry, ...]


class UnsafePath(Exception):
    """A path the runner will not read or write through (a link out of its tree); the message says which."""


class LocalFailure(Exception):
    """A pod-side failure that ends a transfer (a staged directory or file the runner may not read,
    a full volume): the message names the path. No reconnect to the vault can help."""


def resolve_root(path: str) -> str | None:
    """Where a staged path is read: itself, or, when it is a link, its target if that stays in the
    directory holding the link; None (logged) when it leads elsewhere. Raises FileNotFoundError."""
    if not os.path.islink(path):
        if not os.path.lexists(path):
            raise FileNotFoundError(path)
        return os.path.realpath(path)  # links among its parents are the container's own layout
    parent = os.path.dirname(path)
    real = os.path.realpath(path)
    if parent == "/" or not staging.is_inside(real, os.path.realpath(parent)):
        log.warning("not staging a link that leads out of its directory", extra={"path": path})
        return None
    if not os.path.exists(real):
        raise FileNotFoundError(path)
    return real


def root_file(path: str, real: str) -> LocalEntry | None:
    """The entry for a staged path that is a regular file; None for a directory."""
    try:
        info = os.stat(real, follow_symlinks=False)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise LocalFailure(f"{path} cannot be read: {exc.strerror}") from exc
    if stat.S_ISDIR(info.st_mode):
        return None
    if not stat.S_ISREG(info.st_mode):
        raise FileNotFoundError(path)
    return _file_entry(os.path.basename(path), info)


def _file_entry(name: str, info: os.stat_result) -> LocalEntry:
    return LocalEntry(
        name, "file", info.st_size, info.st_mtime_ns, mode=info.st_mode, device=info.st_dev, inode=info.st_ino
    )


def walk_tree(path: str, real: str) -> Iterator[LocalDir]:
    """Each directory of the staged tree `path` (read at `real`), parents first, with its regular
    files and the links that stay inside the tree; sockets, fifos and devices are not data. A
    directory is opened without following a link and must be the one listed: one swapped for a
    link (or another directory) during the walk is not followed. Raises LocalFailure for a
    directory the runner may not read."""
    tree = os.path.realpath(real)
    pending: list[tuple[str, str, tuple[int, int] | None]] = [(path, real, None)]
    while pending:
        shown, actual, identity = pending.pop()
        listed = _list_dir(path, tree, shown, actual, identity)
        if listed is None:
            continue
        entries, subdirs = listed
        yield LocalDir(shown, actual, tuple(entries))
        pending.extend(sorted(subdirs, reverse=True))


def _list_dir(
    path: str, tree: str, shown: str, actual: str, identity: tuple[int, int] | None
) -> tuple[list[LocalEntry], list[tuple[str, str, tuple[int, int] | None]]] | None:
    """One directory's files and links, and its subdirectories; None when it is no longer the one listed."""
    try:
        fd = os.open(actual, _DIR_FLAGS)
    except OSError as exc:
        if identity is not None and exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            log.warning("not staging a directory that changed into a link or vanished", extra={"path": shown})
            return None
        raise LocalFailure(f"{shown} cannot be read: {exc.strerror}") from exc
    entries: list[LocalEntry] = []
    subdirs: list[tuple[str, str, tuple[int, int] | None]] = []
    try:
        info = os.fstat(fd)
        if identity is not None and (info.st_dev, info.st_ino) != identity:
            log.warning("not staging a directory that changed into a link or vanished", extra={"path": shown})
            return None
        with os.scandir(fd) as listing:
            for item in listing:
                item_path = os.path.join(actual, item.name)
                if item.is_symlink():
                    if staging.is_inside(os.path.realpath(item_path), tree):
                        entries.append(LocalEntry(item.name, "link", target=os.readlink(item.name, dir_fd=fd)))
                    else:
                        log.warning(
                            "not staging a link that leads out of the staged path",
                            extra={"path": f"{shown}/{item.name}", "staged_path": path},
                        )
                elif item.is_dir(follow_symlinks=False):
                    child = item.stat(follow_symlinks=False)
                    subdirs.append((f"{shown}/{item.name}", item_path, (child.st_dev, child.st_ino)))
                elif item.is_file(follow_symlinks=False):
                    entries.append(_file_entry(item.name, item.stat(follow_symlinks=False)))
    except OSError as exc:
        raise LocalFailure(f"{shown} cannot be read: {exc.strerror}") from exc
    finally:
        os.close(fd)
    entries.sort(key=lambda e: e.name)
    return entries, subdirs


def open_for_reading(path: str, identity: tuple[int, int] | None = None) -> int:
    """A staged file's descriptor; a link swapped in since the walk is refused (ELOOP), and so is
    another file put at its name (ESTALE) when `identity` (device, inode) says which was walked."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    if identity is not None and identity != (0, 0):
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != identity:
            os.close(fd)
            raise OSError(errno.ESTALE, "not the file walked", path)
    return fd


def read_small(path: str, size: int, identity: tuple[int, int] | None = None) -> bytes:
    """The first `size` bytes of a small staged file, in one trip (opened as open_for_reading does)."""
    fd = open_for_reading(path, identity)
    try:
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


# --- copy-back ------------------------------------------------------------------------------------


def open_dir_from_root(path: str) -> int:
    """A descriptor of the directory `path`, made where missing, reached from `/` one component at
    a time without following a link. Raises UnsafePath when a component is a link or not a directory."""
    fd = os.open("/", _DIR_FLAGS)
    for name in [part for part in path.split("/") if part]:
        fd = _step(fd, name, path)  # closes the parent, also when it raises
    return fd


def _step(parent: int, name: str, whole: str) -> int:
    """The child directory `name` of `parent` (made if missing); closes `parent`."""
    try:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(
                f"{whole}: {name} is a symbolic link or not a directory; nothing is written through it"
            ) from exc
        raise
    finally:
        os.close(parent)


class BeneathWriter:
    """Writes files under one stage-out directory, never through a link (see the module docstring)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.root_fd = open_dir_from_root(root)
        self.dirs: dict[str, int] = {}

    def close(self) -> None:
        for fd in self.dirs.values():
            os.close(fd)
        self.dirs.clear()
        os.close(self.root_fd)

    def dir_fd(self, relative_dir: str) -> int:
        """The descriptor of `relative_dir` (below the root, made where missing)."""
        if not relative_dir:
            return self.root_fd
        known = self.dirs.get(relative_dir)
        if known is not None:
            return known
        fd = os.dup(self.root_fd)
        for name in relative_dir.split("/"):
            if name in ("", ".", ".."):
                os.close(fd)
                raise UnsafePath(f"{self.root}/{relative_dir}: not a plain relative path")
            fd = _step(fd, name, f"{self.root}/{relative_dir}")
        if len(self.dirs) >= _OPEN_DIRS:
            os.close(self.dirs.pop(next(iter(self.dirs))))
        self.dirs[relative_dir] = fd
        return fd

    def list_dir(self, relative_dir: str) -> dict[str, tuple[int, int, int]]:
        """What `relative_dir` (made where missing) holds: name -> (size, mtime in seconds, mode),
        links not followed."""
        found: dict[str, tuple[int, int, int]] = {}
        with os.scandir(self.dir_fd(relative_dir)) as listing:
            for item in listing:
                info = item.stat(follow_symlinks=False)
                found[item.name] = (info.st_size, info.st_mtime_ns // 1_000_000_000, info.st_mode)
        return found

    def stat(self, relative: str) -> os.stat_result | None:
        """The file at `relative` as it is (a link is not followed); None when absent."""
        head, _, name = relative.rpartition("/")
        try:
            return os.stat(name, dir_fd=self.dir_fd(head), follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open_part(self, relative: str, *, resume: bool) -> int:
        """The partial file beside `relative` for writing: the existing one to resume, else one
        created exclusively (a stale one is removed first, a link there is never followed)."""
        head, _, name = relative.rpartition("/")
        part, parent = vault_files.part_name(name), self.dir_fd(head)
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            if resume:
                return os.open(part, flags, dir_fd=parent)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part, dir_fd=parent)
            return os.open(part, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(f"{self.root}/{head}/{part} is a symbolic link") from exc
            raise

    def create_new(self, relative: str) -> int | None:
        """A new file at `relative` for writing; None when the name is taken by anything (O_EXCL:
        a link there is neither followed nor replaced; the caller goes through a partial file)."""
        head, _, name = relative.rpartition("/")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(name, flags, 0o644, dir_fd=self.dir_fd(head))
        except FileExistsError:
            return None

    def commit(self, relative: str, *, mtime: float | None) -> None:
        """Rename the verified partial file into place (a link there is replaced, never followed)."""
        head, _, name = relative.rpartition("/")
        parent = self.dir_fd(head)
        part = vault_files.part_name(name)
        if mtime is not None:
            os.utime(part, (mtime, mtime), dir_fd=parent, follow_symlinks=False)
        os.replace(part, name, src_dir_fd=parent, dst_dir_fd=parent)

    def discard_part(self, relative: str) -> None:
        head, _, name = relative.rpartition("/")
        with contextlib.suppress(OSError):
            os.unlink(vault_files.part_name(name), dir_fd=self.dir_fd(head))

    def remove(self, relative: str) -> None:
        """Remove the file at `relative` (a copy that failed half-way), never following a link."""
        head, _, name = relative.rpartition("/")
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.dir_fd(head))
