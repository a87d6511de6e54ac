"""The newest complete checkpoint a burst pod's remote job wrote, read from its account's vault (I/O
around gateway.checkpoints).

The pod is read from the API server (never a path from the caller): its UID must be the one asked
about (a replacement of the same name is another pod). Its Job's directory is reachable only once that
Job is found with the UID the pod's controller reference names, as for the pod's own SFTP sessions
(gateway.vault_server). Every path is checked as written and as the vault resolves it, so a link the
job made in its directory leads nowhere else; a directory is resolved again after its listing, and one
that changed meanwhile is refused (a job that swaps it for a link and back between the three requests
is the SFTP endpoint's known limit too: at worst names and times of files are shown to the controller).
One SSH connection per ask, closed after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import asyncssh

from gateway.accounts import Accounts, VaultAccess
from gateway.checkpoints import (
    CheckpointPlace,
    Entry,
    Kind,
    NoCheckpointPlace,
    answer,
    base_entries,
    checkpoint_place,
    newest,
)
from gateway.checkpoints import work_dir as choose_work_dir
from gateway.vault_scope import PathRefused, check_resolved, relative_to_root, split_path
from gateway.vault_server import granted_job_uid
from jarvice.checkpoint import FRESHNESS_SLACK_SECONDS

# The whole ask (connection, lease, listings): well inside the controller's read timeout (30 s).
ASK_SECONDS: Final = 20.0
MAX_LEASE_BYTES: Final = 4096
# A checkpoint directory holds a few checkpoints (the example keeps 3): a listing stops past this many
# entries, so one job's directory of millions of files costs the gateway (every tenant's) neither its
# memory nor its CPU at every homecoming round. Such a directory's newest is not known.
MAX_LISTED_ENTRIES: Final = 10_000
_SELF_AND_PARENT: Final = (b".", b"..", ".", "..")
HTTP_FORBIDDEN, HTTP_NOT_FOUND, HTTP_CONFLICT, HTTP_BAD_GATEWAY = 403, 404, 409, 502


class Unanswered(Exception):
    """The ask cannot be answered: `status` for the HTTP answer, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class PodReader(Protocol):
    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def job_uid(self, namespace: str, name: str) -> str | None: ...


Connect = Callable[[VaultAccess], Awaitable[asyncssh.SSHClientConnection]]


def _kind(attrs: asyncssh.SFTPAttrs) -> Kind:
    if attrs.type == asyncssh.FILEXFER_TYPE_REGULAR:
        return "file"
    return "directory" if attrs.type == asyncssh.FILEXFER_TYPE_DIRECTORY else "other"


def _entry(name: asyncssh.SFTPName) -> Entry:
    filename = name.filename
    text = filename.decode("utf-8", "surrogateescape") if isinstance(filename, bytes) else filename
    return Entry(text, _kind(name.attrs), None if name.attrs.mtime is None else float(name.attrs.mtime))


class _Vault:
    """One ask's SFTP session, every path checked against the pod's grant."""

    def __init__(self, sftp: asyncssh.SFTPClient, root: str, place: CheckpointPlace) -> None:
        self._sftp = sftp
        self._root = root
        self._place = place

    async def _resolved(self, path: str) -> bytes:
        """The vault's realpath of `path`, checked to stay in the pod's directories."""
        resolved = await self._sftp.realpath(path.encode("utf-8", "surrogateescape"))
        below = relative_to_root(resolved.decode("utf-8", "surrogateescape"), self._root)
        check_resolved(split_path(path), below, self._place.grant, passage_ok=False, how="full")
        return resolved

    async def _checked(self, path: str) -> bytes:
        await self._resolved(path)
        return path.encode("utf-8", "surrogateescape")

    async def read_lease(self) -> str | None:
        if self._place.lease is None:
            return None
        try:
            async with self._sftp.open(await self._checked(self._place.lease), "r", errors="replace") as lease:
                return await lease.read(MAX_LEASE_BYTES)
        except asyncssh.SFTPNoSuchFile:
            return None

    async def listing(self, path: str) -> list[Entry]:
        """The directory's entries; none when it does not exist (the program has not made it yet)."""
        entries: list[Entry] = []
        try:
            resolved = await self._resolved(path)
            async for name in self._sftp.scandir(path.encode("utf-8", "surrogateescape")):
                if name.filename in _SELF_AND_PARENT:
                    continue
                if len(entries) == MAX_LISTED_ENTRIES:
                    raise Unanswered(HTTP_CONFLICT, f"{path!r} holds more than {MAX_LISTED_ENTRIES} entries")
                entries.append(_entry(name))
            if await self._resolved(path) != resolved:  # swapped for a link meanwhile: what was listed is unknown
                raise PathRefused(f"{path!r} changed while it was listed")
        except asyncssh.SFTPNoSuchFile:
            return []
        return entries


class CheckpointReader:
    def __init__(
        self,
        kube: PodReader,
        accounts: Accounts,
        *,
        connect: Connect,
        wall_clock: Callable[[], float],
        ask_seconds: float = ASK_SECONDS,
    ) -> None:
        self._kube = kube
        self._accounts = accounts
        self._connect = connect
        self._wall_clock = wall_clock
        self._ask_seconds = ask_seconds

    async def newest(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        """The route's answer for the pod (gateway.checkpoints.answer); Unanswered says why not."""
        pod = await asyncio.to_thread(self._kube.get_pod, namespace, name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
            raise Unanswered(HTTP_NOT_FOUND, f"no pod {namespace}/{name} with UID {uid}")
        try:
            place = checkpoint_place(pod, job_uid=await granted_job_uid(self._kube.job_uid, namespace, pod))
        except NoCheckpointPlace as exc:
            raise Unanswered(HTTP_CONFLICT, str(exc)) from None
        account = self._accounts.for_namespace(namespace)
        if account is None or account.vault is None:
            raise Unanswered(HTTP_CONFLICT, f"no account of this cluster with a vault pays for namespace {namespace!r}")
        try:
            return await asyncio.wait_for(self._look(place, account.vault), self._ask_seconds)
        except PathRefused as exc:
            raise Unanswered(HTTP_FORBIDDEN, str(exc)) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise Unanswered(HTTP_BAD_GATEWAY, f"the vault of account {account.name} was not read: {reason}") from None

    async def _look(self, place: CheckpointPlace, access: VaultAccess) -> dict[str, Any]:
        connection = await self._connect(access)
        try:
            async with connection.start_sftp_client() as sftp:
                root = (await sftp.realpath(b".")).decode("utf-8", "surrogateescape")
                vault = _Vault(sftp, root, place)
                work = choose_work_dir(place, await vault.read_lease())
                base, *subdirectories = place.directories(work)
                listings = [("", base_entries(place, await vault.listing(base)))]
                for path in subdirectories:  # an index's own: `<index>/<file>`
                    listings.append((f"{path.rsplit('/', 1)[-1]}/", await vault.listing(path)))
        finally:
            connection.close()
        now = self._wall_clock()
        return answer(place, work, newest(listings, not_after=now + FRESHNESS_SLACK_SECONDS), now=now)
