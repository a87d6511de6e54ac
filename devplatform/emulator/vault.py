"""Emulated JARVICE vaults: a directory per account and vault, an SFTP server, `/jarvice/vault`,
and each job's `/data`.

- **Storage.** `<root>/<username>/<vault name>/`. The SFTP server (asyncssh; user = JARVICE
  username, password = API key, as JARVICE's own clients log in) serves the account's default vault
  (DEFAULT_VAULT), the one a job gets when its submit names no vault.
- **Listing.** `/jarvice/vault?vault=&path=&details=&sort=`: JARVICE's answer shape (a list of
  `[name, size, mtime]`, directories with a trailing `/`, not recursive).
- **Jobs.** With `private_root` (the emulator runs as root), each job runs in a private mount
  namespace (`unshare --mount`) chrooted into a tmpfs root that shows the host's directories through
  overlays (see _PRIVATE_ROOT_SCRIPT), with the vault bound at `/data`. So the staging prelude's links
  (`/workspace/data`, `/etc/train`) are made in the job's own root, never on the dev machine, and
  vanish with the job; only directories with mounts below them (here /root, /mnt) and /proc, /sys,
  /dev are the host's own. JARVICE runs each job in a container of its image instead.
- **Object vaults.** A vault of kind "object" is mounted as an overlay (the vault below, a scratch
  directory above): the job's writes reach the vault only when it ends normally (COMPLETED, COMPLETED
  WITH ERROR, or a shutdown), never after a terminate or the walltime, as JARVICE documents for
  object storage. Deletions in the job are not written back (the emulator's simplification).
- **Faults.** `SftpFaults` below, set by `POST /_emulator/vault-faults`: the next SFTP sessions are cut
  after that many bytes read or written (or, with `stall`, stop answering with the connection kept
  open), so a runner's resume and its stall detection can be tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import asyncssh

VaultKind = Literal["filesystem", "object"]
DEFAULT_VAULT: Final = "drop.jarvice.com"
VAULT_MOUNT: Final = "/data"


@dataclass
class VaultConfig:
    root: Path
    kinds: dict[str, VaultKind] = field(default_factory=lambda: {DEFAULT_VAULT: "filesystem"})
    sftp_host: str = "127.0.0.1"
    sftp_port: int = 0  # 0 picks a free port
    # Jobs in a private mount namespace with the vault at /data (needs root; see the module docstring).
    private_root: bool = True


def vault_dir(config: VaultConfig, *, username: str, name: str) -> Path:
    if "/" in name or name in ("", ".", "..") or "/" in username or username in ("", ".", ".."):
        raise ValueError(f"not a vault name: {name!r}")
    path = config.root / username / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def parse_vault_kinds(items: list[str]) -> dict[str, VaultKind]:
    """`NAME=KIND` options (KIND filesystem or object) -> {name: kind}; the default vault always exists."""
    kinds: dict[str, VaultKind] = {DEFAULT_VAULT: "filesystem"}
    for item in items:
        name, sep, kind = item.partition("=")
        if not sep or not name or "/" in name or kind not in ("filesystem", "object"):
            raise ValueError(f"--vault {item!r}: expected NAME=filesystem or NAME=object")
        kinds[name] = "object" if kind == "object" else "filesystem"
    return kinds


# --- /jarvice/vault ---------------------------------------------------------------------------


def list_vault(directory: Path, path: str, *, details: bool, sort: str) -> list[list[Any]] | None:
    """JARVICE's listing of one directory of a vault; None when `path` is no directory in it."""
    target = (directory / path.lstrip("/")).resolve()
    if not target.is_relative_to(directory.resolve()) or not target.is_dir():
        return None
    rows: list[list[Any]] = []
    for entry in os.scandir(target):
        info = entry.stat(follow_symlinks=False)
        is_dir = stat.S_ISDIR(info.st_mode)
        name = entry.name + ("/" if is_dir else "")
        rows.append([name, info.st_size if details else 0, int(info.st_mtime) if details else 0])
    key = {"n": 0, "s": 1, "m": 2}.get(sort.lower(), 0)
    rows.sort(key=lambda row: row[key], reverse=sort.isupper())
    return rows


# --- jobs: a private root with the vault at /data -----------------------------------------------

