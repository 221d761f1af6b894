"""The tool schema cache (`tpu_devops.host.tool_cache`): a start from the cache publishes exactly what a start
without it publishes, its tools work (argument validation, typed errors, structured results), and a
cache that is corrupt, for other sources, unwritable or wrong can only cost time, never correctness."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver.exceptions import ToolError

import tpu_devops
from tests.mcp_session import ROOT, mcp_client
from tpu_devops.host.registration import Registrar
from tpu_devops.host.tool_cache import FORMAT, KEEP_FILES, CacheFile, SchemaCache, ToolSchemas, source_key
from tpu_devops.host.toolsets import READ, Toolset

pytestmark = pytest.mark.anyio
KEY = source_key(ROOT / "server.py")
CACHE_FILE = SchemaCache(Path("."), KEY).path.name  # this checkout's file name in any cache directory


async def listing(cache_dir: str, **env: str) -> list[dict[str, Any]]:
    async with mcp_client(TPU_DEVOPS_CACHE_DIR=cache_dir, **env) as client:
        return [t.model_dump(mode="json") for t in (await client.list_tools()).tools]


async def test_cached_start_lists_what_an_uncached_start_lists_and_its_tools_work(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    uncached = await listing("off")
    assert not cache.exists()
    first = await listing(str(cache))  # builds the schemas and writes them
    written = json.loads((cache / CACHE_FILE).read_text())
    assert written["key"] == KEY
    assert set(written["tools"]) == {t["name"] for t in uncached}
    async with mcp_client(TPU_DEVOPS_CACHE_DIR=str(cache)) as client:
        cached = [t.model_dump(mode="json") for t in (await client.list_tools()).tools]
        assert cached == first == uncached

        plan = await client.call_tool("plan_capacity", {"max_model_len": 16384})
        assert not plan.is_error
        assert plan.structured_content["kv"]["bytes_per_token"] == 18432
        assert plan.structured_content["kv_tokens"] == 321376
        assert plan.content[0].text

        wrong_type = await client.call_tool("plan_capacity", {"max_model_len": "sixteen thousand"})
        assert wrong_type.is_error and "max_model_len" in wrong_type.content[0].text

        refused = await client.call_tool("get_job", {"job_id": "nope-1"})
        assert refused.is_error and "Fix:" in refused.content[0].text

        help_ = await client.call_tool("get_help", {})
        assert {t["name"] for t in help_.structured_content["tools"]} == {t["name"] for t in uncached}


async def test_corrupt_or_foreign_cache_is_ignored_and_rewritten(tmp_path: Path) -> None:
    reference = await listing("off")
    for content in (
        "{not json",
        json.dumps({"format": 1, "key": "another-checkout", "tools": {"get_help": {"parameters": {}}}}),
        json.dumps({"format": 1, "key": KEY, "tools": "not a mapping"}),
    ):
        cache = tmp_path / f"c{len(content)}"
        cache.mkdir()
        (cache / CACHE_FILE).write_text(content)
        assert await listing(str(cache)) == reference, content
        rewritten = json.loads((cache / CACHE_FILE).read_text())
        assert rewritten["key"] == KEY


async def test_unwritable_cache_directory_only_costs_time(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    errlog = tmp_path / "stderr.log"
    with errlog.open("w") as err:
        async with mcp_client(err, TPU_DEVOPS_CACHE_DIR=str(blocker / "cache")) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert not (await client.call_tool("get_help", {})).is_error
    assert "get_help" in names
    assert "tool schema cache not written" in errlog.read_text()


async def test_cache_that_disagrees_with_the_code_is_deleted_at_first_call(tmp_path: Path) -> None:
    """Same key, wrong schema (as if the schema depended on something the key does not cover): the call
    still validates against the code, a warning says so, and the cache goes."""
    cache = tmp_path / "cache"
    await listing(str(cache))
    data = json.loads((cache / CACHE_FILE).read_text())
    data["tools"]["lint_vllm_flags"]["parameters"]["properties"].pop("command")
    (cache / CACHE_FILE).write_text(json.dumps(data))
    errlog = tmp_path / "stderr.log"
    with errlog.open("w") as err:
        async with mcp_client(err, TPU_DEVOPS_CACHE_DIR=str(cache)) as client:
            result = await client.call_tool(
                "lint_vllm_flags", {"command": "vllm serve google/gemma-4-E2B-it"}
            )
            assert not result.is_error
    assert "cached schema differs from the code" in errlog.read_text()
    assert not (cache / CACHE_FILE).exists()


async def test_read_only_start_after_a_full_one_uses_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    full = await listing(str(cache))
    before = (cache / CACHE_FILE).stat().st_mtime_ns
    read_only = await listing(str(cache), TPU_DEVOPS_READ_ONLY="1")
    assert read_only == [t for t in full if t["annotations"]["read_only_hint"] or t["name"] == "cancel_job"]
    assert (cache / CACHE_FILE).stat().st_mtime_ns == before  # nothing was missing: not rewritten


def test_a_tool_declared_twice_is_refused() -> None:
    toolset = Toolset("t", "test", default=True)
    decorator = toolset.tool(title="t", kind=READ, open_world=False)

    async def same() -> None:
        """Twice."""

    decorator(same)
    with pytest.raises(ValueError, match="declared twice"):
        decorator(same)
    other = Toolset("u", "test", default=True)
    other.tool(title="t", kind=READ, open_world=False)(same)
    with pytest.raises(ValueError, match="two toolsets"):
        Registrar([toolset, other], enabled=("t", "u"), read_only=False)


def test_lazy_submodules_load_on_use_and_refuse_unknown_names() -> None:
    assert tpu_devops.catalog.resolve_accelerator_type("v5e-1").name == "v5litepod-1"
    with pytest.raises(AttributeError, match="no attribute 'no_such_module'"):
        _ = tpu_devops.no_such_module
    assert not hasattr(tpu_devops.logs, "no_such_module")


async def test_checkouts_sharing_a_cache_directory_keep_a_file_each(tmp_path: Path) -> None:
    other = tmp_path / "tool-schemas-0123456789abcdef.json"
    other.write_text(json.dumps({"format": 1, "key": "0123456789abcdef-other-tree", "tools": {}}))
    await listing(str(tmp_path))
    assert other.exists() and (tmp_path / CACHE_FILE).exists()
    for n in range(KEEP_FILES + 2):  # older files beyond the newest few are pruned at the next write
        old = tmp_path / f"tool-schemas-old{n:012d}.json"
        old.write_text("{}")
        os.utime(old, (1_000_000 + n, 1_000_000 + n))
    (tmp_path / CACHE_FILE).unlink()
    await listing(str(tmp_path))
    kept = sorted(p.name for p in tmp_path.glob("tool-schemas-*.json"))
    assert len(kept) == KEEP_FILES and CACHE_FILE in kept and other.name in kept


def test_editor_dot_files_in_the_package_do_not_break_the_key() -> None:
    """Emacs keeps a dangling ``.#name.py`` symlink next to a module with unsaved edits."""
    lock = Path(tpu_devops.__file__).parent / ".#tool-cache-test.py"
    lock.symlink_to("user@host.1234:1700000000")
    try:
        assert source_key(ROOT / "server.py") == KEY
    finally:
        lock.unlink()


