"""How much of the gateway's SFTP endpoint one pod may hold at once (pure bookkeeping, no I/O).

A burst pod's runner opens one SSH connection per burst container that stages data, with at most four
SFTP sessions on it (entrypoint.vault_files.transfer_depth); a restarted runner may overlap its
predecessor's connection for a moment. Each connection the gateway accepts holds a connection to the
vault and buffers for its sessions, so without a bound one pod's token could take the gateway's memory
and the vault's connections from every other tenant. A connection over the bound is refused at login,
a session over it when requested; both say why in the gateway's log.
"""

from __future__ import annotations

from typing import Final

MAX_CONNECTIONS_PER_POD: Final = 8
MAX_SESSIONS_PER_CONNECTION: Final = 8


class PodConnections:
    """The logged-in connections each pod holds now, bounded by `limit`."""

    def __init__(self, limit: int = MAX_CONNECTIONS_PER_POD) -> None:
        self._limit = limit
        self._open: dict[str, int] = {}

    def admit(self, pod_uid: str) -> str | None:
        """Count one more connection of the pod; the refusal's reason when it already holds `limit`."""
        held = self._open.get(pod_uid, 0)
        if held >= self._limit:
            return (
                f"the pod already holds {held} connections to the gateway's SFTP endpoint, the most one pod may;"
                " close one (a runner needs one per burst container)"
            )
        self._open[pod_uid] = held + 1
        return None

    def release(self, pod_uid: str) -> None:
        """One connection of the pod closed (it was admitted)."""
        held = self._open.get(pod_uid, 0) - 1
        if held > 0:
            self._open[pod_uid] = held
        else:
            self._open.pop(pod_uid, None)

    def held(self, pod_uid: str) -> int:
        return self._open.get(pod_uid, 0)


def session_refusal(open_sessions: int, limit: int = MAX_SESSIONS_PER_CONNECTION) -> str | None:
    """Why one more SFTP session on a connection holding `open_sessions` is refused (None: it is not)."""
    if open_sessions < limit:
        return None
    return f"the connection already holds {open_sessions} SFTP sessions, the most one may (a runner opens four)"
