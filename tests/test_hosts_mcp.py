"""What every host gets, through the official MCP client over stdio.

Every tool is enumerated from ``tools/list``, so a tool added later is held to the same rules: its
schemas stay inside the Gemini subset and bounded, its arguments are checked, both result forms lead
with the same summary and stay under the size cap (on the bundled inputs of `tests.host_scenarios`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult

from tests.conftest import gcp_environ
from tests.fakes.gcp import FakeGcp
from tests.host_scenarios import (
    DECLARATION_BUDGET,
    DEFAULT_DECLARATION_BUDGET,
    EXPORT,
    EXPORT_SINCE,
    HF_TOKEN,
    RATIO_GOAL,
    Transcript,
    call,
    client_for,
    declaration_bytes,
    default_toolset_tools,
    missing_facts,
    run_calls,
    run_every_tool,
)
from tests.mcp_session import mcp_client, server_env
from tests.test_schemas import gemini_subset_problems
from tpu_devops.host.results import (
    HOST_COMBINED_LIMIT,
    HOST_TEXT_LIMIT,
    MAX_EVIDENCE_TOKENS,
    MAX_RESULT_CHARS,
)

pytestmark = pytest.mark.anyio
RIG_LABELS = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def transcript(tmp_path_factory: pytest.TempPathFactory) -> Transcript:
    """Every listed tool called once on the bundled inputs (one server session, shared by the tests)."""
    return await run_every_tool(tmp_path_factory.mktemp("hosts"))


async def test_every_listed_tool_has_a_bundled_call(transcript: Transcript) -> None:
    assert transcript.missing == [], (
        f"tools without a call in tests/host_scenarios.py CALLS: {transcript.missing}: add one (arguments on the "
        "bundled inputs) so the host-contract tests cover them"
    )
    failed = [(a.tool, a.text[:300]) for a in transcript.answers if a.is_error]
    assert failed == [], failed


async def test_both_forms_lead_with_the_same_summary_and_fit_the_host_limit(transcript: Transcript) -> None:
    for a in transcript.answers:
        assert a.structured is not None, f"{a.tool}: no structured content"
        summary = a.structured.get("summary")
        assert summary and a.text.startswith(summary.splitlines()[0]), (
            f"{a.tool}: the text must start with the structured summary (ToolResult.summary_text); "
            f"text starts {a.text[:120]!r}, summary {summary!r}"
        )
        assert list(a.structured)[0] == "summary", a.tool
        # every host takes it whole: Gemini CLI / Claude Code read one form, Qwen Code both (25,000)
        assert a.text_chars <= HOST_TEXT_LIMIT and a.both_chars <= HOST_COMBINED_LIMIT, (
            f"{a.tool}: text {a.text_chars:,}, text + structured {a.both_chars:,} characters (limits "
            f"{HOST_TEXT_LIMIT:,} / {HOST_COMBINED_LIMIT:,}): write a large artifact as a file "
            "(tpu_devops.host.artifacts) and answer with its summary, size, path and URI"
        )
        assert "left out to fit" not in a.text, f"{a.tool}: cut with default arguments on the bundled inputs"


async def test_a_file_an_answer_links_to_is_described_and_served_only_as_ours(tmp_path: Path) -> None:
    """The full startup script is a file: its answer names size, path and URI, the resource_link is
    readable with resources/read (whole), and nothing else is."""
    async with mcp_client(TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
        assert client.server_capabilities.resources is not None
        answer = await call(client, "render_startup_script", {})
        [link] = answer.links
        file = answer.structured["file"]
        assert link.uri == file["uri"] and link.size == file["bytes"] == answer.structured["bytes"]
        assert link.mime_type == "text/x-shellscript" and Path(file["path"]).parent == tmp_path / "artifacts"
        for fact in (file["path"], file["uri"], f"{file['bytes']:,} bytes"):
            assert fact in answer.text
        read = (await client.read_resource(link.uri)).contents[0]
        assert read.text == Path(file["path"]).read_text() and read.text.startswith("#!/bin/bash")
        assert len(read.text.encode()) == file["bytes"] and answer.structured["settings_block"] in read.text
        assert [r.uri for r in (await client.list_resources()).resources] == [link.uri]
        outside = tmp_path / "secret.txt"
        outside.write_text("not for the model")
        (tmp_path / "artifacts" / "linked-000000000000.txt").symlink_to(outside)
        for uri in (
            f"file://{outside}",
            "tpu-devops://artifacts/../secret.txt",
            "tpu-devops://artifacts/linked-000000000000.txt",  # a link planted in the directory
            "tpu-devops://artifacts/startup-script-000000000000.sh",  # well formed, not there
            link.uri + "x",
        ):
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            assert refused.value.error.code == -32002 and "not for the model" not in str(refused.value), uri


async def test_the_text_carries_the_key_facts_of_the_structured_form(transcript: Transcript) -> None:
    """Gemini CLI gives its model only the text: every key fact of the structure must be in it too."""
    for a in transcript.answers:
        assert missing_facts(a) == [], (
            f"{a.tool}: the text lacks {missing_facts(a)}: state them in the result's render_text (or leave a "
            "field out of the structured form with Field(exclude=True) if it only repeats the text)"
        )


async def test_the_structured_form_is_not_much_larger_than_the_text(transcript: Transcript) -> None:
    """Claude Code gives its model only the structure: it must not cost much more than the text, for every
    listed tool (a list of uniform records goes as a table, what the structure states once is not repeated)."""
    for a in transcript.answers:
        ratio = a.structured_chars / max(1, a.text_chars)
        assert ratio <= RATIO_GOAL, (
            f"{a.tool}: structured {a.structured_chars:,} characters is {ratio:.2f}x its text ({a.text_chars:,}); "
            f"at most {RATIO_GOAL}: send a list of uniform records as a Table (tpu_devops.host.results), leave out what "
            "repeats (Field(exclude=True) for a field the text form already shows, e.g. a rendering of the same "
            "data, or that another field of the structure states) or what carries nothing"
        )


async def test_no_form_exceeds_the_cap_at_the_largest_allowed_arguments(tmp_path: Path) -> None:
    """The budgets' upper bounds and the cap: the biggest answers the arguments allow stay under 40,000."""
    biggest = await run_calls(
        tmp_path,
        [
            (
                "summarize_logs",
                {"path": EXPORT, "token_budget": MAX_EVIDENCE_TOKENS, "max_entries": 200_000},
                None,
            ),
            ("get_cloud_logging_logs", {"limit": 500, "since": EXPORT_SINCE}, None),
            (
                "get_cloud_logging_logs",
                {"log": "container", "limit": 500, "since": EXPORT_SINCE, "node": "gemma4-qr"},
                None,
            ),
            ("diagnose_vllm_boot", {"log_text": Path(EXPORT).read_text()[:1_000_000]}, None),
            ("get_help", {}, None),
        ],
    )
    for a in biggest.answers:
        assert not a.is_error, (a.tool, a.text[:300])
        assert a.text_chars <= HOST_TEXT_LIMIT and a.both_chars <= HOST_COMBINED_LIMIT <= MAX_RESULT_CHARS, (
            a.tool,
            a.text_chars,
            a.structured_chars,
        )
    cut = [a for a in biggest.answers if "omitted" in (a.structured or {})]
    assert cut, "the largest arguments must produce an answer that has to be cut"
    for a in cut:  # what a cap left out is said, with how to get it, in both forms, and the whole is a file
        assert a.structured["omitted"][-1].startswith("to see it, ") and "left out" in a.text
        [whole] = [link for link in a.links if link.mime_type == "text/plain"]
        assert whole.uri in a.text and whole.uri in a.structured["omitted"][-1]
        assert whole.size > HOST_TEXT_LIMIT


