"""get_metrics: prometheus_client parsing of vLLM's /metrics, histogram quantiles, rates since last call."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeVllm
from tpu_devops.config import load_settings
from tpu_devops.errors import EndpointError
from tpu_devops.serving import chat, metrics

pytestmark = pytest.mark.anyio

HISTOGRAM = """\
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 90.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 100.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 100.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 100.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 30.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.95
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
"""


def test_histogram_quantiles_interpolate_like_prometheus() -> None:
    samples = metrics.parse(HISTOGRAM)
    # rank 50 falls in (0.1, 0.5] holding 80 observations from 10: 0.1 + 0.4 * 40/80 = 0.3
    assert metrics.histogram_quantile(samples, "vllm:time_to_first_token_seconds", 0.5) == pytest.approx(0.3)
    # rank 99 falls in (0.5, 1.0] holding 10 from 90: 0.5 + 0.5 * 9/10 = 0.95
    assert metrics.histogram_quantile(samples, "vllm:time_to_first_token_seconds", 0.99) == pytest.approx(
        0.95
    )
    result = metrics.summarise("http://x", samples)
    assert result.ttft is not None
    assert result.ttft.p50_ms == pytest.approx(300)
    assert result.ttft.mean_ms == pytest.approx(300)
    # the older KV metric name is read too, and a nearly full cache is a finding
    assert result.kv_cache_metric == "vllm:gpu_cache_usage_perc"
    assert result.kv_cache_usage == pytest.approx(0.95)
    assert any("KV cache 95% full" in f for f in result.findings)
    assert any("waiting" in f for f in result.findings)


def test_not_prometheus_text_is_a_clear_error() -> None:
    with pytest.raises(EndpointError) as err:
        metrics.parse("<html>{not metrics</html>\n")
    assert err.value.field == "/metrics"


async def test_live_metrics_from_the_fake_server(tmp_path: Path) -> None:
    with FakeVllm(ttft_s=0.02, itl_s=0.003, kv_usage=0.25) as fake:
        s = load_settings(
            tmp_path / "none.env", environ={"VLLM_URL": fake.url, "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
        )
        first = await metrics.get_metrics(s)
        assert first.preemptions_total == 0
        assert first.preemptions_since_last_call is None  # no previous scrape of this endpoint
        for _ in range(3):
            await chat.query(s, "three words here", max_tokens=5)
        fake.add_preemptions(2)
        second = await metrics.get_metrics(s)
    assert second.kv_cache_metric == "vllm:kv_cache_usage_perc"
    assert second.kv_cache_usage == pytest.approx(0.25)
    assert second.kv_pool_tokens == 10043 * 32
    assert second.requests_running == 0
    assert second.preemptions_total == 2
    assert second.preemptions_since_last_call == 2
    assert second.preemptions_per_min is not None and second.preemptions_per_min > 0
    assert second.prompt_tokens_total == 3 * (3 + 4)
    assert second.generation_tokens_total == 15
    assert second.ttft is not None and second.ttft.count == 3
    assert second.tpot is not None and second.tpot.metric == "vllm:time_per_output_token_seconds"
    assert any("preemption" in f for f in second.findings)


def test_metrics_text_is_a_few_summary_lines() -> None:
    # regression check of the human rendering (was a generic nested dump)
    metrics._previous.pop("http://render.test", None)
    result = metrics.summarise("http://render.test", metrics.parse(HISTOGRAM), now=1000.0)
    text = result.render_text()
    assert text.splitlines()[0] == "KV cache 95% used, 0 running / 3 waiting, 0 preemptions total"
    assert "TTFT ms over 100 requests: mean 300.0" in text
    assert "metric:" not in text and len(text.splitlines()) <= 8
