"""A local fake of the Hugging Face Hub's file and model-info routes, and a way to put a model's small
files (its config.json, without weights) into a Hugging Face cache directory the way a real
``hf_hub_download`` leaves them: the real ``huggingface_hub`` client downloads them from the fake.

Routes: ``GET|HEAD /{owner}/{name}/resolve/{revision}/{file}`` (with ``X-Repo-Commit`` and ``ETag``, as the
client needs) and ``GET /api/models/{owner}/{name}`` (``safetensors.total`` / ``parameters`` when given).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.http_runner import ServerThread


def hub_app(
    repos: dict[str, dict[str, bytes]], parameters: dict[str, dict[str, int]] | None = None
) -> Starlette:
    """The fake Hub: ``repos`` repo id -> {file name: content}; ``parameters`` repo id -> {dtype: count}."""
    parameters = parameters or {}

    async def resolve(request: Request) -> Response:
        repo = f"{request.path_params['owner']}/{request.path_params['name']}"
        files = repos.get(repo)
        if files is None:
            return JSONResponse({"error": "Repository not found"}, 404, {"X-Error-Code": "RepoNotFound"})
        body = files.get(request.path_params["file"])
        if body is None:
            return JSONResponse({"error": "Entry not found"}, 404, {"X-Error-Code": "EntryNotFound"})
        commit = hashlib.sha1(repo.encode()).hexdigest()
        headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha1(body).hexdigest()}"',
                   "Content-Length": str(len(body))}  # fmt: skip
        return Response(
            b"" if request.method == "HEAD" else body, 200, headers, media_type="application/json"
        )

    async def model_info(request: Request) -> Response:
        repo = f"{request.path_params['owner']}/{request.path_params['name']}"
        if repo not in repos:
            return JSONResponse({"error": "Repository not found"}, 404, {"X-Error-Code": "RepoNotFound"})
        info: dict[str, Any] = {"id": repo, "modelId": repo, "sha": hashlib.sha1(repo.encode()).hexdigest()}
        if repo in parameters:
            info["safetensors"] = {"parameters": parameters[repo], "total": sum(parameters[repo].values())}
        return JSONResponse(info)

    return Starlette(
        routes=[
            Route("/{owner}/{name}/resolve/{rev}/{file}", resolve, methods=["GET", "HEAD"]),
            Route("/api/models/{owner}/{name}", model_info, methods=["GET"]),
        ]
    )


def seed_cache(hf_home: Path, repo: str, files: dict[str, bytes]) -> list[Path]:
    """Download ``files`` of ``repo`` from a fake Hub into ``hf_home``'s cache (``<hf_home>/hub``) with the
    real client, so that a process run with ``HF_HOME=hf_home`` finds them there; returns their paths."""
    from huggingface_hub import hf_hub_download

    with ServerThread(hub_app({repo: files})) as hub:
        return [
            Path(hf_hub_download(repo, name, cache_dir=hf_home / "hub", endpoint=hub.url)) for name in files
        ]


def config_bytes(path: Path) -> bytes:
    """A config.json's bytes (compact, as published files are small)."""
    return json.dumps(json.loads(path.read_text())).encode()