async def test_schemas_are_in_the_gemini_subset_and_every_input_is_bounded(transcript: Transcript) -> None:
    for tool in transcript.listed:
        schema = tool.input_schema
        problems = gemini_subset_problems(schema)
        assert problems == [], f"{tool.name}: {problems}"
        for name, prop in schema.get("properties", {}).items():
            kind = prop.get("type")
            where = f"{tool.name}.{name}"
            assert prop.get("description"), f"{where}: describe it (tpu_devops/tools/args.py or its toolset)"
            if kind in ("integer", "number"):
                pass  # bounded where it is checked (test_arguments); published unless a sanity limit
            elif kind == "string":
                pass  # the default bound is checked, not published (test_arguments, schemas.validation_schema)
            elif kind in ("array", "boolean"):
                pass
            elif kind == "object":
                assert "maxProperties" in prop, f"{where}: bound it with Field(max_length=...)"
            else:
                pytest.fail(f"{where}: give it one JSON type ({prop})")
        assert tool.title is None, f"{tool.name}: the title lives in annotations.title only"


async def test_declarations_fit_the_per_request_budget(transcript: Transcript) -> None:
    """Hosts send every tool's name, description and input schema to the model on every turn: the default
    toolsets within 20,000 bytes, every toolset within 30,000, every argument described."""
    default = default_toolset_tools()
    read_only = [t for t in transcript.listed if t.annotations.read_only_hint]
    sizes = {
        "every toolset": (declaration_bytes(transcript.listed), DECLARATION_BUDGET),
        "read-only tools": (declaration_bytes(read_only), DECLARATION_BUDGET),
        "the default toolsets": (
            declaration_bytes([t for t in transcript.listed if t.name in default]),
            DEFAULT_DECLARATION_BUDGET,
        ),
    }
    assert len(transcript.listed) <= 32 and len(default) < len(transcript.listed)
    for which, (size, budget) in sizes.items():
        assert size <= budget, (
            f"{which}: {size:,} bytes of function declarations per model request (budget {budget:,}): "
            "shorten the first paragraph of the tool docstrings and the argument descriptions in tpu_devops/tools "
            "(say what a model needs to choose and call the tool; longer explanations go in later docstring "
            "paragraphs, which only GemmaTools.md carries)"
        )


