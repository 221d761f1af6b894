"""Bounded, rooted file access: only allowed directories, regular files, bounded sizes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tpu_devops.config import load_settings
from tpu_devops.errors import InputError, shown_value
from tpu_devops.host import files


def _settings(tmp_path: Path, *roots: Path):
    env = {
        "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
        "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
        "TPU_DEVOPS_FILE_ROOTS": os.pathsep.join(map(str, roots)),
    }
    return load_settings(environ=env)


def _refused(settings, value: str, problem: str, **kw) -> InputError:
    with pytest.raises(InputError) as err:
        files.readable_file(settings, value, field="path", max_bytes=kw.get("max_bytes", 1 << 20))
    assert problem in err.value.message, err.value.message
    assert err.value.field == "path" and err.value.fix
    return err.value


def test_reads_stay_under_the_roots(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    root.mkdir()
    (root / "boot.log").write_text("INFO ok\n")
    s = _settings(tmp_path, root)
    assert files.readable_file(s, str(root / "boot.log"), field="path", max_bytes=100) == root / "boot.log"
    assert files.readable_file(
        s, str(FIXTURES / "bench" / "v5e1-e2b-c128-u1.json"), field="p", max_bytes=1 << 20
    )
    err = _refused(s, "/etc/passwd", "outside the directories this server may read")
    assert "TPU_DEVOPS_FILE_ROOTS" in err.fix and str(root) in err.fix
    _refused(s, str(root / ".." / "elsewhere.log"), "outside")
    outside = tmp_path / "secret.txt"
    outside.write_text("-----BEGIN PRIVATE KEY-----\n")
    (root / "link.log").symlink_to(outside)  # a link inside a root that leads out of it
    _refused(s, str(root / "link.log"), "the path leads to")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_ed25519").write_text("key")
    _refused(s, str(root / ".ssh" / "id_ed25519"), "credential store")
    _refused(s, "", "empty path")
    _refused(s, "a\x00b", "NUL")
    _refused(s, "x" * 5000, "over 4096")


def test_only_regular_files_of_bounded_size(tmp_path: Path) -> None:
    s = _settings(tmp_path, tmp_path)
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    _refused(s, str(fifo), "not a regular file")
    with pytest.raises(InputError, match="not a regular file"):  # never blocks on the FIFO
        files.open_regular(fifo, field="path", value=str(fifo), max_bytes=10)
    _refused(s, str(tmp_path), "a directory")
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 2048)
    _refused(s, str(big), "limit", max_bytes=1024)
    _refused(s, "/dev/zero", "outside")
    _refused(s, str(tmp_path / "missing.log"), "no such file")


def test_writes_only_under_write_roots(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the working directory is a write root: not the repo here
    s = _settings(tmp_path)
    made = files.writable_dir(s, None, field="results_dir", default=tmp_path / "state" / "results")
    assert made.is_dir()
    with pytest.raises(InputError, match="may write"):
        files.writable_dir(s, "/var/tmp/elsewhere", field="results_dir", default=made)
    with pytest.raises(InputError, match="may write"):  # bundled data is read-only for tools
        files.writable_dir(s, str(FIXTURES / "new"), field="results_dir", default=made)
    (tmp_path / "state" / "escape").symlink_to("/var/tmp")
    with pytest.raises(InputError, match="may write"):
        files.writable_dir(s, str(tmp_path / "state" / "escape" / "x"), field="results_dir", default=made)
    assert not Path("/var/tmp/x").exists() and not (FIXTURES / "new").exists()


def test_working_directory_is_a_root_unless_too_broad(tmp_path: Path, monkeypatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "boot.log").write_text("x")
    monkeypatch.chdir(project)
    s = _settings(tmp_path)
    assert files.readable_file(s, "boot.log", field="path", max_bytes=10) == project / "boot.log"
    for broad in ("/", "/etc", str(Path.home())):
        monkeypatch.chdir(broad)
        assert files.working_directory() is None, broad


def test_error_values_are_cut() -> None:
    err = InputError("bad", field="command", value="x" * 1_000_000, fix="shorter")
    assert len(str(err)) < 400 and "1,000,002 characters" in str(err)
    assert len(err.as_dict()["value"]) <= files.MAX_PATH_CHARS
    assert shown_value("short") == "'short'"


@pytest.mark.anyio
async def test_benchmark_import_and_results_dir_use_the_roots(tmp_path: Path) -> None:
    from tpu_devops.serving import benchmark

    s = _settings(tmp_path)
    for bad, problem in (("/dev/zero", "outside"), ("/etc", "outside"), (str(tmp_path), "outside")):
        with pytest.raises(InputError) as err:
            await benchmark.import_results(s, bad, write=False)
        assert problem in err.value.message and err.value.field == "results_path"
    with pytest.raises(InputError) as err:
        benchmark.results_dir(s, "/usr/local/results")
    assert err.value.field == "results_dir" and not Path("/usr/local/results").exists()
