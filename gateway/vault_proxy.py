"""One pod's SFTP session relayed to its account's vault, every path checked on the way (I/O).

Requests are read as packets and passed on in the order they came, as many in flight as the client
sends (the runner keeps many: a round trip per request would halve a transfer). A request naming a
path waits for its checks (gateway.sftp_requests, gateway.vault_scope): the path as written at once,
the path as the vault resolves it by a realpath on a second SFTP session of the same connection, its
directory's answer remembered until a request removes or renames something there. The checks of
many requests are asked together; the requests behind one wait for it, so the vault sees them in
their order. A request that changes nothing in the vault (a read-only open, a stat) goes at once
instead, with its checks: its answer is held until they pass, and if they fail a handle it opened is
closed unread and the pod gets the refusal. Answers come back untouched, as whole packets (the
gateway's own refusals go between them, and SFTP lets answers come in any order).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any, Final

import asyncssh

from gateway.sftp_requests import (
    CLOSE,
    FX_BAD_MESSAGE,
    FX_FAILURE,
    FX_NO_SUCH_FILE,
    FX_OP_UNSUPPORTED,
    FX_PERMISSION_DENIED,
    BadPacket,
    PathCheck,
    Request,
    close_packet,
    filter_version,
    handle_of,
    init_packet,
    parse_request,
    request_id_of,
    status_packet,
)
from gateway.vault_scope import PathRefused, VaultGrant, check_resolved, relative_to_root

log = logging.getLogger(__name__)

READ_CHUNK: Final = 256 * 1024
# Requests read ahead of the one the vault is waiting for: the client's pipelining, bounded.
MAX_QUEUED: Final = 4096
# ...and their bytes: a pod that sends large packets and reads no answers (the vault then reads
# nothing more) is held here, not in the gateway's memory that every pod's session shares.
MAX_QUEUED_BYTES: Final = 16 * 1024 * 1024
MAX_PACKET: Final = 1024 * 1024 + 64  # asyncssh and OpenSSH write at most 256 KiB blocks; room to spare
MAX_CACHED_DIRS: Final = 4096
# Early requests held for their checks at once: beyond, a request waits in the queue (which bounds
# what is read) for its check to be answered before it is sent, as one that may write does.
MAX_HELD: Final = MAX_QUEUED

Resolver = Callable[[str], Awaitable[str]]


class PacketStream:
    """Whole packets from an SSH stream (length, then body), read in large chunks."""

    def __init__(self, reader: asyncssh.SSHReader[bytes]) -> None:
        self._reader = reader
        self._buffer = bytearray()

    async def packets(self) -> list[bytes]:
        """The next whole packets (at least one); [] at the stream's end."""
        while True:
            packets = self._split()
            if packets:
                return packets
            chunk = await self._reader.read(READ_CHUNK)
            if not chunk:
                return []
            self._buffer += chunk

    def _split(self) -> list[bytes]:
        packets: list[bytes] = []
        offset = 0
        while len(self._buffer) - offset >= 4:
            (size,) = struct.unpack_from(">I", self._buffer, offset)
            if size > MAX_PACKET:
                raise BadPacket(f"an SFTP packet of {size} bytes")
            if len(self._buffer) - offset - 4 < size:
                break
            packets.append(bytes(self._buffer[offset : offset + 4 + size]))
            offset += 4 + size
        del self._buffer[:offset]
        return packets


