"""``DIR/state.json`` as ``make dev-up`` writes it: rewritten as each component starts, not once at
the end, so a dev-up that stops half-way (an error, Ctrl-C, a kill, a closed terminal) leaves a
state that ``make dev-down`` stops. Until the stack is up, ``phase`` is ``starting``.

The real node keeps its own state file (node.py); its path is recorded here before the node starts,
so ``down`` finds a node that was starting too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from devplatform.cluster import processes
from devplatform.cluster.processes import ManagedProcess

PHASE: Final = "phase"
STARTING: Final = "starting"
UP: Final = "up"


class StartRecord:
    """The processes and facts of a dev-up in progress, saved to ``path`` on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._processes: list[ManagedProcess] = []
        self._extra: dict[str, str] = {PHASE: STARTING}
        self._save()

    @property
    def processes(self) -> tuple[ManagedProcess, ...]:
        return tuple(self._processes)

    def add(self, proc: ManagedProcess) -> None:
        """Records a process the moment it is started (``down`` stops them newest first)."""
        self._processes.append(proc)
        self._save()

    def note(self, **facts: str) -> None:
        self._extra.update(facts)
        self._save()

    def finish(self, **facts: str) -> None:
        """The stack is up: its last facts, and ``phase`` ``up``."""
        self.note(**facts, **{PHASE: UP})

    def _save(self) -> None:
        processes.save_state(self.path, self._processes, self._extra)
