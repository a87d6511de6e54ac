"""gateway.vault_proxy.VaultProxy wired between two local socket pairs (the pod's channel and the
vault's), each end's streams in the test's hands."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

from gateway.vault_proxy import Resolver, VaultProxy
from gateway.vault_scope import VaultGrant

POD = "11111111-1111-1111-1111-111111111111"


async def streams(sock: socket.socket) -> tuple[Any, Any]:
    return await asyncio.open_connection(sock=sock)


@dataclass
class Wired:
    """A proxy between a pod's socket and a vault's, each end's streams in the test's hands."""

    relay: asyncio.Task[None]
    pod: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    vault: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    proxy_writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]

    async def abort(self) -> None:
        """Every end closed at once, not flushed: what they hold is never read."""
        for writer in (*self.proxy_writers, self.pod[1], self.vault[1]):
            writer.transport.abort()
        await asyncio.sleep(0)  # the transports close their sockets on the next turn


async def wire_proxy(why_no_path: str = "", *, resolve: Resolver | None = None) -> Wired:
    """A running proxy whose path checks ask `resolve` (the vault's realpath, below a root of "/");
    without it, `why_no_path`: why no request of the test is resolved (an assertion if one is)."""
    pod_side, proxy_client = socket.socketpair()
    vault_side, proxy_vault = socket.socketpair()
    client_in, client_out = await streams(proxy_client)
    vault_in, vault_out = await streams(proxy_vault)

    async def unresolved(path: str) -> str:
        raise AssertionError(why_no_path)

    proxy = VaultProxy(
        VaultGrant(POD),
        client=(client_in, client_out),
        vault=(vault_in, vault_out),
        resolve=resolve if resolve is not None else unresolved,
        root="/",
        client_swaps=False,
        vault_swaps=False,
    )
    pod, vault = await streams(pod_side), await streams(vault_side)
    return Wired(asyncio.create_task(proxy.run()), pod, vault, (client_out, vault_out))
