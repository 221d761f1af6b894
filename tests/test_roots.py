"""The roots an MCP client declares (`tpu_devops.host.roots`, `tpu_devops.host.files`): read roots and the
base for relative paths, replaced on ``roots/list_changed``, beside the configured roots; through the
official SDK client over stdio, which declares roots as Claude Code and VS Code do."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types import ListRootsResult, Root

from tests.host_scenarios import client_for
from tests.mcp_session import ROOT, server_env
from tpu_devops.config import load_settings
from tpu_devops.errors import InputError
from tpu_devops.host import files

LOG = ROOT / "tests" / "data" / "vllm-logs" / "v5e1-e2b-util095-program-oom.log"


@pytest.fixture
def no_client_roots() -> Iterator[None]:
    yield
    files.set_client_roots([])


def _settings(tmp_path: Path, *roots: Path) -> Any:
    env = {
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
        "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
        "TPU_DEVOPS_FILE_ROOTS": os.pathsep.join(map(str, roots)),
    }
    return load_settings(environ=env)


def test_client_roots_are_read_roots_and_the_base_for_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_client_roots: None
) -> None:
    workspace, elsewhere, configured = tmp_path / "my project", tmp_path / "ext", tmp_path / "configured"
    for d in (workspace, elsewhere, configured):
        d.mkdir()
    (workspace / "boot.log").write_text("x")
    (configured / "c.log").write_text("c")
    monkeypatch.chdir(elsewhere)  # a Gemini CLI extension starts its server in the extension's checkout
    s = _settings(tmp_path, configured)
    with pytest.raises(InputError, match="relative path is read from"):
        files.readable_file(s, "boot.log", field="path", max_bytes=10)
    accepted = files.set_client_roots(
        [workspace.as_uri(), "https://example.com/repo", "file:///", f"file://{Path.home()}", "relative/dir"]
    )
    assert accepted == (workspace.resolve(),)  # a URI with a space is decoded; others are refused
    assert files.readable_file(s, "boot.log", field="path", max_bytes=10) == workspace / "boot.log"
    assert files.readable_file(s, str(workspace / "boot.log"), field="path", max_bytes=10)
    assert files.readable_file(s, str(configured / "c.log"), field="path", max_bytes=10)  # configured stay
    assert workspace.resolve() in files.roots(s).write
    # the working directory inside a client root stays the base (Claude Code: cwd = the project)
    monkeypatch.chdir(workspace)
    (workspace / "sub").mkdir()
    files.set_client_roots([workspace.as_uri(), elsewhere.as_uri()])
    assert files.relative_base() == workspace
    # a new list replaces the old one
    files.set_client_roots([elsewhere.as_uri()])
    monkeypatch.chdir(elsewhere)
    with pytest.raises(InputError, match="outside the directories"):
        files.readable_file(s, str(workspace / "boot.log"), field="path", max_bytes=10)


class Workspace:
    """What a client declares as its roots, changeable while the session runs."""

    def __init__(self, *dirs: Path) -> None:
        self.dirs = list(dirs)
        self.asked = 0

    async def __call__(self, context: Any) -> ListRootsResult:
        self.asked += 1
        return ListRootsResult(roots=[Root(uri=d.as_uri(), name=d.name) for d in self.dirs])


async def diagnose(client: Any, path: str) -> tuple[bool, str]:
    result = await client.call_tool("diagnose_vllm_boot", {"path": path})
    return bool(result.is_error), result.content[0].text


@pytest.mark.anyio
async def test_an_sdk_client_that_declares_roots_reads_its_workspace(tmp_path: Path) -> None:
    first, second, configured, extension = (tmp_path / n for n in ("ws1", "ws2", "configured", "ext"))
    for d in (first, second, configured, extension):
        d.mkdir()
    shutil.copy(LOG, first / "boot.log")
    shutil.copy(LOG, second / "other.log")
    shutil.copy(LOG, configured / "kept.log")
    workspace = Workspace(first)
    env = server_env(TPU_DEVOPS_STATE_DIR=str(tmp_path / "state"), TPU_DEVOPS_FILE_ROOTS=str(configured))
    # roots/list is a request from server to client: the handshake protocols (up to 2025-11-25, what Claude
    # Code, VS Code and Gemini CLI speak) have it; the SDK's default 2026-07-28 protocol has no roots
    async with client_for(
        env, tmp_path / "stderr.log", cwd=extension, list_roots_callback=workspace, mode="legacy"
    ) as client:
        error, text = await diagnose(client, "boot.log")  # relative: read from the client's root
        assert not error and "program" in text.lower(), text
        assert not (await diagnose(client, str(first / "boot.log")))[0]
        error, text = await diagnose(client, str(second / "other.log"))
        assert error and "outside the directories" in text
        asked = workspace.asked
        await diagnose(client, "boot.log")
        assert workspace.asked == asked  # not asked again until the roots change
        # the user opens another folder: the client says so, and the next call sees the new roots
        workspace.dirs = [second]
        await client.send_roots_list_changed()
        error, text = await diagnose(client, "other.log")
        assert not error, text
        error, text = await diagnose(client, str(first / "boot.log"))
        assert error and "outside the directories" in text
        assert not (await diagnose(client, str(configured / "kept.log")))[0]  # configured roots stay


@pytest.mark.anyio
async def test_a_client_without_roots_keeps_the_working_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(LOG, project / "boot.log")
    env = server_env(TPU_DEVOPS_STATE_DIR=str(tmp_path / "state"), TPU_DEVOPS_FILE_ROOTS="")
    async with client_for(env, tmp_path / "stderr.log", cwd=project) as client:
        error, text = await diagnose(client, "boot.log")
        assert not error, text
