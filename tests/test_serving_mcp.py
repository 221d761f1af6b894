"""Serving tools end to end: the official MCP client starts server.py over stdio; the server talks to
the vLLM-shaped fake (real openai client) and the fake Billing Catalog (real google-cloud-billing)."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import PIL.Image
import pytest

from tests.fakes.gcp import FakeGcp
from tests.fakes.openai_server import FakeVllm, closed_port_url
from tests.mcp_session import mcp_client
from tpu_devops.host.results import table_records

pytestmark = pytest.mark.anyio

BENCH = Path(__file__).parent / "data" / "bench"


@pytest.fixture
def gcp() -> Iterator[FakeGcp]:
    with FakeGcp() as fake:
        yield fake


def env_for(tmp_path: Path, gcp: FakeGcp, vllm_url: str = "") -> dict[str, str]:
    return {
        "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
        "TPU_DEVOPS_GCP_ENDPOINT": gcp.url,
        "PROVISIONING_MODEL": "spot",
        "VLLM_URL": vllm_url,
    }


async def call(client: Any, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(name, args or {})
    assert not result.is_error, result.content[0].text
    assert result.content[0].text  # the readable rendering
    return result.structured_content


async def test_health_stats_metrics_details_cost_and_a_benchmark_job(tmp_path: Path, gcp: FakeGcp) -> None:
    with FakeVllm(ttft_s=0.01, itl_s=0.002) as fake:
        async with mcp_client(**env_for(tmp_path, gcp, fake.url)) as client:
            health = await call(client, "verify_model_health")
            assert health["healthy"] is True
            assert [p["name"] for p in table_records(health["probes"])] == [
                "health",
                "models",
                "chat",
                "tool_call",
            ]

            stats = await call(client, "query_gemma", {"stats": True, "prompt": "Say hi", "max_tokens": 8})
            assert stats["stats"]["completion_tokens"] == 8
            assert stats["stats"]["ttft_ms"] is not None and stats["stats"]["max_gap_ms"] is not None

            answer = await call(client, "query_gemma", {"prompt": "Say hi", "max_tokens": 3})
            assert answer["content"] == "tok tok tok" and answer.get("stats") is None

            fake.kv_usage = 0.5
            fake.add_preemptions(1)
            metrics = await call(client, "get_serving_status", {"view": "metrics"})
            assert metrics["kv_cache_usage"] == 0.5
            assert metrics["preemptions_total"] == 1
            assert metrics["generation_tokens_total"] >= 11

            details = await call(client, "get_serving_status", {"view": "model"})
            assert details["max_model_len"] == 16384 and details["vllm_version"] == "0.30.0"

            cost = await call(client, "estimate_deployment_cost", {"tokens_per_s": 1496.5})
            assert cost["price"]["source"] == "live"
            assert cost["usd_per_million_output_tokens"] == pytest.approx(0.107, abs=5e-4)

            imported = await call(
                client, "run_benchmark", {"results_path": str(BENCH / "v5e1-e2b-c128-u64.json")}
            )
            assert table_records(imported["cells"])[0]["output_tokens_per_s"] == pytest.approx(
                1381.5, abs=0.05
            )
            assert table_records(imported["cells"])[0]["usd_per_million_output_tokens"] == pytest.approx(
                0.1162, abs=1e-4
            )

            started = await call(
                client,
                "run_benchmark",
                {"concurrency": [1, 2], "prompt_lengths": [32], "output_len": 4, "requests_per_cell": 2},
            )
            job_id = started["job_id"]
            for _ in range(300):
                job = await call(client, "get_job", {"job_id": job_id})
                if job["state"] != "running":
                    break
                await asyncio.sleep(0.1)
            assert job["state"] == "succeeded", job
            files = dict(job["result"]["files"])
            where = Path(files.pop("dir"))  # the structured form names the directory once
            assert {k: (where / v).exists() for k, v in files.items()} == {
                "csv": True,
                "json": True,
                "png": True,
            }
            assert where.parent == tmp_path / "state" / "results"
            finished = await client.call_tool("get_job", {"job_id": job_id})
            job_text = finished.content[0].text
            assert str(where / files["csv"]) in job_text, job_text
            # the chart comes with the finished job's answer: an image a host shows, and the same file
            chart = assert_chart_offered(finished.content, job["result"]["chart"])
            assert chart == (where / files["png"]).read_bytes()
            imported = await client.call_tool("run_benchmark", {"results_path": str(BENCH)})
            chart = assert_chart_offered(imported.content, imported.structured_content["chart"])
            assert chart == Path(imported.structured_content["chart"]["path"]).read_bytes()
            assert (await client.read_resource(imported.structured_content["chart"]["uri"])).contents[0].blob
            assert [c["completed"] for c in table_records(job["result"]["cells"])] == [2, 2]
            # newcomer trial: progress showed last_cell={'concurrency': 4, ...} raw; now one readable line
            last = job["progress"]["last_cell"]
            assert (
                isinstance(last, str)
                and last.startswith("2 clients x 32-token prompts:")
                and "2/2 ok" in last
            )


def assert_chart_offered(content: list[Any], described: dict[str, Any]) -> bytes:
    """The answer's chart: a valid PNG of at most 100 KB as image content (decoded with Pillow), a link
    to the file the structured form describes, and the text naming it."""
    kinds = [c.type for c in content]
    assert kinds == ["text", "image", "resource_link"], kinds
    text, image, link = content
    data = base64.b64decode(image.data)
    assert image.mime_type == "image/png" and len(data) <= 100_000
    with PIL.Image.open(io.BytesIO(data)) as decoded:
        decoded.verify()  # a valid PNG, not only its signature
    with PIL.Image.open(io.BytesIO(data)) as decoded:
        assert decoded.format == "PNG" and decoded.width >= 400 and decoded.height >= 200
    assert link.uri == described["uri"] and link.size == described["bytes"] == len(data)
    assert described["path"] in text.text and described["uri"] in text.text
    return data


async def test_health_failure_classes_over_mcp(tmp_path: Path, gcp: FakeGcp) -> None:
    with FakeVllm() as fake:
        async with mcp_client(**env_for(tmp_path, gcp, fake.url)) as client:

            async def failure(args: dict[str, Any] | None = None) -> str | None:
                health = await call(client, "verify_model_health", args)
                assert health["healthy"] is (health.get("failure") is None)
                if health.get("failure"):
                    assert health["fix"], health
                return health.get("failure")

            assert await failure() is None
            assert await failure({"base_url": closed_port_url()}) == "connection_refused"
            assert await failure({"model": "google/gemma-4-E4B-it"}) == "model_mismatch"
            fake.mode = "booting"
            assert await failure() == "booting"
            fake.mode = "ready"
            fake.empty_content = True
            assert await failure() == "empty_content"
            fake.empty_content = False
            fake.tool_parser = False
            assert await failure() == "tool_parser_missing"
            fake.tool_parser = True
            fake.raw_tool_syntax = True
            assert await failure() == "tool_call_unparsed"


async def test_no_endpoint_and_bad_input_are_clear_errors(tmp_path: Path, gcp: FakeGcp) -> None:
    async with mcp_client(**env_for(tmp_path, gcp)) as client:
        health = await call(client, "verify_model_health")
        assert health["failure"] == "no_endpoint"
        result = await client.call_tool("query_gemma", {"prompt": "hi"})
        assert result.is_error
        assert "Fix:" in result.content[0].text and "Traceback" not in result.content[0].text
        result = await client.call_tool("run_benchmark", {"concurrency": [0]})
        assert result.is_error and "concurrency" in result.content[0].text
        result = await client.call_tool("estimate_deployment_cost", {"provisioning_model": "reserved"})
        assert result.is_error and "provisioning_model" in result.content[0].text
        # newcomer trial: "" scanned the server's working directory; 0 h said "use hours between 0 and 8760"
        result = await client.call_tool("run_benchmark", {"results_path": ""})
        assert result.is_error and "results_path = ''" in result.content[0].text
        assert "is empty" in result.content[0].text and "package-lock" not in result.content[0].text
        result = await client.call_tool("estimate_deployment_cost", {"duration_hours": 0})
        assert result.is_error and "duration_hours" in result.content[0].text
        assert "between 0 and" not in result.content[0].text


async def test_endpoint_discovered_from_our_active_tpu(tmp_path: Path, gcp: FakeGcp) -> None:
    with FakeVllm() as fake:
        port = fake.url.rsplit(":", 1)[1]
        env = {**env_for(tmp_path, gcp), "GOOGLE_CLOUD_PROJECT": "demo-project", "VLLM_PORT": port}
        ours = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
        gcp.tpu.external_ip = "127.0.0.1"
        gcp.tpu.timings["PROVISIONING"] = 3600.0  # stays PROVISIONING until replaced below
        gcp.tpu.add_foreign("us-west4-a", "gemma4-e2b", labels=ours, state="PROVISIONING")
        async with mcp_client(**env) as client:
            waiting = await call(client, "verify_model_health")
            assert waiting["failure"] == "no_endpoint"
            assert "PROVISIONING" in table_records(waiting["probes"])[0]["detail"]
            gcp.tpu.add_foreign("us-west4-a", "gemma4-e2b", labels=ours, state="ACTIVE")
            health = await call(client, "verify_model_health", {"check_tool_calling": False})
    assert health["healthy"] is True, health
    assert health["endpoint_source"] == "discovery"
    assert health["endpoint"] == f"http://127.0.0.1:{port}"


async def test_cost_without_cloud_endpoint_or_credentials_uses_the_dated_fallback(tmp_path: Path) -> None:
    # regression: with no TPU_DEVOPS_GCP_ENDPOINT the Billing Catalog lookup must give up quickly
    # (no ADC here) and the answer must say it used the fallback table; never a tool error.
    closed = closed_port_url().removeprefix("http://")
    env = {
        "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
        "HOME": str(tmp_path),  # no gcloud application-default credentials
        "GCE_METADATA_HOST": closed,  # the metadata-server probe stays on this machine
        "GCE_METADATA_IP": closed,
        "GOOGLE_CLOUD_REGION": "us-west4",
    }
    async with mcp_client(**env) as client:
        for _ in range(2):  # the second answer comes from the cached failure
            cost = await call(
                client, "estimate_deployment_cost", {"provisioning_model": "spot", "tokens_per_s": 1496.5}
            )
            assert cost["price"]["source"] == "fallback"
            assert cost["usd_per_million_output_tokens"] == pytest.approx(0.107, abs=5e-4)
        result = await client.call_tool("estimate_deployment_cost", {"provisioning_model": "spot"})
        assert "fallback table dated" in result.content[0].text
        assert "Billing Catalog unavailable" in result.content[0].text


async def test_cost_falls_back_when_the_metadata_server_probe_hangs(tmp_path: Path) -> None:
    # regression: off Google Cloud, on a network that drops the metadata server's packets, ADC discovery
    # alone took 12 s (3 probes x 3 s); it is now bounded (billing.ADC_DISCOVERY_BUDGET_S) and falls back.
    from tests.fakes.openai_server import silent_port_url

    with silent_port_url() as url:
        silent = url.removeprefix("http://")
        env = {
            "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
            "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
            "HOME": str(tmp_path),
            "GCE_METADATA_HOST": silent,
            "GCE_METADATA_IP": silent,
            "GOOGLE_CLOUD_REGION": "us-west4",
        }
        async with mcp_client(**env) as client:
            cost = await call(client, "estimate_deployment_cost", {"provisioning_model": "on-demand"})
    assert cost["price"]["source"] == "fallback" and cost["price"]["usd_per_hour"] == pytest.approx(1.20)
    assert any("Application Default Credentials" in n for n in cost["price"]["notes"])
