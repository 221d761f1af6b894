"""Files answers link to (`tpu_devops.host.artifacts`): content-addressed names under the state directory,
bounded, pruned, and served only as this server's own (`read`, `listing`), plus the content blocks a
result with files becomes (`tpu_devops.host.registration.to_call_result`)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tpu_devops.host import artifacts
from tpu_devops.host.artifacts import Artifact
from tpu_devops.host.registration import to_call_result
from tpu_devops.host.results import MAX_IMAGE_BYTES, ToolResult

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


def test_the_same_content_is_one_file_with_a_safe_name(tmp_path: Path) -> None:
    first = artifacts.write(
        "Startup Script/../x",
        "#!/bin/bash\n",
        suffix=".sh",
        mime_type="text/x-shellscript",
        state_dir=tmp_path,
    )
    again = artifacts.write(
        "Startup Script/../x",
        "#!/bin/bash\n",
        suffix=".sh",
        mime_type="text/x-shellscript",
        state_dir=tmp_path,
    )
    assert first == again and len(list((tmp_path / "artifacts").iterdir())) == 1
    assert Path(first.path).parent == (tmp_path / "artifacts").resolve()
    assert first.name.startswith("startup-script-x-") and first.name.endswith(".sh") and "/" not in first.name
    assert first.bytes == 12 and first.sha256.startswith(first.name.rsplit("-", 1)[1][:12])
    with pytest.raises(ValueError):
        artifacts.write("x", b"y", suffix="/../z", mime_type="text/plain", state_dir=tmp_path)
    with pytest.raises(ValueError, match="over"):
        artifacts.write("x", b"y" * (artifacts.MAX_ARTIFACT_BYTES + 1), suffix=".txt", mime_type="text/plain", state_dir=tmp_path)  # fmt: skip


def test_the_oldest_files_go_beyond_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "KEEP_ARTIFACTS", 3)
    made = []
    for i in range(5):
        made.append(artifacts.write("n", f"{i}", suffix=".txt", mime_type="text/plain", state_dir=tmp_path))
        os.utime(made[-1].path, (1_000_000 + i, 1_000_000 + i))  # distinct ages on a coarse clock
    artifacts.write("n", "5", suffix=".txt", mime_type="text/plain", state_dir=tmp_path)
    left = sorted(p.name for p in (tmp_path / "artifacts").iterdir())
    assert (
        len(left) == 3 and made[0].name not in left and made[1].name not in left and made[2].name not in left
    )
    (tmp_path / "artifacts" / "mine.txt").write_text("not an artifact name: never touched")
    artifacts.write("n", "6", suffix=".txt", mime_type="text/plain", state_dir=tmp_path)
    assert (tmp_path / "artifacts" / "mine.txt").exists()


def test_read_serves_text_and_blobs_and_listing_is_newest_first(tmp_path: Path) -> None:
    text = artifacts.write(
        "answer", "whole answer", suffix=".txt", mime_type="text/plain", state_dir=tmp_path
    )
    chart = artifacts.write("chart", PNG, suffix=".png", mime_type="image/png", state_dir=tmp_path)
    os.utime(text.path, (1_000_000, 1_000_000))
    assert artifacts.read(text.uri, tmp_path).contents[0].text == "whole answer"
    blob = artifacts.read(chart.uri, tmp_path).contents[0]
    assert base64.b64decode(blob.blob) == PNG and blob.mime_type == "image/png"
    assert [r.uri for r in artifacts.listing(tmp_path)] == [chart.uri, text.uri]
    assert artifacts.listing(tmp_path / "nothing-here") == []


@pytest.mark.parametrize(
    "uri",
    [
        "file:///etc/passwd",
        "tpu-devops://artifacts/../../etc/passwd",
        "tpu-devops://artifacts/answer-0123456789ab.txt/../../x",
        "tpu-devops://artifacts/ANSWER-0123456789ab.txt",
        "tpu-devops://artifacts/answer-0123456789ab.txt",  # well formed, never written
        "tpu-devops://other/answer-0123456789ab.txt",
        None,
        42,
    ],
)
def test_anything_but_our_own_files_is_not_found(tmp_path: Path, uri: object) -> None:
    artifacts.write("answer", "x", suffix=".txt", mime_type="text/plain", state_dir=tmp_path)
    with pytest.raises(MCPError) as refused:
        artifacts.read(uri, tmp_path)
    assert refused.value.error.code == artifacts.RESOURCE_NOT_FOUND


def test_a_link_a_fifo_or_an_oversized_file_planted_under_our_name_is_not_served(tmp_path: Path) -> None:
    directory = tmp_path / "artifacts"
    directory.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("private")
    (directory / "a-0123456789ab.txt").symlink_to(secret)
    os.mkfifo(directory / "b-0123456789ab.txt")  # would hang a reader that blocks
    with open(directory / "c-0123456789ab.txt", "wb") as big:
        big.truncate(artifacts.MAX_ARTIFACT_BYTES + 1)
    for name in ("a", "b", "c"):
        with pytest.raises(MCPError):
            artifacts.read(f"tpu-devops://artifacts/{name}-0123456789ab.txt", tmp_path)
    assert [r.name for r in artifacts.listing(tmp_path)] == ["c-0123456789ab.txt"]  # regular, not a link


class Charted(ToolResult):
    rows: int
    chart: Artifact | None = None


def test_a_result_with_a_chart_sends_it_as_an_image_and_a_link(tmp_path: Path) -> None:
    chart = artifacts.write("chart", PNG, suffix=".png", mime_type="image/png", state_dir=tmp_path)
    result = to_call_result(Charted(rows=3, chart=chart))
    kinds = [c.type for c in result.content]
    assert kinds == ["text", "image", "resource_link"]
    assert base64.b64decode(result.content[1].data) == PNG and result.content[2].uri == chart.uri
    assert result.structured_content["chart"]["uri"] == chart.uri


def test_a_chart_too_large_or_not_a_png_goes_as_a_link_only(tmp_path: Path) -> None:
    big = artifacts.write(
        "big", PNG + b"\0" * MAX_IMAGE_BYTES, suffix=".png", mime_type="image/png", state_dir=tmp_path
    )
    fake = artifacts.write("fake", b"GIF89a", suffix=".png", mime_type="image/png", state_dir=tmp_path)
    for file in (big, fake):
        assert [c.type for c in to_call_result(Charted(rows=1, chart=file)).content] == [
            "text",
            "resource_link",
        ]
