"""Run one call per item, all at once (a thread each): how the e2e tests create pods concurrently."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def run_at_once(
    call: Callable[[Item], Result], items: Sequence[Item], *, barrier: bool = False
) -> tuple[list[Result], list[BaseException]]:
    """`call(item)` for every item in its own thread; returns what the calls returned and what they
    raised, each in the order they finished. `barrier`: every thread waits until all have started,
    so the calls really overlap."""
    results: list[Result] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(len(items)) if barrier and items else None

    def run(item: Item) -> None:
        if start is not None:
            start.wait()
        try:
            result = call(item)
        except BaseException as exc:  # handed back to the test, which decides
            with lock:
                errors.append(exc)
        else:
            with lock:
                results.append(result)

    threads = [threading.Thread(target=run, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors
