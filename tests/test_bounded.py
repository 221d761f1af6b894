"""Every HTTP response is read under the caps of `tpu_devops.host.bounded`, whichever client reads it: the
serving clients (httpx, and the openai client on them), the Google clients (requests under google-auth), the
Kubernetes client (urllib3). Each endless body of `tests.fakes.endless` ends the call with the cap named;
ordinary bodies, compressed or not, still read whole. Memory against these servers is measured by the audit
(`tests.audit.run.bounded_reads_section`), not here."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import httpx
import pytest
import requests

from tests.fakes.endless import EndlessServer
from tests.fakes.http_runner import ServerThread
from tpu_devops.config import Settings, load_settings
from tpu_devops.host import bounded, deadline
from tpu_devops.host.bounded import BodyReader, Caps, ReadLimitError
from tpu_devops.serving import client as serving_client
from tpu_devops.serving import metrics, models
from tpu_devops.serving.errors import ServingError
from tpu_devops.serving.stream import stream_chat

pytestmark = pytest.mark.anyio

SIZE_CAPS = {"body": "MAX_BODY_BYTES", "json": "MAX_BODY_BYTES", "gzip": "MAX_BODY_BYTES",
             "bomb": "MAX_BODY_BYTES", "length": "MAX_BODY_BYTES", "sse": "MAX_STREAM_BYTES",
             "line": "MAX_LINE_BYTES", "brotli": "Content-Encoding"}  # fmt: skip


@pytest.fixture(scope="module")
def endless_server() -> EndlessServer:
    with EndlessServer() as srv:
        yield srv


@pytest.fixture
def endless(endless_server: EndlessServer) -> EndlessServer:
    """The endless server, as the endpoint the operator configured (it may receive chat requests)."""
    from tpu_devops.serving import egress

    egress.mark_owned(endless_server.url, "VLLM_URL")
    return endless_server


def settings_for(tmp_path: Path, url: str) -> Settings:
    env = {"TPU_DEVOPS_GCP_ENDPOINT": url, "GOOGLE_CLOUD_PROJECT": "my-project",
           "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
    return load_settings(tmp_path / "none.env", environ=env)


# ---- the reader itself -------------------------------------------------------------------------------------


def test_the_reader_counts_decoded_bytes_not_wire_bytes() -> None:
    reader = BodyReader("http://h/x", Caps(body_bytes=1 << 20), encoding="gzip")
    bomb = gzip.compress(bytes(8 << 20))  # 8 MiB of zeros in ~8 KB
    assert len(bomb) < 64 << 10
    with pytest.raises(ReadLimitError) as err:
        for _ in reader.feed(bomb):
            pass
    assert err.value.cap == "MAX_BODY_BYTES" and "1 MiB" in err.value.message
    assert reader.total <= (1 << 20) + bounded.PIECE_BYTES


@pytest.mark.parametrize(
    "encoding, encode",
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),  # zlib-wrapped, as RFC 9110 says
        ("deflate", lambda b: zlib.compress(b, wbits=-15)),  # raw deflate, as some servers send
        ("gzip, gzip", lambda b: gzip.compress(gzip.compress(b))),  # two codings, decoded in reverse
        ("gzip", lambda b: gzip.compress(b[:500]) + gzip.compress(b[500:])),  # two gzip members
        ("identity", lambda b: b),
    ],
)
def test_ordinary_compressed_bodies_decode_whole(encoding: str, encode: object) -> None:
    body = b"".join(b"line %d of a log page\n" % i for i in range(5000))
    reader = BodyReader("http://h/x", encoding=encoding)
    wire = encode(body)  # type: ignore[operator]
    out = b"".join(p for i in range(0, len(wire), 777) for p in reader.feed(wire[i : i + 777]))
    assert out + b"".join(reader.finish()) == body


def test_the_line_cap_applies_to_event_streams_only() -> None:
    line = b"x" * (bounded.MAX_LINE_BYTES + 10)
    assert len(b"".join(BodyReader("http://h/x").feed(line))) == len(line)
    reader = BodyReader("http://h/x", event_stream=True)
    assert list(reader.feed(b"data: 1\n\n" * 1000))  # many short lines are fine
    with pytest.raises(ReadLimitError) as err:
        list(reader.feed(line))
    assert err.value.cap == "MAX_LINE_BYTES"


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, br"])
def test_encodings_that_are_not_decoded_here_are_refused(encoding: str) -> None:
    with pytest.raises(ReadLimitError) as err:
        BodyReader("http://h/x", encoding=encoding)
    assert err.value.cap == "Content-Encoding" and err.value.fix


def test_a_declared_length_over_the_cap_is_refused_before_reading() -> None:
    with pytest.raises(ReadLimitError, match="announced 17,000,000 bytes"):
        BodyReader("http://h/x", declared="17000000")
    BodyReader("http://h/x", declared="1000")


def test_corrupt_compressed_data_is_a_clear_error() -> None:
    with pytest.raises(ReadLimitError, match="does not decode"):
        list(BodyReader("http://h/x", encoding="gzip").feed(b"\x1f\x8b\x08\x00garbage" * 10))


def test_the_url_shown_has_no_query_or_user_info() -> None:
    assert bounded.where_of("http://u:p@h:81/a/b?key=secret") == "http://h:81/a/b"
    assert bounded.where_of("http://[::1]:8000/m") == "http://[::1]:8000/m"


# ---- serving: httpx and the openai client --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["body", "json", "gzip", "bomb", "length", "brotli", "sse", "line"])
async def test_metrics_against_an_endless_body_ends_with_the_cap(endless: EndlessServer, mode: str) -> None:
    endless.mode = mode
    with pytest.raises(ServingError) as err:
        await metrics.fetch_samples(endless.url)
    assert err.value.failure == "read_limit"
    assert (
        SIZE_CAPS[mode] in err.value.message
        or SIZE_CAPS[mode] in str(err.value.fix)
        or (mode == "brotli" and "br" in err.value.message)
    )
    assert "/metrics" in err.value.message and err.value.fix


@pytest.mark.parametrize("mode", ["stall", "drip"])
async def test_a_body_that_never_ends_ends_with_the_call_budget(endless: EndlessServer, mode: str) -> None:
    endless.mode = mode
    with deadline.budget(1.5), pytest.raises(ServingError) as err:
        await models.served_models(endless.url)
    assert err.value.failure == "read_limit" and "budget ran out" in err.value.message


async def test_a_drip_ends_at_the_request_read_timeout_outside_a_call(endless: EndlessServer) -> None:
    endless.mode = "drip"
    http = serving_client.http_client(endless.url)
    with pytest.raises(ReadLimitError) as err:
        await http.get("/health", timeout=httpx.Timeout(1.0, connect=5.0))
    assert err.value.cap == "read timeout" and "1 s is the cap" in err.value.message


@pytest.mark.parametrize("mode", ["line", "gzip", "body"])
async def test_a_chat_stream_that_breaks_a_cap_says_which(endless: EndlessServer, mode: str) -> None:
    endless.mode = mode
    with pytest.raises(ServingError) as err:
        await stream_chat(endless.url, "m", [{"role": "user", "content": "hi"}], deadline_s=20)
    assert err.value.failure == "read_limit"


async def test_an_endless_stream_of_valid_chunks_stops_at_the_stream_cap(endless: EndlessServer) -> None:
    endless.mode = "sse"  # a server that ignores max_tokens: 1 KiB of content per chunk, forever
    answer = await stream_chat(endless.url, "m", [{"role": "user", "content": "hi"}], deadline_s=120)
    assert answer.interrupted == "read_limit"  # what arrived is kept, marked as cut off by the cap
    assert 16 << 20 < len(answer.content) <= bounded.MAX_STREAM_BYTES


async def test_ordinary_serving_answers_still_read(tmp_path: Path) -> None:
    from tests.fakes.openai_server import FakeVllm
    from tpu_devops.serving import egress

    with FakeVllm() as fake:
        egress.mark_owned(fake.url, "VLLM_URL")
        assert (await metrics.fetch_samples(fake.url))["vllm:num_requests_running"]
        answer = await stream_chat(fake.url, fake.model, [{"role": "user", "content": "hi"}], max_tokens=8)
        assert answer.content


# ---- Google clients: requests under google-auth -------------------------------------------------------


@pytest.mark.parametrize("mode", ["json", "gzip", "bomb", "length", "brotli", "drip"])
def test_a_cloud_logging_page_is_read_under_the_caps(
    tmp_path: Path, endless: EndlessServer, mode: str
) -> None:
    from tpu_devops.gcp import logging as gcp_logging

    endless.mode = mode
    settings = settings_for(tmp_path, endless.url)
    with deadline.budget(2 if mode == "drip" else 120), pytest.raises(ReadLimitError) as err:
        gcp_logging.list_entries_page(settings, filter_="severity>=ERROR")
    assert "/v2/entries:list" in err.value.message
    assert err.value.cap == {"drip": "tool-call budget", "brotli": "Content-Encoding"}.get(
        mode, "MAX_API_BODY_BYTES"
    )


@pytest.mark.parametrize("mode", ["json", "gzip", "stall"])
def test_a_tpu_api_listing_is_read_under_the_caps(tmp_path: Path, endless: EndlessServer, mode: str) -> None:
    from tpu_devops.gcp.tpu import TpuApi

    endless.mode = mode
    with deadline.budget(2 if mode == "stall" else 120), pytest.raises(ReadLimitError):
        TpuApi(settings_for(tmp_path, endless.url)).list_queued_resources("us-west4-a")


def test_the_requests_adapter_decodes_gzip_and_streams_bounded() -> None:
    body = b'{"entries": []}' * 1000

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-encoding", b"gzip"), (b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.body", "body": gzip.compress(body)})

    with ServerThread(app) as srv:
        session = requests.Session()
        session.mount("http://", bounded.bounded_adapter())
        response = session.get(srv.url + "/x", timeout=5)
        assert response.content == body and "Content-Encoding" not in response.headers
        streamed = session.get(srv.url + "/x", timeout=5, stream=True)
        assert b"".join(streamed.iter_content(1000)) == body
        session.mount("http://", bounded.bounded_adapter(Caps(body_bytes=1000)))
        with pytest.raises(ReadLimitError):
            session.get(srv.url + "/x", timeout=5)
        with pytest.raises(ReadLimitError):
            b"".join(session.get(srv.url + "/x", timeout=5, stream=True).iter_content(100))


# ---- Kubernetes: urllib3 under the kubernetes client --------------------------------------------------


@pytest.mark.parametrize("mode", ["json", "gzip", "drip"])
def test_kube_api_answers_are_read_under_the_caps(endless: EndlessServer, mode: str) -> None:
    from kubernetes import client as kclient

    from tpu_devops.gke.kube import Kube

    endless.mode = mode
    configuration = kclient.Configuration(host=endless.url)
    kube = Kube(kclient.ApiClient(configuration))
    with deadline.budget(60 if mode != "drip" else 2), pytest.raises(ReadLimitError) as err:
        kube.events("default")
    assert err.value.cap == ("tool-call budget" if mode == "drip" else "MAX_API_BODY_BYTES")


# ---- the public-IP lookup ------------------------------------------------------------------------------


async def test_the_public_ip_lookup_is_read_under_the_caps(tmp_path: Path, endless: EndlessServer) -> None:
    from tpu_devops.errors import ConfigError
    from tpu_devops.provisioning.access import detect_public_ip

    endless.mode = "body"
    settings = load_settings(
        tmp_path / "none.env",
        environ={"PUBLIC_IP_LOOKUP_URL": endless.url + "/ip", "TPU_DEVOPS_STATE_DIR": str(tmp_path / "s")},
    )
    with pytest.raises(ConfigError) as err:
        await detect_public_ip(settings)
    assert "MAX_BODY_BYTES" in err.value.message and err.value.field == "allowed_source_ranges"
