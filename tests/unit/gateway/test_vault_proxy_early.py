"""gateway.vault_proxy.VaultProxy with requests that change nothing in the vault (a read-only open, a
stat): they reach the vault with their path checks, not after them, and their answers wait for the
checks; a refused one's handle is closed unread. A request that writes still waits for its check."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest

from gateway import sftp_requests as sftp
from gateway.vault_proxy import MAX_QUEUED, Resolver
from tests.support.deadlines import HANG_SECONDS
from tests.support.proxy_wiring import POD, Wired, wire_proxy

OWN = f"nimbix-burst/pod-{POD}.main"
OTHER = "nimbix-burst/pod-22222222-2222-2222-2222-222222222222/secret"
DEADLINE_SECONDS = HANG_SECONDS  # a hang fails the test instead of holding the run; never a bound on its speed


class Vault:
    """The vault's realpath as the proxy asks it: answered from `paths`, once `answer` is set."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths
        self.answer = asyncio.Event()

    async def __call__(self, path: str) -> str:
        await self.answer.wait()
        return self.paths[path]


def request(kind: int, request_id: int, *fields: bytes | int) -> bytes:
    body = bytes([kind]) + struct.pack(">I", request_id)
    for field in fields:
        body += struct.pack(">I", field) if isinstance(field, int) else sftp.encode_string(field)
    return sftp.frame(body)


def read_open(request_id: int, path: str) -> bytes:
    return request(sftp.OPEN, request_id, path.encode(), sftp.FXF_READ, 0)


def handle_answer(request_id: int, handle: bytes) -> bytes:
    return request(sftp.HANDLE, request_id, handle)


def marker(request_id: int) -> bytes:
    """A request with neither path nor handle: passed at once, in its order."""
    return request(sftp.EXTENDED, request_id, b"limits@openssh.com")


def read(request_id: int, handle: bytes) -> bytes:
    return request(sftp.READ, request_id, handle, 0, 0, 4096)  # offset as two 32-bit halves


def ok(request_id: int) -> bytes:
    return sftp.status_packet(request_id, 0, "")


