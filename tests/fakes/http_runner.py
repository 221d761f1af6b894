"""Run an ASGI app (a fake REST API or a fake OpenAI server) on a free loopback port in a thread, or on a
socket the caller made (e.g. inside a simulated VM's network namespace), optionally over TLS."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

# Waiting for the server thread to listen: a condition polled, so this is only the give-up time of a
# machine so loaded that a thread is not scheduled for a minute, never a pause.
START_DEADLINE_S = 60.0


class ServerThread:
    """``with ServerThread(app) as srv: srv.url`` -> ``http://127.0.0.1:PORT``; stops on exit.

    The listening socket is bound here and handed to uvicorn: the port is held from the moment it is
    chosen (asking the OS for a free port, closing it and letting uvicorn bind it again later let another
    process of a loaded machine take it in between).
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
    ) -> None:
        self.app = app
        self.host = host
        if sock is None:
            # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
            # without it every small response waited out Nagle and delayed ACK (40 ms a request, not 0.6 ms)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        self._socket = sock
        self.port = sock.getsockname()[1]
        scheme = "https" if ssl_certfile else "http"
        self.url = f"{scheme}://{host}:{self.port}"
        config = uvicorn.Config(
            app, host=host, port=self.port, log_level="warning", lifespan="off",
            ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + START_DEADLINE_S
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"fake server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    """A port free on ``host`` now (for a server that binds it itself later, e.g. inside a VM's namespace)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
