"""Model calls that outlast a tool call, over MCP: the official client starts server.py over stdio, with
its real 25 s budget per tool call, against a local OpenAI-compatible server slowed to CPU speed (the
scripted fake in its llama.cpp flavor: an answer takes 40 s).

``query_gemma`` and ``analyze_cloud_logging`` answer inside the budget with a job id, the job keeps
streaming, ``get_job`` shows the text so far, and the job's result is the whole answer: no generated
text is lost. The log the analyst reads is 21,171 real fixture lines with the OOM at the end
(`tests.long_logs`), read right by every log tool. Waits are polls of ``get_job`` with generous
bounds, never a guess of how long a step takes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeVllm, ScriptedTurn
from tests.long_logs import TOTAL_LINES, oom_at_the_end
from tests.mcp_session import mcp_client

pytestmark = pytest.mark.anyio

MODEL = "gemma-3-270m-it-Q8_0.gguf"
# 120 words: the first after 4 s (a CPU prefill), then one every 0.3 s: 40 s in all.
SLOW = {"ttft_s": 4.0, "itl_s": 0.3}
WORDS = 120
FIRST_OOM_LINE = "line-21050"


def env_for(tmp_path: Path, url: str) -> dict[str, str]:
    return {
        "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
        "VLLM_URL": url,
        "MODEL_NAME": MODEL,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hf"),
    }


async def call(client: Any, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    result = await client.call_tool(name, args)
    text = result.content[0].text
    assert not result.is_error, text
    return result.structured_content, text


async def poll(
    client: Any, job_id: str, *, seen: list[dict[str, Any]], bound_s: float = 240
) -> tuple[dict[str, Any], str]:
    """``get_job`` every second until the job ends: its last (structured, text); every running view is
    kept in ``seen``."""
    async with asyncio.timeout(bound_s):
        while True:
            job, text = await call(client, "get_job", {"job_id": job_id})
            if job["state"] != "running":
                return job, text
            seen.append(job)
            await asyncio.sleep(1.0)


async def test_query_gemma_delivers_a_40_s_answer_through_its_job(tmp_path: Path) -> None:
    answer = " ".join(f"word{i}" for i in range(WORDS))
    with FakeVllm(flavor="llama.cpp", model=MODEL, max_model_len=8192) as fake:
        fake.queue(ScriptedTurn(content=answer, **SLOW))
        async with mcp_client(**env_for(tmp_path, fake.url)) as client:
            # No rate measured yet: asked inline, and handed to a job when the call must answer.
            started, text = await call(
                client, "query_gemma", {"prompt": "Write 120 words.", "max_tokens": 400}
            )
            assert started["in_progress"] and started["job_id"].startswith("query-"), text
            assert answer.startswith(started.get("content", "")) and f"get_job('{started['job_id']}')" in text
            seen: list[dict[str, Any]] = []
            done, text = await poll(client, started["job_id"], seen=seen)
            assert done["state"] == "succeeded", done
            assert done["result"]["content"] == answer  # every word generated, in order
            assert answer in text and '<untrusted-data source="a language model' in text
            so_far = [v["result"].get("content", "") for v in seen if v.get("result")]
            assert so_far and all(answer.startswith(t) for t in so_far)
            assert any(len(t) > len(started.get("content", "")) for t in so_far), "get_job showed no progress"

            # Now the endpoint's rates are measured: a long answer is a job from the start.
            fake.queue(ScriptedTurn(content="a short answer after all"))
            prompt = "Explain the KV cache of a TPU serving engine in detail. " * 4
            started, text = await call(client, "query_gemma", {"prompt": prompt, "max_tokens": 2000})
            assert started["in_progress"] and started["expected_s"] > 25 and not started.get("content"), text
            assert "tok/s" in started["estimate_basis"]
            done, _ = await poll(client, started["job_id"], seen=[])
            assert done["state"] == "succeeded" and done["result"]["content"] == "a short answer after all"


async def test_analyze_cloud_logging_delivers_a_40_s_answer_through_its_job(tmp_path: Path) -> None:
    log = oom_at_the_end(tmp_path / "vllm.log")
    answer = (
        f"The engine ran out of HBM loading a compiled program [{FIRST_OOM_LINE}]: "
        "lower --gpu-memory-utilization to 0.92 and restart the server. "
        + " ".join(f"detail{i}" for i in range(WORDS - 20))
    )
    with FakeVllm(flavor="llama.cpp", model=MODEL, max_model_len=16384) as fake:
        fake.queue(
            ScriptedTurn(
                tool_calls=[{"name": "search_logs", "arguments": {"text": "RuntimeProgramAllocationFailure"}}]
            ),
            ScriptedTurn(content=answer, **SLOW),
        )
        async with mcp_client(**env_for(tmp_path, fake.url)) as client:
            # Every log tool reads the 21,171-line log right: the OOM is in its last lines.
            summary, text = await call(client, "summarize_logs", {"path": str(log)})
            assert summary["root_cause"]["signature"] == "program-allocation-oom", text
            assert "lines 1-1,171 (the oldest) not read" in text and f"max_entries={TOTAL_LINES}" in text
            boot, text = await call(client, "diagnose_vllm_boot", {"path": str(log)})
            assert "RuntimeProgramAllocationFailure" in text or "compiled program" in text, text[:400]

            started, text = await call(
                client, "analyze_cloud_logging", {"question": "Why did vLLM die?", "path": str(log)}
            )
            assert started["in_progress"] and started["job_id"].startswith("analysis-"), text
            assert started["root_cause"]["signature"] == "program-allocation-oom"
            assert FIRST_OOM_LINE in started["answer"]  # the deterministic summary answers meanwhile
            seen: list[dict[str, Any]] = []
            done, text = await poll(client, started["job_id"], seen=seen)
    assert done["state"] == "succeeded", done
    assert answer in text
    result = done["result"]
    assert result["model_consulted"] and result["model_answer_usable"], result.get("answer_problems")
    assert result["answer"] == answer  # the whole answer the model wrote
    assert FIRST_OOM_LINE in [c["ref"] for c in result["citations"] if c["verified"]]
    so_far = [v["result"].get("answer_so_far", "") for v in seen if v.get("result")]
    assert any(so_far) and all(answer.startswith(t) for t in so_far if t)
