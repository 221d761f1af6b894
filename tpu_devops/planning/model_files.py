"""Recognising model files a user passes where a ``config.json`` is expected (a GGUF, a safetensors shard).

A llama.cpp user names a ``.gguf`` file as the model; reading 253 MB of weights as UTF-8 text is
what must never happen. The file type is decided from its first bytes, and the few metadata keys the
refusal names are read from the GGUF header (`gguf_metadata`) so it can say what the file is.

``gguf.GGUFReader`` (llama.cpp's ``gguf`` package) parses every key and builds an array per token of
the vocabulary (262,144 for Gemma) before anything can be asked: 14-16 s on a 253 MB Gemma 3 GGUF, most
of a tool call. So the header is walked here with the package's own type table (``gguf.constants``):
each key/value pair in order (GGUF spec, ggml-org/ggml ``docs/gguf.md``: magic, version, tensor count,
key/value count, then per pair a string key, a ``uint32`` value type and the value; strings are a
``uint64`` length and bytes, arrays a ``uint32`` item type, a ``uint64`` count and the items), values
of keys not wanted skipped by seeking, and the walk stops as soon as the wanted keys are in: llama.cpp's
converter writes ``general.*`` and the architecture's keys before the tokenizer's arrays.

Raises `tpu_devops.errors.InputError` naming the field, the file and the fix.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from tpu_devops.errors import InputError
from tpu_devops.host import files

GGUF_MAGIC = b"GGUF"
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few KB; anything this large is not one


ARCH_KEYS = ("block_count", "context_length", "attention.head_count_kv", "attention.key_length")
GENERAL_KEYS = ("general.architecture", "general.name", "general.file_type")
MAX_KEY_BYTES = 1 << 16  # a GGUF key is a short dotted name
MAX_STRING_BYTES = 1 << 24  # one metadata string (a chat template is a few KB)


class _Header:
    """A little-endian (or byte-swapped) reader of a GGUF header from a binary file."""

    def __init__(self, handle: Any, size: int) -> None:
        self.f, self.size, self.order = handle, size, "<"

    def take(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        raw = self.f.read(n)
        if len(raw) != n:
            raise ValueError("the file ends inside its header")
        return struct.unpack(self.order + fmt, raw)[0]

    def skip(self, n: int) -> None:
        if n < 0 or self.f.tell() + n > self.size:
            raise ValueError("a length points past the end of the file")
        self.f.seek(n, 1)

    def string(self, limit: int = MAX_STRING_BYTES) -> str | None:
        """A string, or None (skipped) when it is longer than ``limit`` bytes."""
        n = self.take("Q")
        if n > limit:
            self.skip(n)
            return None
        if self.f.tell() + n > self.size:
            raise ValueError("a string runs past the end of the file")
        return self.f.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, *, keep: bool) -> Any:
        """The value of type ``vtype`` when ``keep`` (scalars and strings), else skip it."""
        from gguf.constants import GGUFValueType as T

        fixed = {T.UINT8: "B", T.INT8: "b", T.BOOL: "?", T.UINT16: "H", T.INT16: "h", T.UINT32: "I",
                 T.INT32: "i", T.FLOAT32: "f", T.UINT64: "Q", T.INT64: "q", T.FLOAT64: "d"}  # fmt: skip
        t = T(vtype)
        if t in fixed:
            if keep:
                return self.take(fixed[t])
            self.skip(struct.calcsize(fixed[t]))
            return None
        if t == T.STRING:
            if keep:
                return self.string()
            self.skip(self.take("Q"))
            return None
        # An array: skipped whole (no wanted key is one); fixed-size items in one seek.
        item, count = T(self.take("I")), self.take("Q")
        if item in fixed:
            self.skip(count * struct.calcsize(fixed[item]))
        else:
            for _ in range(count):
                self.value(item, keep=False)
        return None


def gguf_metadata(path: Path) -> dict[str, Any]:
    """A GGUF file's main metadata: ``architecture``, ``name``, ``block_count``, ``context_length``,
    ``head_count_kv``, ``key_length``, ``file_type`` and ``size_bytes`` (keys absent when the file
    lacks them). Keys follow the GGUF spec (``general.architecture``, ``{arch}.block_count``, ...).
    Only the header up to the last of these keys is read (module docstring).

    Raises:
        InputError: the file is not a readable GGUF.
    """
    size = path.stat().st_size
    try:
        with files.open_regular(path, field="model", value=str(path), max_bytes=1 << 62, binary=True) as fh:
            found = _read_keys(_Header(fh, size))
    except (ValueError, struct.error, OSError) as exc:  # truncated, foreign or corrupt
        raise InputError(
            f"not a readable GGUF file ({type(exc).__name__}: {exc})",
            field="model",
            value=str(path),
            fix="check the file (a complete download of a .gguf)",
        ) from None
    arch = found.get("general.architecture")
    out: dict[str, Any] = {"architecture": arch, "name": found.get("general.name"), "size_bytes": size}
    for key in ARCH_KEYS:
        if arch and (v := found.get(f"{arch}.{key}")) is not None:
            out[key.rsplit(".", 1)[-1]] = v
    out["file_type"] = found.get("general.file_type")
    return {k: v for k, v in out.items() if v is not None}


def _read_keys(h: _Header) -> dict[str, Any]:
    """The wanted keys' values, walking the key/value pairs until all are found (or none is left)."""
    if h.f.read(4) != GGUF_MAGIC:
        raise ValueError("no GGUF magic")
    version = h.take("I")
    if version & 0xFFFF == 0:  # written on a big-endian machine (as gguf.GGUFReader tells it)
        h.order = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} is not one this reader knows (2, 3)")
    h.take("Q")  # tensor count
    pairs = h.take("Q")
    found: dict[str, Any] = {}
    suffixes = tuple(f".{k}" for k in ARCH_KEYS)
    for _ in range(pairs):
        key = h.string(MAX_KEY_BYTES)
        vtype = h.take("I")
        # The architecture's keys may come before general.architecture: any key ending like one is kept.
        keep = key is not None and (key in GENERAL_KEYS or key.endswith(suffixes))
        value = h.value(vtype, keep=keep)
        if keep and value is not None:
            found[str(key)] = value
        arch = found.get("general.architecture")
        if arch and all(k in found for k in GENERAL_KEYS) and all(f"{arch}.{k}" in found for k in ARCH_KEYS):
            break
    return found


