"""The runner's SFTP transfers (entrypoint.sftp_transfer) against the emulator's vault, in process:
small files go up and come back whole with their times, a second pass moves nothing, a file new to
the pod is written in place and one the pod holds is replaced whole, and nothing is written through
a link. The SSH connection's writes go through jarvice.batched_socket, the SFTP session's through
entrypoint.sftp_session (both also tested alone)."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from bench import delay_line
from devplatform.emulator import EmulatorControl, Timing
from entrypoint import (
    local_tree,
    sftp_session,
    sftp_transfer,
    vault_download,
    vault_files,
    vault_settings,
    vault_upload,
)
from entrypoint.sftp_transfer import DownloadRoot, UploadRoot, VaultTransfer
from jarvice import batched_socket
from jarvice.redaction import Secret
from tests.support import vaults
from tests.support.runner_processes import API_KEY, APP, FAST_TIMING, USER

SMALL = 300  # more files than are in flight at once
OLD = 1_500_000_000  # a modification time no file made now has


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[vault_settings.VaultSettings, Path]]:
    """The vault's SFTP address (host key checked) and the directory it stores the user's files in."""
    root = tmp_path_factory.mktemp("vaults")
    with vaults.vault_emulator(root, user=USER, apikey=API_KEY, app=APP, timing=Timing(**FAST_TIMING)) as emu:
        with EmulatorControl(emu.url) as ctl:
            info = ctl.session.get(f"{emu.url}/_emulator/vault", timeout=5).json()
        known_hosts = root / "known_hosts"
        known_hosts.write_text(info["known_hosts"])
        host, _, port = info["sftp"].rpartition(":")
        yield (
            vault_settings.VaultSettings(host, int(port), str(known_hosts), keep_job_dir=True),
            root / USER / "drop.jarvice.com",
        )


def transfer(address: vault_settings.VaultSettings) -> VaultTransfer:
    return VaultTransfer(
        address, username=USER, apikey=Secret(API_KEY), clock=time.monotonic, progress_out=io.StringIO()
    )


def small_tree(top: Path) -> dict[str, bytes]:
    """SMALL files of a few hundred bytes to 64 KiB (one write request each), in two directories, with old times."""
    made: dict[str, bytes] = {}
    for i in range(SMALL):
        relative = f"d{i % 2}/f{i:04d}.bin"
        data = os.urandom((i * 211) % (sftp_transfer.IN_PLACE_BYTES + 1))
        path = top / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (OLD + i, OLD + i))
        made[relative] = data
    return made


def upload(address: vault_settings.VaultSettings, local: Path, vault_path: str) -> sftp_transfer.Report:
    roots = [UploadRoot(str(local), str(local), vault_path)]
    return transfer(address).upload(
        roots, totals=sftp_transfer.Totals(), never_staged=frozenset(), should_stop=lambda: False
    )


def test_small_files_go_up_whole_with_their_times_and_a_second_pass_moves_nothing(
    vault: tuple[vault_settings.VaultSettings, Path], tmp_path: Path
) -> None:
    address, stored = vault
    made = small_tree(tmp_path / "data")
    report = upload(address, tmp_path / "data", "up-small")
    assert report.complete, report.error
    assert (report.copied, report.skipped) == (SMALL, 0)
    for relative, data in made.items():
        copy = stored / "up-small" / relative
        assert copy.read_bytes() == data, relative
        assert copy.stat().st_mtime == (tmp_path / "data" / relative).stat().st_mtime, relative
    again = upload(address, tmp_path / "data", "up-small")
    assert (again.copied, again.skipped) == (0, SMALL)


def test_the_requests_of_files_in_flight_leave_in_few_channel_writes(
    vault: tuple[vault_settings.VaultSettings, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each small file is four SFTP requests (open; write, time, close); written one by one, each
    would be an SSH packet of its own. The files in flight share a loop turn's write."""
    address, _stored = vault
    small_tree(tmp_path / "data")
    writes: list[int] = []
    real_write = asyncssh.SSHWriter.write

    def counted(self: asyncssh.SSHWriter[bytes], data: bytes) -> None:
        if isinstance(self.channel, asyncssh.SSHClientChannel):  # the emulator's server runs in this process
            writes.append(len(data))
        real_write(self, data)

    monkeypatch.setattr(asyncssh.SSHWriter, "write", counted)
    report = upload(address, tmp_path / "data", "up-few-writes")
    assert report.complete, report.error
    assert report.copied == SMALL
    assert len(writes) < 2 * SMALL, f"{len(writes)} channel writes for {4 * SMALL} requests"


