"""A stand-in TPU VM for running the rendered startup script and its watcher for real, on loopback.

- `FakeMetadata`: the GCE metadata server's paths the script uses (``Metadata-Flavor: Google`` required):
  the service-account token, the project id, instance attributes (one key, or the directory with
  ``?recursive=true``) with ``wait_for_change`` / ``last_etag`` / ``timeout_sec`` and an ``ETag`` header
  (https://cloud.google.com/compute/docs/metadata/querying-metadata#waitforchange), and guest attribute
  PUTs. Attributes can come from a callable (the fake TPU node's metadata) and guest attributes can go
  to one (the fake TPU's ``getGuestAttributes``), so the server and the VM share one world.
- `FakeEngine`: vLLM as the VM's docker shim left it: ``/health`` answers while the ``vllm`` container
  runs, ``/v1/models`` reports ``--max-model-len`` and ``--served-model-name`` of its command line and
  wants ``Authorization: Bearer <VLLM_API_KEY from its env file>`` when one was set.
- `VmShims`: a ``bin`` directory put first on PATH: ``curl`` (logs its argv, sends Google hosts to the
  loopback fakes, then runs the real curl), ``docker`` (containers as JSON files; a container whose
  command line holds a ``fail_flags`` entry exits at once with ``fail_log`` as its log), ``logger``,
  ``systemctl`` (logged), ``sleep`` (0.05 s), ``python3`` (a plain interpreter). Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.fakes.http_runner import ServerThread

ACCESS_TOKEN = "ya29.vm-access-token-PLANTED"


class FakeMetadata:
    """The metadata server of one VM. ``attributes`` (or ``attributes_source()``) are the instance
    attributes; ``guest`` holds ``"namespace/key" -> value`` (also passed to ``guest_sink``)."""

    def __init__(
        self,
        *,
        project: str = "demo-project",
        attributes_source: Callable[[], dict[str, str]] | None = None,
        guest_sink: Callable[[str, str], None] | None = None,
    ) -> None:
        self.project = project
        self.attributes: dict[str, str] = {}
        self.attributes_source = attributes_source
        self.guest_sink = guest_sink
        self.guest: dict[str, str] = {}
        self.waits: list[dict[str, str]] = []  # every wait_for_change request's query
        self.app = Starlette(
            routes=[Route("/computeMetadata/v1/{path:path}", self.handle, methods=["GET", "PUT"])]
        )
        self._thread: ServerThread | None = None
        self._stopping = False

    def current(self) -> dict[str, str]:
        return dict(self.attributes_source() if self.attributes_source else self.attributes)

    @staticmethod
    def etag(value: Any) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]

    async def handle(self, request: Request) -> Response:
        if request.headers.get("metadata-flavor") != "Google":
            return PlainTextResponse("Missing Metadata-Flavor:Google header.", status_code=403)
        path = request.path_params["path"]
        if request.method == "PUT":
            if not path.startswith("instance/guest-attributes/"):
                return PlainTextResponse("not found", status_code=404)
            key = path.removeprefix("instance/guest-attributes/")
            value = (await request.body()).decode("utf-8", "replace")
            self.guest[key] = value
            if self.guest_sink:
                self.guest_sink(key, value)
            return PlainTextResponse("")
        if path == "instance/service-accounts/default/token":
            return JSONResponse({"access_token": ACCESS_TOKEN, "expires_in": 3599, "token_type": "Bearer"})
        if path == "project/project-id":
            return PlainTextResponse(self.project)
        if path.startswith("instance/attributes/"):
            key = path.removeprefix("instance/attributes/")
            return await self._attributes(request, key)
        return PlainTextResponse("not found", status_code=404)

    async def _attributes(self, request: Request, key: str) -> Response:
        def value() -> Any:
            attrs = self.current()
            return attrs if key in ("", "/") else attrs.get(key)

        q = request.query_params
        now = value()
        if q.get("wait_for_change") == "true":
            self.waits.append(dict(q))
            last = q.get("last_etag")
            deadline = time.monotonic() + float(q.get("timeout_sec") or 3600)
            # As documented: a last_etag that differs from the current contents returns at once.
            while last == self.etag(now) and time.monotonic() < deadline and not self._stopping:
                await asyncio.sleep(0.02)
                if await request.is_disconnected():  # the watcher was stopped: end the hanging GET
                    return PlainTextResponse("", status_code=503)
                now = value()
        if now is None:
            return PlainTextResponse("not found", status_code=404)
        body = json.dumps(now) if key in ("", "/") or q.get("recursive") == "true" else str(now)
        return Response(body, headers={"ETag": self.etag(now)}, media_type="application/text")

    @property
    def url(self) -> str:
        assert self._thread is not None
        return self._thread.url

    def start(self) -> FakeMetadata:
        self._thread = ServerThread(self.app).start()
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._thread:
            self._thread.stop()


class FakeEngine:
    """vLLM on the VM, driven by the docker shim's container files in ``containers``."""

    def __init__(self, containers: Path, port: int = 0) -> None:
        self.containers = containers
        self.app = Starlette(
            routes=[
                Route("/health", self.health, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ]
        )
        self._thread = ServerThread(self.app, port=port)
        self.port = self._thread.port

    def container(self) -> dict[str, Any] | None:
        path = self.containers / "vllm.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if data.get("running") else None

    async def health(self, request: Request) -> Response:
        return PlainTextResponse("", status_code=200 if self.container() else 503)

    async def models(self, request: Request) -> Response:
        c = self.container()
        if c is None:
            return PlainTextResponse("", status_code=503)
        key = c.get("env", {}).get("VLLM_API_KEY")
        if key and request.headers.get("authorization") != f"Bearer {key}":
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        args = c["args"]

        def flag(name: str) -> str | None:
            return args[args.index(name) + 1] if name in args else None

        name = flag("--served-model-name") or c["model"]
        card = {"id": name, "object": "model", "owned_by": "vllm", "root": c["model"]}
        if flag("--max-model-len"):
            card["max_model_len"] = int(flag("--max-model-len") or 0)
        return JSONResponse({"object": "list", "data": [card]})

    @property
    def url(self) -> str:
        return self._thread.url

    def start(self) -> FakeEngine:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._thread.stop()


CURL = r"""#!/bin/bash
# Logs argv (never stdin), sends Google hosts to loopback fakes, runs the real curl.
printf '%s\0' "curl" "$@" >>"$FAKE_DIR/argv.bin"
printf '\n' >>"$FAKE_DIR/argv.bin"
rewrite() {
  local s="$1"
  s="${s//http:\/\/metadata.google.internal/$FAKE_MD_URL}"
  s="${s//https:\/\/storage.googleapis.com/$FAKE_GCP_URL}"
  s="${s//https:\/\/secretmanager.googleapis.com/$FAKE_GCP_URL}"
  printf '%s' "$s"
}
args=()
stdin_config=0
prev=""
for a in "$@"; do
  [[ "$prev" == --config && "$a" == - ]] && stdin_config=1
  args+=("$(rewrite "$a")")
  prev="$a"
done
if ((stdin_config)); then
  config=$(cat)
  exec "$REAL_CURL" "${args[@]}" <<<"$(rewrite "$config")"
fi
exec "$REAL_CURL" "${args[@]}"
"""

DOCKER = r'''#!{python}
"""docker stand-in: containers are JSON files in $FAKE_DIR/containers."""
import hashlib, json, os, sys
from pathlib import Path

fake = Path(os.environ["FAKE_DIR"])
containers = fake / "containers"
containers.mkdir(exist_ok=True)
with open(fake / "argv.bin", "ab") as log:
    log.write(b"\0".join(a.encode() for a in ["docker", *sys.argv[1:]]) + b"\0\n")
args = sys.argv[1:]
cmd = args[0] if args else ""
fail_flags = json.loads(os.environ.get("FAKE_FAIL_FLAGS", "[]"))
if cmd == "pull":
    sys.exit(1 if args[-1] in os.environ.get("FAKE_PULL_FAIL", "") else 0)
if cmd == "image" and args[1] == "inspect":
    image = args[-1]
    if "RepoDigests" in " ".join(args):
        repo = image.split("@")[0].rsplit(":", 1)[0] if "@" not in image else image.split("@")[0]
        digest = image.split("@sha256:")[1] if "@sha256:" in image else hashlib.sha256(image.encode()).hexdigest()
        print(f"{{repo}}@sha256:{{digest}}")
    else:
        print("sha256:" + hashlib.sha256(image.encode()).hexdigest())
    sys.exit(0)
if cmd == "rm":
    (containers / f"{{args[-1]}}.json").unlink(missing_ok=True)
    sys.exit(0)
if cmd == "inspect":
    path = containers / f"{{args[-1]}}.json"
    if not path.exists():
        sys.exit(1)
    print("true" if json.loads(path.read_text())["running"] else "false")
    sys.exit(0)
if cmd == "logs":
    path = containers / f"{{args[-1]}}.json"
    if path.exists():
        sys.stdout.write(json.loads(path.read_text()).get("log", ""))
    sys.exit(0)
if cmd == "run":
    if os.environ.get("FAKE_GCPLOGS_FAIL") and "--log-driver=gcplogs" in args:
        print("docker: Error response from daemon: failed to initialize logging driver: gcplogs", file=sys.stderr)
        sys.exit(125)
    name = args[args.index("--name") + 1]
    env = {{}}
    if "--env-file" in args:
        env_file = Path(args[args.index("--env-file") + 1])
        (fake / "env_mode").write_text(oct(env_file.stat().st_mode & 0o777)[2:])
        for line in env_file.read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                env[k] = v
    mounts = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
    for mount in mounts:  # vLLM compiles into an empty compile cache: leave a program there
        host, _, inside = mount.partition(":")
        if inside == "/root/.cache/vllm" and not any(Path(host).rglob("*")):
            (Path(host) / "xla_cache").mkdir(parents=True, exist_ok=True)
            (Path(host) / "xla_cache" / "jit_step.bin").write_bytes(b"compiled" * 64)
    serve = args.index("serve")
    model, serve_args = args[serve + 1], args[serve + 2 :]
    line = " ".join(serve_args)
    failing = any(f in line for f in fail_flags)
    log = Path(os.environ["FAKE_FAIL_LOG"]).read_text() if failing else "INFO Application startup complete.\n"
    state = {{"name": name, "image": args[serve - 2], "model": model, "args": serve_args, "env": env,
             "mounts": mounts, "running": not failing, "log": log}}
    (containers / f"{{name}}.json").write_text(json.dumps(state))
    with open(fake / "runs.jsonl", "a") as runs:
        runs.write(json.dumps({{k: v for k, v in state.items() if k not in ("env", "log")}}) + "\n")
    print("0123456789ab")
    sys.exit(0)
sys.exit(0)
'''


class VmShims:
    """The ``bin`` directory of shims and the scratch tree of one fake VM (see the module docstring)."""

    def __init__(self, root: Path, *, metadata_url: str, gcp_url: str) -> None:
        self.root = root
        self.bin = root / "bin"
        self.fake = root / "fake"
        self.fs = root / "fs"
        for d in (self.bin, self.fake, self.fs, self.fake / "containers"):
            d.mkdir(parents=True, exist_ok=True)
        real_curl = shutil.which("curl")
        assert real_curl, "curl is needed to run the startup script"
        shims = {
            "curl": CURL,
            "docker": DOCKER.format(python=sys.executable),
            "logger": '#!/bin/bash\nprintf "%s\\n" "$*" >>"$FAKE_DIR/syslog"\n',
            "systemctl": '#!/bin/bash\nprintf "%s\\n" "$*" >>"$FAKE_DIR/systemctl"\n',
            "sleep": "#!/bin/bash\nexec /bin/sleep 0.05\n",
        }
        for name, body in shims.items():
            (self.bin / name).write_text(body)
            (self.bin / name).chmod(0o755)
        # python3 as the VM image has it: a plain interpreter (a version manager's shim costs ~0.2 s a call)
        (self.bin / "python3").symlink_to(Path(sys.executable).resolve())
        self.env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "HOME": str(root),
            "FAKE_DIR": str(self.fake),
            "FAKE_MD_URL": metadata_url,
            "FAKE_GCP_URL": gcp_url,
            "REAL_CURL": real_curl,
            "TPU_DEVOPS_FS_ROOT": str(self.fs),
            "FAKE_FAIL_FLAGS": "[]",
            "FAKE_FAIL_LOG": "/dev/null",
        }
        self.watcher: subprocess.Popen[str] | None = None

    @property
    def containers(self) -> Path:
        return self.fake / "containers"

    @property
    def state(self) -> Path:
        return self.fs / "var" / "lib" / "tpu-devops"

    def boot(self, script: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """Run the rendered startup script as the guest agent would."""
        path = self.root / "startup.sh"
        path.write_text(script)
        return subprocess.run(
            ["bash", str(path)], env=self.env | env, capture_output=True, text=True, timeout=timeout
        )

    def start_watcher(self, **env: str) -> None:
        """Start the installed watcher (``serve.sh watch``) as its systemd unit would, in the background."""
        self.env.update(env)
        self.watcher = subprocess.Popen(
            ["bash", str(self.state / "serve.sh"), "watch"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def stop_watcher(self) -> str:
        """Stop the watcher we started (its own process group) and return what it printed."""
        if self.watcher is None:
            return ""
        if self.watcher.poll() is None:
            os.killpg(self.watcher.pid, signal.SIGTERM)
        out, _ = self.watcher.communicate(timeout=10)
        self.watcher = None
        return out or ""

    def argv_lines(self) -> list[list[str]]:
        """Every shimmed command line (curl, docker), as argv lists."""
        path = self.fake / "argv.bin"
        if not path.exists():
            return []
        out = []
        for record in path.read_bytes().split(b"\0\n"):
            if record.strip(b"\n"):
                out.append([a.decode() for a in record.strip(b"\n").split(b"\0") if a])
        return out

    def runs(self) -> list[dict[str, Any]]:
        """Every ``docker run`` (name, image, model, args, mounts, running)."""
        path = self.fake / "runs.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def syslog(self) -> str:
        path = self.fake / "syslog"
        return path.read_text() if path.exists() else ""
