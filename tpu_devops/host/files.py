"""Bounded, rooted access to the files and directories tool arguments name.

A path argument is caller input: a prompt-injected host can pass ``/etc/passwd``, ``~/.ssh/id_rsa``,
``/dev/zero``, a FIFO that never ends, or a symlink that leads out of an allowed directory. Every tool
that reads or writes a path it was given goes through this module:

- roots: reads only under the state directory, the repo's bundled data (``tests/data``,
  ``tpu_devops/data``), the roots the MCP client declares (``roots/list``: the user's workspace folders in
  Claude Code, VS Code, Gemini CLI, Qwen Code; `set_client_roots`), the server's working directory (the
  user's project: MCP hosts start the server there) and the directories listed in
  ``TPU_DEVOPS_FILE_ROOTS``; writes only under the state directory, the client's roots, the working
  directory and ``TPU_DEVOPS_FILE_ROOTS``. None of these may be ``/``, a system directory, the home
  directory or one of its ancestors (`too_broad`). A path is resolved (symlinks followed, ``..`` removed)
  before the check, so a link inside a root that points outside is refused;
- a relative path is read from the user's workspace (`relative_base`): the working directory when it is
  inside a client root (or the client declares none), else the client's first root (a Gemini CLI
  extension starts its server in the extension's own directory);
- credential stores are refused even inside a root (``.ssh``, ``.gnupg``, ``.aws``, ``.azure``,
  gcloud's configuration, ``.netrc``, ``.git-credentials``);
- regular files only: a device, FIFO or socket is refused, the file is opened without blocking and
  checked again on the open descriptor (it may have been swapped since), and read to a per-use size
  limit;
- every refusal is an `InputError` naming the argument, the value (cut) and the fix.

Tools call the checked functions from worker threads (a synchronous tool, or ``anyio.to_thread``), never
on the event loop.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import unquote, urlparse

from tpu_devops.errors import InputError

log = logging.getLogger("tpu_devops.files")
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux
MIB = 1 << 20
# The repo's bundled data: model configs, real logs and benchmark results the docs point at.
# The checkout (or installed package) this module belongs to: its bundled data is always readable.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_DIRS = (PACKAGE_ROOT / "tests" / "data", PACKAGE_ROOT / "tpu_devops" / "data")


class FileSettings(Protocol):
    """What this module reads of the server's settings (`tpu_devops.config.Settings` has both).

    Read-only properties, so a frozen settings model satisfies it."""

    @property
    def state_dir(self) -> str: ...

    @property
    def file_roots(self) -> tuple[str, ...]: ...


# Directories never readable even inside a root: where credentials live.
_CREDENTIAL_DIRS = frozenset({".ssh", ".gnupg", ".aws", ".azure", ".password-store"})
_CREDENTIAL_FILES = frozenset({".netrc", ".git-credentials", ".pgpass", "credentials.db", "access_tokens.db"})
# Too broad to serve as "the user's project": a host that starts the server there gives no consent to
# read the whole machine.
_SYSTEM_DIRS = tuple(
    Path(p)
    for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/proc", "/run", "/sbin", "/sys", "/usr", "/var")
)
ROOTS_SETTING = "TPU_DEVOPS_FILE_ROOTS"


@dataclass(frozen=True)
class Roots:
    """Resolved directories under which tools may read and write."""

    read: tuple[Path, ...]
    write: tuple[Path, ...]

    def describe(self, write: bool = False) -> str:
        """``/a, /b and /c`` for error messages."""
        shown = [str(p) for p in (self.write if write else self.read)]
        return ", ".join(shown[:-1]) + (" and " if len(shown) > 1 else "") + shown[-1] if shown else "(none)"


def too_broad(directory: Path) -> bool:
    """True for a directory too broad to be a root (``/``, a system directory, the home directory or one of
    its ancestors): a host that starts the server there, or declares it, gives no consent to read the whole
    machine."""
    real = directory.resolve()
    home = Path.home().resolve()
    return (
        real == Path(real.anchor)
        or home.is_relative_to(real)
        or any(real.is_relative_to(d) for d in _SYSTEM_DIRS)
    )


def working_directory() -> Path | None:
    """The server's working directory as a root, or None when it is too broad to be one (`too_broad`)."""
    cwd = Path.cwd().resolve()
    return None if too_broad(cwd) else cwd


# The roots the MCP client declared (``roots/list``), as `set_client_roots` accepted them: one client per
# process on stdio, replaced whole on every ``notifications/roots/list_changed``.
_client_roots: tuple[Path, ...] = ()


