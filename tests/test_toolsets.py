"""Toolsets: the operator picks what is declared (TPU_DEVOPS_TOOLSETS), get_help shows every set and how to
turn it on, and a call of a tool that is not declared (another toolset's, an old name's) says why and what
to call instead. Through the official MCP client against server.py over stdio."""

from __future__ import annotations

from pathlib import Path

import pytest

from server import TOOLSETS
from tests.mcp_session import mcp_client
from tpu_devops.host.toolsets import Toolset, select

pytestmark = pytest.mark.anyio

DEFAULT = {name for ts in TOOLSETS if ts.default for name in ts.tools}
GKE = set(next(ts for ts in TOOLSETS if ts.name == "gke").tools)


def test_select_expands_default_and_all_and_names_a_typo_with_the_closest_set() -> None:
    sets = [Toolset("a", "", default=True), Toolset("b", "", default=True), Toolset("gke", "", default=False)]
    assert select(sets, []).enabled == ("a", "b")
    assert select(sets, ["default", "gke"]).enabled == ("a", "b", "gke")
    assert select(sets, ["all"]).enabled == ("a", "b", "gke")
    assert select(sets, ["gke"]).enabled == ("gke",)
    typo = select(sets, ["default", "gkee"])
    assert typo.enabled == ("a", "b")
    assert "'gkee' is no toolset (did you mean gke?)" in typo.errors[0] and "Fix:" in typo.errors[0]
    assert select(sets, ["nothing"]).enabled == ("a", "b")  # a typo never leaves the server without tools


async def test_the_default_set_is_the_main_job_and_opt_in_sets_are_off(tmp_path: Path) -> None:
    async with mcp_client(TPU_DEVOPS_TOOLSETS="", TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == DEFAULT
        assert {
            "get_help",
            "create_tpu_queued_resource",
            "query_gemma",
            "summarize_logs",
            "get_job",
        } <= listed
        assert not listed & (GKE | {"run_benchmark", "plan_scale_out"})
        off = await client.call_tool("apply_gke_deployment", {"cluster": "c"})
        assert off.is_error
        text = off.content[0].text
        assert "toolset 'gke'" in text and "TPU_DEVOPS_TOOLSETS=default,gke" in text and "restart" in text
        help_text = (await client.call_tool("get_help", {})).content[0].text
        assert "gke [off]" in help_text and "to enable: set TPU_DEVOPS_TOOLSETS=default,gke" in help_text
        assert "provision [on]" in help_text


async def test_an_opt_in_set_adds_its_tools_and_read_only_filters_the_declared_set(tmp_path: Path) -> None:
    async with mcp_client(TPU_DEVOPS_TOOLSETS="default,gke", TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == DEFAULT | GKE
    env = {"TPU_DEVOPS_TOOLSETS": "gke", "TPU_DEVOPS_READ_ONLY": "1", "TPU_DEVOPS_STATE_DIR": str(tmp_path)}
    async with mcp_client(**env) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        # help is always declared; read-only mode hides what changes state, also in an opt-in set
        assert {"get_help", "check_setup", "plan_gke_deployment", "benchmark_gke_deployment"} == set(tools)
        hidden = await client.call_tool("apply_gke_deployment", {"cluster": "c"})
        assert hidden.is_error and "read-only" in hidden.content[0].text


@pytest.mark.parametrize(
    ("old", "replacement"),
    [
        ("query_gemma_with_stats", "query_gemma with stats=true"),
        ("manage_queued_resource", "destroy_queued_resource with only_failed=true"),
        ("get_reservation_status", "describe_queued_resource"),
        ("get_system_status", "check_setup with view='status'"),
        ("get_vllm_deployment_config", "render_startup_script with form='commands'"),
        ("get_metrics", "get_serving_status with view='metrics'"),
        ("list_jobs", "get_job without job_id"),
        ("get_tpu_system_logs", "get_cloud_logging_logs with log='system'"),
        ("import_benchmark_results", "run_benchmark with results_path"),
    ],
)
async def test_a_call_by_an_old_name_names_the_tool_and_arguments_that_replace_it(
    old: str, replacement: str, tmp_path: Path
) -> None:
    async with mcp_client(TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
        result = await client.call_tool(old, {"prompt": "hi"})
    assert result.is_error
    text = result.content[0].text
    assert f"name = '{old}'" in text and "renamed or merged" in text and replacement in text


async def test_an_unknown_toolset_name_is_a_configuration_error_and_the_defaults_stay(tmp_path: Path) -> None:
    async with mcp_client(TPU_DEVOPS_TOOLSETS="default,gkee", TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
        assert {t.name for t in (await client.list_tools()).tools} == DEFAULT
        help_answer = await client.call_tool("get_help", {})
    assert help_answer.content[0].text.startswith("CONFIGURATION ERROR")
    assert "'gkee' is no toolset (did you mean gke?)" in help_answer.content[0].text


def test_no_answer_of_ours_names_a_tool_that_no_longer_exists() -> None:
    """Fix texts and next steps name tools a model will call: an old name would send it to an error."""
    import ast
    import re

    from tests.mcp_session import ROOT

    old = {name for ts in TOOLSETS for name in ts.renames}
    allowed = {ROOT / "tpu_devops" / "host" / "untrusted.py"}  # its injection patterns name them on purpose
    found = []
    for path in (ROOT / "tpu_devops").rglob("*.py"):
        if path in allowed or path.parent.name == "tools":
            continue
        for node in ast.walk(ast.parse(path.read_text())):  # the texts: strings, f-strings, docstrings
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [
                    f"{path.name}:{node.lineno}: {n}" for n in old if re.search(rf"\b{n}\b", node.value)
                ]
    assert found == []


def test_described_arguments_counts_only_arguments_with_a_description() -> None:
    from types import SimpleNamespace

    from tests.host_scenarios import described_arguments

    tools = [
        SimpleNamespace(
            input_schema={"properties": {"a": {"description": "zone"}, "b": {"description": " "}}}
        ),
        SimpleNamespace(input_schema={"properties": {"c": {"type": "string"}}}),
        SimpleNamespace(input_schema={}),
    ]
    assert described_arguments(tools) == (1, 3)
    assert described_arguments([]) == (0, 0)
