"""The vault's SFTP session, with the requests of one event-loop turn written to its channel at once,
and its requests and answers counted so a vault that stops answering is noticed. I/O only.

asyncssh's SFTP client writes each request to the channel on its own, and the channel makes each
write an SSH packet of its own (encrypted, logged, and preceded by an SSH_MSG_IGNORE packet): a
small file's open, write, time and close cost eight packets. Held until the loop's next turn, the
requests of every file in flight leave as one write, which the channel cuts into as few packets as
its packet size allows; the server reads an SFTP stream, not packets, so nothing else changes.
Order is kept, and nothing waits longer than the loop's turn.
"""

import asyncio
from collections.abc import Callable

import asyncssh
from asyncssh import sftp as asyncssh_sftp
from asyncssh.channel import SSHChannel

from jarvice.batched_socket import TurnBatch

# A request this large (a large file's block) is written at once: joined, it would be copied for nothing
# (a 1 GiB upload took half as long again).
LARGE_REQUEST_BYTES = 64 * 1024
# The SFTP version asyncssh's own start_sftp_client asks for by default (OpenSSH speaks 3).
SFTP_VERSION = asyncssh_sftp.MIN_SFTP_VERSION


class Activity:
    """Requests sent and answers received on one SFTP session (each request has one answer), and
    since when an answer has been awaited with none arriving: a stalled vault's measure."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.sent = 0
        self.received = 0
        self.waiting_since: float | None = None  # None: no request is unanswered

    def request_sent(self) -> None:
        self.sent += 1
        if self.waiting_since is None:
            self.waiting_since = self.clock()

    def answer_received(self) -> None:
        self.received += 1
        self.waiting_since = self.clock() if self.received < self.sent else None

    def silent_for(self) -> float:
        """How long requests have waited with no answer at all (0 when none waits)."""
        return 0.0 if self.waiting_since is None else self.clock() - self.waiting_since


class _CountingReader:
    """The SFTP client's reader: asyncssh reads each packet as its 4-byte length, then its body."""

    def __init__(self, inner: "asyncssh.SSHReader[bytes]", activity: Activity) -> None:
        self._inner = inner
        self._activity = activity
        self._body_next = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def readexactly(self, n: int) -> bytes:
        data = await self._inner.readexactly(n)
        if self._body_next:
            self._activity.answer_received()
        self._body_next = not self._body_next
        return data


class _TurnWriter:
    """The SFTP client's writer: writes are joined until the loop's next turn, then written at once.
    asyncssh writes each request as one call."""

    def __init__(self, inner: "asyncssh.SSHWriter[bytes]", activity: Activity | None = None) -> None:
        self._inner = inner
        self._batch = TurnBatch(inner.write, inner.channel.is_closing, pass_through=LARGE_REQUEST_BYTES)
        self._activity = activity

    @property
    def channel(self) -> "SSHChannel[bytes]":
        return self._inner.channel

    def write(self, data: bytes) -> None:
        if self._activity is not None:
            self._activity.request_sent()
        self._batch.add(data)

    def write_eof(self) -> None:
        self._batch.flush()
        self._inner.write_eof()

    def close(self) -> None:
        self._batch.flush()
        self._inner.close()


async def start_sftp(conn: asyncssh.SSHClientConnection, activity: Activity | None = None) -> asyncssh.SFTPClient:
    """An SFTP client on `conn` whose requests of one loop turn go out as one channel write: what
    asyncssh's `conn.start_sftp_client()` does, with the writer in between (and, given `activity`,
    its requests and answers counted there). Use it as `async with`."""
    writer, reader, _ = await conn.open_session(subsystem="sftp", encoding=None)
    return await asyncssh_sftp.start_sftp_client(
        conn,
        asyncio.get_running_loop(),
        "strict",  # asyncssh's default for UTF-8 in names it decodes (none here: paths are bytes)
        reader if activity is None else _CountingReader(reader, activity),  # type: ignore[arg-type]
        _TurnWriter(writer, activity),  # type: ignore[arg-type]  # the writer's part the SFTP client uses
        "utf-8",
        # A name that is not UTF-8 (any bytes but "/" and NUL are a name on Linux) travels as its
        # bytes: os.fsdecode's surrogates are encoded back, and the vault's names decoded likewise.
        "surrogateescape",
        SFTP_VERSION,
    )
