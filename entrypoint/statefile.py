"""The restart state on disk: one small JSON file per container, replaced atomically.

I/O only; what the state means is `entrypoint.restart`. A write goes to a temporary file in the
same directory, is fsynced, renamed over the old file and the directory fsynced, so a runner
killed at any moment leaves either the old state or the new one, never half of one.
"""

import contextlib
import os
import tempfile
from pathlib import Path

from entrypoint import restart


class StateDirError(Exception):
    """NIMBIX_BURST_STATE_DIR is not a writable directory (the message says why)."""


class StateFile:
    def __init__(self, directory: Path, *, container: str) -> None:
        self.directory = directory
        self.path = directory / restart.build_state_name(container)

    @classmethod
    def open(cls, directory: str, *, container: str) -> "StateFile":
        """Check the directory once, at start: it must exist and take a file."""
        path = Path(directory)
        if not path.is_dir():
            raise StateDirError(f"{directory} does not exist or is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise StateDirError(f"{directory} is not writable by uid {os.getuid()}")
        store = cls(path, container=container)
        store._remove_leftovers()
        return store

    def _remove_leftovers(self) -> None:
        """A runner killed between its temporary file and the rename left that file behind; the
        container has one runner at a time, so at start every such file of ours is stale."""
        for leftover in self.directory.glob(f"{self._temp_prefix}*.tmp"):
            with contextlib.suppress(OSError):
                leftover.unlink()

    @property
    def _temp_prefix(self) -> str:
        return f".{self.path.name}."

    def load(self) -> restart.RunnerState | None:
        """The saved state; None when there is none. Raises StateError for an unreadable one."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return restart.parse_state(text)

    def save(self, state: restart.RunnerState) -> None:
        data = restart.render_state(state).encode()
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=self._temp_prefix, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)
