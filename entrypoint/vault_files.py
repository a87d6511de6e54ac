"""How one file is copied to and from the vault: the partial file it is written as, when a copy is
current, the mode and time a copy carries, how much a transfer keeps in flight, and its progress
lines. Pure; the transfers (`entrypoint.vault_upload`, `entrypoint.vault_download`,
`entrypoint.local_tree`) do the I/O.
"""

import hashlib
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
# session with three blocks of a file in flight is quickest. Farther, what is in flight does: four
# sessions (each an SSH channel with its own window) and six blocks.
NEAR_RTT_SECONDS: Final = 0.005


@dataclass(frozen=True, slots=True)
class Depth:
    """How much a transfer keeps in flight: SFTP sessions, and a file's blocks."""

    sessions: int
    blocks_per_file: int


def transfer_depth(rtt_seconds: float) -> Depth:
    """The depth for a vault a measured round trip away."""
    return Depth(1, 3) if rtt_seconds < NEAR_RTT_SECONDS else Depth(4, 6)


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
