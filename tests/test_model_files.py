"""plan_capacity given a GGUF or another binary: refused by type with what it is, never read as text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpu_devops.errors import InputError
from tpu_devops.planning.model_files import gguf_metadata
from tpu_devops.planning.sizing import load_model_config


def _tiny_gguf(path: Path) -> Path:
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "gemma3")
    writer.add_name("gemma-test-tiny")
    writer.add_block_count(4)
    writer.add_context_length(8192)
    writer.add_head_count_kv(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_is_described_and_refused(tmp_path: Path) -> None:
    path = _tiny_gguf(tmp_path / "gemma-tiny-Q4_K_M.gguf")
    meta = gguf_metadata(path)
    assert meta["architecture"] == "gemma3" and meta["block_count"] == 4 and meta["context_length"] == 8192
    with pytest.raises(InputError) as err:
        load_model_config(str(path))
    assert err.value.field == "model" and "GGUF" in err.value.message and "gemma3" in err.value.message
    assert "repo id" in (err.value.fix or "")


@pytest.mark.parametrize(
    "name, data", [("weights.bin", b"\x00\x01\x02" * 100), ("x.safetensors", b"\x08\x00" + b"\x00" * 50)]
)
def test_binary_files_are_refused_by_type(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError) as err:
        load_model_config(str(path))
    assert "not a config.json" in err.value.message


def test_a_truncated_gguf_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    with pytest.raises(InputError) as err:
        load_model_config(str(path))
    assert "GGUF" in err.value.message


def _vocab_gguf(
    path: Path, *, tokens: int = 20_000, arch_after_vocab: bool = False, big_endian: bool = False
) -> Path:
    """A tensor-less GGUF with a tokenizer vocabulary, as llama.cpp's converter writes one (the arrays
    after the architecture's keys, unless ``arch_after_vocab``)."""
    from gguf import GGUFEndian, GGUFWriter

    writer = GGUFWriter(str(path), "gemma3", endianess=GGUFEndian.BIG if big_endian else GGUFEndian.LITTLE)
    writer.add_name("gemma-vocab")

    def arch_keys() -> None:
        writer.add_block_count(18)
        writer.add_context_length(32768)
        writer.add_head_count_kv(1)
        writer.add_key_length(256)
        writer.add_file_type(15)

    if not arch_after_vocab:
        arch_keys()
    writer.add_token_list([f"tok{i}" for i in range(tokens)])
    writer.add_token_scores([float(-i) for i in range(tokens)])
    writer.add_token_types([1] * tokens)
    writer.add_chat_template("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}")
    if arch_after_vocab:
        arch_keys()
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _library_reading(path: Path) -> dict:
    from gguf import GGUFReader

    reader = GGUFReader(path, "r")

    def value(key: str):
        field = reader.get_field(key)
        return None if field is None else field.contents()

    arch = value("general.architecture")
    out = {"architecture": arch, "name": value("general.name"), "size_bytes": path.stat().st_size}
    for key in ("block_count", "context_length", "attention.head_count_kv", "attention.key_length"):
        out[key.rsplit(".", 1)[-1]] = value(f"{arch}.{key}")
    out["file_type"] = value("general.file_type")
    return out


@pytest.mark.parametrize(
    "shape",
    [{}, {"arch_after_vocab": True}, {"big_endian": True}, {"tokens": 0}],
    ids=["converter-order", "keys-after-the-vocabulary", "big-endian", "no-vocabulary"],
)
def test_the_header_read_agrees_with_the_gguf_library(tmp_path: Path, shape: dict) -> None:
    path = _vocab_gguf(tmp_path / "model.gguf", **shape)
    assert gguf_metadata(path) == _library_reading(path)


def test_the_read_stops_once_the_keys_are_in(tmp_path: Path) -> None:
    # Cut the file inside its vocabulary: the library cannot parse it any more, but the keys wanted
    # come before the vocabulary and are all there, so a reader that stops early still answers.
    from gguf import GGUFReader

    path = _vocab_gguf(tmp_path / "model.gguf")
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: data.index(b"tok100")])
    with pytest.raises((ValueError, IndexError, KeyError)):
        GGUFReader(cut, "r")
    meta = gguf_metadata(cut)
    assert meta["architecture"] == "gemma3" and meta["block_count"] == 18 and meta["key_length"] == 256


@pytest.mark.parametrize("garbage", [b"GGUF\x03\x00\x00\x00", b"GGUF\x09\x00\x00\x00" + b"\x00" * 16])
def test_a_header_that_lies_is_a_clear_error(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(garbage)
    with pytest.raises(InputError) as err:
        gguf_metadata(path)
    assert "not a readable GGUF" in err.value.message and err.value.field == "model"


def test_a_string_length_past_the_end_is_a_clear_error(tmp_path: Path) -> None:
    import struct

    path = tmp_path / "bad.gguf"
    # magic, version 3, 0 tensors, 1 pair: a key of 2**40 bytes.
    path.write_bytes(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1 << 40))
    with pytest.raises(InputError) as err:
        gguf_metadata(path)
    assert "past the end" in err.value.message