def test_a_small_file_new_to_the_vault_is_created_exclusively_and_one_made_there_since_still_replaced(
    vault: tuple[vault_settings.VaultSettings, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Created exclusively, a file follows no link at its name (through the gateway only its directory
    is resolved); a file that appeared at its name after the listing is opened as any other."""
    address, stored = vault
    (stored / "exclusive").mkdir(parents=True, exist_ok=True)
    (stored / "exclusive" / "appeared").write_bytes(b"made after the listing")
    opens: list[tuple[str, str]] = []
    real_open = asyncssh.SFTPClient.open

    async def seen(self: asyncssh.SFTPClient, path: str, mode: str = "r", **kwargs: object) -> object:
        opens.append((path, mode))
        return await real_open(self, path, mode, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncssh.SFTPClient, "open", seen)

    async def put_both() -> None:
        async with (
            asyncssh.connect(
                address.host,
                address.port,
                username=USER,
                password=API_KEY,
                known_hosts=address.known_hosts,
                client_keys=None,
                agent_path=None,
                config=[],
            ) as conn,
            conn.start_sftp_client() as sftp,
        ):
            for name in ("fresh", "appeared"):
                item = vault_upload.Put(name, name, f"exclusive/{name}", 3, OLD, 0o644, (0, 0), new=True)
                handle = await vault_upload.open_small(sftp, item)
                await handle.write(b"new", 0)
                await handle.close()

    asyncio.run(put_both())
    assert opens == [("exclusive/fresh", "xb"), ("exclusive/appeared", "xb"), ("exclusive/appeared", "wb")]
    assert (stored / "exclusive" / "fresh").read_bytes() == b"new"
    assert (stored / "exclusive" / "appeared").read_bytes() == b"new"


def test_copy_back_writes_new_files_in_place_and_replaces_a_file_the_pod_holds_whole(
    vault: tuple[vault_settings.VaultSettings, Path], tmp_path: Path
) -> None:
    address, _stored = vault
    made = small_tree(tmp_path / "data")
    assert upload(address, tmp_path / "data", "down-small").complete
    pod = tmp_path / "pod" / "out"
    (pod / "d0").mkdir(parents=True)
    (pod / "d0" / "f0000.bin").write_bytes(b"an older version")
    report = transfer(address).download([DownloadRoot("down-small", str(pod))], should_stop=lambda: False)
    assert report.complete, report.error
    assert (report.copied, report.skipped) == (SMALL, 0)
    for relative, data in made.items():
        assert (pod / relative).read_bytes() == data, relative
        assert (pod / relative).stat().st_mtime == (tmp_path / "data" / relative).stat().st_mtime, relative
    assert not [p for p in pod.rglob("*") if vault_files.is_part_name(p.name)]
    again = transfer(address).download([DownloadRoot("down-small", str(pod))], should_stop=lambda: False)
    assert (again.copied, again.skipped) == (0, SMALL)


def test_a_far_vault_gets_the_depth_of_its_round_trip_and_a_large_file_crosses_whole(
    vault: tuple[vault_settings.VaultSettings, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    address, stored = vault
    blob = os.urandom(14 * vault_files.BLOCK_BYTES + 12345)  # more blocks than are in flight, a short last one
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(blob)
    assert address.known_hosts is not None
    with delay_line.delay_line(address.port, rtt_ms=100) as port:  # Depth(8, 12) at 100 ms
        host_key = Path(address.known_hosts).read_text().split(" ", 1)[1]
        (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}")
        far = vault_settings.VaultSettings(address.host, port, str(tmp_path / "known_hosts"), keep_job_dir=True)
        with caplog.at_level(logging.INFO, logger=sftp_transfer.log.name):
            assert upload(far, tmp_path / "data", "far-big").complete
            back = tmp_path / "back"
            report = transfer(far).download([DownloadRoot("far-big", str(back))], should_stop=lambda: False)
    assert report.complete, report.error
    assert (stored / "far-big" / "big.bin").read_bytes() == blob
    assert (back / "big.bin").read_bytes() == blob
    measured = [r for r in caplog.records if r.getMessage() == "vault round trip measured"]
    assert [(r.sessions, r.blocks) for r in measured] == [(8, 12), (8, 12)]  # type: ignore[attr-defined]


def test_a_link_planted_at_a_new_files_name_after_the_listing_is_replaced_never_written_through(
    tmp_path: Path,
) -> None:
    bait = tmp_path / "secrets" / "token"
    bait.parent.mkdir()
    bait.write_text("bait")
    out = tmp_path / "out"
    out.mkdir()
    writer = local_tree.BeneathWriter(str(out))
    try:
        # Listed as absent (fresh), then a link appears at its name before the write.
        (out / "token").symlink_to(bait)
        item = vault_download.Get(writer, "token", "vault/token", 6, OLD, 0o644, fresh=True)
        vault_download.write_whole(item, b"output")
        assert writer.create_new("token") is None
    finally:
        writer.close()
    assert bait.read_text() == "bait"
    assert not (out / "token").is_symlink()
    assert (out / "token").read_bytes() == b"output"
    assert (out / "token").stat().st_mtime == OLD


def test_what_one_loop_turn_writes_leaves_in_one_send_in_order() -> None:
    async def scenario() -> None:
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        loop = asyncio.get_running_loop()
        transport, _protocol = await loop.create_connection(asyncio.Protocol, sock=ours)
        batched = batched_socket._BatchedWrites(transport)
        try:
            batched.write(b"one ")
            batched.write(b"two ")
            batched.write(b"three")
            with pytest.raises(BlockingIOError):  # nothing sent within the turn
                theirs.recv(100)
            assert batched.get_write_buffer_size() == len(b"one two three")
            await asyncio.sleep(0)  # the loop's next turn
            assert theirs.recv(100) == b"one two three"
            batched.write(b"last")
            batched.close()  # what is held is sent before the close
            await asyncio.sleep(0)
            theirs.setblocking(True)
            assert theirs.recv(100) == b"last"
        finally:
            theirs.close()

    asyncio.run(scenario())


def test_sftp_requests_of_one_loop_turn_go_to_the_channel_in_one_write_in_order() -> None:
    class Channel:
        closing = False

        def is_closing(self) -> bool:
            return self.closing

    class Writer:  # the part of asyncssh's SSHWriter the SFTP client uses
        def __init__(self) -> None:
            self.channel = Channel()
            self.calls: list[tuple[str, bytes]] = []

        def write(self, data: bytes) -> None:
            self.calls.append(("write", data))

        def write_eof(self) -> None:
            self.calls.append(("eof", b""))

        def close(self) -> None:
            self.calls.append(("close", b""))

    async def scenario() -> None:
        inner = Writer()
        turn = sftp_session._TurnWriter(inner)  # type: ignore[arg-type]
        turn.write(b"open ")
        turn.write(b"write ")
        turn.write(b"close")
        assert inner.calls == []  # nothing within the turn
        await asyncio.sleep(0)
        assert inner.calls == [("write", b"open write close")]
        turn.write(b"last")
        turn.write_eof()  # what is held goes first
        assert inner.calls[1:] == [("write", b"last"), ("eof", b"")]
        turn.write(b"after")
        turn.close()
        assert inner.calls[3:] == [("write", b"after"), ("close", b"")]
        large = b"x" * sftp_session.LARGE_REQUEST_BYTES  # a large file's block: on at once, after what is held
        turn.write(b"held")
        turn.write(large)
        assert inner.calls[5:] == [("write", b"held"), ("write", large)]
        await asyncio.sleep(0)
        assert len(inner.calls) == 7
        inner.channel.closing = True
        turn.write(b"too late")
        turn.write(large)
        await asyncio.sleep(0)
        assert len(inner.calls) == 7  # a closing channel takes nothing more

    asyncio.run(scenario())


def test_what_handling_received_data_writes_leaves_at_once() -> None:
    """A window adjust written while reading must not wait for the loop's next turn: the server may
    be waiting for it before it sends more."""

    class Answering(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            assert isinstance(self.transport, asyncio.WriteTransport)
            self.transport.write(b"adjust")

    async def scenario() -> None:
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        relay = batched_socket._Relay(Answering())
        transport, _protocol = await asyncio.get_running_loop().create_connection(lambda: relay, sock=ours)
        try:
            relay.data_received(b"data")
            assert theirs.recv(100) == b"adjust"  # no turn of the loop in between
        finally:
            transport.close()
            theirs.close()

    asyncio.run(scenario())


def test_a_session_s_activity_measures_only_a_silence_while_requests_wait() -> None:
    now = [0.0]
    activity = sftp_session.Activity(lambda: now[0])
    now[0] = 100.0  # idle with nothing asked: no silence
    assert activity.silent_for() == 0.0
    activity.request_sent()
    activity.request_sent()
    now[0] = 130.0
    assert activity.silent_for() == 30.0
    activity.answer_received()  # one answered: the other waits from now
    now[0] = 140.0
    assert activity.silent_for() == 10.0
    activity.answer_received()
    now[0] = 500.0
    assert activity.silent_for() == 0.0
