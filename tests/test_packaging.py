"""Install without a clone: the wheel carries the package, the startup template and the data, and its
console script serves MCP from a fresh venv outside the checkout, reading tpu.env where the README says.
The Claude Desktop bundle (`make mcpb`) is validated and packed by the official MCPB CLI and serves from
its unpacked tree; `server.json` validates against the MCP registry's published schema. Then the README's
installs with the real tools: ``uvx --from <wheel> tpu-devops-mcp``, ``pipx install <wheel>``, and the
bundle's own command (``uv run --directory <bundle> server.py``).

The wheel is built by pip from a copy of the sources (nothing is written into the checkout; pip fetches
the build backend from PyPI). The fresh venv reads its dependencies from this test's own venv through a
plain path entry, so no package is downloaded, and it never sees the checkout: the installed
``tpu_devops`` must be the one in the venv. uv and pipx come from PyPI into a throwaway venv and install
the dependencies from the package registry as a user's would (uv's cache and pip's configuration are the
machine's, so a second run downloads little); without a registry those tests skip, except in CI (``CI``
set), where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.mcp_session import ROOT, TEST_CACHE_DIR

pytestmark = pytest.mark.anyio
MCPB = ROOT / "node_modules" / ".bin" / "mcpb"
SOURCES_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "tests"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    sources = work / "src"
    shutil.copytree(ROOT, sources, symlinks=True, ignore=SOURCES_IGNORED)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(sources), "--no-deps", "-q", "-w", str(work / "dist")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (built,) = (work / "dist").glob("tpu_devops-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel installed; dependencies from this venv."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300, env=clean)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=clean,
    ).stdout.strip()
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
        env=clean,
    )
    # Then a plain path line: the dependencies become importable, the .pth files there (this checkout's
    # editable install among them) are not processed.
    (Path(purelib) / "zz-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def installed_env(home: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NO_GCE_CHECK": "true",
        "TPU_DEVOPS_CACHE_DIR": TEST_CACHE_DIR,
        "TPU_DEVOPS_STATE_DIR": str(home / "state"),
        **extra,
    }


async def session(command: str, args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """get_help, render_startup_script (its script read back through resources/read) and plan_capacity
    through the MCP client."""
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    async with Client(params, read_timeout_seconds=120) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        help_ = await client.call_tool("get_help", {})
        script = await client.call_tool("render_startup_script", {})
        capacity = await client.call_tool("plan_capacity", {})
        assert not help_.is_error and not script.is_error and not capacity.is_error, script.content[0].text
        # the whole script is a file the answer links to (the installed package wrote and serves it)
        read = await client.read_resource(script.structured_content["file"]["uri"])
    return {
        "tools": tools,
        "help": help_.structured_content,
        "script": {**script.structured_content, "script": read.contents[0].text},
        "capacity": capacity.structured_content,
    }


def test_the_wheel_carries_the_package_template_and_data_and_nothing_else(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "tpu_devops/data/startup_script.sh.tmpl" in names
    assert "tpu_devops/data/config__google__gemma-4-E2B-it.json" in names
    assert any(n.startswith("tpu_devops/data/bench/") and n.endswith(".json") for n in names)
    assert "tpu_devops/server.py" in names and "tpu_devops/main.py" in names
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"tpu_devops", f"tpu_devops-{version()}.dist-info"}, top  # no top-level server module
    server = zipfile.ZipFile(wheel).read("tpu_devops/server.py").decode()
    assert server == (ROOT / "server.py").read_text()  # the file itself, not a link
    entry = zipfile.ZipFile(wheel).read(f"tpu_devops-{version()}.dist-info/entry_points.txt").decode()
    assert "tpu-devops-mcp = tpu_devops.main:main" in entry


async def test_the_console_script_serves_from_a_fresh_venv_in_any_directory(
    venv: Path, tmp_path: Path
) -> None:
    home, work = tmp_path / "home", tmp_path / "elsewhere"
    work.mkdir()
    config = home / ".config" / "tpu-devops"
    config.mkdir(parents=True)
    (config / "tpu.env").write_text("RESOURCE_ID=wheel-rig\nGOOGLE_CLOUD_ZONE=us-east5-a\n")
    env = installed_env(home)
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import json, sys, tpu_devops; print(tpu_devops.__file__); print(json.dumps(sys.path))",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        check=True,
    ).stdout.splitlines()
    assert where[0].startswith(str(venv)), where  # the installed copy, not the checkout
    # no entry of its path is a checkout (this one, or the one an editable install names)
    assert not [p for p in json.loads(where[1]) if p and (Path(p) / "server.py").exists()], where[1]
    out = await session(str(venv / "bin" / "tpu-devops-mcp"), [], env, work)
    assert "get_help" in out["tools"] and "plan_queued_resource" in out["tools"]
    configuration = out["help"]["configuration"]
    # the user's config directory: its values, and the region follows the zone (no GOOGLE_CLOUD_REGION there)
    assert configuration["env_file"] == str(config / "tpu.env")
    assert out["help"]["server"] == "tpu-devops-wheel-rig"
    assert (configuration["zone"], configuration["region"]) == ("us-east5-a", "us-east5")
    assert out["script"]["script"].startswith("#!/bin/bash")  # the template came from the wheel
    assert out["capacity"]["kv"]["bytes_per_token"] == 18_432  # the bundled Gemma 4 E2B config.json
    assert out["capacity"]["kv_tokens"] == 321_376


async def test_env_file_and_working_directory_tpu_env_are_read_by_the_installed_server(
    venv: Path, tmp_path: Path
) -> None:
    home, work = tmp_path / "home", tmp_path / "project"
    work.mkdir()
    home.mkdir()
    (work / "tpu.env").write_text("RESOURCE_ID=cwd-rig\n")
    out = await session(str(venv / "bin" / "tpu-devops-mcp"), [], installed_env(home), work)
    assert out["help"]["server"] == "tpu-devops-cwd-rig"
    named = tmp_path / "named.env"
    named.write_text("RESOURCE_ID=named-rig\nTPU_DEVOPS_TOOLSETS=plan\n")
    out = await session(
        str(venv / "bin" / "tpu-devops-mcp"), ["--env-file", str(named)], installed_env(home), work
    )
    assert out["help"]["server"] == "tpu-devops-named-rig"
    assert "plan_queued_resource" not in out["tools"] and "plan_capacity" in out["tools"]
    check = subprocess.run(
        [str(venv / "bin" / "tpu-devops-mcp"), "--check-config", "--env-file", str(named)],
        capture_output=True,
        text=True,
        env=installed_env(home),
        cwd=work,
    )
    assert check.returncode == 0 and "resource_id: named-rig" in check.stdout, check.stderr


def test_server_json_validates_against_the_registry_schema() -> None:
    import jsonschema

    schema = json.loads((ROOT / "tests" / "data" / "mcp-registry" / "server.schema.json").read_text())
    document = json.loads((ROOT / "server.json").read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    assert list(validator.iter_errors(document)) == []
    assert document["$schema"] == schema["$id"]
    assert document["version"] == version() and document["packages"][0]["version"] == version()
    assert document["packages"][0]["identifier"] == "tpu-devops"  # pyproject's name
    from tpu_devops.config import DEFAULTS

    assert {v["name"] for v in document["packages"][0]["environmentVariables"]} <= {
        *DEFAULTS,
        "TPU_DEVOPS_ENV_FILE",
    }
    # the registry's PyPI ownership check reads this line from the package's README (the wheel's METADATA)
    assert f"mcp-name: {document['name']}" in (ROOT / "README.md").read_text()
    # the validator is a real one: a registry-invalid document fails
    broken = {**document, "name": "no-slash", "description": "x" * 101}
    assert {e.validator for e in validator.iter_errors(broken)} >= {"pattern", "maxLength"}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not MCPB.exists():
        pytest.fail(f"{MCPB} is missing: run make setup (package.json pins @anthropic-ai/mcpb)")
    out = tmp_path_factory.mktemp("mcpb")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "build_mcpb.py"),
            "--out",
            str(out),
            "--stage",
            str(out / "stage"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_GCE_CHECK": "true"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Manifest schema validation passes" in done.stdout
    return out / f"tpu-devops-{version()}.mcpb"


def test_the_bundle_manifest_is_valid_with_the_user_settings(bundle: Path, tmp_path: Path) -> None:
    manifest = json.loads(zipfile.ZipFile(bundle).read("manifest.json"))
    assert manifest["version"] == version() and manifest["server"]["type"] == "uv"
    assert set(manifest["user_config"]) == {"project", "zone", "read_only", "toolsets"}
    env = manifest["server"]["mcp_config"]["env"]
    assert env["GOOGLE_CLOUD_PROJECT"] == "${user_config.project}"
    assert env["GOOGLE_CLOUD_ZONE"] == "${user_config.zone}"
    assert env["TPU_DEVOPS_READ_ONLY"] == "${user_config.read_only}"
    assert env["TPU_DEVOPS_TOOLSETS"] == "${user_config.toolsets}"
    assert {t["name"] for t in manifest["tools"]} >= {"get_help", "plan_queued_resource"}
    names = zipfile.ZipFile(bundle).namelist()
    assert "tpu_devops/data/startup_script.sh.tmpl" in names and "pyproject.toml" in names
    assert not any("__pycache__" in n or n.startswith(("tests/", ".venv")) for n in names)
    # the official CLI really checks: a manifest without its server is refused
    broken = tmp_path / "manifest.json"
    broken.write_text(json.dumps({k: v for k, v in manifest.items() if k != "server"}))
    refused = subprocess.run(
        [str(MCPB), "validate", str(broken)], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode != 0


async def test_the_unpacked_bundle_serves_with_the_settings_claude_desktop_passes(
    bundle: Path, tmp_path: Path
) -> None:
    unpacked = tmp_path / "bundle"
    subprocess.run(
        [str(MCPB), "unpack", str(bundle), str(unpacked)], check=True, capture_output=True, timeout=120
    )
    home = tmp_path / "home"
    home.mkdir()
    manifest = json.loads((unpacked / "manifest.json").read_text())
    chosen = {"project": "bundle-project-1", "zone": "us-east5-a", "read_only": "true", "toolsets": "plan"}
    env = {
        k: v.replace("${user_config.", "").rstrip("}")
        for k, v in manifest["server"]["mcp_config"]["env"].items()
    }
    env = {k: chosen[v] for k, v in env.items()}
    # what `uv run --directory <bundle> server.py` runs, with this test's interpreter for the dependencies
    out = await session(sys.executable, [str(unpacked / "server.py")], installed_env(home, **env), unpacked)
    help_ = out["help"]
    assert help_["project"] == "bundle-project-1" and help_["read_only_mode"] is True
    assert (help_["configuration"]["zone"], help_["configuration"]["region"]) == ("us-east5-a", "us-east5")
    assert [s["name"] for s in help_["toolsets"] if s["enabled"]] == ["help", "plan"]
    assert out["script"]["script"].startswith("#!/bin/bash")


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway venv holding uv and pipx from PyPI; its bin directory."""
    root = tmp_path_factory.mktemp("install-tools") / "venv"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300, env=clean)
    out = subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "uv>=0.5", "pipx>=1.7"],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean,
    )
    if out.returncode != 0:
        _unavailable(f"uv and pipx could not be installed from PyPI: {out.stderr[-500:]}")
    return root / "bin"


