"""A loopback TCP proxy that a test can cut: to interrupt a client's connections for real."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Self


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to a target. `cut()` drops every connection and refuses new ones
    (accept-then-close) until `restore()`.

    With more targets (`also`), each new connection goes to the next one in turn, skipping any that
    refuses, like a Service spreading connections over its endpoints.
    """

    def __init__(self, target_host: str, target_port: int, *also: tuple[str, int]) -> None:
        self._targets = [(target_host, target_port), *also]
        self._next = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="tcpproxy", daemon=True)
        self._thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cut(self) -> None:
        self._open.clear()
        self._drop_all()

    def restore(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed = True
        self._open.clear()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._drop_all()

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()
                continue
            upstream = self._connect_next()
            if upstream is None:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _connect_next(self) -> socket.socket | None:
        for _ in range(len(self._targets)):
            target = self._targets[self._next % len(self._targets)]
            self._next += 1
            try:
                upstream = socket.create_connection(target, timeout=5)
            except OSError:
                continue
            upstream.settimeout(None)
            return upstream
        return None

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
