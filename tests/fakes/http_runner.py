"""Run an ASGI app (a fake REST API or a fake OpenAI server) on a free loopback port in a thread, or on a
socket the caller made (e.g. inside a simulated VM's network namespace), optionally over TLS."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


class ServerThread:
    """``with ServerThread(app) as srv: srv.url`` -> ``http://127.0.0.1:PORT``; stops on exit."""

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
        self.port = sock.getsockname()[1] if sock else port or _free_port(host)
        scheme = "https" if ssl_certfile else "http"
        self.url = f"{scheme}://{host}:{self.port}"
        config = uvicorn.Config(
            app, host=host, port=self.port, log_level="warning", lifespan="off",
            ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        sockets = [sock] if sock else None
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": sockets}, daemon=True)

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"fake server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
