"""Loopback ports that never answer, as a metadata server or token endpoint that is down looks to a
client: one that completes the handshake and stays silent, one that drops the connection attempt.
Shared by the credential tests and ``scripts/bench_credentials.py``."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def silent_port() -> Iterator[tuple[str, list[socket.socket]]]:
    """(``127.0.0.1:PORT``, the connections accepted so far): accepts, counts, and never answers."""
    accepted: list[socket.socket] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.1)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join()
        for s in [*accepted, server]:
            s.close()


@contextlib.contextmanager
def dropping_port() -> Iterator[tuple[str, list[socket.socket]]]:
    """(``127.0.0.1:PORT``, ``[]``): its accept queue is full, so the kernel drops new connection attempts
    and a connect waits for its timeout. The empty list keeps the shape of `silent_port` (nothing is
    ever accepted)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        fillers = []
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                c.connect(server.getsockname())
            fillers.append(c)
        try:
            yield f"127.0.0.1:{server.getsockname()[1]}", []
        finally:
            for c in fillers:
                c.close()