async def test_get_help_is_always_loaded_and_only_tools_are_advertised(tmp_path: Path) -> None:
    async with mcp_client(TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
        caps = client.server_capabilities
        # resources: only the files answers link to (read, listed; no subscriptions), never prompts
        assert caps.tools is not None and caps.prompts is None
        assert caps.resources is not None and not caps.resources.subscribe and not caps.resources.list_changed
        tools = {t.name: t for t in (await client.list_tools()).tools}
        help_tool = tools["get_help"]
        assert (help_tool.meta or {}).get("anthropic/alwaysLoad") is True
        assert "tpu-devops" in help_tool.description and "start here" in help_tool.description.lower()
        with pytest.raises(MCPError) as raised:
            await client.list_prompts()
        assert raised.value.error.code == -32601
        assert (await client.list_resources()).resources == []  # nothing written yet
        assert (await client.list_resource_templates()).resource_templates == []


async def test_every_tool_refuses_unknown_keys_and_true_for_a_number(
    transcript: Transcript, tmp_path: Path
) -> None:
    async with mcp_client(TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
        for tool in transcript.listed:
            result = await client.call_tool(tool.name, {"no_such_argument": 1})
            text = result.content[0].text
            assert result.is_error and "unknown argument no_such_argument" in text and "Fix:" in text, (
                tool.name,
                text,
            )
            for name, prop in tool.input_schema.get("properties", {}).items():
                if prop.get("type") in ("integer", "number"):
                    result = await client.call_tool(tool.name, {name: True})
                    text = result.content[0].text
                    assert result.is_error and f"{name} = True" in text and "got a boolean" in text, text


async def test_crashes_and_bad_types_come_back_with_a_fix_and_no_secret(tmp_path: Path) -> None:
    long_name = str(tmp_path / ("a" * 300))
    async with mcp_client(TPU_DEVOPS_STATE_DIR=str(tmp_path)) as client:
        for tool, args, field in [
            ("diagnose_vllm_boot", {"path": long_name}, "path"),
            ("summarize_logs", {"path": long_name}, "path"),
            ("run_benchmark", {"results_path": long_name}, "results_path"),
            ("diagnose_vllm_boot", {"path": "x\x00y"}, "path"),
        ]:
            result = await client.call_tool(tool, args)
            text = result.content[0].text
            assert result.is_error and field in text and "Fix:" in text, text
            assert not text.rstrip().endswith(f"Error executing tool {tool}") and "Traceback" not in text
        for shape in ([HF_TOKEN], {"token": HF_TOKEN}, 7):
            result = await client.call_tool("save_hf_token", {"token": shape})
            text = result.content[0].text
            assert result.is_error and "token" in text and "expected a string" in text and "Fix:" in text
            assert HF_TOKEN not in text and HF_TOKEN[3:20] not in text


async def test_a_headless_host_that_cannot_confirm_gets_a_fix_and_nothing_is_deleted(tmp_path: Path) -> None:
    async def cancelled(context: Any, params: Any) -> ElicitResult:  # what a headless host answers
        return ElicitResult(action="cancel")

    with FakeGcp() as gcp:
        gcp.tpu.add_foreign("us-west4-a", "gemma4-e2b", labels=RIG_LABELS)
        env = server_env(**gcp_environ(gcp, tmp_path))
        async with client_for(env, tmp_path / "stderr.log", elicitation_callback=cancelled) as client:
            result = await client.call_tool("destroy_queued_resource", {"dry_run": False})
        text = result.content[0].text
        assert result.is_error and "nothing was deleted" in text and "could not ask you" in text
        assert "Fix:" in text and "confirm_token=" not in text  # nothing a model could replay
        assert "gcloud compute tpus queued-resources delete gemma4-e2b --zone=us-west4-a" in text
        assert "TPU_DEVOPS_UNATTENDED_DELETE=gemma4-e2b" in text
        assert "Resolver for parameter" not in text
        assert gcp.tpu.state_of("us-west4-a", "gemma4-e2b") == "ACTIVE"
