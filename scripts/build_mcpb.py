"""`make mcpb`: the Claude Desktop bundle (``dist/tpu-devops-<version>.mcpb``), validated and packed by the
official MCPB CLI (npm ``@anthropic-ai/mcpb``, pinned in package.json).

The bundle is of server type ``uv`` (MCPB manifest 0.4, MANIFEST.md "UV Runtime"): it carries the package,
``server.py`` and ``pyproject.toml``, and the host installs the dependencies with uv; nothing is vendored,
so it stays a few hundred KB and works on any platform uv supports. The user settings Claude Desktop asks
for (project, zone, read-only mode, toolsets) reach the server as its environment variables, which beat
any tpu.env. The tools listed in the manifest are the default toolsets', read from the server itself.

``--check`` only validates the staged manifest (no pack); ``--out DIR`` chooses where the bundle goes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MCPB = ROOT / "node_modules" / ".bin" / "mcpb"
# What the bundle carries: the package (its data included), the entry point and what uv installs from.
CARRIED = ("server.py", "pyproject.toml", "README.md")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")

USER_CONFIG: dict[str, dict[str, Any]] = {
    "project": {
        "type": "string",
        "title": "Google Cloud project id",
        "description": "The project of the TPUs (the id, not the name). Empty: the project of your gcloud "
        "configuration or Application Default Credentials (gcloud config set project ID).",
        "required": False,
        "default": "",
    },
    "zone": {
        "type": "string",
        "title": "TPU zone",
        "description": "Zone of the queued resource, e.g. us-west4-a (flex-start v5litepod-1 was accepted "
        "there); the region follows from it.",
        "required": True,
        "default": "us-west4-a",
    },
    "read_only": {
        "type": "boolean",
        "title": "Read-only mode",
        "description": "Hide every tool that can create, change or delete cloud resources.",
        "required": False,
        "default": False,
    },
    "toolsets": {
        "type": "string",
        "title": "Toolsets",
        "description": "Comma list of toolsets to serve; empty: help, plan, provision, serve, logs, jobs. "
        "Add bench, scaleout, gke, or use all.",
        "required": False,
        "default": "",
    },
}
ENVIRONMENT = {
    "GOOGLE_CLOUD_PROJECT": "${user_config.project}",
    "GOOGLE_CLOUD_ZONE": "${user_config.zone}",
    "TPU_DEVOPS_READ_ONLY": "${user_config.read_only}",
    "TPU_DEVOPS_TOOLSETS": "${user_config.toolsets}",
}


def project_metadata() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def default_tools() -> list[dict[str, str]]:
    """Name and first line of every tool of the default toolsets, as the server lists them."""
    env_before = dict(os.environ)
    os.environ.update({"TPU_DEVOPS_TOOLSETS": "", "TPU_DEVOPS_READ_ONLY": "0", "TPU_DEVOPS_CACHE_DIR": "off"})
    os.environ.setdefault("TPU_DEVOPS_ENV_FILE", "none")
    try:
        sys.path.insert(0, str(ROOT))
        from tpu_devops import server

        tools = asyncio.run(server.mcp.list_tools())
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    return [{"name": t.name, "description": (t.description or "").split("\n", 1)[0].strip()} for t in tools]


def manifest() -> dict[str, Any]:
    """The MCPB manifest (0.4) of this version."""
    meta = project_metadata()
    python = meta["requires-python"]
    return {
        "manifest_version": "0.4",
        "name": "tpu-devops",
        "display_name": "tpu-devops: Gemma 4 on Cloud TPU",
        "version": meta["version"],
        "description": meta["description"],
        "long_description": (
            "Plan TPU capacity and HBM, create and tear down TPU queued resources (flex-start, spot, "
            "on-demand), render the VM startup script that serves Gemma 4 with vLLM, check the endpoint "
            "and its health, benchmark, price, and analyse boot and Cloud Logging logs. Planning needs no "
            "cloud account; the cloud tools use your Application Default Credentials "
            "(gcloud auth application-default login). Start with get_help."
        ),
        "author": {"name": "tpu-devops"},
        "server": {
            "type": "uv",
            "entry_point": "server.py",
            "mcp_config": {
                "command": "uv",
                "args": ["run", "--directory", "${__dirname}", "server.py"],
                "env": dict(ENVIRONMENT),
            },
        },
        "tools": default_tools(),
        "tools_generated": True,  # the toolsets setting adds or removes tools
        "keywords": ["tpu", "vllm", "gemma", "google-cloud", "sre", "devops"],
        "compatibility": {"platforms": ["darwin", "linux"], "runtimes": {"python": python}},
        "user_config": USER_CONFIG,
    }


def stage(directory: Path) -> Path:
    """The bundle's tree in ``directory`` (replaced): the carried files, the package, the manifest."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for name in CARRIED:
        shutil.copyfile(ROOT / name, directory / name)  # follows links: the files themselves
    shutil.copytree(ROOT / "tpu_devops", directory / "tpu_devops", ignore=SKIPPED)
    (directory / "manifest.json").write_text(json.dumps(manifest(), indent=2) + "\n", encoding="utf-8")
    return directory


def mcpb(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the pinned MCPB CLI. Raises SystemExit with the fix when it is missing or fails."""
    if not MCPB.exists():
        raise SystemExit(f"{MCPB} not found. Fix: run make setup (package.json pins @anthropic-ai/mcpb)")
    out = subprocess.run([str(MCPB), *args], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"mcpb {' '.join(args)} failed:\n{out.stdout}{out.stderr}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "dist"), help="directory of the .mcpb (default dist/)")
    parser.add_argument("--stage", default=str(ROOT / "build" / "mcpb"), help="staging directory")
    parser.add_argument("--check", action="store_true", help="validate the manifest only")
    args = parser.parse_args(argv)
    staged = stage(Path(args.stage))
    print(mcpb("validate", str(staged / "manifest.json")).stdout.strip())
    if args.check:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bundle = out / f"tpu-devops-{project_metadata()['version']}.mcpb"
    mcpb("pack", str(staged), str(bundle))
    print(f"built {bundle} ({bundle.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
