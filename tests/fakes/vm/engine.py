"""vLLM inside a simulated VM's container: ``python -m tests.fakes.vm.engine vllm serve MODEL FLAGS...``.

Serves the fake OpenAI-compatible server (`tests.fakes.openai_server.FakeVllm`) on the command line's
``--host`` / ``--port`` with its ``--served-model-name`` and ``--max-model-len``, requiring the
container's ``VLLM_API_KEY`` like vLLM; prints boot lines in vLLM's format (the ``non-default args``
line, ``Starting vLLM API server``, ``Application startup complete.``) and answers /health with 503 while
"booting"; a cold start leaves a compiled program in the mounted compile cache
(``FAKE_ENGINE_COMPILE_CACHE``, the host side of ``/root/.cache/vllm``). Its scripted behaviour comes from the docker stand-in (`tests.fakes.vm.init`):
``FAKE_ENGINE_BOOT_S`` (seconds until healthy), ``FAKE_ENGINE_HEALTHY=0`` (never healthy),
``FAKE_ENGINE_EXIT_AFTER_S`` with ``FAKE_ENGINE_EXIT_CODE`` and ``FAKE_ENGINE_LOG`` (print that log, as a
failing boot prints its traceback, then exit).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def _flag(args: list[str], name: str, default: str | None = None) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def _say(level: str, where: str, text: str) -> None:
    stamp = datetime.now(UTC).strftime("%m-%d %H:%M:%S")
    print(f"(APIServer pid={os.getpid()}) {level} {stamp} [{where}] {text}", flush=True)


def main(argv: list[str]) -> int:
    if argv[:2] != ["vllm", "serve"] or len(argv) < 3:
        print(f"the fake engine runs `vllm serve MODEL ...`, not {argv!r}", file=sys.stderr)
        return 2
    model, args = argv[2], argv[3:]
    served = _flag(args, "--served-model-name", model) or model
    port = int(_flag(args, "--port", "8000") or 8000)
    host = _flag(args, "--host", "0.0.0.0") or "0.0.0.0"
    _say("INFO", "api_server.py:1", "vLLM API server version 0.30.0")
    _say(
        "INFO",
        "utils.py:233",
        f"non-default args: {{'model_tag': '{model}', 'host': '{host}', 'port': {port}}}",
    )
    exit_after = os.environ.get("FAKE_ENGINE_EXIT_AFTER_S")
    if exit_after:
        time.sleep(float(exit_after))
        log = os.environ.get("FAKE_ENGINE_LOG")
        if log and Path(log).is_file():
            sys.stdout.write(Path(log).read_text(errors="replace"))
        print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
        return int(os.environ.get("FAKE_ENGINE_EXIT_CODE") or 1)

    from tests.fakes.openai_server import FakeVllm

    length = _flag(args, "--max-model-len")
    fake = FakeVllm(model=served, max_model_len=int(length) if length else 16384,
                    api_key=os.environ.get("VLLM_API_KEY") or None, mode="booting")  # fmt: skip
    _start(fake, host, port)
    _say("INFO", "api_server.py:1885", f"Starting vLLM API server 0 on http://{host}:{port}")
    if os.environ.get("FAKE_ENGINE_HEALTHY") != "0":
        time.sleep(float(os.environ.get("FAKE_ENGINE_BOOT_S") or 0.2))
        _say("INFO", "core.py:95", "init engine (profile, create kv cache, warmup model) took 1.00 seconds")
        cache = os.environ.get("FAKE_ENGINE_COMPILE_CACHE")
        if cache and Path(cache).is_dir() and not any(Path(cache).rglob("*")):  # a cold start compiles
            (Path(cache) / "xla_cache").mkdir(parents=True, exist_ok=True)
            (Path(cache) / "xla_cache" / "jit_step.bin").write_bytes(b"compiled" * 64)
        fake.mode = "ready"
        print(f"(APIServer pid={os.getpid()}) INFO:     Application startup complete.", flush=True)
    while True:
        time.sleep(3600)


def _start(fake: object, host: str, port: int) -> None:
    from tests.fakes.http_runner import ServerThread

    fake._thread = ServerThread(fake.app, host=host, port=port).start()  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
