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
