"""The tools against a local OpenAI-compatible server that is not vLLM.

The official MCP client starts server.py over stdio; the server talks (real openai client, real
httpx) to the fake in its llama.cpp flavor: ``meta.n_ctx`` in /v1/models, ``llamacpp:`` metrics or
501, /tokenize and /apply-template in llama.cpp's shapes, no /version, degenerate answers on demand,
and llama.cpp's 400 when a prompt exceeds the context. Every chat request the fake receives is
recorded, so the analyst's "never send a prompt that cannot fit" is checked where it matters: at the
server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from tests.fakes.openai_server import FakeVllm, ScriptedTurn
from tests.mcp_session import mcp_client
from tpu_devops.host.results import table_records

pytestmark = pytest.mark.anyio

MODEL = "gemma-4-E2B-it-Q4_K_M.gguf"
EXPORT = str(FIXTURES / "logs" / "v5e1-util095-export.json")


def env_for(tmp_path: Path, url: str) -> dict[str, str]:
    return {
        "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
        "VLLM_URL": url,
        "MODEL_NAME": MODEL,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hf"),
    }


async def call(client: Any, name: str, args: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    result = await client.call_tool(name, args or {})
    text = result.content[0].text
    assert not result.is_error, text
    return result.structured_content, text


def _assert_every_prompt_fit(fake: FakeVllm) -> None:
    assert fake.context_checks, "the model was never asked"
    for prompt, max_tokens, ctx in fake.context_checks:
        assert prompt + max_tokens <= ctx, f"sent {prompt} + {max_tokens} tokens into a {ctx}-token context"


async def test_tools_read_a_llama_cpp_server(tmp_path: Path) -> None:
    with FakeVllm(flavor="llama.cpp", model=MODEL, max_model_len=8192) as fake:
        fake.set_llama_load(processing=4, deferred=4)
        async with mcp_client(**env_for(tmp_path, fake.url)) as client:
            details, text = await call(client, "get_serving_status", {"view": "model"})
            assert details["max_model_len"] == 8192 and "meta.n_ctx" in details["context_source"]
            assert details["server"].startswith("llama.cpp") and details.get("vllm_version") is None
            assert "on llama.cpp" in text and "vLLM ?" not in text and details.get("configured_flags") is None

            metrics, text = await call(client, "get_serving_status", {"view": "metrics"})
            assert metrics["metrics_kind"] == "llama.cpp" and metrics.get("requests_running") is None
            assert "no vLLM metrics" in text and "4 processing / 4 deferred" in text
            assert metrics["server_series"]["llamacpp:requests_deferred"] == 4

            fake.metrics_enabled = False
            result = await client.call_tool("get_serving_status", {"view": "metrics"})
            assert (
                result.is_error and "--metrics" in result.content[0].text and "501" in result.content[0].text
            )

            health, text = await call(client, "verify_model_health")
            assert health["healthy"], text
            assert "llama.cpp" in text and "context 8192" in text

            fake.degenerate = "repeat"
            health, text = await call(client, "verify_model_health")
            assert not health["healthy"] and health["failure"] == "wrong_answer" and "repeats 'model'" in text
            answer, text = await call(client, "query_gemma", {"prompt": "Why?", "max_tokens": 64})
            assert answer["cut_off"] and "degenerate" in text and "finish_reason=length" in text


@pytest.mark.parametrize("tokenize", [True, False], ids=["server-count", "offline-estimate"])
@pytest.mark.parametrize("context", [8192, 16384, 4096])
async def test_analyst_fits_every_round_to_the_context(tmp_path: Path, tokenize: bool, context: int) -> None:
    with FakeVllm(flavor="llama.cpp", model=MODEL, max_model_len=context, tokenize_enabled=tokenize) as fake:
        # Two rounds of 20-entry searches, then an answer citing the root cause.
        fake.queue(
            ScriptedTurn(tool_calls=[{"name": "search_logs", "arguments": {"limit": 20}}]),
            ScriptedTurn(
                tool_calls=[
                    {"name": "search_logs", "arguments": {"severity": "ERROR", "limit": 20}},
                    {"name": "search_logs", "arguments": {"text": "memory", "limit": 20}},
                ]
            ),
            ScriptedTurn(
                content="RuntimeProgramAllocationFailure loading jit_structured_decode_fn [3a808ea2a697db]."
            ),
        )
        async with mcp_client(**env_for(tmp_path, fake.url)) as client:
            out, text = await call(
                client, "analyze_cloud_logging", {"question": "Why did vLLM die?", "path": EXPORT}
            )
    _assert_every_prompt_fit(fake)
    assert out["model_consulted"] and out["model_answer_usable"], text
    # the question is the user's through the real MCP path too: not log data, in the prompt or the text
    assert fake.requests[0]["messages"][1]["content"].startswith("The user's question: Why did vLLM die?\n")
    assert "your question: Why did vLLM die?" in text.splitlines() and out["question"] == "Why did vLLM die?"
    rounds = table_records(out["rounds"])
    assert out["context_tokens"] == context and len(rounds) == 3
    for r in rounds:
        assert r["prompt_tokens"] <= r["prompt_limit"] == context - 700
    counted = rounds[0]["counted_by"]
    assert ("server's tokenizer" in counted) if tokenize else ("estimate" in counted)
    assert "3a808ea2a697db" in [c["ref"] for c in out["citations"] if c["verified"]]


async def test_analyst_calls_a_degenerate_answer_what_it_is(tmp_path: Path) -> None:
    with FakeVllm(flavor="llama.cpp", model=MODEL, max_model_len=8192, degenerate="repeat") as fake:
        async with mcp_client(**env_for(tmp_path, fake.url)) as client:
            out, text = await call(
                client, "analyze_cloud_logging", {"question": "Why?", "path": EXPORT, "max_steps": 1}
            )
    _assert_every_prompt_fit(fake)
    assert out["model_consulted"] and not out["model_answer_usable"]
    assert any("repeats 'model'" in p for p in out["answer_problems"])
    assert any("cut off" in p for p in out["answer_problems"])
    assert out.get("citations", []) == [] and "Most likely root cause" in out["deterministic_summary"]
    assert "not usable" in text.splitlines()[0] and "stands alone" in text
    assert '<untrusted-data source="a language model' in text


async def test_a_later_round_failing_keeps_the_analysis(tmp_path: Path) -> None:
    with FakeVllm(flavor="llama.cpp", model=MODEL, max_model_len=8192) as fake:
        fake.queue(
            ScriptedTurn(tool_calls=[{"name": "search_logs", "arguments": {"limit": 20}}]),
            ScriptedTurn(status=500, error="slot crashed"),
        )
        async with mcp_client(**env_for(tmp_path, fake.url)) as client:
            out, text = await call(client, "analyze_cloud_logging", {"question": "Why?", "path": EXPORT})
    assert out["model_consulted"] and len(table_records(out["steps"])) == 1
    assert any("round 2 failed" in n for n in out["notices"]) and out["summary"]
    assert not out["model_answer_usable"] and "stands alone" in text


async def test_a_tiny_context_is_refused_before_sending(tmp_path: Path) -> None:
    with FakeVllm(flavor="llama.cpp", model=MODEL, max_model_len=512) as fake:
        async with mcp_client(**env_for(tmp_path, fake.url)) as client:
            out, text = await call(client, "analyze_cloud_logging", {"question": "Why?", "path": EXPORT})
    assert fake.context_checks == []  # nothing that cannot fit was sent
    assert not out["model_consulted"] and "context" in out["notices"][0] and "-c" in out["notices"][0]