def set_client_roots(uris: list[str]) -> tuple[Path, ...]:
    """Take the client's roots (``file://`` URIs, as ``roots/list`` returns them) as read and write roots,
    replacing the previous ones; returns the directories accepted. Other schemes, relative or too broad
    directories (`too_broad`) are left out and logged."""
    global _client_roots
    accepted: list[Path] = []
    for uri in uris:
        parsed = urlparse(uri)
        path = (
            Path(unquote(parsed.path))
            if parsed.scheme == "file" and parsed.netloc in ("", "localhost")
            else None
        )
        if path is None or not path.is_absolute():
            log.info("client root %s ignored: not a local file:// URI", uri[:200])
            continue
        if too_broad(path):
            log.warning("client root %s ignored: too broad to read (/, a system or the home directory)", path)
            continue
        real = path.resolve()
        if real not in accepted:
            accepted.append(real)
    _client_roots = tuple(accepted)
    return _client_roots


def client_roots() -> tuple[Path, ...]:
    """The client's roots in force (`set_client_roots`)."""
    return _client_roots


def relative_base() -> Path:
    """Where a relative path is read from: the working directory when the client declares no roots or it
    lies inside one of them, else the client's first root."""
    cwd = Path.cwd()
    given = _client_roots
    if not given or any(cwd.resolve().is_relative_to(r) for r in given):
        return cwd
    return given[0]


def roots(settings: FileSettings) -> Roots:
    """The read and write roots for ``settings`` and the client (see the module docstring), resolved."""
    state = Path(settings.state_dir)
    configured = [Path(p) for p in settings.file_roots]
    cwd = working_directory()
    extra = [*_client_roots, *([cwd] if cwd is not None else [])]
    read = [state, *BUNDLED_DIRS, *extra, *configured]
    write = [state, *extra, *configured]
    return Roots(read=_unique(read), write=_unique(write))


def _unique(paths: list[Path]) -> tuple[Path, ...]:
    out: list[Path] = []
    for p in paths:
        real = p.expanduser().resolve()
        if real not in out:
            out.append(real)
    return tuple(out)


def _fail(problem: str, field: str, value: Any, fix: str) -> InputError:
    return InputError(problem, field=field, value=value, fix=fix)


def resolve(settings: FileSettings, value: str, *, field: str, write: bool = False) -> Path:
    """``value`` (a path argument; ``~`` is expanded and a relative path read from `relative_base`) as a
    resolved absolute path inside the read (or ``write``) roots of ``settings``.

    Raises:
        InputError: empty, too long, NUL, outside the roots (after following links), or a credential store.
    """
    if not isinstance(value, str) or not value.strip():
        raise _fail("empty path", field, value, "pass the path of a file (an empty string is not 'no file')")
    if len(value) > MAX_PATH_CHARS or "\x00" in value:
        raise _fail(
            f"not a usable path ({'a NUL character' if chr(0) in value else f'over {MAX_PATH_CHARS} characters'})",
            field,
            value,
            "pass a real file path",
        )
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = relative_base() / path
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long for the file system
        raise _fail(
            f"cannot resolve the path: {getattr(exc, 'strerror', None) or exc}",
            field,
            value,
            "pass a real file path",
        ) from None
    allowed = roots(settings)
    inside = allowed.write if write else allowed.read
    if not any(real.is_relative_to(r) for r in inside):
        verb = "write" if write else "read"
        raise _fail(
            f"outside the directories this server may {verb}"
            + (f" (the path leads to {real})" if str(real) != os.path.normpath(str(path)) else ""),
            field,
            value,
            f"use a path under {allowed.describe(write)}, or add its directory to {ROOTS_SETTING} "
            f"(absolute paths separated by '{os.pathsep}') in the server's environment",
        )
    parts = set(real.parts)
    if parts & _CREDENTIAL_DIRS or real.name in _CREDENTIAL_FILES or _in_gcloud_config(real):
        raise _fail(
            "a credential store: never read by a tool",
            field,
            value,
            "pass a log, results or config file instead",
        )
    return real


def _in_gcloud_config(real: Path) -> bool:
    parts = real.parts
    return any(parts[i] == ".config" and parts[i + 1] == "gcloud" for i in range(len(parts) - 1))


def _os_error(exc: OSError, field: str, value: Any) -> InputError:
    if isinstance(exc, FileNotFoundError):
        relative = isinstance(value, str) and not Path(value).expanduser().is_absolute()
        where = f" (a relative path is read from {relative_base()})" if relative else ""
        return _fail(
            f"no such file or directory{where}", field, value, "check the path, or pass an absolute one"
        )
    return _fail(f"cannot read: {exc.strerror or exc}", field, value, "check the path and its permissions")


def _stat(real: Path, field: str, value: Any) -> os.stat_result:
    try:
        return real.stat()
    except OSError as exc:
        raise _os_error(exc, field, value) from None


