"""BatchedStream: the log's lines written in batches by the event loop (issue 15)."""

from __future__ import annotations

import asyncio
import io
import threading

from webhook.log_writer import BatchedStream


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_unbound_a_line_goes_straight_through() -> None:
    target = CountingStream()
    stream = BatchedStream(target)
    stream.write("before the loop runs\n")
    assert (target.getvalue(), target.writes) == ("before the loop runs\n", 1)


async def test_bound_the_lines_of_a_batch_are_one_write_in_order_from_every_thread() -> None:
    target = CountingStream()
    stream = BatchedStream(target, batch_seconds=0.05)
    stream.bind(asyncio.get_running_loop())
    for i in range(100):
        stream.write(f"loop {i}\n")
    other = threading.Thread(target=lambda: [stream.write(f"thread {i}\n") for i in range(100)])
    other.start()
    other.join()
    assert target.getvalue() == ""  # queued, not written yet
    await asyncio.sleep(0.2)
    written = target.getvalue().splitlines()
    assert written == [*(f"loop {i}" for i in range(100)), *(f"thread {i}" for i in range(100))]
    assert target.writes == 1


async def test_a_line_from_another_thread_alone_is_written_too() -> None:
    target = CountingStream()
    stream = BatchedStream(target, batch_seconds=0.01)
    stream.bind(asyncio.get_running_loop())
    await asyncio.to_thread(stream.write, "from a watch thread\n")
    await asyncio.sleep(0.1)
    assert target.getvalue() == "from a watch thread\n"


async def test_unbind_writes_what_is_queued_and_goes_straight_through_again() -> None:
    target = CountingStream()
    stream = BatchedStream(target, batch_seconds=60)  # the timer would wait a minute
    stream.bind(asyncio.get_running_loop())
    stream.write("last words\n")
    stream.unbind()
    assert target.getvalue() == "last words\n"
    stream.write("after\n")
    assert target.getvalue() == "last words\nafter\n"
