"""Every tool called once on the bundled inputs, through the official MCP client over stdio.

What hosts read of a tool answer is checked per tool (text vs structured content, sizes, headline), so
the calls must reach every tool the server lists: `CALLS` holds the arguments of each tool's call on the
bundled inputs, and `run_every_tool` starts the fakes (Google APIs in `tests.fakes.gcp`, vLLM in
`tests.fakes.openai_server`), a server pointed at them, and calls each listed tool in `CALLS` order.
A tool listed by the server but missing from `CALLS` is reported in `Transcript.missing`, so the tests
that use this fail for a new tool until its bundled call is added here. Also used by `make bench`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.mcp_session import ROOT, server_env
from tpu_devops.host.results import table_records
from tpu_devops.host.schemas import TABLE_KEYS

DATA = ROOT / "tests" / "data"
PROJECT = "demo-project"
HF_TOKEN = "hf_PlantedScenarioTokenDoNotLeak4242ab"

SEED_COMMAND = (DATA / "seed_serve_command.txt").read_text().strip()
OOM_LOG = str(DATA / "vllm-logs" / "v5e1-e2b-util095-program-oom.log")
EXPORT = str(DATA / "logs" / "v5e1-util095-export.json")
BENCH = str(DATA / "bench" / "v5e1-e2b-c128-u64.json")
EXPORT_SINCE = "2026-08-07T00:00:00Z"  # before the bundled export's first entry

KUBE_SECRET = ("default", "vllm-gemma4-e2b-secrets", {"hf_token": "hf_x", "api_key": "k"})


@dataclass
class World:
    """The fakes a scenario runs against, and values later calls refer to as ``"$name"``."""

    gcp: Any
    vllm: Any
    kube: Any
    values: dict[str, str] = field(default_factory=dict)


# (tool, arguments, what to do to the world first) in call order: the order matters where a call needs what
# an earlier one made (find_tpu's job creates the TPU that status, endpoint and teardown then see). A string
# argument "$x" is replaced by `World.values["x"]` (a job id by the tool that started it, the kubeconfig).
CALLS: list[tuple[str, dict[str, Any], Callable[[World], None] | None]] = [
    ("get_help", {}, None),
    ("check_setup", {}, None),
    ("plan_capacity", {}, None),
    ("plan_scale_out", {"streams": 64}, None),
    ("lint_vllm_flags", {"command": SEED_COMMAND}, None),
    ("render_startup_script", {}, None),
    ("render_startup_script", {"form": "commands"}, None),
    ("diagnose_vllm_boot", {"path": OOM_LOG}, None),
    ("get_zones_with_available_quota", {}, None),
    ("plan_queued_resource", {}, None),
    ("save_hf_token", {"token": HF_TOKEN}, None),
    ("find_tpu", {"zones": ["us-west4-a"], "poll_interval_s": 0.05, "zone_budget_s": 30}, None),
    ("get_job", {"job_id": "$find_tpu"}, None),
    ("get_job", {}, None),
    ("create_tpu_queued_resource", {}, None),
    ("describe_queued_resource", {}, None),
    ("list_queued_resources", {}, None),
    ("get_vllm_endpoint", {}, None),
    ("check_setup", {"view": "status"}, None),
    ("reconfigure_vllm", {"max_model_len": 8192, "dry_run": True}, None),
    ("verify_model_health", {}, None),
    ("query_gemma", {"prompt": "Say hi", "max_tokens": 8}, None),
    ("query_gemma", {"stats": True, "prompt": "Say hi", "max_tokens": 8}, None),
    ("get_serving_status", {"view": "metrics"}, None),
    ("get_serving_status", {"view": "engines"}, None),
    ("get_serving_status", {"view": "model"}, None),
    ("run_benchmark", {"concurrency": [1], "prompt_lengths": [128], "output_len": 4}, None),
    ("cancel_job", {"job_id": "$run_benchmark"}, None),
    ("run_benchmark", {"results_path": BENCH}, None),
    ("estimate_deployment_cost", {"tokens_per_s": 1496.5}, None),
    ("get_cloud_logging_logs", {"limit": 50, "since": EXPORT_SINCE}, None),
    ("get_cloud_logging_logs", {"log": "container", "since": EXPORT_SINCE, "node": "gemma4-qr"}, None),
    ("get_cloud_logging_logs", {"log": "system", "since": EXPORT_SINCE, "node": "gemma4-qr"}, None),
    ("summarize_logs", {"path": EXPORT}, None),
    ("analyze_cloud_logging", {"question": "Why did vLLM fail to start?", "path": EXPORT}, None),
    ("plan_gke_deployment", {"cluster": "gemma", "kubeconfig": "$kubeconfig"}, None),
    ("plan_gke_deployment", {"cluster": "gemma"}, None),
    (
        "apply_gke_deployment",
        {"cluster": "gemma", "poll_interval_s": 0.05, "wait_timeout_s": 5},
        lambda w: w.kube.add_secret(*KUBE_SECRET),
    ),
    (
        "benchmark_gke_deployment",
        {
            "cluster": "gemma",
            "base_url": "$vllm_url",
            "concurrency": [1],
            "prompt_lengths": [16],
            "output_len": 4,
        },
        lambda w: w.kube.mark_ready("default", "vllm-gemma4-e2b"),
    ),
    ("teardown_gke_deployment", {"cluster": "gemma"}, None),
    ("destroy_queued_resource", {"dry_run": True}, None),
    ("destroy_queued_resource", {"only_failed": True, "dry_run": True}, None),
]


@dataclass
class Answer:
    """One tool call as the host received it."""

    tool: str
    arguments: dict[str, Any]
    is_error: bool
    text: str
    structured: dict[str, Any] | None
    links: list[Any] = field(default_factory=list)  # resource_link content blocks (mcp_types.ResourceLink)
    images: list[Any] = field(default_factory=list)  # image content blocks (mcp_types.ImageContent)

    @property
    def text_chars(self) -> int:
        return len(self.text)

    @property
    def structured_chars(self) -> int:
        """Characters of the structured content as a host serialises it (compact JSON)."""
        if self.structured is None:
            return 0
        return len(json.dumps(self.structured, ensure_ascii=False, separators=(",", ":")))

    @property
    def both_chars(self) -> int:
        """Characters of text and structure together: what Qwen Code sends its model (and measures)."""
        return self.text_chars + self.structured_chars


@dataclass
class Transcript:
    answers: list[Answer] = field(default_factory=list)
    listed: list[Any] = field(default_factory=list)  # mcp_types.Tool as listed
    missing: list[str] = field(default_factory=list)  # listed tools without a bundled call


@contextlib.contextmanager
def fakes(state_dir: Path) -> Any:
    """A `World`: the Google API fake (TPU, quotas, secrets, logging with the bundled export, billing, GKE
    with a cluster), the vLLM fake and a Kubernetes API fake, started on loopback."""
    from tests.fakes.gcp import FakeGcp
    from tests.fakes.kube_api import FakeKube
    from tests.fakes.openai_server import FakeVllm

    with FakeGcp() as gcp, FakeVllm(ttft_s=0.001, itl_s=0.001) as vllm, FakeKube() as kube:
        # the export was taken in "my-project": file it under the scenario's project
        gcp.logging.add(json.loads(Path(EXPORT).read_text().replace("my-project", PROJECT)))
        gcp.container.add_cluster("us-west4-a", "gemma", kube=kube)  # reached through the GKE API
        world = World(gcp, vllm, kube)
        world.values["kubeconfig"] = kube.kubeconfig(state_dir / "kubeconfig")
        world.values["vllm_url"] = vllm.url
        yield world


def scenario_env(gcp: Any, vllm: Any, state_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "TPU_DEVOPS_GCP_ENDPOINT": gcp.url,
        "TPU_DEVOPS_STATE_DIR": str(state_dir),
        "TPU_DEVOPS_ENV_FILE": str(state_dir / "no-tpu.env"),
        "VLLM_URL": vllm.url,
        "TPU_DEVOPS_LOG_LEVEL": "WARNING",
    }
    env.update(extra)
    return server_env(**env)


@contextlib.asynccontextmanager
async def client_for(
    env: dict[str, str], errlog: Path, cwd: Path = ROOT, **client_kwargs: Any
) -> AsyncIterator[Client]:
    """The official MCP client on a fresh ``server.py`` with ``env``, started in ``cwd`` (a host starts it
    in the user's project); its stderr goes to ``errlog``."""
    params = StdioServerParameters(
        command=sys.executable, args=[str(ROOT / "server.py")], env=env, cwd=str(cwd)
    )
    with open(errlog, "a") as fh:
        async with Client(
            stdio_client(params, errlog=fh), read_timeout_seconds=120, **client_kwargs
        ) as client:
            yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> Answer:
    result = await client.call_tool(tool, arguments)
    text = "\n".join(c.text for c in result.content if c.type == "text")
    answer = Answer(tool, arguments, bool(result.is_error), text, result.structured_content)
    answer.links = [c for c in result.content if c.type == "resource_link"]
    answer.images = [c for c in result.content if c.type == "image"]
    return answer


async def _wait_job(client: Client, job_id: str) -> None:
    with anyio.fail_after(60):
        while True:
            job = await client.call_tool("get_job", {"job_id": job_id})
            if (job.structured_content or {}).get("state") != "running":
                return
            await anyio.sleep(0.05)


async def run_every_tool(state_dir: Path) -> Transcript:
    """Start fakes and a server, call every listed tool once (`CALLS`), return what the host saw."""
    return await run_calls(state_dir, CALLS)


async def run_calls(
    state_dir: Path, calls: list[tuple[str, dict[str, Any], Callable[[World], None] | None]]
) -> Transcript:
    """Start fakes and a server and make ``calls`` in order (see `CALLS`); ``missing`` lists the listed
    tools that ``calls`` does not reach."""
    out = Transcript()
    with fakes(state_dir) as world:
        env = scenario_env(world.gcp, world.vllm, state_dir)
        async with client_for(env, state_dir / "server-stderr.log") as client:
            out.listed = (await client.list_tools()).tools
            names = {t.name for t in out.listed}
            out.missing = sorted(names - {name for name, _, _ in calls})
            for tool, arguments, before in calls:
                if tool not in names:
                    continue
                if before is not None:
                    before(world)
                args = {k: _resolve(v, world.values) for k, v in arguments.items()}
                answer = await call(client, tool, args)
                out.answers.append(answer)
                job_id = (answer.structured or {}).get("job_id")
                if job_id and not answer.is_error:
                    world.values[tool] = job_id
                    if tool == "find_tpu":
                        await _wait_job(client, job_id)
    return out


def _resolve(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str) and value.startswith("$"):
        return values[value[1:]]
    return value


# What Gemini CLI adds to each of our declarations: a ``wait_for_previous`` boolean parameter with a
# 229-character description (Gemini CLI 0.61.0, ``BaseDeclarativeTool.addWaitForPreviousParameter``),
# 260 bytes of JSON. Measured against the real CLI's requests in tests/test_gemini_cli.py.
GEMINI_CLI_PER_TOOL_BYTES = 260
DECLARATION_BUDGET = 30_000  # bytes of every toolset's declarations in one model request
DEFAULT_DECLARATION_BUDGET = 20_000  # ... of the default toolsets' (what a server declares unless told)
TOOL_LIMIT = 32  # tools with every toolset enabled


def default_toolset_tools() -> set[str]:
    """The names of the tools the default toolsets declare."""
    from server import TOOLSETS

    return {name for ts in TOOLSETS if ts.default for name in ts.tools}


RATIO_GOAL = 1.3  # structured JSON / text characters of every tool's answer on the bundled inputs


def declaration_bytes(tools: list[Any], server: str = "tpu-devops") -> int:
    """Bytes of ``tools`` as Gemini CLI declares them to the model: ``{name: mcp_<server>_<tool>,
    description, parametersJsonSchema}`` as compact JSON, plus the CLI's own per-tool parameter."""
    total = 0
    for t in tools:
        decl = {
            "name": f"mcp_{server}_{t.name}",
            "description": t.description,
            "parametersJsonSchema": t.input_schema,
        }
        total += len(json.dumps(decl, separators=(",", ":"), ensure_ascii=False).encode())
        # the parameter joins the other properties, after a comma when there are any
        total += GEMINI_CLI_PER_TOOL_BYTES - (0 if t.input_schema.get("properties") else 1)
    return total


def described_arguments(tools: list[Any]) -> tuple[int, int]:
    """(arguments with a non-empty description, all arguments) over the top-level ``properties`` of
    ``tools``' input schemas: what a model reads to choose an argument."""
    props = [p for t in tools for p in (t.input_schema.get("properties") or {}).values()]
    return sum(1 for p in props if str(p.get("description") or "").strip()), len(props)


def _variants(value: Any) -> set[str] | None:
    """How a scalar may be written in the text (None: not checked: booleans, long or multi-line text)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return {str(value), f"{value:,}"}
    if isinstance(value, float):
        out = {str(value), f"{value:,}", f"{value:g}", f"{value:,.0f}"}
        for digits in range(1, 5):
            out |= {f"{value:.{digits}f}", f"{value:,.{digits}f}", f"{value:.{digits + 1}g}"}
        if abs(value) <= 1:
            out |= {f"{value * 100:.0f}%", f"{value * 100:.1f}%"}
        return out
    if isinstance(value, str) and 0 < len(value) <= 120 and "\n" not in value:
        return {value}
    return None


def _leaves(obj: Any, path: str = "", depth: int = 0) -> Any:
    """(path, scalar) of the key facts: scalars up to three levels down, the first item of each list (of a
    table: its first row)."""
    if isinstance(obj, dict) and tuple(obj) == TABLE_KEYS:
        obj = table_records(obj)
    if isinstance(obj, dict):
        for k, v in obj.items():
            if depth == 0 and k in ("summary", "untrusted", "omitted"):
                continue
            yield from _leaves(v, f"{path}.{k}" if path else k, depth + 1)
    elif isinstance(obj, list):
        if obj and depth <= 2:
            yield from _leaves(obj[0], f"{path}[0]", depth + 1)
    elif depth <= 3:
        yield path, obj


def missing_facts(answer: Answer) -> list[str]:
    """The structured content's key facts (`_leaves`) that its text does not state in any usual form."""
    missing = []
    for path, value in _leaves(answer.structured or {}):
        forms = _variants(value)
        if forms and not any(f in answer.text for f in forms):
            missing.append(f"{path}={value!r}"[:80])
    return missing