def tool_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's environment for uv / pipx: their own HOME, the machine's caches and pip configuration."""
    real_home = Path(os.environ.get("HOME", "/root"))
    env = installed_env(home, **extra)
    env["UV_CACHE_DIR"] = os.environ.get("UV_CACHE_DIR") or str(real_home / ".cache" / "uv")
    env["UV_PYTHON_DOWNLOADS"] = "never"  # the machine's Python 3.11+, as the README assumes
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or str(real_home / ".cache" / "pip")
    # the machine's certificate authorities, proxies and pip settings: what a user's shell has
    passed = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
    for name, value in os.environ.items():
        if (
            name in passed
            or name.lower() in ("http_proxy", "https_proxy", "no_proxy")
            or name.startswith("PIP_")
        ):
            env[name] = value
    if "PIP_CONFIG_FILE" not in env and (real_home / ".config" / "pip" / "pip.conf").is_file():
        env["PIP_CONFIG_FILE"] = str(real_home / ".config" / "pip" / "pip.conf")
    return env


async def test_uvx_runs_the_wheel_from_any_directory(tools: Path, wheel: Path, tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".config" / "tpu-devops").mkdir(parents=True)
    (home / ".config" / "tpu-devops" / "tpu.env").write_text("RESOURCE_ID=uvx-rig\n")
    work.mkdir()
    env = tool_env(home)
    out = await session(str(tools / "uvx"), ["--from", str(wheel), "tpu-devops-mcp"], env, work)
    assert out["help"]["server"] == "tpu-devops-uvx-rig"
    assert out["script"]["script"].startswith("#!/bin/bash")
    assert out["capacity"]["kv"]["bytes_per_token"] == 18_432


async def test_pipx_installs_the_wheel_and_its_command_serves(
    tools: Path, wheel: Path, tmp_path: Path
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = tool_env(
        home,
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "pipx-bin"),
        PIPX_MAN_DIR=str(tmp_path / "pipx-man"),
    )
    done = subprocess.run(
        [str(tools / "pipx"), "install", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=900,
    )
    if done.returncode != 0 and "Could not find a version" in done.stderr:
        _unavailable(f"pipx could not reach the package registry: {done.stderr[-500:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    command = tmp_path / "pipx-bin" / "tpu-devops-mcp"
    assert command.exists()
    (work / "tpu.env").write_text("RESOURCE_ID=pipx-rig\n")
    out = await session(str(command), [], env, work)
    assert out["help"]["server"] == "tpu-devops-pipx-rig"  # ./tpu.env of the directory it started in
    assert out["script"]["script"].startswith("#!/bin/bash")


async def test_the_bundle_runs_as_its_manifest_says_with_uv(
    tools: Path, bundle: Path, tmp_path: Path
) -> None:
    import json

    unpacked = tmp_path / "bundle"
    subprocess.run(
        [str(MCPB), "unpack", str(bundle), str(unpacked)], check=True, capture_output=True, timeout=120
    )
    config = json.loads((unpacked / "manifest.json").read_text())["server"]["mcp_config"]
    assert config["command"] == "uv"
    args = [a.replace("${__dirname}", str(unpacked)) for a in config["args"]]
    chosen = {"project": "bundle-project-2", "zone": "us-west4-a", "read_only": "false", "toolsets": ""}
    env = {k: chosen[v.removeprefix("${user_config.").removesuffix("}")] for k, v in config["env"].items()}
    home = tmp_path / "home"
    home.mkdir()
    out = await session(str(tools / "uv"), args, tool_env(home, **env), tmp_path)
    assert out["help"]["project"] == "bundle-project-2" and out["help"]["read_only_mode"] is False
    assert out["script"]["script"].startswith("#!/bin/bash")
    assert zipfile.ZipFile(bundle).read("pyproject.toml").decode().count(f'version = "{version()}"') == 1
