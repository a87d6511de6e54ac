"""How one file is copied to and from the vault: the partial file it is written as, when a copy is
current, the mode and time a copy carries, how much a transfer keeps in flight, and its progress
lines. Pure; the transfers (`entrypoint.vault_upload`, `entrypoint.vault_download`,
`entrypoint.local_tree`) do the I/O.
"""

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Final

# A file being written is `.nbpart-<16 hex digits of its name's hash>` beside it, renamed into place
# only once whole: 24 bytes whatever the name (a name of 255 bytes, the most a volume allows, has a
# part file too). Runners before wrote `<name>.nbpart`: both are the runner's own, never data.
PART_PREFIX: Final = ".nbpart-"
LEGACY_PART_SUFFIX: Final = ".nbpart"
_PART_RE: Final = re.compile(r"\.nbpart-[0-9a-f]{16}")
# SFTP (version 3) carries a file's times as unsigned 32-bit seconds.
MAX_SFTP_TIME: Final = 2**32 - 1


def is_current(*, size: int, mtime: int, copy: tuple[int, int] | None) -> bool:
    """Whether a copy (size, modification time in whole seconds, as SFTP carries it) is the file
    as it is now: the same size and time. The copy gets the source's time only once it is whole."""
    return copy is not None and copy == (size, mtime)


def part_name(name: str) -> str:
    """The partial file's name for a file named `name` (any bytes the volume allows, as
    os.fsdecode gives them): short and the same on every try, so a resume finds it."""
    digest = hashlib.blake2b(name.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()
    return PART_PREFIX + digest


def is_part_name(name: str) -> bool:
    """Whether `name` is a partial file of a runner (this one's or an earlier one's): never data."""
    return name.endswith(LEGACY_PART_SUFFIX) or _PART_RE.fullmatch(name) is not None


def file_mode(mode: int) -> int:
    """The permission bits a copy carries (read, write, execute for each); never set-id bits."""
    return mode & 0o777


def sftp_time(mtime_ns: int) -> int:
    """A modification time in the seconds SFTP carries: before 1970 or after 2106 it is clamped."""
    return min(max(mtime_ns // 1_000_000_000, 0), MAX_SFTP_TIME)


# Below this round trip the vault is near (a LAN, loopback): the CPU per packet sets the pace, and one
# session with three blocks of a file in flight is quickest (four sessions made a loopback upload of
# many files half as slow again).
NEAR_RTT_SECONDS: Final = 0.005
NEAR_DEPTH_BLOCKS: Final = 3
# Farther, what is in flight sets the pace: a file's blocks in flight are the rate aimed at times the
# round trip (6.4 MiB at 50 ms, 19.2 MiB at 150 ms), between the bounds below.
TARGET_BYTES_PER_SECOND: Final = 128 << 20
BLOCK_BYTES: Final = 1 << 20  # transfer_pass.CHUNK_BYTES
FAR_MIN_BLOCKS: Final = 6
# A session's channel has the server's window (OpenSSH: 2 MiB): a session carries three quarters of
# it in blocks (on average: a file's blocks go round the sessions), so a window seldom holds one back.
SESSION_BLOCK_BYTES: Final = 1536 << 10
FAR_MIN_SESSIONS: Final = 4
# OpenSSH's sshd allows 10 sessions per connection unless told otherwise (MaxSessions): 8 leave room.
MAX_SESSIONS: Final = 8
# Each block in flight is held in the runner's memory (with asyncssh's copies of it), and 12 are
# what 8 sessions carry: 80 MiB/s at 150 ms.
MAX_BLOCKS: Final = MAX_SESSIONS * SESSION_BLOCK_BYTES // BLOCK_BYTES
# Blocks held in memory at once over all files (a near vault, or a far one's least): six.
MIN_BLOCKS_IN_MEMORY: Final = 6


@dataclass(frozen=True, slots=True)
class Depth:
    """How much a transfer keeps in flight: SFTP sessions, a file's blocks, and the blocks held in
    memory over every file at once."""

    sessions: int
    blocks_per_file: int
    blocks_in_memory: int = MIN_BLOCKS_IN_MEMORY


def transfer_depth(rtt_seconds: float, *, target_bytes_per_second: int = TARGET_BYTES_PER_SECOND) -> Depth:
    """The depth for a vault a measured round trip away: a far vault's blocks in flight are what
    `target_bytes_per_second` puts in flight over the round trip (bounded), its sessions as many as
    those blocks need windows for."""
    if rtt_seconds < NEAR_RTT_SECONDS:
        return Depth(1, NEAR_DEPTH_BLOCKS)
    wanted = math.ceil(target_bytes_per_second * rtt_seconds / BLOCK_BYTES)
    blocks = min(max(wanted, FAR_MIN_BLOCKS), MAX_BLOCKS)
    sessions = min(max(math.ceil(blocks * BLOCK_BYTES / SESSION_BLOCK_BYTES), FAR_MIN_SESSIONS), MAX_SESSIONS)
    return Depth(sessions, blocks, max(blocks, MIN_BLOCKS_IN_MEMORY))


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def format_progress(
    direction: str, *, done: int, total: int, seconds: float, files_done: int = 0, files: int = 0
) -> str:
    """One progress line:
    `stage-in 1200 of 2400 files, 512.0 MiB of 1.0 GiB (50%), 85.3 MiB/s, ETA 6 s`."""
    share = 100 * done // total if total else 100
    rate = done / seconds if seconds > 0 else 0.0
    eta = f"{(total - done) / rate:.0f} s" if rate > 0 else "unknown"
    return (
        f"nimbix-burst: {direction} {files_done} of {files} files, {format_bytes(done)} of {format_bytes(total)}"
        f" ({share}%), {format_bytes(rate)}/s, ETA {eta}"
    )
