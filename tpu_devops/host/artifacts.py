"""Files a tool answer points at instead of carrying: the full startup script, a long answer, a chart.

Hosts cap what a tool result may hold (Gemini CLI and Claude Code read one form, Qwen Code moves a result
over 25,000 characters to a file and shows its model a 2 KB preview, Codex cuts one to about 10 KB), so a
large artifact is written under the state directory (``<TPU_DEVOPS_STATE_DIR>/artifacts``) and the answer
carries its summary, size, path and URI plus an MCP ``resource_link`` content block
(`Artifact.link`); the server then serves ``resources/read`` for exactly these files (`read`), and
``resources/list`` lists them (`listing`).

- Names are ``<stem>-<sha256[:12]><suffix>``: content-addressed, so the same script rendered twice is one
  file, and a name cannot be steered outside the directory (`_safe_stem`).
- Only this server's own files are served: a URI must be ``tpu-devops://artifacts/<name>``, the name one
  this module makes, and the file a regular file directly in the artifacts directory (not a link), at most
  `MAX_ARTIFACT_BYTES`. Anything else is "resource not found" (-32002, the MCP specification's code).
- The directory keeps the newest `KEEP_ARTIFACTS` files; older ones are removed when a new one is written.

`configure` names the state directory once at startup (`tpu_devops.host.registration.Registrar`), so
that the result plumbing can write an overflowing answer without knowing the settings.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any

from mcp_types import BlobResourceContents, ReadResourceResult, Resource, ResourceLink, TextResourceContents
from pydantic import BaseModel, Field

log = logging.getLogger("tpu_devops.artifacts")

SCHEME = "tpu-devops"
URI_PREFIX = f"{SCHEME}://artifacts/"
DIRECTORY = "artifacts"  # under the state directory
MAX_ARTIFACT_BYTES = 8 << 20  # per file, written or read: a startup script is ~30 KB, a chart < 100 KB
KEEP_ARTIFACTS = 200  # files kept in the directory, newest first
RESOURCE_NOT_FOUND = -32002  # MCP specification, resources: "Resource not found"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,60}-[0-9a-f]{12}\.[a-z0-9]{1,8}$")
_TEXT_TYPES = ("text/", "application/json")
_lock = threading.Lock()
_state_dir: Path | None = None


class Artifact(BaseModel):
    """A file this server wrote for an answer: where it is, how big, and the URI hosts read it by."""

    path: str = Field(description="absolute path of the file")
    uri: str = Field(description="MCP resource URI (resources/read)")
    bytes: int = Field(description="size in bytes")
    sha256: str = Field(exclude=True)  # of the content, hex; its first 12 digits are in the name
    mime_type: str = Field(description="media type, e.g. text/x-shellscript or image/png")

    @property
    def name(self) -> str:
        return self.uri.removeprefix(URI_PREFIX)

    def describe(self) -> str:
        """``/path (12,345 bytes, text/plain, resource tpu-devops://artifacts/x)`` for answers."""
        return f"{self.path} ({self.bytes:,} bytes, {self.mime_type}, resource {self.uri})"

    def link(self, description: str | None = None) -> ResourceLink:
        """The ``resource_link`` content block that offers this file to the host."""
        return ResourceLink(
            type="resource_link",
            uri=self.uri,
            name=self.name,
            mime_type=self.mime_type,
            size=self.bytes,
            description=description,
        )


def configure(state_dir: str | os.PathLike[str] | None) -> None:
    """Name the state directory artifacts go under (None: none, answers are cut without a file)."""
    global _state_dir
    _state_dir = Path(state_dir).expanduser() if state_dir else None


def configured() -> Path | None:
    """The state directory `configure` named, if any."""
    return _state_dir


def _directory(state_dir: str | os.PathLike[str] | None) -> Path:
    base = Path(state_dir).expanduser() if state_dir else _state_dir
    if base is None:
        raise RuntimeError("no state directory configured for artifacts")
    return base / DIRECTORY


def _safe_stem(stem: str) -> str:
    """``stem`` reduced to lower-case letters, digits and single ``-`` (at most 60 characters)."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:60].rstrip("-")
    return cleaned or "artifact"


def write(
    stem: str,
    content: str | bytes,
    *,
    suffix: str,
    mime_type: str,
    state_dir: str | os.PathLike[str] | None = None,
) -> Artifact:
    """Write ``content`` as ``<state>/artifacts/<stem>-<sha12><suffix>`` (once per content) and describe it.

    ``state_dir``: the settings' state directory (default: the one `configure` named).

    Raises:
        ValueError: more than `MAX_ARTIFACT_BYTES`, or a bad suffix.
        OSError: the directory cannot be created or written.
        RuntimeError: no state directory given or configured.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    if len(data) > MAX_ARTIFACT_BYTES:
        raise ValueError(f"artifact of {len(data):,} bytes is over the {MAX_ARTIFACT_BYTES:,}-byte limit")
    if not re.fullmatch(r"\.[a-z0-9]{1,8}", suffix):
        raise ValueError(f"bad artifact suffix {suffix!r}")
    digest = hashlib.sha256(data).hexdigest()
    name = f"{_safe_stem(stem)}-{digest[:12]}{suffix}"
    directory = _directory(state_dir)
    path = directory / name
    with _lock:
        directory.mkdir(parents=True, exist_ok=True)
        if not (path.is_file() and not path.is_symlink() and path.stat().st_size == len(data)):
            tmp = directory / f".{name}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)
        else:
            os.utime(path)  # the newest again: pruning keeps it
        _prune(directory)
    return Artifact(
        path=str(path.resolve()), uri=URI_PREFIX + name, bytes=len(data), sha256=digest, mime_type=mime_type
    )


def _prune(directory: Path) -> None:
    """Remove the oldest artifacts beyond `KEEP_ARTIFACTS` (only names this module makes)."""
    try:
        entries = [
            (e.stat().st_mtime, e) for e in os.scandir(directory) if _NAME.match(e.name) and e.is_file()
        ]
    except OSError:
        return
    entries.sort(key=lambda pair: pair[0], reverse=True)
    for _, entry in entries[KEEP_ARTIFACTS:]:
        try:
            os.unlink(entry.path)
        except OSError as exc:
            log.info("cannot remove old artifact %s: %s", entry.path, exc)


def _not_found(uri: Any, why: str) -> Any:
    from mcp.shared.exceptions import MCPError

    return MCPError(
        code=RESOURCE_NOT_FOUND, message=f"Resource not found: {why}", data={"uri": str(uri)[:300]}
    )


def _mime(name: str) -> str:
    suffix = Path(name).suffix
    return {
        ".sh": "text/x-shellscript",
        ".txt": "text/plain",
        ".json": "application/json",
        ".csv": "text/csv",
        ".png": "image/png",
        ".log": "text/plain",
    }.get(suffix, "application/octet-stream")


def _open(uri: Any, state_dir: str | os.PathLike[str] | None) -> tuple[str, bytes]:
    """(name, content) of the artifact ``uri`` names. Raises MCPError (-32002) for anything else."""
    if not isinstance(uri, str) or not uri.startswith(URI_PREFIX):
        raise _not_found(uri, f"this server serves only its own {URI_PREFIX}<name> files")
    name = uri.removeprefix(URI_PREFIX)
    if not _NAME.match(name):
        raise _not_found(uri, "not a name this server gives its files")
    try:
        directory = _directory(state_dir)
    except RuntimeError:
        raise _not_found(uri, "this server keeps no files") from None
    path = directory / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise _not_found(uri, "no such file (it may have been removed: ask the tool again)") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ARTIFACT_BYTES:
            raise _not_found(uri, "not a file this server wrote")
        data = handle.read(MAX_ARTIFACT_BYTES + 1)
    if len(data) > MAX_ARTIFACT_BYTES:
        raise _not_found(uri, "not a file this server wrote")
    return name, data


def read(uri: Any, state_dir: str | os.PathLike[str] | None = None) -> ReadResourceResult:
    """The ``resources/read`` answer for ``uri``: text for text files, base64 for the others.

    Raises:
        MCPError: -32002 for a URI that is not one of this server's artifacts.
    """
    name, data = _open(uri, state_dir)
    mime = _mime(name)
    if mime.startswith(_TEXT_TYPES):
        contents: Any = TextResourceContents(uri=uri, mime_type=mime, text=data.decode("utf-8", "replace"))
    else:
        contents = BlobResourceContents(uri=uri, mime_type=mime, blob=base64.b64encode(data).decode("ascii"))
    return ReadResourceResult(contents=[contents])


def listing(state_dir: str | os.PathLike[str] | None = None, limit: int = 100) -> list[Resource]:
    """This server's artifacts as MCP resources, newest first (at most ``limit``)."""
    try:
        directory = _directory(state_dir)
        entries = [
            e for e in os.scandir(directory) if _NAME.match(e.name) and e.is_file(follow_symlinks=False)
        ]
    except (OSError, RuntimeError):
        return []
    entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    return [
        Resource(uri=URI_PREFIX + e.name, name=e.name, mime_type=_mime(e.name), size=e.stat().st_size)
        for e in entries[:limit]
    ]
