"""The log's stream: lines written by a thread of their own, in batches (issue 15)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

BATCH_SECONDS = 0.01
MAX_PENDING_CHARS = 8 << 20  # ~30,000 admission lines


class BackgroundWriter:
    """A text stream for the log handler. write() queues the text and returns; a daemon thread writes
    what has queued in one write and one flush, at most every `batch_seconds`. So the event loop never
    waits on stdout: a slow reader of the pipe (the container runtime's log copier) cannot stall
    admissions, and a burst of reviews costs a system call per batch, not one per line. Lines keep
    their order: every line, from any thread, goes through the one queue.

    Bounded: past `max_pending_chars` queued, lines are dropped and counted, and `dropped_line(count)`
    is written once the writer catches up. flush() returns at once (a line is written within
    `batch_seconds`); drain() writes what is queued before the process exits."""

    def __init__(
        self,
        target: TextIO,
        *,
        dropped_line: Callable[[int], str],
        batch_seconds: float = BATCH_SECONDS,
        max_pending_chars: int = MAX_PENDING_CHARS,
    ) -> None:
        self._target = target
        self._dropped_line = dropped_line
        self._batch_seconds = batch_seconds
        self._max_pending_chars = max_pending_chars
        self._pending: list[str] = []
        self._pending_chars = 0
        self._dropped = 0
        self._lock = threading.Lock()  # the queue
        self._writing = threading.Lock()  # the target: taken before a batch is taken, so batches keep their order
        self._queued = threading.Event()
        threading.Thread(target=self._run, name="log-writer", daemon=True).start()

    def write(self, text: str) -> int:
        with self._lock:
            if self._pending_chars + len(text) > self._max_pending_chars:
                self._dropped += 1
            else:
                self._pending.append(text)
                self._pending_chars += len(text)
                if not self._queued.is_set():
                    self._queued.set()
        return len(text)

    def flush(self) -> None:
        """Nothing to wait for: the writer thread flushes each batch it writes."""

    def drain(self) -> None:
        """Write what is queued now, from the calling thread (at exit)."""
        self._write_batch()

    def _run(self) -> None:
        while True:
            self._queued.wait()
            time.sleep(self._batch_seconds)  # what arrives meanwhile joins this batch
            self._write_batch()

    def _write_batch(self) -> None:
        with self._writing:
            with self._lock:
                lines, self._pending, self._pending_chars = self._pending, [], 0
                dropped, self._dropped = self._dropped, 0
                self._queued.clear()
            if dropped:
                lines.append(self._dropped_line(dropped))
            if not lines:
                return
            try:
                self._target.write("".join(lines))
                self._target.flush()
            except (OSError, ValueError) as exc:  # as logging does: a lost line must not stop the webhook
                print(f"log lines not written: {exc}", file=sys.stderr)  # noqa: T201 - stdout is what failed