class PathChecker:
    """A request's paths as the vault resolves them, checked against the pod's grant."""

    def __init__(self, grant: VaultGrant, resolve: Resolver, root: str) -> None:
        self._grant = grant
        self._resolve = resolve
        self._root = root
        self._dirs: dict[tuple[str, ...], tuple[str, ...]] = {}

    async def _resolved(self, parts: tuple[str, ...], *, cache: bool) -> tuple[str, ...]:
        if not parts:  # the root is the root: no round trip (the runner times a stat of it)
            return ()
        if cache and parts in self._dirs:
            return self._dirs[parts]
        resolved = relative_to_root(await self._resolve("/".join(parts) or "."), self._root)
        if cache:
            if len(self._dirs) >= MAX_CACHED_DIRS:
                self._dirs.clear()
            self._dirs[parts] = resolved
        return resolved

    async def check(self, check: PathCheck) -> None:
        if check.how == "full":
            resolved = await self._resolved(check.parts, cache=False)
        else:
            resolved = await self._resolved(check.parts[:-1], cache=True)
        check_resolved(check.parts, resolved, self._grant, passage_ok=check.passage_ok, how=check.how)

    def forget(self, changed: tuple[str, ...]) -> None:
        """A path removed or renamed: what was resolved at or below it may be another thing now."""
        size = len(changed)
        for parts in [p for p in self._dirs if p[:size] == changed]:
            del self._dirs[parts]

    def sent(self, request: Request) -> None:
        """`request` goes to the vault: forget what it may change. One that may put a link on a path
        (a symlink, a rename, a hard link) empties the cache: a directory resolved before may lead
        through that path by way of other links, which its own name does not show."""
        if request.barrier:
            self._dirs.clear()
        for changed in request.changes:
            self.forget(changed)


async def _verdict(request: Request, checker: PathChecker, after: list[asyncio.Future[Any]]) -> bytes | None:
    """None: pass the request on; else the refusal to answer with. `after`: what its checks wait
    for: the answer of the last request before it that may put a link on a path (checked before it
    ran, a path could be one thing at the check and a link when the request runs), and for a request
    that may change the vault, the checks of the early requests before it (the vault ran those at
    once: checked after a change, their paths could lead elsewhere than where the vault went)."""
    if after:
        await asyncio.wait(after)  # waits, never cancels: another request's verdict is not this one's
    try:
        for check in request.checks:
            await checker.check(check)
    except PathRefused as exc:
        return status_packet(request.id, FX_PERMISSION_DENIED, str(exc))
    except asyncssh.SFTPError as exc:  # the vault could not resolve it: the request would fail alike
        return status_packet(request.id, exc.code if exc.code else FX_NO_SUCH_FILE, exc.reason)
    return None


