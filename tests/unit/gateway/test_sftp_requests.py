"""The vault proxy's reading of SFTP requests (pure): what passes at once, what is checked and how,
what is refused, and SYMLINK's two paths put in the order the vault reads them."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from gateway import sftp_requests as sftp
from gateway.sftp_requests import BadPacket, encode_string, filter_version, frame, parse_request
from gateway.vault_scope import PathRefused, VaultGrant

POD = "11111111-1111-1111-1111-111111111111"
GRANT = VaultGrant(POD)
OWN = f"nimbix-burst/pod-{POD}.main"


def request(kind: int, *fields: bytes | int, request_id: int = 7) -> bytes:
    body = bytes([kind]) + struct.pack(">I", request_id)
    for field in fields:
        body += struct.pack(">I", field) if isinstance(field, int) else encode_string(field)
    return frame(body)


def extended(name: str, *fields: bytes) -> bytes:
    return request(sftp.EXTENDED, name.encode(), *fields)


def parse(packet: bytes, *, client_swaps: bool = False, vault_swaps: bool = False) -> sftp.Request:
    return parse_request(packet, GRANT, client_swaps=client_swaps, vault_swaps=vault_swaps)


@pytest.mark.parametrize(
    "packet",
    [
        request(sftp.READ, b"handle", 0, 0, 32768),
        request(sftp.WRITE, b"handle", 0, 0, b"data"),
        request(sftp.CLOSE, b"handle"),
        request(sftp.FSTAT, b"handle"),
        request(sftp.READDIR, b"handle"),
        extended("fsync@openssh.com", b"handle"),
        extended("limits@openssh.com"),
    ],
)
def test_a_request_on_a_handle_passes_as_it_came(packet: bytes) -> None:
    parsed = parse(packet)
    assert (parsed.packet, parsed.checks, parsed.id) == (packet, (), 7)


@pytest.mark.parametrize(
    ("packet", "checks"),
    [
        (request(sftp.OPEN, f"{OWN}/f".encode(), 0x01, 0), [("full", False)]),
        (request(sftp.OPEN, f"{OWN}/f".encode(), 0x02 | 0x08 | 0x20, 0), [("parent", False)]),
        (request(sftp.OPEN, f"{OWN}/f".encode(), 0x02 | 0x08 | 0x10, 0), [("full", False)]),
        (request(sftp.STAT, b"nimbix-burst"), [("full", True)]),
        (request(sftp.LSTAT, f"{OWN}/l".encode()), [("parent", True)]),
        (request(sftp.MKDIR, b"nimbix-burst", 0), [("parent", True)]),
        (request(sftp.OPENDIR, OWN.encode()), [("full", False)]),
        (request(sftp.REMOVE, f"{OWN}/f".encode()), [("parent", False)]),
        (request(sftp.READLINK, f"{OWN}/l".encode()), [("parent", False)]),
        (request(sftp.RENAME, f"{OWN}/a".encode(), f"{OWN}/b".encode()), [("parent", False)] * 2),
        (extended("posix-rename@openssh.com", f"{OWN}/a".encode(), f"{OWN}/b".encode()), [("parent", False)] * 2),
        (
            extended("hardlink@openssh.com", f"{OWN}/a".encode(), f"{OWN}/b".encode()),
            [("full", False), ("parent", False)],
        ),
        (extended("statvfs@openssh.com", OWN.encode()), [("full", False)]),
    ],
)
def test_a_request_naming_paths_is_checked_as_its_kind_resolves_them(
    packet: bytes, checks: list[tuple[str, bool]]
) -> None:
    parsed = parse(packet)
    assert parsed.packet == packet
    assert [(c.how, c.passage_ok) for c in parsed.checks] == checks


@pytest.mark.parametrize("tail", ["/", "/.", "//./"])
@pytest.mark.parametrize(
    "make",
    [
        lambda p: request(sftp.LSTAT, p),
        lambda p: extended("lsetstat@openssh.com", p, 0),
        lambda p: request(sftp.REMOVE, p),
        lambda p: request(sftp.RMDIR, p),
        lambda p: request(sftp.MKDIR, p, 0),
        lambda p: request(sftp.READLINK, p),
        lambda p: request(sftp.OPEN, p, 0x02 | 0x08 | 0x20, 0),
        lambda p: request(sftp.RENAME, p, p),
        lambda p: extended("posix-rename@openssh.com", p, p),
        lambda p: extended("hardlink@openssh.com", p, p),
        lambda p: request(sftp.SYMLINK, p, b"anything"),
    ],
    ids=[
        "lstat",
        "lsetstat",
        "remove",
        "rmdir",
        "mkdir",
        "readlink",
        "excl-open",
        "rename",
        "posix-rename",
        "hardlink",
        "symlink",
    ],
)
def test_a_path_ending_in_a_slash_or_dot_is_resolved_whole(make: Callable[[bytes], bytes], tail: str) -> None:
    """`l/` and `l/.` name what the link `l` leads to: the vault follows it (OpenSSH's sftp-server
    passes the path to the system as written), so a request that acts on a name itself (an lstat, an
    lsetstat: a chmod) must not be checked by its directory alone, or it reaches another pod's."""
    parsed = parse(make(f"{OWN}/l{tail}".encode()))
    assert {c.how for c in parsed.checks} == {"full"}
    assert all(c.parts[-1] == "l" for c in parsed.checks)


