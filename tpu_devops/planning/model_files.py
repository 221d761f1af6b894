"""Recognising model files a user passes where a ``config.json`` is expected (a GGUF, a safetensors shard).

A llama.cpp user names a ``.gguf`` file as the model; reading 253 MB of weights as UTF-8 text is
what must never happen. The file type is decided from its first bytes, and a GGUF's metadata is read
with llama.cpp's own ``gguf`` package (``gguf.GGUFReader``, memory-mapped: tensor data is not read;
https://github.com/ggml-org/llama.cpp/tree/master/gguf-py) so the refusal can say what the file is.

Raises `tpu_devops.errors.InputError` naming the field, the file and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpu_devops.errors import InputError
from tpu_devops.host import files

GGUF_MAGIC = b"GGUF"
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few KB; anything this large is not one


def gguf_metadata(path: Path) -> dict[str, Any]:
    """A GGUF file's main metadata: ``architecture``, ``name``, ``block_count``, ``context_length``,
    ``head_count_kv``, ``key_length``, ``file_type`` and ``size_bytes`` (keys absent when the file
    lacks them). Keys follow the GGUF spec (``general.architecture``, ``{arch}.block_count``, ...).

    Raises:
        InputError: the file is not a readable GGUF.
    """
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path, "r")
    except Exception as exc:  # truncated or foreign file
        raise InputError(
            f"not a readable GGUF file ({type(exc).__name__})",
            field="model",
            value=str(path),
            fix="check the file",
        ) from None

    def value(key: str) -> Any:
        f = reader.get_field(key)
        if f is None:
            return None
        try:
            return f.contents()
        except Exception:  # an unusual field type: leave it out
            return None

    arch = value("general.architecture")
    out: dict[str, Any] = {
        "architecture": arch,
        "name": value("general.name"),
        "size_bytes": path.stat().st_size,
    }
    for key in ("block_count", "context_length", "attention.head_count_kv", "attention.key_length"):
        if arch and (v := value(f"{arch}.{key}")) is not None:
            out[key.rsplit(".", 1)[-1]] = v
    out["file_type"] = value("general.file_type")
    return {k: v for k, v in out.items() if v is not None}


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
