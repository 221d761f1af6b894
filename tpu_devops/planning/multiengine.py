"""One host, one vLLM engine per chip: engine count, ports, chip isolation, load balancer.

A multi-chip host (v5litepod-4 / -8) serves ``chips / tensor-parallel-size`` engines, each in its own
container on its own port, behind HAProxy on ``VLLM_PORT``. No setting adds idle chips: the engine
count follows from ACCELERATOR_TYPE and TENSOR_PARALLEL_SIZE (v5litepod-4 at TP 1 = 4 engines).

**Chip isolation** (each process sees only its chips), as tpu-inference does for its own
multi-process data parallelism (vllm-project/tpu-inference ``tpu_inference/worker/tpu_worker.py``,
``_setup_dp_chip_isolation``, commit b8692ff): ``TPU_VISIBLE_CHIPS`` (the chip indexes),
``TPU_CHIPS_PER_PROCESS_BOUNDS`` (``1,N,1`` for N chips; ``1,1,1`` for one), ``TPU_PROCESS_BOUNDS``
``1,1,1`` (one process in its own slice), a distinct ``TPU_PROCESS_PORT`` per process so the libtpu
runtimes coexist on the host (tpu-inference uses a base port plus the rank), ``TPU_PROCESS_ADDRESSES``
``localhost:<port>`` and ``CLOUD_TPU_TASK_ID`` 0. The same variables appear in tpu-inference's
``examples/disagg/run_disagg_single_host.sh`` (one engine per chip, ``TPU_VISIBLE_CHIPS=0`` / ``=1``).

**Load balancer**: HAProxy (official image ``haproxy``, LTS 3.2; the configuration also passes
``haproxy -c`` of Debian's 2.6, which the tests run): ``balance leastconn`` (a long generation keeps its
engine busy; least connections spreads streams evenly, which the scale-out model assumes), an active
``GET /health`` check per engine every 5 s (3 failures take it out, 2 successes bring it back, a refused
connection at once), which the pool's servers track; a request that finds an engine gone is tried on
another (``retry-on conn-failure``, ``option redispatch``); ``maxconn 256`` per engine (vLLM's max_num_seqs: beyond it requests queue in the
balancer, not in a preempting engine). Per-engine routes on the one open port: ``/engines/<i>/...`` go
to engine i only with the prefix stripped (``/engines/0/metrics`` is engine 0's ``/metrics``), so the
health, metrics and benchmark tools reach each engine through the firewall rule of ``VLLM_PORT``.
"""

from __future__ import annotations

from typing import Any

from tpu_devops.catalog import resolve_accelerator_type
from tpu_devops.config import Settings
from tpu_devops.errors import ConfigError

LB_IMAGE = "haproxy:3.2"  # HAProxy LTS branch tag of the official image (hub.docker.com/_/haproxy)
LB_CONTAINER = "vllm-lb"
LB_CONFIG_PATH = "/usr/local/etc/haproxy/haproxy.cfg"  # where the official image reads its config
TPU_PROCESS_BASE_PORT = 8476  # libtpu's default TPU_PROCESS_PORT; engine i uses 8476 + i
ENGINE_MAX_CONNECTIONS = 256  # vLLM's default max_num_seqs on TPU
HEALTH_INTERVAL_S = 5
STREAM_TIMEOUT = "1h"  # a long generation streams for minutes; the balancer must not cut it


def chips_per_host(settings: Settings) -> int:
    """Chips on one host of ACCELERATOR_TYPE (v5e: 1, 4 or 8; larger slices span hosts of 8)."""
    accel = resolve_accelerator_type(settings.accelerator_type)
    return min(accel.chips, max(accel.generation.machine_types))


def engines_per_host(settings: Settings) -> int:
    """Engines one host serves: its chips / TENSOR_PARALLEL_SIZE (no chip left idle).

    Raises:
        ConfigError: TENSOR_PARALLEL_SIZE does not divide the host's chips.
    """
    chips, tp = chips_per_host(settings), settings.tensor_parallel_size
    if tp < 1 or chips % tp:
        raise ConfigError(
            f"a host of {settings.accelerator_type} has {chips} chip(s), which TENSOR_PARALLEL_SIZE={tp} does not divide",
            field="TENSOR_PARALLEL_SIZE",
            value=tp,
            fix=f"use a divisor of {chips} (1 serves one engine per chip)",
        )
    return chips // tp