async def next_packet(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    return struct.pack(">I", size) + await reader.readexactly(size)


def status_of(packet: bytes) -> tuple[int, int, str]:
    """(request id, code, message) of a STATUS answer."""
    assert packet[4] == sftp.STATUS, packet
    request_id, code, size = struct.unpack_from(">III", packet, 5)
    return request_id, code, packet[17 : 17 + size].decode()


async def wired_session(vault: Resolver, test: Callable[[Wired], Awaitable[None]]) -> None:
    wired = await wire_proxy(resolve=vault)
    (pod_in, pod_out), (vault_in, vault_out) = wired.pod, wired.vault
    try:
        async with asyncio.timeout(DEADLINE_SECONDS):
            pod_out.write(sftp.init_packet())
            await next_packet(vault_in)
            vault_out.write(sftp.frame(bytes([sftp.VERSION]) + struct.pack(">I", 3)))
            await next_packet(pod_in)
            await test(wired)
    finally:
        wired.relay.cancel()
        await asyncio.gather(wired.relay, return_exceptions=True)
        await wired.abort()


def test_a_read_only_open_reaches_the_vault_before_its_check_and_its_answer_waits_for_it() -> None:
    vault = Vault({f"{OWN}/f": f"/{OWN}/f"})

    async def test(wired: Wired) -> None:
        (pod_in, pod_out), (vault_in, vault_out) = wired.pod, wired.vault
        pod_out.write(read_open(1, f"{OWN}/f") + marker(2))
        assert (await next_packet(vault_in))[4] == sftp.OPEN  # the check not answered yet
        assert sftp.request_id_of(await next_packet(vault_in)) == 2
        vault_out.write(handle_answer(1, b"h1") + ok(2))
        assert sftp.request_id_of(await next_packet(pod_in)) == 2  # the open's answer is held
        vault.answer.set()
        assert await next_packet(pod_in) == handle_answer(1, b"h1")

    asyncio.run(wired_session(vault, test))


@pytest.mark.parametrize("check_first", [True, False], ids=["check-answered-first", "vault-answered-first"])
def test_a_read_only_open_through_a_link_out_is_closed_unread_and_refused(check_first: bool) -> None:
    vault = Vault({f"{OWN}/out": f"/{OTHER}"})

    async def test(wired: Wired) -> None:
        (pod_in, pod_out), (vault_in, vault_out) = wired.pod, wired.vault
        if check_first:
            vault.answer.set()
        pod_out.write(read_open(1, f"{OWN}/out"))
        await next_packet(vault_in)
        vault_out.write(handle_answer(1, b"h1"))
        vault.answer.set()
        assert await next_packet(vault_in) == sftp.close_packet(1, b"h1")
        vault_out.write(ok(1))
        request_id, code, message = status_of(await next_packet(pod_in))
        assert (request_id, code) == (1, sftp.FX_PERMISSION_DENIED)
        assert "symbolic link" in message

    asyncio.run(wired_session(vault, test))


def test_a_refused_stat_gets_the_refusal_not_the_vaults_answer() -> None:
    vault = Vault({f"{OWN}/out": f"/{OTHER}"})

    async def test(wired: Wired) -> None:
        (pod_in, pod_out), (vault_in, vault_out) = wired.pod, wired.vault
        pod_out.write(request(sftp.STAT, 1, f"{OWN}/out".encode()))
        await next_packet(vault_in)
        vault_out.write(request(105, 1, 0))  # ATTRS, no fields
        vault.answer.set()
        assert status_of(await next_packet(pod_in))[:2] == (1, sftp.FX_PERMISSION_DENIED)

    asyncio.run(wired_session(vault, test))


def test_an_open_that_may_write_reaches_the_vault_only_once_checked() -> None:
    vault = Vault({f"{OWN}/out": f"/{OTHER}"})
    vault.answer.set()

    async def test(wired: Wired) -> None:
        (pod_in, pod_out), vault_in = wired.pod, wired.vault[0]
        flags = 0x02 | sftp.FXF_CREAT | 0x10  # write, create, truncate
        pod_out.write(request(sftp.OPEN, 1, f"{OWN}/out".encode(), flags, 0) + marker(2))
        assert sftp.request_id_of(await next_packet(vault_in)) == 2  # the open never came
        assert status_of(await next_packet(pod_in))[:2] == (1, sftp.FX_PERMISSION_DENIED)

    asyncio.run(wired_session(vault, test))


def test_a_request_with_the_id_of_one_held_is_refused_not_passed() -> None:
    """Answers are matched to a held request by its id: a second request with it would be taken for it."""
    vault = Vault({f"{OWN}/f": f"/{OWN}/f", f"{OWN}/out": f"/{OTHER}"})

    async def test(wired: Wired) -> None:
        (pod_in, pod_out), (vault_in, vault_out) = wired.pod, wired.vault
        pod_out.write(read_open(1, f"{OWN}/out") + read_open(1, f"{OWN}/f") + marker(3))
        assert sftp.request_id_of(await next_packet(vault_in)) == 1
        assert sftp.request_id_of(await next_packet(vault_in)) == 3  # not the second open
        assert status_of(await next_packet(pod_in))[:2] == (1, sftp.FX_BAD_MESSAGE)
        vault_out.write(handle_answer(1, b"h1"))
        vault.answer.set()
        assert await next_packet(vault_in) == sftp.close_packet(1, b"h1")

    asyncio.run(wired_session(vault, test))


def test_a_read_of_a_guessed_handle_of_a_held_open_is_refused_not_passed() -> None:
    """A vault numbers its handles (OpenSSH: the index in its table): a pod that sends a read-only open of
    a path through a link out, and at once a READ of the handle it will get, must not read it before
    the gateway closes it. Only handles the pod was given are passed."""
    vault = Vault({f"{OWN}/out": f"/{OTHER}"})

    async def test(wired: Wired) -> None:
        (pod_in, pod_out), (vault_in, vault_out) = wired.pod, wired.vault
        pod_out.write(read_open(1, f"{OWN}/out") + read(2, b"h1") + marker(3))
        assert (await next_packet(vault_in))[4] == sftp.OPEN
        assert sftp.request_id_of(await next_packet(vault_in)) == 3  # not the READ
        assert status_of(await next_packet(pod_in))[:2] == (2, sftp.FX_FAILURE)
        vault_out.write(handle_answer(1, b"h1"))
        vault.answer.set()
        assert await next_packet(vault_in) == sftp.close_packet(1, b"h1")

    asyncio.run(wired_session(vault, test))


def test_a_handle_is_passed_once_given_and_refused_once_closed() -> None:
    vault = Vault({f"{OWN}/f": f"/{OWN}/f"})
    vault.answer.set()

    async def test(wired: Wired) -> None:
        (pod_in, pod_out), (vault_in, vault_out) = wired.pod, wired.vault
        pod_out.write(read_open(1, f"{OWN}/f"))
        await next_packet(vault_in)
        vault_out.write(handle_answer(1, b"h1"))
        assert await next_packet(pod_in) == handle_answer(1, b"h1")
        pod_out.write(read(2, b"h1") + request(sftp.CLOSE, 3, b"h1") + read(4, b"h1") + marker(5))
        assert sftp.request_id_of(await next_packet(vault_in)) == 2
        assert await next_packet(vault_in) == sftp.close_packet(3, b"h1")
        assert sftp.request_id_of(await next_packet(vault_in)) == 5  # the READ after the CLOSE never came
        assert status_of(await next_packet(pod_in))[:2] == (4, sftp.FX_FAILURE)

    asyncio.run(wired_session(vault, test))


class SwappedVault:
    """A vault where `OWN/l` is a link out until a request that removes or renames it reaches the vault
    (a pod then makes it a directory of its own): the realpath of a path through it answers by what
    `l` is when it is answered, late (its session busy), so a request after it has every chance to
    reach the vault first."""

    TURNS = 200  # loop turns the late realpath lets pass: the REMOVE, if it is not held, is read by then

    def __init__(self) -> None:
        self.link_out = True

    async def resolve(self, path: str) -> str:
        if path == OWN:
            return f"/{OWN}"
        assert path == f"{OWN}/l/secret", path
        for _ in range(self.TURNS):
            if not self.link_out:
                break
            await asyncio.sleep(0)
        return f"/{OTHER}" if self.link_out else f"/{OWN}/l/secret"

    async def serve(self, vault_in: asyncio.StreamReader, vault_out: asyncio.StreamWriter) -> None:
        while True:
            packet = await next_packet(vault_in)
            if packet[4] == sftp.OPEN:  # done now: what `l` leads to now is what it opens
                vault_out.write(handle_answer(sftp.request_id_of(packet), b"other" if self.link_out else b"own"))
            elif packet[4] in (sftp.REMOVE, sftp.RMDIR, sftp.RENAME):
                self.link_out = False
                vault_out.write(ok(sftp.request_id_of(packet)))
            elif packet[4] == sftp.CLOSE:
                vault_out.write(ok(sftp.request_id_of(packet)))


@pytest.mark.parametrize(
    "change",
    [
        request(sftp.REMOVE, 2, f"{OWN}/l".encode()),
        request(sftp.RMDIR, 2, f"{OWN}/l".encode()),
        request(sftp.RENAME, 2, f"{OWN}/l".encode(), f"{OWN}/m".encode()),
    ],
    ids=["remove", "rmdir", "rename"],
)
def test_a_change_after_an_early_open_waits_for_its_check(change: bytes) -> None:
    """An early open is done by the vault at once; its check comes later. A request after it that
    changes what its path leads to (the link out removed, a directory of the pod's own put there) must
    not reach the vault before that check is answered, or the check sees the new path and passes the
    handle the vault opened through the old one: another pod's file."""
    vault = SwappedVault()

    async def test(wired: Wired) -> None:
        (pod_in, pod_out), (vault_in, vault_out) = wired.pod, wired.vault
        serving = asyncio.create_task(vault.serve(vault_in, vault_out))
        try:
            pod_out.write(read_open(1, f"{OWN}/l/secret") + change)
            answers = {sftp.request_id_of(p): p for p in [await next_packet(pod_in), await next_packet(pod_in)]}
            assert status_of(answers[1])[:2] == (1, sftp.FX_PERMISSION_DENIED)
        finally:
            serving.cancel()

    asyncio.run(wired_session(vault.resolve, test))


def test_early_requests_whose_checks_wait_are_not_taken_without_bound() -> None:
    """A held request costs the gateway its check (a realpath on the vault's second session) and its
    answer: a pod that sends stats faster than they are checked is held back by its own channel once
    the gateway holds as many as it queues, not taken in without end."""
    bound = 2 * MAX_QUEUED + 1  # held, then at most as many queued behind them
    asked: list[str] = []
    never = asyncio.Event()

    async def slow_vault(path: str) -> str:
        asked.append(path)
        await never.wait()
        raise AssertionError("never answered")

    async def test(wired: Wired) -> None:
        pod_out = wired.pod[1]
        for request_id in range(1, 3 * MAX_QUEUED + 1):
            pod_out.write(request(sftp.STAT, request_id, f"{OWN}/f".encode()))
        async with asyncio.timeout(DEADLINE_SECONDS):
            while len(asked) < MAX_QUEUED:  # the held ones' checks at least
                await asyncio.sleep(0.01)
        for _ in range(SwappedVault.TURNS):  # had it read on, the rest would be asked by now
            await asyncio.sleep(0)
        assert len(asked) <= bound

    asyncio.run(wired_session(slow_vault, test))


def test_a_handle_given_to_one_session_is_refused_in_another() -> None:
    """A pod's sessions on one connection each have their own vault session, whose handles may have
    the same values: a handle passes only in the session that was given it."""
    vault = Vault({f"{OWN}/f": f"/{OWN}/f"})
    vault.answer.set()

    async def test(first: Wired) -> None:
        second = await wire_proxy(resolve=vault)
        try:
            (pod_in, pod_out), (vault_in, vault_out) = second.pod, second.vault
            pod_out.write(sftp.init_packet())
            await next_packet(vault_in)
            vault_out.write(sftp.frame(bytes([sftp.VERSION]) + struct.pack(">I", 3)))
            await next_packet(pod_in)
            first.pod[1].write(read_open(1, f"{OWN}/f"))
            await next_packet(first.vault[0])
            first.vault[1].write(handle_answer(1, b"h1"))
            assert await next_packet(first.pod[0]) == handle_answer(1, b"h1")
            pod_out.write(read(2, b"h1") + marker(3))
            assert sftp.request_id_of(await next_packet(vault_in)) == 3  # not the READ
            assert status_of(await next_packet(pod_in))[:2] == (2, sftp.FX_FAILURE)
        finally:
            second.relay.cancel()
            await asyncio.gather(second.relay, return_exceptions=True)
            await second.abort()

    asyncio.run(wired_session(vault, test))
