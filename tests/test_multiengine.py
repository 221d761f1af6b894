"""One host, one engine per chip: engine count and ports, per-engine TPU isolation
variables, the HAProxy configuration, and per-engine status through the balancer's routes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes.http_runner import ServerThread
from tests.fakes.openai_server import FakeVllm
from tests.startup_vm import SHELLCHECK, render
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError, InputError
from tpu_devops.planning import multiengine
from tpu_devops.planning.lint import lint_notes
from tpu_devops.serving import engines as engine_status

pytestmark = pytest.mark.anyio


def settings(tmp_path: Path, **env: str):
    base = {"TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"), "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
    return load_settings(environ={**base, **env})


@pytest.mark.parametrize(
    "accel, tp, engines, ports",
    [
        ("v5litepod-1", "1", 1, [8000]),
        ("v5litepod-4", "1", 4, [8001, 8002, 8003, 8004]),
        ("v5litepod-8", "1", 8, list(range(8001, 8009))),
        ("v5litepod-8", "2", 4, [8001, 8002, 8003, 8004]),
        ("v5litepod-4", "4", 1, [8000]),
    ],
)
def test_engines_follow_chips_and_tensor_parallel_size(
    tmp_path: Path, accel: str, tp: str, engines: int, ports: list[int]
) -> None:
    s = settings(tmp_path, ACCELERATOR_TYPE=accel, TENSOR_PARALLEL_SIZE=tp)
    assert multiengine.engines_per_host(s) == engines
    assert multiengine.engine_ports(s) == ports
    assert not any("chips-idle" in n or "idle" in n for n in lint_notes(s))  # no chip left paid for and idle


def test_a_tensor_parallel_size_that_does_not_divide_the_host_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        multiengine.engines_per_host(
            settings(tmp_path, ACCELERATOR_TYPE="v5litepod-8", TENSOR_PARALLEL_SIZE="3")
        )
    assert err.value.field == "TENSOR_PARALLEL_SIZE"


def test_each_engine_sees_only_its_chips(tmp_path: Path) -> None:
    s = settings(tmp_path, ACCELERATOR_TYPE="v5litepod-8", TENSOR_PARALLEL_SIZE="2")
    envs = [multiengine.tpu_env(s, i) for i in range(4)]
    assert [e["TPU_VISIBLE_CHIPS"] for e in envs] == ["0,1", "2,3", "4,5", "6,7"]
    assert {e["TPU_CHIPS_PER_PROCESS_BOUNDS"] for e in envs} == {"1,2,1"}
    assert {e["TPU_PROCESS_BOUNDS"] for e in envs} == {"1,1,1"}
    assert len({e["TPU_PROCESS_PORT"] for e in envs}) == 4  # one libtpu port per process
    assert all(e["TPU_PROCESS_ADDRESSES"] == f"localhost:{e['TPU_PROCESS_PORT']}" for e in envs)


def test_haproxy_config_balances_by_least_connections_with_per_engine_checks(tmp_path: Path) -> None:
    s = settings(tmp_path, ACCELERATOR_TYPE="v5litepod-4")
    cfg = multiengine.haproxy_config(s)
    assert "bind :8000" in cfg and "balance leastconn" in cfg
    assert cfg.count("option httpchk GET /health") == 4  # one check per engine, in its own backend
    assert (
        "option redispatch" in cfg and "retry-on conn-failure" in cfg
    )  # a request finding a dead engine moves on
    assert (
        "default-server inter 5s fall 3 rise 2 observe layer4 error-limit 1 on-error mark-down maxconn 256"
        in cfg
    )
    for i, port in enumerate([8001, 8002, 8003, 8004]):
        # the pool routes to an engine exactly when its own backend's check passes (track), and a refused
        # connection takes it out at once (the defaults above)
        assert f"server engine-{i} 127.0.0.1:{port} track engine-{i}/engine-{i}\n" in cfg
        assert f"server engine-{i} 127.0.0.1:{port} check\n" in cfg
        assert f"use_backend engine-{i} if {{ path_beg /engines/{i}/ }}" in cfg
        assert f"http-request replace-path /engines/{i}(/.*) \\1" in cfg
    assert "timeout server 1h" in cfg  # long streams are not cut
    assert multiengine.haproxy_config(settings(tmp_path / "one")) == ""


@pytest.mark.skipif(
    shutil.which("haproxy") is None,
    reason="haproxy is not installed (apt-get install haproxy; .ci/run installs it)",
)
@pytest.mark.parametrize("accel, tp", [("v5litepod-4", "1"), ("v5litepod-8", "1"), ("v5litepod-8", "2")])
def test_haproxy_accepts_the_rendered_configuration(tmp_path: Path, accel: str, tp: str) -> None:
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(
        multiengine.haproxy_config(settings(tmp_path, ACCELERATOR_TYPE=accel, TENSOR_PARALLEL_SIZE=tp))
    )
    check = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert check.returncode == 0 and "Configuration file is valid" in check.stdout + check.stderr, (
        check.stderr
    )


def test_ports_that_collide_with_libtpu_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        multiengine.engine_ports(settings(tmp_path, ACCELERATOR_TYPE="v5litepod-8", VLLM_PORT="8470"))
    assert err.value.field == "VLLM_PORT"


# ---- per-engine status through the balancer's /engines/<i>/ routes ---------------------------------


def balancer(backends: list[str]) -> Starlette:
    """Routes /engines/<i>/<rest> to backend i (what the HAProxy config above does); the rest to backend 0."""

    async def route(request: Request) -> Response:
        parts = request.url.path.split("/")
        if len(parts) > 3 and parts[1] == "engines":
            index = int(parts[2])
            if index >= len(backends):
                return Response("no such engine", status_code=503)
            target, path = backends[index], "/" + "/".join(parts[3:])
        else:
            target, path = backends[0], request.url.path
        async with httpx.AsyncClient() as client:
            r = await client.get(target + path)
        return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))

    return Starlette(routes=[Route("/{path:path}", route)])


async def test_status_reports_every_engine_and_the_totals(tmp_path: Path) -> None:
    with FakeVllm() as a, FakeVllm() as b, ServerThread(balancer([a.url, b.url, "http://127.0.0.1:9"])) as lb:
        s = settings(tmp_path, ACCELERATOR_TYPE="v5litepod-4", TENSOR_PARALLEL_SIZE="1", VLLM_URL=lb.url)
        result = await engine_status.get_engine_status(s, engines=3)
    assert [e.healthy for e in result.engines] == [True, True, False]
    assert result.healthy == 2 and result.engines[2].error
    assert result.engines[0].path == "/engines/0"
    assert result.requests_running == sum(e.requests_running or 0 for e in result.engines)
    text = result.render_text()
    assert text.startswith("2/3 engines healthy") and "engine 2 (/engines/2): DOWN" in text
    with pytest.raises(InputError) as err:
        await engine_status.get_engine_status(s, engines=0)
    assert err.value.field == "engines"


async def test_a_one_engine_host_is_one_healthy_engine_at_the_root_path(tmp_path: Path) -> None:
    """A one-chip rig runs vLLM alone on its port, no balancer: asked at /engines/0/health it answered 404
    and was called DOWN while every probe of verify_model_health passed."""
    with FakeVllm() as vllm:
        for accel, tp in (("v5litepod-1", "1"), ("v5litepod-4", "4")):  # one chip; one engine over four
            s = settings(tmp_path, ACCELERATOR_TYPE=accel, TENSOR_PARALLEL_SIZE=tp, VLLM_URL=vllm.url)
            result = await engine_status.get_engine_status(s)
            assert [(e.engine, e.path, e.healthy) for e in result.engines] == [(0, "", True)], result
            assert result.healthy == 1 and result.engines[0].error is None
            assert (
                result.render_text().startswith("1/1 engines healthy")
                and "engine 0 (/): healthy" in result.render_text()
            )
        several = await engine_status.get_engine_status(s, engines=2)  # said to run two: per-engine paths
        assert [e.path for e in several.engines] == ["/engines/0", "/engines/1"] and several.healthy == 0


# The rendered v5litepod-4 script's run (four engines behind a real HAProxy): tests/test_startup_vm.py.


def test_rendered_multi_engine_script_is_shellcheck_clean(tmp_path: Path) -> None:
    import subprocess

    path = render(tmp_path, ACCELERATOR_TYPE="v5litepod-8", TENSOR_PARALLEL_SIZE="2")
    subprocess.run(["bash", "-n", str(path)], check=True)
    result = subprocess.run([str(SHELLCHECK), "-S", "style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
