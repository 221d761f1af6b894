"""The shared frame of a scripted fake model API (Gemini API, OpenAI Responses / Chat Completions): the
turns a test queues, and the app served on a loopback port for the length of a ``with`` block."""

from __future__ import annotations

from collections import deque
from typing import Any, Generic, Self, TypeVar

from tests.fakes.http_runner import ServerThread

TurnT = TypeVar("TurnT")


class ScriptedApi(Generic[TurnT]):
    """``with Fake() as api: api.script(turn, ...)``; a subclass sets ``self.app`` (an ASGI app) and pops
    ``self.turns`` as requests arrive."""

    app: Any

    def __init__(self) -> None:
        self.turns: deque[TurnT] = deque()
        self._thread: ServerThread | None = None

    def script(self, *turns: TurnT) -> None:
        self.turns.extend(turns)

    @property
    def url(self) -> str:
        assert self._thread is not None, f"{type(self).__name__} not started"
        return self._thread.url

    def __enter__(self) -> Self:
        self._thread = ServerThread(self.app).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread:
            self._thread.stop()