def _size_error(size: int, max_bytes: int, field: str, value: Any) -> InputError:
    return _fail(
        f"the file is {size / MIB:,.1f} MiB (limit {max_bytes / MIB:,.0f} MiB)",
        field,
        value,
        "pass a smaller file (the part that matters), or split it",
    )


def check_regular(
    real: Path, *, field: str, value: Any, max_bytes: int, st: os.stat_result | None = None
) -> None:
    """Raise InputError unless ``real`` is a regular file of at most ``max_bytes``."""
    st = st or _stat(real, field, value)
    if stat.S_ISDIR(st.st_mode):
        raise _fail("not a regular file: a directory", field, value, "pass the path of a file in it")
    if not stat.S_ISREG(st.st_mode):
        raise _fail(
            "not a regular file (a device, FIFO or socket)", field, value, "pass the path of a saved file"
        )
    if st.st_size > max_bytes:
        raise _size_error(st.st_size, max_bytes, field, value)


def readable_file(settings: FileSettings, value: str, *, field: str, max_bytes: int) -> Path:
    """``value`` resolved inside the read roots, a regular file of at most ``max_bytes``.

    Raises:
        InputError: see `resolve` and `check_regular`; no such file.
    """
    real = resolve(settings, value, field=field)
    check_regular(real, field=field, value=value, max_bytes=max_bytes)
    return real


def readable_path(settings: FileSettings, value: str, *, field: str, max_bytes: int) -> Path:
    """Like `readable_file`, but a directory is accepted too (its files are checked by `files_in`)."""
    real = resolve(settings, value, field=field)
    st = _stat(real, field, value)
    if not stat.S_ISDIR(st.st_mode):
        check_regular(real, field=field, value=value, max_bytes=max_bytes, st=st)
    return real


def files_in(
    settings: FileSettings,
    directory: Path,
    pattern: str,
    *,
    field: str,
    value: Any,
    max_bytes: int,
    limit: int,
) -> list[Path]:
    """The regular files of ``directory`` matching ``pattern`` (sorted), each resolved inside the read roots
    and at most ``max_bytes``; links that lead elsewhere and other kinds of entry are left out.

    Raises:
        InputError: more than ``limit`` matches.
    """
    found: list[Path] = []
    for entry in sorted(directory.glob(pattern)):
        try:
            real = resolve(settings, str(entry), field=field)
            check_regular(real, field=field, value=value, max_bytes=max_bytes)
        except InputError:
            continue
        found.append(real)
        if len(found) > limit:
            raise _fail(
                f"more than {limit} {pattern} files in the directory",
                field,
                value,
                "point at a directory holding only the files to read",
            )
    return found


def open_regular(
    path: Path | str,
    *,
    field: str,
    value: Any,
    max_bytes: int,
    binary: bool = False,
    newline: str | None = None,
) -> IO[Any]:
    """Open ``path`` for reading, refusing anything but a regular file of at most ``max_bytes``: opened
    without blocking (a FIFO never hangs the call) and checked on the descriptor itself.

    Text mode reads UTF-8 with replacement characters. Raises InputError (no such file, not a regular file,
    too large, unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise _os_error(exc, field, value) from None
    try:
        check_regular(Path(path), field=field, value=value, max_bytes=max_bytes, st=os.fstat(fd))
        os.set_blocking(fd, True)
        if binary:
            return os.fdopen(fd, "rb")
        return os.fdopen(fd, "r", encoding="utf-8", errors="replace", newline=newline)
    except BaseException:
        os.close(fd)
        raise


def read_text(path: Path | str, *, field: str, value: Any, max_bytes: int) -> str:
    """The whole of a regular file of at most ``max_bytes`` as text (see `open_regular`); a file that grew
    past the limit while being read is refused."""
    with open_regular(path, field=field, value=value, max_bytes=max_bytes, binary=True) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _size_error(len(data), max_bytes, field, value)
    return data.decode("utf-8", errors="replace")


def writable_dir(settings: FileSettings, value: str | None, *, field: str, default: Path) -> Path:
    """The directory ``value`` (or ``default`` when None), resolved inside the write roots and created.

    Raises:
        InputError: see `resolve`; an existing non-directory; cannot be created.
    """
    real = resolve(settings, str(default) if value is None else value, field=field, write=True)
    try:
        real.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise _fail("exists and is not a directory", field, value, "pass a directory") from None
    except OSError as exc:
        raise _fail(
            f"cannot create the directory: {exc.strerror or exc}", field, value, "pass a writable directory"
        ) from None
    if real.resolve() != real:  # replaced by a link while being created
        raise _fail("the directory changed while being created", field, value, "try again")
    return real