# Run as `unshare --mount --propagation private -- bash -c SCRIPT bash ROOT DATA [UPPER WORK] -- ARGV`.
# The job's root is a tmpfs. Each top-level directory of the host is, in it:
# - a link, copied (merged /usr: /bin -> usr/bin);
# - empty on the host (e.g. /srv): the job's own, empty directory;
# - /proc, /sys, /dev, or one with mounts below it (e.g. /root here): bound recursively, writes reach
#   the host (the only place they do);
# - otherwise an overlay with the host's directory below and a tmpfs above: the job reads the host's
#   files (its cwd, the AppDef's executables) and whatever it writes (a staged path's link under /etc)
#   stays its own and vanishes with it.
# The job then runs chrooted, in the same cwd.
_PRIVATE_ROOT_SCRIPT: Final = r"""set -eu
root=$1 data=$2 upper=$3 work=$4; shift 5
mount -t tmpfs -o mode=0755 nimbix-job-root "$root"
layers=$root/.nimbix-layers
mkdir -p "$layers" && mount -t tmpfs nimbix-job-layers "$layers"
has_mounts_below() { awk -v d="$1/" 'index($5, d) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; }
for top in /*; do
  name=${top#/}
  if [ -L "$top" ]; then cp -P -- "$top" "$root/$name"
  elif [ "$top" = /data ] || [ ! -d "$top" ]; then :
  elif [ -z "$(ls -A -- "$top" 2>/dev/null)" ]; then mkdir -p -- "$root/$name"
  elif [ "$top" = /proc ] || [ "$top" = /sys ] || [ "$top" = /dev ] || has_mounts_below "$top"; then
    mkdir -p -- "$root/$name"; mount --rbind -- "$top" "$root/$name"
  else
    mkdir -p -- "$root/$name" "$layers/$name/up" "$layers/$name/work"
    mount -t overlay "nimbix-job-$name" -o "lowerdir=$top,upperdir=$layers/$name/up,workdir=$layers/$name/work" \
      "$root/$name"
  fi
done
mkdir -p -- "$root/data"
if [ -n "$upper" ]; then
  mount -t overlay nimbix-object-vault -o "lowerdir=$data,upperdir=$upper,workdir=$work" "$root/data"
else
  mount --bind -- "$data" "$root/data"
fi
exec chroot -- "$root" /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$PWD" "$@"
"""


@dataclass(frozen=True, slots=True)
class JobVault:
    directory: Path  # the vault's directory on the host
    kind: VaultKind
    scratch: Path  # the job's root mount point, and the object vault's overlay dirs


def prepare_job_vault(config: VaultConfig, *, username: str, submission: Mapping[str, Any], workdir: Path) -> JobVault:
    requested = submission.get("vault")
    name = requested.get("name") if isinstance(requested, Mapping) else None
    name = name if isinstance(name, str) and name else DEFAULT_VAULT
    kind = config.kinds.get(name)
    if kind is None:
        # A vault the emulator does not know: an empty one, as an "ephemeral" vault would be.
        directory, kind = workdir / "ephemeral-vault", "filesystem"
        directory.mkdir(parents=True, exist_ok=True)
    else:
        directory = vault_dir(config, username=username, name=name)
    scratch = workdir / "vault-scratch"
    for part in ("root", "upper", "work"):
        (scratch / part).mkdir(parents=True, exist_ok=True)
    return JobVault(directory=directory, kind=kind, scratch=scratch)


def wrap_argv(job_vault: JobVault, argv: list[str]) -> list[str]:
    """`argv` run in the job's private root (see _PRIVATE_ROOT_SCRIPT)."""
    upper, work = ("", "")
    if job_vault.kind == "object":
        upper, work = str(job_vault.scratch / "upper"), str(job_vault.scratch / "work")
    return [
        "unshare", "--mount", "--propagation", "private", "--",
        "bash", "-c", _PRIVATE_ROOT_SCRIPT, "bash",
        str(job_vault.scratch / "root"), str(job_vault.directory), upper, work, "--", *argv,
    ]  # fmt: skip


def write_back(job_vault: JobVault) -> int:
    """An object vault after a normal end: the files the job wrote (the overlay's upper directory)
    copied into the vault. Returns how many files were written back."""
    if job_vault.kind != "object":
        return 0
    upper = job_vault.scratch / "upper"
    count = 0
    for directory, _dirs, names in os.walk(upper):
        relative = Path(directory).relative_to(upper)
        for name in names:
            source = Path(directory) / name
            if not source.is_file() or source.is_symlink():
                continue  # whiteouts (deletions) and links are not written back
            target = job_vault.directory / relative / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            count += 1
    return count


def discard_scratch(job_vault: JobVault) -> None:
    shutil.rmtree(job_vault.scratch, ignore_errors=True)


# --- the SFTP server ----------------------------------------------------------------------------