async def test_a_tool_that_cannot_be_built_says_so_without_the_exception_text(tmp_path: Path) -> None:
    cache = SchemaCache(tmp_path, "k" * 64)
    schemas = ToolSchemas(parameters={"type": "object", "properties": {}}, output_schema=None)
    cache.path.write_text(
        CacheFile(format=FORMAT, key=cache.key, tools={"broken": schemas}).model_dump_json()
    )
    toolset = Toolset("t", "test", default=True)

    @toolset.tool(title="Broken", kind=READ, open_world=False)
    async def broken() -> tpu_devops.no_such_module.Result:  # type: ignore[name-defined]
        """Its result type lives in a module that does not exist."""

    server = Registrar([toolset], enabled=("t",), read_only=False, schema_cache=cache).build_server(
        name="test"
    )
    assert [t.name for t in await server.list_tools()] == ["broken"]  # listed from the cache
    with pytest.raises(ToolError) as raised:
        await server.call_tool("broken", {})
    # what happened and where to look, not the exception's own text
    assert str(raised.value) == (
        "broken: the tool could not be loaded (AttributeError); the server's log (stderr) has the traceback"
    )


def test_every_logic_name_the_toolsets_use_exists() -> None:
    """Tool bodies and result types name logic lazily (``tpu_devops.planning.sizing.PlanResult``), so a typo would
    only show when that tool runs: resolve every such name in every toolset file now."""
    checked = 0
    for path in sorted((ROOT / "tpu_devops" / "tools").glob("*.py")):
        checked += _resolve_lazy_names(ast.parse(path.read_text()))
    assert checked > 60


def _resolve_lazy_names(tree: ast.AST) -> int:
    roots = {"tpu_devops": tpu_devops}
    checked = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain: list[str] = []
        inner: ast.expr = node
        while isinstance(inner, ast.Attribute):
            chain.insert(0, inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name) and inner.id in roots:
            value = roots[inner.id]
            for attr in chain:
                value = getattr(value, attr)  # AttributeError names the typo
            checked += 1
    return checked
