"""The shared endpoint clients (`tpu_devops.serving.client`): reused on their own event loop, never on
another one, against the vLLM-shaped fake through the real httpx and openai clients."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_server import FakeVllm, ScriptedTurn
from tpu_devops.config import load_settings
from tpu_devops.serving import chat, client


@pytest.fixture
def fake():
    with FakeVllm(ttft_s=0.0, itl_s=0.0) as server:
        yield server


def _ask(url: str) -> str:
    """One chat in a loop of its own (as `asyncio.run` in a script, or each async test, does)."""
    state = tempfile.mkdtemp()
    settings = load_settings(
        Path(state) / "none.env", environ={"VLLM_URL": url, "TPU_DEVOPS_STATE_DIR": state}
    )
    return anyio.run(chat.query, settings, "meaning of life?").content


def test_a_second_event_loop_gets_its_own_clients(fake: FakeVllm) -> None:
    """The first loop's pooled connection is that loop's transport: reused from the next loop it failed
    with 'Event loop is closed' (tests on a reused port, a script that runs two loops)."""
    fake.queue(ScriptedTurn(content="42"))
    fake.queue(ScriptedTurn(content="43"))
    assert _ask(fake.url) == "42"
    assert _ask(fake.url) == "43"

    async def models() -> int:
        return (await client.http_client(fake.url).get("/v1/models")).status_code

    assert anyio.run(models) == 200
    assert anyio.run(models) == 200


def test_one_loop_shares_one_pool_per_endpoint(fake: FakeVllm) -> None:
    async def clients() -> tuple[object, ...]:
        http, again = client.http_client(fake.url), client.http_client(fake.url + "/v1/")
        ai = client.openai_client(fake.url)
        assert ai._client is http  # the openai client rides the shared pool
        return http, again, ai, client.openai_client(fake.url), client.openai_client(fake.url, "k")

    http, again, ai, ai_again, ai_keyed = anyio.run(clients)
    assert http is again and ai is ai_again and ai_keyed is not ai
    other_loop = anyio.run(clients)
    assert other_loop[0] is not http and other_loop[2] is not ai


def test_a_closed_pool_is_replaced_with_its_openai_client(fake: FakeVllm) -> None:
    async def run() -> None:
        http, ai = client.http_client(fake.url), client.openai_client(fake.url)
        await http.aclose()
        fresh = client.openai_client(fake.url)
        assert fresh is not ai and fresh._client is client.http_client(fake.url) and fresh._client is not http
        assert (await fresh.models.list()).data[0].id == fake.model
        await client.close_all()
        assert client.http_client(fake.url).is_closed is False

    anyio.run(run)