def test_the_vaults_root_written_as_a_dot_is_resolved_whole() -> None:
    """LSTAT "." has no last name to check beside its directory: checked whole (the root, a passage)."""
    assert [c.how for c in parse(request(sftp.LSTAT, b".")).checks] == ["full"]


def test_a_removal_or_rename_makes_the_cache_forget_its_paths() -> None:
    assert parse(request(sftp.REMOVE, f"{OWN}/f".encode())).changes == (("nimbix-burst", f"pod-{POD}.main", "f"),)
    assert len(parse(extended("posix-rename@openssh.com", f"{OWN}/a".encode(), f"{OWN}/b".encode())).changes) == 2
    assert parse(request(sftp.MKDIR, f"{OWN}/d".encode(), 0)).changes == ()
    hardlink = extended("hardlink@openssh.com", f"{OWN}/a".encode(), f"{OWN}/b".encode())
    assert parse(hardlink).changes == (("nimbix-burst", f"pod-{POD}.main", "b"),)


@pytest.mark.parametrize(
    "packet",
    [
        request(sftp.OPEN, b"/etc/passwd", 1, 0),
        request(sftp.OPENDIR, b"nimbix-burst"),
        request(sftp.RENAME, f"{OWN}/a".encode(), b"nimbix-burst/pod-x/b"),
        extended("posix-rename@openssh.com", b"nimbix-burst/pod-x/a", f"{OWN}/b".encode()),
        request(sftp.SYMLINK, b"nimbix-burst/pod-x/l", b"anything"),
    ],
)
def test_a_path_outside_the_pods_is_refused_before_the_vault_sees_it(packet: bytes) -> None:
    with pytest.raises(PathRefused):
        parse(packet)


@pytest.mark.parametrize(
    ("packet", "says"),
    [
        (extended("expand-path@openssh.com", b"~"), "'expand-path@openssh.com' is not passed"),
        (extended("home-directory", b"alice"), "not passed"),
        (request(sftp.INIT), "type 1 is not passed"),
        (request(60), "type 60 is not passed"),
        (frame(bytes([sftp.OPEN]) + struct.pack(">I", 1) + struct.pack(">I", 99)), "ended early"),
    ],
)
def test_a_request_the_gateway_does_not_know_is_refused(packet: bytes, says: str) -> None:
    with pytest.raises(BadPacket, match=says):
        parse(packet)


