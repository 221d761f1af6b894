"""get_model_details: /v1/models, /version, vllm:cache_config_info and the rendered serving flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeVllm, closed_port_url
from tpu_devops.config import load_settings
from tpu_devops.serving.details import get_details
from tpu_devops.serving.errors import ServingError

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


@pytest.mark.parametrize(
    "fake_args",
    [{"flavor": "llama.cpp", "metrics_enabled": False}, {"flavor": "llama.cpp"}],
    ids=["llama.cpp-no-metrics", "llama.cpp"],
)
async def test_figures_the_server_does_not_expose_read_unknown_not_none(tmp_path: Path, fake_args) -> None:
    # A KV pool (or context) the server does not report is "unknown" in the text, never a Python None.
    with FakeVllm(**fake_args) as fake:
        s = load_settings(
            tmp_path / "none.env", environ={"VLLM_URL": fake.url, "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
        )
        d = await get_details(s)
    assert d.kv_pool_tokens is None
    assert "None" not in d.render_text() and "KV pool unknown tokens" in d.render_text()
