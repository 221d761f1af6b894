"""A file input nested deeper than a parser recurses, or a path the file system refuses (a name too long, a
symlink loop, a directory), ends as an InputError naming the field, the value and the fix, over the real
MCP client: never a traceback, a RecursionError or a generic error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_session import mcp_client

pytestmark = pytest.mark.anyio
DEPTH = 200_000  # far past CPython's recursion limit (1,000) and any C parser's nesting cap


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("deep")
    files = {
        "objects.json": '{"a":' * DEPTH + "1" + "}" * DEPTH,
        "arrays.json": "[" * DEPTH + "]" * DEPTH,
        "mixed.json": '[{"x":' * (DEPTH // 2) + "null" + "}]" * (DEPTH // 2),
        "entries.jsonl": json.dumps({"textPayload": "INFO starting", "severity": "INFO"})
        + "\n"
        + '{"jsonPayload":'
        + '{"m":' * 20_000
        + '"x"'
        + "}" * 20_000
        + "}\n",  # a line under 1 MiB
        "export.json": '[{"jsonPayload":' + '{"m":' * DEPTH + '"x"' + "}" * DEPTH + "}]",
        "kubeconfig.yaml": "apiVersion: v1\nclusters: " + "[" * DEPTH + "]" * DEPTH + "\n",
        "kubeconfig-map.yaml": "apiVersion: v1\nusers: " + "{a: " * DEPTH + "1" + "}" * DEPTH + "\n",
        "config.json": '{"architectures":' * DEPTH + "1" + "}" * DEPTH,
    }
    out = {}
    for name, text in files.items():
        (d / name).write_text(text)
        out[name] = d / name
    (d / "loop-a").symlink_to(d / "loop-b")
    (d / "loop-b").symlink_to(d / "loop-a")
    out["loop"] = d / "loop-a"
    out["long"] = d / ("n" * 300 + ".log")  # one component over NAME_MAX (255)
    out["deep-long"] = d / "/".join(["d" * 250] * 16)  # over PATH_MAX (4,096) once resolved
    out["dir"] = d
    (d / "sub").mkdir()
    return out


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    state = tmp_path_factory.mktemp("state")
    async with mcp_client(TPU_DEVOPS_STATE_DIR=str(state), TPU_DEVOPS_ENV_FILE=str(state / "none.env")) as c:
        yield c


EXTRA = {"plan_gke_deployment": {"cluster": "audit-cluster"}}


def _checked(result: Any, field: str, value: str) -> str:
    text = "\n".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error, text[:400]
    assert "Traceback" not in text and "RecursionError" not in text and "maximum recursion" not in text, text
    assert field in text and "fix" in text.lower(), text[:400]
    assert value[:40] in text or Path(value).name[:40] in text, text[:400]
    assert len(text) < 4_000, f"the value is not truncated: {len(text):,} chars"
    return text


CASES = [
    ("run_benchmark", "results_path", "objects.json"),
    ("run_benchmark", "results_path", "arrays.json"),
    ("run_benchmark", "results_path", "mixed.json"),
    ("diagnose_vllm_boot", "path", "entries.jsonl"),
    ("summarize_logs", "path", "entries.jsonl"),
    ("diagnose_vllm_boot", "path", "export.json"),
    ("summarize_logs", "path", "export.json"),
    ("summarize_logs", "path", "arrays.json"),
    ("plan_gke_deployment", "kubeconfig", "kubeconfig.yaml"),
    ("plan_gke_deployment", "kubeconfig", "kubeconfig-map.yaml"),
    ("plan_capacity", "model", "config.json"),
]


@pytest.mark.parametrize(("tool", "field", "name"), CASES)
async def test_deep_nesting_is_an_input_error(
    client: Any, inputs: dict[str, Path], tool: str, field: str, name: str
) -> None:
    value = str(inputs[name])
    result = await client.call_tool(tool, {**EXTRA.get(tool, {}), field: value})
    text = "\n".join(getattr(c, "text", "") for c in result.content)
    if not result.is_error:  # read as data, the nesting shown as a notice: also the truth
        assert "Traceback" not in text and "RecursionError" not in text, text[:400]
        return
    _checked(result, field, value)
    assert "nest" in text.lower(), text[:400]


@pytest.mark.parametrize(
    "text",
    ['{"textPayload": "INFO a"}\n' + '{"jsonPayload":' + '{"m":' * 5_000 + "1" + "}" * 5_000 + "}\n",
     "[" * 50_000 + "]" * 50_000],
)  # fmt: skip
async def test_deep_nesting_in_a_log_text_argument_is_an_input_error_or_read(client: Any, text: str) -> None:
    result = await client.call_tool("diagnose_vllm_boot", {"log_text": text})
    shown = "\n".join(getattr(c, "text", "") for c in result.content)
    assert "Traceback" not in shown and "RecursionError" not in shown and "does not handle" not in shown, (
        shown[:400]
    )
    if result.is_error:
        assert "log_text" in shown and "Fix" in shown, shown[:400]


@pytest.mark.parametrize("kind", ["loop", "long", "deep-long", "dir"])
@pytest.mark.parametrize(
    ("tool", "field"),
    [("run_benchmark", "results_path"), ("diagnose_vllm_boot", "path"), ("summarize_logs", "path"),
     ("plan_gke_deployment", "kubeconfig")],
)  # fmt: skip
async def test_a_path_the_file_system_refuses_is_an_input_error(
    client: Any, inputs: dict[str, Path], kind: str, tool: str, field: str
) -> None:
    if kind == "dir" and tool == "run_benchmark":
        pytest.skip("a directory of results files is what results_path may name")
    value = str(inputs[kind])
    text = _checked(await client.call_tool(tool, {**EXTRA.get(tool, {}), field: value}), field, value)
    assert "[Errno" not in text, text[:400]  # said in words, not as an OSError's repr


def test_the_nesting_error_is_a_json_decode_error_that_handlers_already_catch() -> None:
    from tpu_devops.host import nesting

    with pytest.raises(json.JSONDecodeError) as caught:
        nesting.loads("[" * DEPTH + "]" * DEPTH)
    assert isinstance(caught.value, nesting.TooDeep) and "levels deep" in str(caught.value)
    assert nesting.loads('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}  # ordinary JSON unchanged
    with pytest.raises(json.JSONDecodeError) as plain:
        nesting.loads('{"a": ')
    assert not isinstance(plain.value, nesting.TooDeep)
