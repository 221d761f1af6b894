"""Audit section: egress through redirects and aliases, run in this process against the real serving clients.

Two loopback listeners stand for the rig (the real OpenAI-compatible fake, ``VLLM_URL``) and a host that
is not the rig's; both record the ``Host`` each request was addressed to, its method, whether it had a
body and its ``Authorization``. The rig may receive prompts and the API key only when it is addressed as
``VLLM_URL`` says (owned = scheme, host and port as written); every other spelling of it, and the other
host under any spelling, gets probes only (GET without a key) or nothing. A third listener answers every
request with a redirect (301, 302, 307, 308) to the other host: as ``VLLM_URL``, ``base_url`` or a GKE
Service of ours (a benchmark sweep with the deployment's key) it must not carry anything there.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from starlette.responses import JSONResponse, RedirectResponse

from tests.fakes.http_runner import ServerThread
from tests.fakes.openai_server import FakeVllm

AUDIT_KEY = "audit-egress-key-" + "0ddba11c0ffee"
REDIRECTS = (301, 302, 307, 308)


class Recorder:
    """An ASGI middleware that records every request's Host, method, path, body and Authorization."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        record = {
            "host": headers.get("host", ""),
            "method": scope["method"],
            "path": scope["path"],
            "authorization": headers.get("authorization", ""),
            "body": scope["method"] not in ("GET", "HEAD", "OPTIONS")
            or headers.get("content-length", "0") != "0",
        }
        self.seen.append(record)
        await self.app(scope, receive, send)