class VaultProxy:
    """Relay one SFTP session: client (the pod) <-> vault, for the pod's `grant`."""

    def __init__(
        self,
        grant: VaultGrant,
        *,
        client: tuple[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]],
        vault: tuple[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]],
        resolve: Resolver,
        root: str,
        client_swaps: bool,
        vault_swaps: bool,
    ) -> None:
        self._grant = grant
        self._client_in, self._client_out = PacketStream(client[0]), client[1]
        self._vault_in, self._vault_out = PacketStream(vault[0]), vault[1]
        self._resolve = resolve
        self._root = root  # the vault's answer for ".": where the session's relative paths start
        self._client_swaps, self._vault_swaps = client_swaps, vault_swaps
        # (request, its verdict, the bytes it came as)
        self._queue: asyncio.Queue[tuple[Request | None, asyncio.Future[bytes | None] | bytes | None, int]] = (
            asyncio.Queue(MAX_QUEUED)
        )
        self._queued_bytes = 0
        self._room = asyncio.Event()  # set: the queue's bytes went below MAX_QUEUED_BYTES
        # Requests that may put a link on a path (SYMLINK, RENAME), by id: answered, the checks after
        # them may run. The latest is what every later check waits for.
        self._barriers: dict[int, asyncio.Future[None]] = {}
        self._barrier: asyncio.Future[None] | None = None
        # Requests on their way to the vault (or to the gateway's refusal), by id: an early request
        # is held by its id, so it goes early only when no other request has that id, and a request
        # with the id of one held is refused (SFTP ids are unique among a client's open requests).
        self._in_flight: dict[int, int] = {}
        self._held: dict[int, asyncio.Future[bytes | None]] = {}  # an early request's verdict, by id
        # Done once every early request held so far is checked: what a request that may change the
        # vault waits for (one future, not each of them: a wait per held request would cost their square).
        self._early_checked: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._early_checked.set_result(None)
        self._closing: dict[int, bytes] = {}  # the gateway's CLOSE of a refused handle: the refusal, by id
        self._settling: set[asyncio.Task[None]] = set()
        # The handles the vault gave this client and it has not closed: a request naming another is
        # refused. A vault numbers its handles, so a pod could otherwise name the handle of an early
        # open the gateway is about to close (a path through a link out) before it is closed.
        self._handles: set[bytes] = set()

    async def run(self) -> None:
        """Relay until either side ends."""
        early = await self._handshake()
        if early is None:
            return
        checker = PathChecker(self._grant, self._resolve, self._root)
        tasks = [
            asyncio.create_task(self._requests(checker, early)),
            asyncio.create_task(self._forward(checker)),
            asyncio.create_task(self._answers()),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            tasks += self._settling
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _handshake(self) -> list[bytes] | None:
        """INIT and VERSION; the requests that came with the INIT (None: a side ended)."""
        first = await self._client_in.packets()
        if not first:
            return None
        self._vault_out.write(init_packet())  # version 3, whatever the client asked: the version read here
        answer = await self._vault_in.packets()
        if not answer:
            return None
        if len(answer) > 1:  # nothing but VERSION may come before a request
            raise BadPacket("the vault answered SFTP's INIT with more than VERSION")
        self._client_out.write(filter_version(answer[0]))
        return first[1:]

    def _parsed(
        self, packet: bytes, checker: PathChecker
    ) -> tuple[Request | None, asyncio.Future[bytes | None] | bytes | None]:
        try:
            request = parse_request(packet, self._grant, client_swaps=self._client_swaps, vault_swaps=self._vault_swaps)
        except PathRefused as exc:
            return None, status_packet(request_id_of(packet), FX_PERMISSION_DENIED, str(exc))
        except BadPacket as exc:
            code = FX_OP_UNSUPPORTED if len(packet) >= 9 else FX_BAD_MESSAGE
            return None, status_packet(request_id_of(packet), code, str(exc))
        if request.id in self._held or request.id in self._closing:
            return None, status_packet(request.id, FX_BAD_MESSAGE, "a request id already in use")
        if request.handle is not None:
            if request.handle not in self._handles:
                return None, status_packet(request.id, FX_FAILURE, "not a handle this session was given")
            if request.kind == CLOSE:  # the vault may give the same handle to a later open
                self._handles.discard(request.handle)
        in_use = self._in_flight.get(request.id, 0)
        self._in_flight[request.id] = in_use + 1
        after: list[asyncio.Future[Any]] = [self._barrier] if self._barrier is not None else []
        free = not in_use and len(self._held) < MAX_HELD and (self._barrier is None or self._barrier.done())
        if request.checks and request.early and free:
            held = self._held[request.id] = asyncio.ensure_future(_verdict(request, checker, after))
            # asyncio.wait waits, never cancels: neither is the next request's own.
            self._early_checked = asyncio.ensure_future(asyncio.wait((self._early_checked, held)))
            return request, None
        if not self._early_checked.done():
            after.append(self._early_checked)
        verdict = asyncio.ensure_future(_verdict(request, checker, after)) if request.checks else None
        if request.barrier:
            self._barrier = self._barriers[request.id] = asyncio.get_running_loop().create_future()
        return request, verdict

    async def _enqueue(self, packet: bytes, checker: PathChecker) -> None:
        self._queued_bytes += len(packet)
        await self._queue.put((*self._parsed(packet, checker), len(packet)))

    async def _requests(self, checker: PathChecker, early: list[bytes]) -> None:
        """`early`: the requests of a client that did not wait for VERSION, queued as the forwarder
        takes them (more than the queue holds would wait for a forwarder not started yet)."""
        packets = early
        while packets or (packets := await self._client_in.packets()):
            for packet in packets:
                await self._enqueue(packet, checker)
            while self._queued_bytes >= MAX_QUEUED_BYTES:  # read no more until the vault took some
                self._room.clear()
                await self._room.wait()
            packets = []
        await self._queue.put((None, None, 0))

    async def _forward(self, checker: PathChecker) -> None:
        pending = bytearray()
        while True:
            if self._queue.empty() and pending:
                self._vault_out.write(bytes(pending))
                pending.clear()
                await self._vault_out.drain()
            request, verdict, size = await self._queue.get()
            self._queued_bytes -= size
            if self._queued_bytes < MAX_QUEUED_BYTES:
                self._room.set()
            if isinstance(verdict, asyncio.Future) and not verdict.done() and pending:
                # What is held goes first: the check may wait for its answer (a link's creation).
                self._vault_out.write(bytes(pending))
                pending.clear()
            if request is None and verdict is None:
                if pending:
                    self._vault_out.write(bytes(pending))
                self._vault_out.write_eof()
                return
            refusal = verdict if isinstance(verdict, bytes) else (await verdict if verdict is not None else None)
            if refusal is not None or request is None:
                if refusal is not None:  # as the vault's answers: a client that reads none is not buffered for
                    self._client_out.write(refusal)
                    await self._client_out.drain()
                if request is not None:
                    self._answered(request.id)
                    self._release(request.id)
                continue
            pending += request.packet
            checker.sent(request)
            if len(pending) >= READ_CHUNK:
                self._vault_out.write(bytes(pending))
                pending.clear()
                await self._vault_out.drain()

    def _answered(self, request_id: int) -> None:
        barrier = self._barriers.pop(request_id, None)
        if barrier is not None and not barrier.done():
            barrier.set_result(None)

    def _release(self, request_id: int) -> None:
        left = self._in_flight.pop(request_id, 1) - 1
        if left:
            self._in_flight[request_id] = left

    async def _answers(self) -> None:
        while packets := await self._vault_in.packets():
            passed = [out for packet in packets if (out := self._outcome(packet)) is not None]
            if passed:
                self._client_out.write(passed[0] if len(passed) == 1 else b"".join(passed))
            await self._client_out.drain()

    def _outcome(self, answer: bytes) -> bytes | None:
        """What the client gets for a vault's answer (None: nothing yet)."""
        request_id = request_id_of(answer)
        if self._barriers:
            self._answered(request_id)
        refusal = self._closing.pop(request_id, None)
        if refusal is not None:  # the answer to the gateway's own CLOSE: the early request's refusal now
            self._release(request_id)
            return refusal
        verdict = self._held.get(request_id)
        if verdict is None:
            self._release(request_id)
            return self._given(answer)
        if verdict.done():
            return self._settled(request_id, verdict, answer)
        task = asyncio.ensure_future(self._settle_later(request_id, verdict, answer))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)
        return None

    def _given(self, answer: bytes) -> bytes:
        """An answer on its way to the client, a handle it carries noted as the client's."""
        handle = handle_of(answer)
        if handle is not None:
            self._handles.add(handle)
        return answer

    async def _settle_later(self, request_id: int, verdict: asyncio.Future[bytes | None], answer: bytes) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(verdict)
        out = self._settled(request_id, verdict, answer)
        if out is not None:
            self._client_out.write(out)

    def _settled(self, request_id: int, verdict: asyncio.Future[bytes | None], answer: bytes) -> bytes | None:
        """An early request's answer, its checks done: passed, or refused (a handle closed first)."""
        del self._held[request_id]
        if verdict.cancelled() or verdict.exception() is not None:
            refusal: bytes | None = status_packet(request_id, FX_FAILURE, "the path could not be checked")
        else:
            refusal = verdict.result()
        if refusal is None:
            self._release(request_id)
            return self._given(answer)
        handle = handle_of(answer)
        if handle is None:
            self._release(request_id)
            return refusal
        self._closing[request_id] = refusal  # its id stays in use until the CLOSE is answered
        self._vault_out.write(close_packet(request_id, handle))
        return None