@pytest.mark.parametrize(
    ("client_swaps", "vault_swaps", "sent", "passed"),
    [
        (False, False, (b"L", b"target"), (b"L", b"target")),
        (False, True, (b"L", b"target"), (b"target", b"L")),
        (True, False, (b"target", b"L"), (b"L", b"target")),
        (True, True, (b"target", b"L"), (b"target", b"L")),
    ],
)
def test_symlinks_paths_reach_the_vault_in_the_order_it_reads_them(
    client_swaps: bool, vault_swaps: bool, sent: tuple[bytes, bytes], passed: tuple[bytes, bytes]
) -> None:
    def named(pair: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        return tuple(f"{OWN}/l".encode() if p == b"L" else p for p in pair)  # type: ignore[return-value]

    parsed = parse(request(sftp.SYMLINK, *named(sent)), client_swaps=client_swaps, vault_swaps=vault_swaps)
    assert parsed.packet == request(sftp.SYMLINK, *named(passed))
    assert [c.how for c in parsed.checks] == ["parent"]  # the target is text: any may be stored


def test_the_vaults_version_keeps_only_the_extensions_passed() -> None:
    answer = frame(
        bytes([sftp.VERSION])
        + struct.pack(">I", 3)
        + encode_string(b"posix-rename@openssh.com")
        + encode_string(b"1")
        + encode_string(b"expand-path@openssh.com")
        + encode_string(b"1")
    )
    kept = frame(
        bytes([sftp.VERSION]) + struct.pack(">I", 3) + encode_string(b"posix-rename@openssh.com") + encode_string(b"1")
    )
    assert filter_version(answer) == kept
    with pytest.raises(BadPacket, match="version 6"):
        filter_version(frame(bytes([sftp.VERSION]) + struct.pack(">I", 6)))


@pytest.mark.parametrize(
    ("software", "swaps"), [("OpenSSH_9.6p1", True), ("paramiko_3.4", True), ("AsyncSSH_2.24.1", False)]
)
def test_which_peers_write_symlink_the_other_way_round(software: str, swaps: bool) -> None:
    assert sftp.swaps_symlink(software) is swaps


@pytest.mark.parametrize(
    ("packet", "barrier"),
    [
        (request(sftp.SYMLINK, f"{OWN}/l".encode(), b"../x"), True),
        (request(sftp.RENAME, f"{OWN}/a".encode(), f"{OWN}/b".encode()), True),
        (extended("posix-rename@openssh.com", f"{OWN}/a".encode(), f"{OWN}/b".encode()), True),
        (extended("hardlink@openssh.com", f"{OWN}/a".encode(), f"{OWN}/b".encode()), True),  # of a link, a link
        (request(sftp.REMOVE, f"{OWN}/f".encode()), False),  # a removal puts no link anywhere: uploads stay pipelined
        (request(sftp.OPEN, f"{OWN}/f".encode(), 0x01, 0), False),
        (request(sftp.MKDIR, f"{OWN}/d".encode(), 0), False),
    ],
)
def test_a_request_that_may_put_a_link_on_a_path_holds_the_checks_after_it(packet: bytes, barrier: bool) -> None:
    assert parse(packet).barrier is barrier


@pytest.mark.parametrize(
    ("packet", "early"),
    [
        (request(sftp.OPEN, f"{OWN}/f".encode(), sftp.FXF_READ, 0), True),
        (request(sftp.OPEN, f"{OWN}/f".encode(), sftp.FXF_READ | 0x02, 0), False),
        (request(sftp.OPEN, f"{OWN}/f".encode(), 0x02 | 0x08 | 0x10, 0), False),
        (request(sftp.OPEN, f"{OWN}/f".encode(), 0x02 | 0x08 | 0x20, 0), False),
        (request(sftp.OPEN, f"{OWN}/f".encode(), 0x04, 0), False),  # append
        (request(sftp.OPENDIR, OWN.encode()), True),
        (request(sftp.STAT, f"{OWN}/f".encode()), True),
        (request(sftp.REALPATH, f"{OWN}/f".encode()), True),
        (request(sftp.SETSTAT, f"{OWN}/f".encode(), 0), False),
        (request(sftp.REMOVE, f"{OWN}/f".encode()), False),
        (request(sftp.MKDIR, f"{OWN}/d".encode(), 0), False),
        (request(sftp.RENAME, f"{OWN}/a".encode(), f"{OWN}/b".encode()), False),
        (extended("statvfs@openssh.com", OWN.encode()), False),
    ],
)
def test_only_a_request_that_changes_nothing_goes_with_its_checks(packet: bytes, early: bool) -> None:
    assert parse(packet).early is early


def test_a_handle_answer_gives_the_handle_a_close_takes() -> None:
    answer = frame(bytes([sftp.HANDLE]) + struct.pack(">I", 9) + encode_string(b"h-1"))
    assert sftp.handle_of(answer) == b"h-1"
    assert sftp.handle_of(sftp.status_packet(9, 0, "")) is None
    assert sftp.close_packet(9, b"h-1") == request(sftp.CLOSE, b"h-1", request_id=9)
