"""get_model_details: /v1/models, /version, vllm:cache_config_info and the rendered serving flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeVllm, closed_port_url
from tpu_devops.config import load_settings
from tpu_devops.serving.chat import ServingError
from tpu_devops.serving.details import get_details

pytestmark = pytest.mark.anyio


async def test_details_from_the_server(tmp_path: Path) -> None:
    with FakeVllm(max_model_len=16384) as fake:
        s = load_settings(
            tmp_path / "none.env", environ={"VLLM_URL": fake.url, "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
        )
        d = await get_details(s)
    assert d.model == "google/gemma-4-E2B-it"
    assert d.served_models == ["google/gemma-4-E2B-it"]
    assert d.max_model_len == 16384
    assert d.vllm_version == "0.30.0"  # the fake serves the pinned default image's vLLM
    assert d.engine_cache_config is not None and d.engine_cache_config["block_size"] == "32"
    assert d.kv_pool_tokens == 321_376
    if d.configured_flags is not None:  # rendered by the startup-script module when present
        assert "not read from the server" in (d.configured_flags_source or "")
    assert "321376" in d.headline()


async def test_details_of_an_unreachable_endpoint(tmp_path: Path) -> None:
    s = load_settings(
        tmp_path / "none.env", environ={"VLLM_URL": closed_port_url(), "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
    )
    with pytest.raises(ServingError) as err:
        await get_details(s)
    assert err.value.failure == "connection_refused"
