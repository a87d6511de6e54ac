"""gateway.vault_proxy.PathChecker against a real directory tree as the vault (os.path.realpath standing
for the vault's realpath): what one session's requests change, its cache of resolved directories forgets."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from gateway import sftp_requests as sftp
from gateway.sftp_requests import encode_string, frame, parse_request
from gateway.vault_proxy import PathChecker
from gateway.vault_scope import PathRefused, VaultGrant

POD = "11111111-1111-1111-1111-111111111111"
OTHER = "22222222-2222-2222-2222-222222222222"
GRANT = VaultGrant(POD)
OWN = f"nimbix-burst/pod-{POD}"


def packet(kind: int, *fields: bytes | int) -> bytes:
    body = bytes([kind]) + (7).to_bytes(4, "big")
    for field in fields:
        body += field.to_bytes(4, "big") if isinstance(field, int) else encode_string(field)
    return frame(body)


def test_a_hard_link_to_a_link_made_where_a_directory_was_looked_up_is_not_gone_through(tmp_path: Path) -> None:
    """OpenSSH's sftp-server links the link itself (link(2)): a relative link that stays in the pod's
    directory where it is leads out of it one level up. The path the session looked up before must be
    resolved again, not taken from the cache."""
    (tmp_path / OWN / "a").mkdir(parents=True)
    (tmp_path / f"nimbix-burst/pod-{OTHER}").mkdir(parents=True)
    (tmp_path / f"nimbix-burst/pod-{OTHER}/precious").write_text("not yours")
    os.symlink(f"../pod-{OTHER}", tmp_path / OWN / "a" / "l")  # in a/: the pod's own a/pod-<other>

    async def resolve(path: str) -> str:
        return os.path.realpath(tmp_path / path)

    async def run() -> None:
        checker = PathChecker(GRANT, resolve, str(tmp_path))

        async def sent(raw: bytes) -> None:
            """What the proxy does with a request: its checks, then the vault runs it, then it forgets."""
            request = parse_request(raw, GRANT, client_swaps=False, vault_swaps=False)
            for check in request.checks:
                await checker.check(check)
            if request.kind == sftp.EXTENDED:
                os.link(tmp_path / OWN / "a" / "l", tmp_path / OWN / "new", follow_symlinks=False)
            checker.sent(request)

        await sent(packet(sftp.LSTAT, f"{OWN}/new/precious".encode()))  # not there yet: looked up
        await sent(packet(sftp.EXTENDED, b"hardlink@openssh.com", f"{OWN}/a/l".encode(), f"{OWN}/new".encode()))
        try:
            await sent(packet(sftp.REMOVE, f"{OWN}/new/precious".encode()))
        except PathRefused:
            return
        raise AssertionError("the removal through the hard-linked link was let through")

    asyncio.run(run())


def test_a_directory_looked_up_through_a_link_is_resolved_again_once_a_link_is_swapped_in(tmp_path: Path) -> None:
    """`q` is a link to the pod's `d`; `d` is then swapped for a link to another pod's directory. The
    session looked up `q/...` before: that answer went through `d`, which `q`'s name does not show."""
    (tmp_path / OWN / "d").mkdir(parents=True)
    (tmp_path / f"nimbix-burst/pod-{OTHER}").mkdir(parents=True)
    (tmp_path / f"nimbix-burst/pod-{OTHER}/precious").write_text("not yours")
    os.symlink("d", tmp_path / OWN / "q")

    async def resolve(path: str) -> str:
        return os.path.realpath(tmp_path / path)

    async def run() -> None:
        checker = PathChecker(GRANT, resolve, str(tmp_path))

        async def sent(raw: bytes) -> None:
            request = parse_request(raw, GRANT, client_swaps=False, vault_swaps=False)
            for check in request.checks:
                await checker.check(check)
            if request.kind == sftp.RMDIR:
                (tmp_path / OWN / "d").rmdir()
            if request.kind == sftp.SYMLINK:
                os.symlink(f"../pod-{OTHER}", tmp_path / OWN / "d")
            checker.sent(request)

        await sent(packet(sftp.LSTAT, f"{OWN}/q/precious".encode()))  # looked up: q is the pod's d
        await sent(packet(sftp.RMDIR, f"{OWN}/d".encode()))
        await sent(packet(sftp.SYMLINK, f"{OWN}/d".encode(), f"../pod-{OTHER}".encode()))
        try:
            await sent(packet(sftp.REMOVE, f"{OWN}/q/precious".encode()))
        except PathRefused:
            return
        raise AssertionError("the removal through the swapped-in link was let through")

    asyncio.run(run())
