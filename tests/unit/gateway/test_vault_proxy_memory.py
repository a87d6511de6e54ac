"""gateway.vault_proxy.VaultProxy between two local socket pairs (the pod's channel and the vault's): a
pod that sends large requests and reads no answer is held back by the streams, not buffered by the
gateway, whose memory every pod's session shares."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable

from gateway import sftp_requests as sftp
from gateway.vault_proxy import MAX_QUEUED_BYTES
from tests.support.deadlines import HANG_SECONDS
from tests.support.proxy_wiring import POD, wire_proxy

BLOCK = 1024 * 1024  # a WRITE of 1 MiB: within the packets the proxy takes
OWN_FILE = f"nimbix-burst/pod-{POD}.main/f"
OPEN_ID = 1 << 31  # beside the offered requests' ids


async def own_file_only(path: str) -> str:
    """The vault's realpath, for the one file the pod opens before it floods its handle with WRITEs."""
    assert path == OWN_FILE, path
    return f"/{path}"


async def next_packet(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    return await reader.readexactly(size)


def write_request(request_id: int) -> bytes:
    body = bytes([sftp.WRITE]) + struct.pack(">I", request_id) + sftp.encode_string(b"h")
    return sftp.frame(body + struct.pack(">Q", 0) + sftp.encode_string(b"\0" * BLOCK))


def refused_open(request_id: int) -> bytes:
    body = bytes([sftp.OPEN]) + struct.pack(">I", request_id) + sftp.encode_string(b"/etc/passwd")
    return sftp.frame(body + struct.pack(">II", 1, 0))


async def offered_until_held(make: Callable[[int], bytes], offered: int) -> int:
    """How many requests the proxy took from a pod that reads no answer, the vault reading no more."""
    wired = await wire_proxy(resolve=own_file_only)
    relay, (pod_in, pod_out), (vault_reader, vault_writer) = wired.relay, wired.pod, wired.vault
    pod_out.write(sftp.init_packet())
    await vault_reader.readexactly(9)  # the proxy's INIT; then VERSION
    vault_writer.write(sftp.frame(bytes([sftp.VERSION]) + struct.pack(">I", 3)))
    await next_packet(pod_in)
    # The handle the WRITEs name, given as a vault gives one (the gateway passes only those); then the
    # vault reads nothing more.
    opened = bytes([sftp.OPEN]) + struct.pack(">I", OPEN_ID) + sftp.encode_string(OWN_FILE.encode())
    pod_out.write(sftp.frame(opened + struct.pack(">II", sftp.FXF_READ, 0)))
    await next_packet(vault_reader)
    vault_writer.write(sftp.frame(bytes([sftp.HANDLE]) + struct.pack(">I", OPEN_ID) + sftp.encode_string(b"h")))
    await vault_writer.drain()
    await next_packet(pod_in)
    sent = 0

    async def send() -> None:
        nonlocal sent
        for number in range(offered):
            pod_out.write(make(number))
            await pod_out.drain()
            sent += 1

    sender = asyncio.create_task(send())
    # Poll until the count stops growing (held) or every request went through.
    deadline, last, still = time.monotonic() + 60, -1, 0
    while time.monotonic() < deadline and sent < offered and still < 20:
        await asyncio.sleep(0.05)
        still = still + 1 if sent == last else 0
        last = sent
    for task in (sender, relay):
        task.cancel()
    await asyncio.gather(sender, relay, return_exceptions=True)
    await wired.abort()
    del pod_in
    return sent


def test_a_pod_that_reads_no_answer_is_held_by_its_stream_not_buffered_by_the_gateway() -> None:
    sent = asyncio.run(offered_until_held(write_request, 200))
    # What the proxy queues, and what the two socket pairs' buffers hold: never the whole offer.
    assert sent * BLOCK < MAX_QUEUED_BYTES + 32 * BLOCK, sent


def test_a_pod_that_reads_none_of_the_gateways_refusals_is_held_too() -> None:
    """Refusals never reach the vault: without waiting for the pod to read them they pile up here."""
    sent = asyncio.run(offered_until_held(refused_open, 200_000))
    assert sent < 60_000, sent  # the queue's 4096 requests and the socket buffers' few thousand


async def answers_to_requests_sent_with_init(count: int) -> int:
    """How many answers come back to `count` refused requests sent in one write with the INIT."""
    wired = await wire_proxy("an absolute path is refused before it is resolved")
    relay, (pod_in, pod_out), (vault_reader, vault_writer) = wired.relay, wired.pod, wired.vault
    pod_out.write(sftp.init_packet() + b"".join(refused_open(number) for number in range(count)))
    await vault_reader.readexactly(9)
    vault_writer.write(sftp.frame(bytes([sftp.VERSION]) + struct.pack(">I", 3)))
    await vault_writer.drain()
    answered = -1  # the VERSION first
    try:
        async with asyncio.timeout(HANG_SECONDS):  # a hang guard, never a bound on its speed
            while answered < count:
                (size,) = struct.unpack(">I", await pod_in.readexactly(4))
                await pod_in.readexactly(size)
                answered += 1
    except TimeoutError:
        pass
    relay.cancel()
    await asyncio.gather(relay, return_exceptions=True)
    await wired.abort()
    return answered


def test_more_requests_sent_with_the_init_than_the_queue_holds_are_all_answered() -> None:
    """A client need not wait for VERSION: what came with its INIT is more than 4096 small requests."""
    assert asyncio.run(answers_to_requests_sent_with_init(6000)) == 6000