def _redirector(status: list[int], target: list[str]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await RedirectResponse(target[0] + scope["path"], status_code=status[0])(scope, receive, send)

    return app


async def _other_host(scope: Any, receive: Any, send: Any) -> None:
    """A plausible OpenAI-compatible server that is not the rig: a model list, 404 for the rest."""
    if scope["type"] != "http":
        return
    if scope["path"].endswith("/models"):
        body = {"object": "list", "data": [{"id": "google/gemma-4-E2B-it", "object": "model"}]}
        await JSONResponse(body)(scope, receive, send)
        return
    await JSONResponse({"error": {"message": "no", "type": "NotFoundError"}}, status_code=404)(
        scope, receive, send
    )


async def _service_sweep(settings: Any, service_url: str) -> Any:
    """`start_benchmark` at a GKE Service as `tpu_devops.gke.deploy` resolves it (owned, with its key)."""
    from tpu_devops.serving import benchmark, egress
    from tpu_devops.serving.resolve import Endpoint

    egress.mark_owned(service_url, "deployment")
    ep = Endpoint(service_url, "deployment", AUDIT_KEY, "the deployment's Secret")
    started = await benchmark.start_benchmark(
        settings, concurrency=[1], prompt_lengths=[16], output_len=2, endpoint=ep
    )
    from tpu_devops.host.jobs import JOBS

    job_id = getattr(started, "job_id", None)
    with anyio.move_on_after(20):  # a sweep that did start: let it send what it would send
        while job_id and JOBS.get(job_id).state == "running":
            await anyio.sleep(0.05)
    return started


async def redirects_and_aliases() -> tuple[int, list[str]]:
    """(cases, failures): each case sends a prompt (`chat.query`), runs the health probes and reads the
    metrics; a failure is a body or the key reaching anything but the rig addressed as ``VLLM_URL``, or a
    case that ends with something other than a typed error or an answer."""
    from tpu_devops.config import load_settings
    from tpu_devops.errors import TpuDevopsError
    from tpu_devops.host import deadline
    from tpu_devops.serving import chat, egress, health, metrics

    failures: list[str] = []
    cases = 0
    fake = FakeVllm(api_key=AUDIT_KEY)
    rig = Recorder(fake.app)
    rogue = Recorder(_other_host)
    status, target = [307], [""]
    redir = Recorder(_redirector(status, target))
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerThread(rig) as rig_srv,
        ServerThread(rogue) as rogue_srv,
        ServerThread(redir) as redir_srv,
    ):
        rig_port = rig_srv.url.rsplit(":", 1)[1]
        rogue_port = rogue_srv.url.rsplit(":", 1)[1]
        target[0] = rogue_srv.url

        def settings_for(vllm_url: str) -> Any:
            return load_settings(
                environ={"VLLM_URL": vllm_url, "VLLM_API_KEY": AUDIT_KEY, "TPU_DEVOPS_STATE_DIR": tmp,
                         "TPU_DEVOPS_ENV_FILE": str(Path(tmp) / "none.env"), "GOOGLE_CLOUD_PROJECT": ""}
            )  # fmt: skip

        async def case(
            name: str, vllm_url: str, base_url: str | None, owned_host: str, service: str | None = None
        ) -> list[dict[str, Any]]:
            nonlocal cases
            cases += 1
            egress.forget_owned()
            for r in (rig, rogue, redir):
                r.seen.clear()
            settings = settings_for(vllm_url)
            calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                (
                    "query",
                    lambda: chat.query(settings, "CONFIDENTIAL prompt", max_tokens=4, base_url=base_url),
                ),
                ("health", lambda: health.verify_health(settings, base_url=base_url)),
                ("metrics", lambda: metrics.fetch_samples(base_url or vllm_url)),
            ]
            if service:  # a GKE Service of ours (its address from the Kubernetes API), with its Secret's key
                calls = [("gke benchmark", lambda: _service_sweep(settings, service))]
            for what, call in calls:
                try:
                    with deadline.budget(10.0):
                        await call()
                except TpuDevopsError:
                    pass  # a refusal or a classified failure is a fine end
                except Exception as exc:  # anything else is a bare failure
                    failures.append(f"{name} {what}: {type(exc).__name__}: {str(exc)[:120]}")
            seen = rig.seen + rogue.seen + redir.seen
            leaked = [r for r in seen if (r["body"] or r["authorization"]) and r["host"] != owned_host]
            if rogue.seen and not base_url:  # VLLM_URL redirected: nothing may follow it
                leaked += rogue.seen
            for r in leaked:
                key = " with the key" if AUDIT_KEY in r["authorization"] else ""
                failures.append(f"{name}: {r['method']} {r['path']} reached Host {r['host']}{key}")
            return seen

        rig_host = f"127.0.0.1:{rig_port}"
        rig_url = f"http://{rig_host}"
        redir_host = redir_srv.url.split("//", 1)[1]
        names = {"rig.audit.test": "127.0.0.1", "rig.audit.test.": "127.0.0.1"}

        async def resolver(host: str, port: int) -> list[str]:
            if host in names:
                return [names[host]]
            if host in ("localhost", "localhost.", "vm"):
                return ["127.0.0.1"]
            raise OSError(f"{host}: not resolvable in the audit")

        with egress.use_resolver(resolver):
            control = await case("VLLM_URL itself (control)", rig_url, None, rig_host)
            if not any(r["body"] and AUDIT_KEY in r["authorization"] for r in control):
                failures.append(
                    "control: the prompt and key did not reach VLLM_URL (the measure sees nothing)"
                )
            for port, whose in ((rig_port, "the rig"), (rogue_port, "another host")):
                for spelling in (
                    "localhost", "localhost.", "127.1", "127.0.1", "0x7f000001", "2130706433", "0177.0.0.1",
                    "[::ffff:127.0.0.1]", "[::1]", "127.0.0.1.", "rig.audit.test", "rig.audit.test.", "vm",
                    "LOCALHOST", "rig@127.0.0.1", f"127.0.0.1:{rig_port}@127.0.0.1",
                ):  # fmt: skip
                    if port == rig_port and spelling == "127.0.0.1":
                        continue
                    url = f"http://{spelling}:{port}"
                    await case(f"base_url {url} ({whose})", rig_url, url, rig_host)
            await case("base_url of the rig's port on another loopback address", rig_url,
                       f"http://127.0.0.2:{rig_port}", rig_host)  # fmt: skip
            for code in REDIRECTS:
                status[0] = code
                await case(f"VLLM_URL answering {code} to another host", redir_srv.url, None, redir_host)
                await case(f"base_url answering {code} to another host", rig_url, redir_srv.url, rig_host)
                target[0] = f"http://localhost:{rig_port}"
                await case(
                    f"VLLM_URL answering {code} to the rig as localhost", redir_srv.url, None, redir_host
                )
                target[0] = rogue_srv.url
                await case(
                    f"GKE Service answering {code} to another host", rig_url, None, redir_host, redir_srv.url
                )
            status[0] = 307
        egress.forget_owned()
    return cases, failures