def check_config_file(path: Path, field: str = "model") -> None:
    """Refuse, by its type, a file that cannot be a ``config.json``: a GGUF (described from its
    metadata), a binary file, or one over 4 MiB. Reads at most the first 4 KiB of other files.

    Raises:
        InputError: the file is not a JSON config, with what it is and the fix.
    """
    try:
        size = path.stat().st_size
        # A regular file only, opened without blocking (`tpu_devops.host.files`); weights files are large.
        with files.open_regular(path, field=field, value=str(path), max_bytes=1 << 62, binary=True) as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise InputError(
            f"cannot read the file: {exc.strerror}", field=field, value=str(path), fix="check the path"
        ) from None
    if head.startswith(GGUF_MAGIC):
        meta = gguf_metadata(path)
        facts = ", ".join(
            f"{k} {v}"
            for k, v in meta.items()
            if k in ("architecture", "name", "block_count", "context_length")
        )
        raise InputError(
            f"this is a GGUF weights file (llama.cpp; {facts}, {meta['size_bytes'] / 2**30:.2f} GiB), not a "
            "config.json: TPU serving with vLLM plans from the Hugging Face checkpoint's config",
            field=field,
            value=str(path),
            fix="pass the Hugging Face repo id the GGUF was converted from (e.g. google/gemma-4-E2B-it) or its config.json",
        )
    if size > MAX_CONFIG_BYTES or b"\x00" in head:
        kind = (
            "a safetensors weights file" if path.suffix == ".safetensors" else "a binary or very large file"
        )
        raise InputError(
            f"{kind} ({size:,} bytes), not a config.json",
            field=field,
            value=str(path),
            fix="pass the model's config.json (or the directory holding it), or a Hugging Face repo id",
        )
