"""BackgroundWriter: the log's lines, written by a thread of their own in batches (issue 15)."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable

from webhook.log_writer import BackgroundWriter


class BlockingStream(io.StringIO):
    """A stdout whose reader has stopped: write() waits until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def write(self, text: str) -> int:
        self.entered.set()
        self.release.wait(timeout=10)
        return super().write(text)


def dropped(count: int) -> str:
    return f"dropped {count}\n"


def wait_for(predicate: Callable[[], bool], *, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_every_line_is_written_in_order_from_every_thread() -> None:
    target = io.StringIO()
    writer = BackgroundWriter(target, dropped_line=dropped, batch_seconds=0.001)

    def lines(name: str) -> None:
        for i in range(500):
            writer.write(f"{name} {i}\n")

    threads = [threading.Thread(target=lines, args=(name,)) for name in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_for(lambda: target.getvalue().count("\n") == 1500)
    written = target.getvalue().splitlines()
    for name in ("a", "b", "c"):
        assert [line for line in written if line.startswith(name + " ")] == [f"{name} {i}" for i in range(500)]


def test_a_stopped_reader_does_not_block_the_writer_and_overflow_is_counted() -> None:
    target = BlockingStream()
    writer = BackgroundWriter(target, dropped_line=dropped, batch_seconds=0.001, max_pending_chars=100)
    writer.write("first\n")
    assert target.entered.wait(timeout=5)  # the writer thread is now stuck in the target's write()
    began = time.monotonic()
    for i in range(50):
        writer.write(f"line {i:02d}\n")  # 8 characters each: 12 fit under 100, 38 are dropped
    assert time.monotonic() - began < 0.5  # returned without waiting for the reader
    target.release.set()
    wait_for(lambda: "dropped" in target.getvalue())
    written = target.getvalue().splitlines()
    assert written == ["first", *(f"line {i:02d}" for i in range(12)), "dropped 38"]


def test_drain_writes_what_is_queued_now() -> None:
    target = io.StringIO()
    writer = BackgroundWriter(target, dropped_line=dropped, batch_seconds=60)  # the thread would wait a minute
    writer.write("last words\n")
    writer.drain()
    assert target.getvalue() == "last words\n"
