"""One host, one engine per chip (issue 15 §2): engine count and ports, per-engine TPU isolation
variables, the HAProxy configuration, and per-engine status through the balancer's routes."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes.http_runner import ServerThread
from tests.fakes.openai_server import FakeVllm
from tests.startup_vm import (
    FAKE_CURL,
    FAKE_DOCKER,
    PLANTED,
    PLANTED_KEY,
    SHELLCHECK,
    render,
    run_startup_script,
)
from tests.startup_vm import settings as startup_settings
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
    assert cfg.count("option httpchk GET /health") == 5  # the pool and each per-engine backend
    for i, port in enumerate([8001, 8002, 8003, 8004]):
        assert f"server engine-{i} 127.0.0.1:{port} check inter 5s fall 3 rise 2 maxconn 256" in cfg
        assert f"use_backend engine-{i} if {{ path_beg /engines/{i}/ }}" in cfg
        assert f"http-request replace-path /engines/{i}(/.*) \\1" in cfg
    assert "timeout server 1h" in cfg  # long streams are not cut
    assert multiengine.haproxy_config(settings(tmp_path / "one")) == ""


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


# ---- the rendered startup script on a v5litepod-4, run with stand-ins for curl, docker and logger -------


def run_multi(tmp_path: Path, *, dead_engine: int | None = None) -> tuple[object, Path, Path]:
    script = render(tmp_path, GOOGLE_CLOUD_PROJECT="my-tpu-project", ACCELERATOR_TYPE="v5litepod-4")
    curl, docker = FAKE_CURL, FAKE_DOCKER
    if dead_engine is not None:  # that engine never answers and its container has exited
        port = 8001 + dead_engine
        curl = curl.replace(
            '  *"/health") exit 0 ;;', f'  *":{port}/health") exit 7 ;;\n  *"/health") exit 0 ;;'
        )
        docker = docker.replace(
            '[[ "$1" == inspect ]] && echo true',
            f'[[ "$1" == inspect && "$*" == *vllm-{dead_engine}* ]] && {{ echo false; exit 0; }}\n[[ "$1" == inspect ]] && echo true',
        )
    run, fs = run_startup_script(script, tmp_path, curl=curl, docker=docker)
    return run.proc, run.fake, fs


def test_rendered_multi_engine_script_is_shellcheck_clean(tmp_path: Path) -> None:
    import subprocess

    path = render(tmp_path, ACCELERATOR_TYPE="v5litepod-8", TENSOR_PARALLEL_SIZE="2")
    subprocess.run(["bash", "-n", str(path)], check=True)
    result = subprocess.run([str(SHELLCHECK), "-S", "style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_script_serves_one_engine_per_chip_behind_haproxy(tmp_path: Path) -> None:
    proc, fake, fs = run_multi(tmp_path)
    assert proc.returncode == 0, proc.stderr
    runs = [line for line in (fake / "argv.log").read_text().splitlines() if line.startswith("docker run")]
    engines = [r for r in runs if "vllm/vllm-tpu" in r]
    assert len(engines) == 4
    for i, run in enumerate(engines):
        assert f"--name vllm-{i} " in run and f"-e TPU_VISIBLE_CHIPS={i} " in run
        assert "-e TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1" in run and "-e TPU_PROCESS_BOUNDS=1,1,1" in run
        assert f"-e TPU_PROCESS_PORT={8476 + i} " in run
        assert run.endswith(f"--port {8001 + i}") and run.count("--port") == 1
        # each engine's compile cache under the cache key's directory (tpu_devops.planning.warmboot)
        assert re.search(
            rf"/root/\.cache/vllm/[0-9a-f]{{16}}-(?:[0-9a-f]{{16}}|unknown)/engine-{i}:/root/\.cache/vllm ",
            run,
        )
        assert PLANTED not in run and PLANTED_KEY not in run  # both reach the engines by the env file only
        assert "--env-file" in run
    lb = next(r for r in runs if "haproxy:3.2" in r)
    assert "--name vllm-lb" in lb and "haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in lb
    cfg = (fs / "var" / "lib" / "tpu-devops" / "haproxy.cfg").read_text()
    expected = multiengine.haproxy_config(
        startup_settings(GOOGLE_CLOUD_PROJECT="my-tpu-project", ACCELERATOR_TYPE="v5litepod-4")
    )
    assert cfg == expected
    assert "docker pull haproxy:3.2" in (fake / "argv.log").read_text()
    curls = (fake / "argv.log").read_text()
    for port in (8001, 8002, 8003, 8004, 8000):
        assert f"http://127.0.0.1:{port}/health" in curls
    syslog = (fake / "syslog").read_text()
    assert "4 engines of google/gemma-4-E2B-it on ports 8001 8002 8003 8004 behind HAProxy on 8000" in syslog
    assert "STAGE ready vLLM answers on port 8000 (4 engine(s))" in syslog
    record = (fs / "var" / "lib" / "tpu-devops" / "serving-flags.json").read_text()
    assert '"engines":4' in record and '"engine_ports":[8001,8002,8003,8004]' in record


def test_script_names_the_engine_that_died(tmp_path: Path) -> None:
    proc, fake, _ = run_multi(tmp_path, dead_engine=2)
    assert proc.returncode != 0
    syslog = (fake / "syslog").read_text()
    assert "STAGE failed vLLM engine 2 exited before serving" in syslog and "container vllm-2" in syslog
