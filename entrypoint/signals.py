"""The runner's SIGTERM/SIGINT: recorded by the handler, raised where the run can be interrupted.

I/O-free, but it is the shell's: the signal handler (set in `entrypoint.__main__`) calls
`CancelToken.request`, and the remote run reads the token to turn a signal into an event.
"""

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class CancelRequested(BaseException):
    """Raised (from a signal handler) to abandon whatever the runner is waiting on.

    A BaseException, like KeyboardInterrupt, so no `except Exception` on the way swallows it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class CancelToken:
    """Records the first SIGTERM/SIGINT; interrupts the runner only where that is safe.

    Inside `interruptible()` a request raises CancelRequested at once (the signal handler runs in
    the main thread, so a blocked HTTP read or sleep is abandoned). Inside `deferred()` it is only
    recorded and raised on leaving: used around the submit POST, whose outcome must be known.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._interruptible = False

    def request(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        if self._interruptible:
            self._interruptible = False
            raise CancelRequested(self.signum)

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        previous = self._interruptible
        self._interruptible = True
        try:
            if self.signum is not None:
                self._interruptible = False
                raise CancelRequested(self.signum)
            yield
        finally:
            self._interruptible = previous

    @contextmanager
    def deferred(self) -> Iterator[None]:
        previous = self._interruptible
        self._interruptible = False
        try:
            yield
        finally:
            self._interruptible = previous
            if previous and self.signum is not None:
                # Also when the body failed: the cancel wins, and its handler settles the outcome.
                self._interruptible = False
                raise CancelRequested(self.signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
