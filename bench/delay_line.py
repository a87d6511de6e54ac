"""A delay line for the staging benchmark: a TCP relay on 127.0.0.1 that holds every byte for a
fixed time each way before passing it on, so the clients see a chosen round trip to the same sshd
(as a vault across a WAN), without a limit on the rate. Runs its own event loop in a thread.

The kernel's netem would do this on a network namespace's loopback; where the kernel has no
sch_netem (as on the dev machine), this relay does the same for the benchmark's one connection
per client. What is in flight is held in memory (rate x delay: 50 MiB at 1 GB/s and 50 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from typing import Final

READ_BYTES: Final = 256 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Bytes from `reader` to `writer`, each piece sent `delay` seconds after it arrived, in order."""
    loop = asyncio.get_running_loop()
    held: deque[tuple[float, bytes]] = deque()
    arrived = asyncio.Event()
    done = False

    async def receive() -> None:
        nonlocal done
        while data := await reader.read(READ_BYTES):
            held.append((loop.time() + delay, data))
            arrived.set()
        done = True
        arrived.set()

    async def send() -> None:
        while True:
            while not held:
                if done:
                    return
                arrived.clear()
                await arrived.wait()
            due, data = held.popleft()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(receive())
            group.create_task(send())
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _serve(target_port: int, one_way: float, ready: asyncio.Future[int], stop: asyncio.Event) -> None:
    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(_pipe(client_reader, server_writer, one_way))
                group.create_task(_pipe(server_reader, client_writer, one_way))
        except* (ConnectionError, OSError):
            pass  # a side went away: the other is closed below
        except* asyncio.CancelledError:
            pass  # the line is stopping
        finally:
            for writer in (client_writer, server_writer):
                writer.close()

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    ready.set_result(server.sockets[0].getsockname()[1])
    async with server:
        await stop.wait()
    relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in relays:  # a client still connected: its relay ends with the line
        task.cancel()
    await asyncio.gather(*relays, return_exceptions=True)


@contextlib.contextmanager
def delay_line(target_port: int, *, rtt_ms: float) -> Iterator[int]:
    """A relay to 127.0.0.1:`target_port` adding `rtt_ms` to every round trip; yields its port."""
    loop = asyncio.new_event_loop()
    ready: asyncio.Future[int] = loop.create_future()
    stop = asyncio.Event()
    thread = threading.Thread(
        target=loop.run_until_complete, args=(_serve(target_port, rtt_ms / 2000, ready, stop),), daemon=True
    )
    thread.start()
    try:
        port = asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(ready), 10), loop).result()
        yield port
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()
