"""The roots the MCP client declares, kept current for `tpu_devops.host.files`.

A client with the ``roots`` capability (Claude Code, VS Code, Gemini CLI, Qwen Code) answers ``roots/list``
with the user's workspace folders and sends ``notifications/roots/list_changed`` when they change. This
middleware marks the list stale at ``notifications/initialized`` and at every ``list_changed``, and asks the
client again before the next ``tools/call`` that follows, so a call always sees the roots in force when it
was made (asking inside a notification could wait on the client while it waits on us). A client that does
not answer within `ROOTS_TIMEOUT_S` keeps the roots it had, and is asked again only after its next
``list_changed``. The roots become read and write roots and the base for relative paths
(`tpu_devops.host.files.set_client_roots`); the configured roots stay.

Sources: MCP specification, client features, roots (``roots/list``, ``notifications/roots/list_changed``);
the SDK marks the capability deprecated for the 2026-07-28 revision, while the hosts above still use it.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import anyio
from mcp.shared.exceptions import MCPDeprecationWarning, NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import ListRootsRequest, ListRootsResult

from tpu_devops.host import files

log = logging.getLogger("tpu_devops.roots")

ROOTS_TIMEOUT_S = 10.0  # seconds a client gets to answer roots/list before a call goes on without


class ClientRoots:
    """Server middleware keeping `tpu_devops.host.files`' client roots current (see the module docstring)."""

    def __init__(self) -> None:
        self.stale = True
        self._lock = anyio.Lock()

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        method = getattr(ctx, "method", "")
        if method in ("notifications/initialized", "notifications/roots/list_changed"):
            self.stale = True
        elif method == "tools/call" and self.stale:
            await self.refresh(getattr(ctx, "session", None), getattr(ctx, "request_id", None))
        return await call_next(ctx)

    async def refresh(self, session: Any, request_id: Any) -> None:
        """Ask ``session``'s client for its roots (when it declares the capability) and take them; the
        request goes out as part of the ``tools/call`` ``request_id`` (the back-channel stdio and streamable
        HTTP both have while a request is open)."""
        async with self._lock:
            if not self.stale:
                return  # another call refreshed them meanwhile
            self.stale = False
            capabilities = getattr(session, "client_capabilities", None)
            if session is None or getattr(capabilities, "roots", None) is None:
                files.set_client_roots([])
                return
            try:
                with anyio.fail_after(ROOTS_TIMEOUT_S), warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    result = await session.send_request(
                        ListRootsRequest(),
                        ListRootsResult,
                        metadata=ServerMessageMetadata(related_request_id=request_id),
                    )
            except NoBackChannelError:  # the 2026-07-28 protocol has no server-to-client requests (nor roots)
                log.info("this session cannot be asked for roots (its protocol has no server requests)")
                return
            except TimeoutError:
                log.warning(
                    "the client did not answer roots/list within %.0f s: keeping its roots", ROOTS_TIMEOUT_S
                )
                return
            except Exception as exc:  # an error answer: the client's roots are unknown, keep the others
                log.warning("roots/list failed (%s): keeping the previous roots", exc)
                return
            accepted = files.set_client_roots([str(root.uri) for root in result.roots])
            log.info("client roots: %s", ", ".join(map(str, accepted)) or "(none usable)")
