"""Multi-process tests that only PostgreSQL can have: workers on "other hosts" and a
leader cut off from the server.

Everything else runs on both backends through the `db` fixture (engine, recovery,
pause, schedules; the four-process exactly-once run is
`tests/recovery/test_processes.py::test_four_processes_...[postgres]`). The tests here
take the same fixture restricted to its postgres case (`ONLY_POSTGRES`), so an
unreachable server skips them outside CI and fails them under `CI=true`.

`Proxy` is a TCP relay between one process and the server that a test can cut and
restore: a network partition of that process alone. Cutting closes every relayed
connection (the server sees EOF and ends those backends) and refuses new ones, so the
process's next call fails at once instead of waiting on a silent socket.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import pytest

__all__ = ["ONLY_POSTGRES", "Proxy", "now_ms", "via"]

ONLY_POSTGRES = [
    pytest.mark.postgres,
    pytest.mark.parametrize("db", ["postgres"], indirect=True),
]


def now_ms() -> int:
    return int(time.time() * 1000)


def via(url: str, port: int) -> str:
    """`url` with its server port replaced (to go through a `Proxy`)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    auth = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{auth}{host}:{port}"))


def server_of(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


class Proxy:
    """Relays 127.0.0.1:`port` to `target` until `cut()`; `restore()` listens again on
    the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self.relayed = 0
        self.restore()

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.05)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        self._start(self._accept, listener)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            with self._lock:
                if self._listener is not listener:
                    return
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
                client.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._sockets |= {client, upstream}
                self.relayed += 1
            self._start(self._pump, client, upstream)
            self._start(self._pump, upstream, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Close every relayed connection and refuse new ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, set()
        if listener is not None:
            listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.cut()
        for thread in self._threads:
            thread.join(timeout=5)