# How often a stalled session's request looks whether its client has gone.
_STALL_POLL_SECONDS: Final = 0.05


@dataclass
class SftpFaults:
    """Cut the next `sessions` SFTP sessions after `after_bytes` bytes read or written in each; with
    `stall`, leave them open and answer no request more (a vault that hangs, its TCP connection alive)."""

    after_bytes: int = 0
    sessions: int = 0
    cut: int = 0  # sessions cut (or stalled) so far
    stall: bool = False


class _Server(asyncssh.SSHServer):
    def __init__(self, users: Mapping[str, str], connections: set[asyncssh.SSHServerConnection]) -> None:
        self.users = users
        self._connections = connections
        self._connection: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._connection = conn
        self._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connection is not None:
            self._connections.discard(self._connection)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return True

    def validate_password(self, username: str, password: str) -> bool:
        expected = self.users.get(username)
        return expected is not None and secrets.compare_digest(expected, password)


def _sftp_factory(
    config: VaultConfig, faults: SftpFaults
) -> Callable[[asyncssh.SSHServerChannel[bytes]], asyncssh.SFTPServer]:
    class VaultSFTP(asyncssh.SFTPServer):
        def __init__(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
            username = str(chan.get_extra_info("username"))
            super().__init__(chan, chroot=str(vault_dir(config, username=username, name=DEFAULT_VAULT)).encode())
            self.moved = 0
            self.cut_after = faults.after_bytes if faults.sessions > 0 and faults.after_bytes > 0 else 0
            self.stall = faults.stall
            if self.cut_after:
                faults.sessions -= 1

        def readlink(self, path: bytes) -> bytes:
            """The link's text as stored, as OpenSSH's sftp-server answers. asyncssh's own, chrooted,
            resolves a relative target against this process's directory and answers "no such file"."""
            text = os.readlink(self.map_path(path))
            return self.reverse_map_path(text) if text.startswith(b"/") else text

        async def _count(self, size: int) -> None:
            if self.stall and self.moved >= self.cut_after > 0:
                while not self.channel.is_closing():  # no answer until the client goes
                    await asyncio.sleep(_STALL_POLL_SECONDS)
                raise asyncssh.SFTPConnectionLost("the client went away from a stalled session")
            self.moved += size
            if self.cut_after and self.moved >= self.cut_after:
                faults.cut += 1
                if self.stall:
                    return  # this request is answered; none after it
                self.cut_after = 0
                self.channel.get_connection().abort()

        async def read(self, file_obj: object, offset: int, size: int) -> bytes:
            data = super().read(file_obj, offset, size)
            if inspect.isawaitable(data):
                data = await data
            assert isinstance(data, bytes)
            await self._count(len(data))
            return data

        async def write(self, file_obj: object, offset: int, data: bytes) -> int:
            written = super().write(file_obj, offset, data)
            if inspect.isawaitable(written):
                written = await written
            await self._count(len(data))
            return int(written)

    return VaultSFTP


@dataclass
class SftpServer:
    acceptor: asyncssh.SSHAcceptor
    port: int
    host_key: str  # the public host key, as a known_hosts entry's key part
    # Open sessions: closed with the server, so none outlives its event loop with a socket still open.
    connections: set[asyncssh.SSHServerConnection]

    def close(self) -> None:
        self.acceptor.close()
        for conn in list(self.connections):
            conn.close()


async def start_sftp(config: VaultConfig, *, users: Mapping[str, str], faults: SftpFaults) -> SftpServer:
    key = asyncssh.generate_private_key("ssh-ed25519")
    connections: set[asyncssh.SSHServerConnection] = set()
    acceptor = await asyncssh.listen(
        config.sftp_host,
        config.sftp_port,
        server_host_keys=[key],
        server_factory=lambda: _Server(users, connections),
        sftp_factory=_sftp_factory(config, faults),
        allow_scp=False,
    )
    port = acceptor.get_port()
    public = key.export_public_key("openssh").decode().strip()
    return SftpServer(acceptor=acceptor, port=port, host_key=public, connections=connections)


def known_hosts_line(server: SftpServer, host: str) -> str:
    """A known_hosts line for the runner (NIMBIX_BURST_VAULT_KNOWN_HOSTS): `[host]:port key`."""
    return f"[{host}]:{server.port} {server.host_key}\n"


async def stop_sftp(server: SftpServer | None) -> None:
    if server is not None:
        open_sessions = list(server.connections)
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.acceptor.wait_closed(), timeout=5)
        for conn in open_sessions:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), timeout=5)
