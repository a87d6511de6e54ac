"""SFTP (version 3) as the gateway's vault proxy reads it: a request's type, id and paths, which
checks each request needs before it is passed on, and the few packets the gateway writes itself (pure).

The proxy passes every request on as it came (its handles are the vault's, of this session's own
opens), except that a request naming a path is checked first (gateway.vault_scope) and a request
the gateway does not know is refused: an SFTP extension passes only if it is listed here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from gateway.vault_scope import Resolve, VaultGrant, check_access, split_path

SFTP_VERSION: Final = 3
# Packet types (draft-ietf-secsh-filexfer-02).
INIT, VERSION, OPEN, CLOSE, READ, WRITE, LSTAT, FSTAT, SETSTAT, FSETSTAT = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
OPENDIR, READDIR, REMOVE, MKDIR, RMDIR, REALPATH, STAT, RENAME, READLINK, SYMLINK = range(11, 21)
STATUS, HANDLE, EXTENDED = 101, 102, 200
# Status codes.
FX_NO_SUCH_FILE, FX_PERMISSION_DENIED, FX_FAILURE, FX_BAD_MESSAGE, FX_OP_UNSUPPORTED = 2, 3, 4, 5, 8
# OPEN's pflags.
FXF_READ, FXF_CREAT, FXF_EXCL = 0x01, 0x08, 0x20

HANDLE_REQUESTS: Final = frozenset({CLOSE, READ, WRITE, FSTAT, FSETSTAT, READDIR})
# Per path request: how the vault resolves each path, and whether a passage (nimbix-burst itself) may
# be its target. An OPEN that creates exclusively never follows a link at its end: its directory is enough.
PATH_REQUESTS: Final[dict[int, tuple[tuple[Resolve, bool], ...]]] = {
    OPEN: (("full", False),),
    LSTAT: (("parent", True),),
    SETSTAT: (("full", False),),
    OPENDIR: (("full", False),),
    REMOVE: (("parent", False),),
    MKDIR: (("parent", True),),
    RMDIR: (("parent", False),),
    REALPATH: (("full", True),),
    STAT: (("full", True),),
    RENAME: (("parent", False), ("parent", False)),
    READLINK: (("parent", False),),
}
# Requests that change nothing in the vault, whatever their path (an OPEN only when it reads alone).
EARLY_REQUESTS: Final = frozenset({OPENDIR, STAT, REALPATH})
HANDLE_EXTENSIONS: Final = frozenset({"fstatvfs@openssh.com", "fsync@openssh.com"})
PATH_EXTENSIONS: Final[dict[str, tuple[tuple[Resolve, bool], ...]]] = {
    "posix-rename@openssh.com": (("parent", False), ("parent", False)),
    "statvfs@openssh.com": (("full", False),),
    "hardlink@openssh.com": (("full", False), ("parent", False)),
    "lsetstat@openssh.com": (("parent", False),),
}
# What the proxy tells the client the vault offers: the extensions it passes, if the vault has them.
PASSED_EXTENSIONS: Final = HANDLE_EXTENSIONS | PATH_EXTENSIONS.keys() | {"limits@openssh.com"}
OPENSSH_SYMLINK_IMPLS: Final = ("OpenSSH", "paramiko")  # they send SYMLINK's two paths the other way round


class BadPacket(ValueError):
    """A packet that is not SFTP version 3 as the gateway reads it."""


@dataclass(frozen=True, slots=True)
class PathCheck:
    parts: tuple[str, ...]
    how: Resolve
    passage_ok: bool


@dataclass(frozen=True, slots=True)
class Request:
    """One client request: `checks` to make before `packet` is passed on (none: at once)."""

    kind: int
    id: int
    packet: bytes
    checks: tuple[PathCheck, ...] = ()
    # Paths whose resolved directories a cache must forget once this request has run.
    changes: tuple[tuple[str, ...], ...] = ()
    # It may put a link where a path was (SYMLINK, a rename): the checks of later requests wait for its answer.
    barrier: bool = False
    # It changes nothing in the vault (a read-only open, a directory's open, a stat, a realpath): it may
    # go to the vault with its checks, its answer held until they pass (a handle closed if they fail),
    # which saves the round trip of the checks. A request that writes, creates or truncates never does.
    early: bool = False
    # The handle it names (CLOSE, READ, ...): passed only if the vault gave it to this client.
    handle: bytes | None = None


class _Reader:
    def __init__(self, body: bytes, offset: int) -> None:
        self.body, self.offset = body, offset

    def uint32(self) -> int:
        if self.offset + 4 > len(self.body):
            raise BadPacket("a packet ended early")
        (value,) = struct.unpack_from(">I", self.body, self.offset)
        self.offset += 4
        return int(value)

    def string(self) -> bytes:
        size = self.uint32()
        if self.offset + size > len(self.body):
            raise BadPacket("a packet ended early")
        value = self.body[self.offset : self.offset + size]
        self.offset += size
        return value


def encode_string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def status_packet(request_id: int, code: int, message: str) -> bytes:
    body = bytes([STATUS]) + struct.pack(">II", request_id, code) + encode_string(message.encode()) + encode_string(b"")
    return frame(body)


def init_packet() -> bytes:
    return frame(bytes([INIT]) + struct.pack(">I", SFTP_VERSION))


def filter_version(packet: bytes) -> bytes:
    """The vault's VERSION answer with only the extensions the proxy passes; BadPacket for another
    version than 3 (the proxy asks for 3)."""
    if len(packet) < 9 or packet[4] != VERSION:
        raise BadPacket("the vault did not answer SFTP's INIT with VERSION")
    reader = _Reader(packet, 5)
    version = reader.uint32()
    if version != SFTP_VERSION:
        raise BadPacket(f"the vault speaks SFTP version {version}, the gateway only {SFTP_VERSION}")
    kept = b""
    while reader.offset < len(packet):
        name, data = reader.string(), reader.string()
        if name.decode(errors="replace") in PASSED_EXTENSIONS:
            kept += encode_string(name) + encode_string(data)
    return frame(bytes([VERSION]) + struct.pack(">I", version) + kept)


def _path(raw: bytes) -> tuple[str, ...]:
    return split_path(raw.decode("utf-8", errors="surrogateescape"))


def _resolved_as(raw: bytes, how: Resolve) -> Resolve:
    """How the vault resolves a path written so: one ending in `/` or `/.` (or the root, `.`) names
    what its last name leads to, and the vault follows a link there (OpenSSH's sftp-server passes
    the path to the system as written), whatever the request."""
    return "full" if raw.rsplit(b"/", 1)[-1] in (b"", b".") else how


def _checked(
    kind: int,
    *,
    request_id: int,
    packet: bytes,
    raw_paths: list[bytes],
    plan: tuple[tuple[Resolve, bool], ...],
    grant: VaultGrant,
    early: bool = False,
) -> Request:
    checks: list[PathCheck] = []
    for raw, (how, passage_ok) in zip(raw_paths, plan, strict=True):
        parts = _path(raw)
        check_access(parts, grant, passage_ok=passage_ok)
        checks.append(PathCheck(parts, _resolved_as(raw, how), passage_ok))
    changes = tuple(check.parts for check in checks) if kind in (REMOVE, RMDIR, RENAME) else ()
    return Request(kind, request_id, packet, tuple(checks), changes, barrier=kind == RENAME, early=early)


def parse_request(packet: bytes, grant: VaultGrant, *, client_swaps: bool, vault_swaps: bool) -> Request:
    """One framed request, with what to check; PathRefused for a path outside the pod's, BadPacket for
    a request the gateway does not pass (answered FX_OP_UNSUPPORTED). `client_swaps`/`vault_swaps`:
    the client or the vault writes SYMLINK's paths target first (OpenSSH's order)."""
    if len(packet) < 9:
        raise BadPacket("a request shorter than its type and id")
    kind = packet[4]
    reader = _Reader(packet, 5)
    request_id = reader.uint32()
    if kind in HANDLE_REQUESTS:
        return Request(kind, request_id, packet, handle=reader.string())
    if kind in PATH_REQUESTS:
        plan = PATH_REQUESTS[kind]
        paths = [reader.string() for _ in plan]
        early = kind in EARLY_REQUESTS
        if kind == OPEN:
            pflags = reader.uint32()
            early = pflags == FXF_READ
            if pflags & FXF_CREAT and pflags & FXF_EXCL:
                plan = (("parent", False),)
        return _checked(
            kind, request_id=request_id, packet=packet, raw_paths=paths, plan=plan, grant=grant, early=early
        )
    if kind == SYMLINK:
        first, second = reader.string(), reader.string()
        link, target = (second, first) if client_swaps else (first, second)
        parts = _path(link)
        check_access(parts, grant, passage_ok=False)
        # The target is the link's text, never followed here: any text may be stored.
        args = (
            encode_string(target) + encode_string(link) if vault_swaps else encode_string(link) + encode_string(target)
        )
        rewritten = frame(bytes([SYMLINK]) + struct.pack(">I", request_id) + args)
        check = PathCheck(parts, _resolved_as(link, "parent"), False)
        return Request(kind, request_id, rewritten, (check,), (parts,), barrier=True)
    if kind == EXTENDED:
        name = reader.string().decode(errors="replace")
        if name in HANDLE_EXTENSIONS:
            return Request(kind, request_id, packet, handle=reader.string())
        if name == "limits@openssh.com":
            return Request(kind, request_id, packet)
        if name in PATH_EXTENSIONS:
            plan = PATH_EXTENSIONS[name]
            raw_paths = [reader.string() for _ in plan]
            request = _checked(kind, request_id=request_id, packet=packet, raw_paths=raw_paths, plan=plan, grant=grant)
            if name == "posix-rename@openssh.com":
                changes = tuple(c.parts for c in request.checks)
                return Request(kind, request_id, packet, request.checks, changes, barrier=True)
            if name == "hardlink@openssh.com":
                # OpenSSH's link(2) links a link itself: its relative text, read from the new name's
                # directory, may lead elsewhere, so what was resolved at the new name is forgotten.
                changes = (request.checks[1].parts,)
                return Request(kind, request_id, packet, request.checks, changes, barrier=True)
            return request
        raise BadPacket(f"the SFTP extension {name!r} is not passed to the vault")
    raise BadPacket(f"SFTP request type {kind} is not passed to the vault")


def handle_of(answer: bytes) -> bytes | None:
    """The handle a HANDLE answer carries; None for another answer."""
    if len(answer) < 13 or answer[4] != HANDLE:
        return None
    return _Reader(answer, 9).string()


def close_packet(request_id: int, handle: bytes) -> bytes:
    return frame(bytes([CLOSE]) + struct.pack(">I", request_id) + encode_string(handle))


def request_id_of(packet: bytes) -> int:
    return struct.unpack_from(">I", packet, 5)[0] if len(packet) >= 9 else 0


def swaps_symlink(software_version: str) -> bool:
    """Whether a peer of this SSH software version writes SYMLINK's paths the other way round."""
    return any(name in software_version for name in OPENSSH_SYMLINK_IMPLS)
