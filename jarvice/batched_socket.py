"""An SSH connection's TCP socket, with what one event-loop turn writes sent in one `send`. I/O only.
The runner's connection to the vault, and the gateway's vault relay (both its legs), use it.

asyncssh hands each SSH packet to its transport on its own (and an SSH_MSG_IGNORE packet before
each), and asyncio sends each at once: a small file's SFTP requests cost a `send` each, twice, and
wake the server as many times. Held until the loop's next turn, they leave together and the server
reads them together. This plugs in as asyncssh's `tunnel=` (an object with `create_connection`,
the hook asyncssh gives for connections it does not open itself): a plain TCP connection to the
vault whose writes are batched; and, given to `asyncssh.listen` likewise, a plain TCP listener whose
accepted connections are. Order is kept, and nothing waits longer than the loop's turn.
"""

import asyncio
from collections.abc import Callable
from typing import Any, cast

from asyncssh import SSHTCPChannel, SSHTCPSession
from asyncssh.session import SSHTCPSessionFactory


class TurnBatch:
    """What is written within one event-loop turn, handed to `send` joined at the loop's next turn
    (or at `flush`); nothing once `closing()` says the receiver is closing. A write of `pass_through`
    bytes or more goes on at once, after what is held: joining it would only copy it."""

    def __init__(
        self, send: Callable[[bytes], object], closing: Callable[[], bool], *, pass_through: int | None = None
    ) -> None:
        self._send = send
        self._closing = closing
        self._pass_through = pass_through
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def add(self, data: bytes) -> None:
        if self._pass_through is not None and len(data) >= self._pass_through:
            self.flush()
            if not self._closing():
                self._send(data)
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._closing():
                self._send(data)

    def held(self) -> int:
        return sum(map(len, self._pending))


class _BatchedWrites(asyncio.Transport):
    """The SSH connection's transport: writes are held until the loop's next turn, then sent at once."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._batch = TurnBatch(transport.write, transport.is_closing)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._batch.add(bytes(data))

    def flush(self) -> None:
        self._batch.flush()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        # asyncssh ends a connection by abort() right after its last packet (a disconnect): send it.
        self.flush()
        self._transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._batch.held()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()


class _Relay(asyncio.Protocol):
    """The socket's protocol: passes everything to the SSH connection, which writes through _BatchedWrites."""

    def __init__(self, inner: asyncio.Protocol) -> None:
        self.inner = inner
        self.writes: _BatchedWrites | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.writes = _BatchedWrites(cast(asyncio.Transport, transport))
        self.inner.connection_made(self.writes)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)
        # What reading wrote (a window adjust, above all) leaves now: the server may be waiting for it.
        if self.writes is not None:
            self.writes.flush()

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class BatchedTCP:
    """asyncssh's `tunnel=`: a direct TCP connection to the vault whose writes are batched per loop turn."""

    async def create_connection(
        self, session_factory: SSHTCPSessionFactory[bytes], remote_host: str, remote_port: int
    ) -> tuple[SSHTCPChannel[bytes], SSHTCPSession[bytes]]:
        session = session_factory()  # the SSH connection: an asyncio protocol
        transport, _relay = await asyncio.get_running_loop().create_connection(
            lambda: _Relay(cast(asyncio.Protocol, session)), remote_host, remote_port
        )
        # asyncssh uses the session only; the first item stands where an SSH tunnel's channel would.
        return cast(SSHTCPChannel[bytes], transport), session

    async def create_server(
        self, session_factory: Callable[[str, int], object], listen_host: str, listen_port: int
    ) -> asyncio.Server:
        """A TCP listener whose connections' writes are batched (asyncssh.listen's `tunnel=`)."""
        return await asyncio.get_running_loop().create_server(
            lambda: _Relay(cast(asyncio.Protocol, session_factory(listen_host, listen_port))), listen_host, listen_port
        )

    def close(self) -> None:
        """Nothing shared to close: each connection closes itself."""

    async def wait_closed(self) -> None:
        """Nothing shared to wait for."""