def engines_in_slice(settings: Settings) -> int:
    """Engines over the whole slice: every host runs the startup script, so engines per host x hosts."""
    accel = resolve_accelerator_type(settings.accelerator_type)
    return engines_per_host(settings) * (accel.chips // chips_per_host(settings))


def engine_ports(settings: Settings) -> list[int]:
    """Ports of the engines: ``VLLM_PORT`` for a single engine; ``VLLM_PORT + 1 + i`` behind the balancer.

    Raises:
        ConfigError: a port would pass 65535 or hit a libtpu process port (8476 + i).
    """
    n = engines_per_host(settings)
    if n == 1:
        return [settings.vllm_port]
    ports = [settings.vllm_port + 1 + i for i in range(n)]
    taken = set(range(TPU_PROCESS_BASE_PORT, TPU_PROCESS_BASE_PORT + n))
    if ports[-1] > 65535 or taken & set(ports):
        raise ConfigError(
            f"engine ports {ports[0]}-{ports[-1]} collide with the libtpu process ports or pass 65535",
            field="VLLM_PORT",
            value=settings.vllm_port,
            fix="use e.g. VLLM_PORT=8000",
        )
    return ports


def tpu_env(settings: Settings, engine: int) -> dict[str, str]:
    """The TPU runtime variables that give engine ``engine`` its own chips (module docstring, sources)."""
    tp = settings.tensor_parallel_size
    chips = ",".join(str(engine * tp + c) for c in range(tp))
    port = TPU_PROCESS_BASE_PORT + engine
    return {
        "TPU_VISIBLE_CHIPS": chips,
        "TPU_CHIPS_PER_PROCESS_BOUNDS": f"1,{tp},1",
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_PORT": str(port),
        "TPU_PROCESS_ADDRESSES": f"localhost:{port}",
        "CLOUD_TPU_TASK_ID": "0",
    }


def haproxy_config(settings: Settings) -> str:
    """The HAProxy configuration for this host's engines (empty for a single engine: no balancer)."""
    ports = engine_ports(settings)
    if len(ports) == 1:
        return ""
    # One health check per engine, in its own backend; the pool's servers track it, so the balancer routes
    # to an engine exactly when /engines/<i>/health answers through it (what the startup script waits for).
    # A refused connection marks the engine down at once (observe layer4) and the request is tried on
    # another engine (retry-on conn-failure, redispatch), so a crashed engine costs no request. The
    # options are said once (default-server): the rendered script must fit one answer for 8 engines.
    server_defaults = (
        f"inter {HEALTH_INTERVAL_S}s fall 3 rise 2 observe layer4 error-limit 1 on-error mark-down "
        f"maxconn {ENGINE_MAX_CONNECTIONS}"
    )
    lines = [
        "# rendered by tpu-devops: one vLLM engine per chip behind least-connections balancing",
        "global",
        "    log stdout format raw local0",
        "    maxconn 8192",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    timeout connect 5s",
        f"    timeout client {STREAM_TIMEOUT}",
        f"    timeout server {STREAM_TIMEOUT}",
        "    timeout queue 10m",
        "    timeout http-request 60s",
        f"    default-server {server_defaults}",
        "frontend vllm",
        f"    bind :{settings.vllm_port}",
    ]
    lines += [f"    use_backend engine-{i} if {{ path_beg /engines/{i}/ }}" for i in range(len(ports))]
    lines += [
        "    default_backend engines",
        "backend engines",
        "    balance leastconn",
        "    option redispatch",
        "    retries 2",
        "    retry-on conn-failure",
    ]
    lines += [f"    server engine-{i} 127.0.0.1:{p} track engine-{i}/engine-{i}" for i, p in enumerate(ports)]
    for i, p in enumerate(ports):
        lines += [
            f"backend engine-{i}",
            f"    http-request replace-path /engines/{i}(/.*) \\1",
            "    option httpchk GET /health",
            "    http-check expect status 200",
            f"    server engine-{i} 127.0.0.1:{p} check",
        ]
    return "\n".join(lines) + "\n"


def engines_record(settings: Settings) -> dict[str, Any]:
    """What the VM records about its engines (part of the serving-flags record)."""
    ports = engine_ports(settings)
    return {
        "engines": len(ports),
        "engine_ports": ports,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "load_balancer": None
        if len(ports) == 1
        else {"image": LB_IMAGE, "port": settings.vllm_port, "balance": "leastconn"},
        "tpu_env": [tpu_env(settings, i) for i in range(len(ports))] if len(ports) > 1 else [],
    }
