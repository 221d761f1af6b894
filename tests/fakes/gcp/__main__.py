"""Run the Google Cloud fake on its own for manual sessions: ``python -m tests.fakes.gcp``.

Prints the base URL and the variables to export so that the MCP server (``./mcp-run.sh``, an MCP
inspector, Claude Desktop ...) talks to it instead of Google. It also starts the fake vLLM
(`tests.fakes.openai_server`) as the endpoint of every node the fake creates: nodes get the external IP
127.0.0.1 and ``VLLM_PORT`` is the fake vLLM's port, which requires the API key that create stores in
the fake Secret Manager (as vLLM on the VM would after reading it at boot). Options script the TPU
surface:

    python -m tests.fakes.gcp --port 8765 --secret \\
        --script europe-west4-a=unsupported --script us-west4-b=stockout --timings 5,20,10

Stop with Ctrl-C. State lives in memory only.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.fakes.gcp import FakeGcp
from tests.fakes.gcp.tpu import OUTCOMES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fakes.gcp", description="Local fake of the Google Cloud APIs tpu-devops uses."
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--project", default="demo-project", help="project id the fake answers for")
    parser.add_argument(
        "--script",
        action="append",
        default=[],
        metavar="ZONE=OUTCOME",
        help=f"create outcome per zone: {', '.join(OUTCOMES)}",
    )
    parser.add_argument(
        "--timings",
        default="0,0,0",
        metavar="ACCEPTED,WAITING,PROVISIONING",
        help="seconds spent in each state before the next",
    )
    parser.add_argument(
        "--latency", type=float, default=0.0, help="seconds of latency added to every TPU call"
    )
    parser.add_argument(
        "--secret", action="store_true", help="pre-create the hf-token secret with a dummy version"
    )
    parser.add_argument(
        "--no-vllm", action="store_true", help="do not start the fake vLLM server behind the fake node"
    )
    args = parser.parse_args(argv)

    gcp, vllm = build(args)
    print(f"fake Google Cloud APIs at {gcp.url} (surfaces: {', '.join(gcp.surfaces)})")
    if vllm is not None:
        print(
            f"fake vLLM at {vllm.url}: every node the fake TPU API creates has external IP 127.0.0.1, so the "
            "endpoint is found there; it requires the API key create stores in the fake Secret Manager"
        )
    print("export these before starting the MCP server:")
    for key, value in exports(gcp, vllm, args.project).items():
        print(f"  export {key}={value}")
    print("Ctrl-C to stop.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        if vllm is not None:
            vllm.stop()
        gcp.stop()
    return 0


def exports(gcp: FakeGcp, vllm: object | None, project: str) -> dict[str, str]:
    """The variables that point the MCP server at these fakes (VLLM_PORT: the fake vLLM's port)."""
    out = {"TPU_DEVOPS_GCP_ENDPOINT": gcp.url, "GOOGLE_CLOUD_PROJECT": project}
    if vllm is not None:
        out["VLLM_PORT"] = vllm.url.rsplit(":", 1)[1]  # type: ignore[attr-defined]
    return out


def build(args: argparse.Namespace) -> tuple[FakeGcp, object | None]:
    """Start the fake Google APIs (and, unless ``--no-vllm``, the fake vLLM the fake node serves)."""
    gcp = FakeGcp()
    for surface in gcp.surfaces.values():
        if hasattr(surface, "project"):
            surface.project = args.project
    for item in args.script:
        zone, _, outcome = item.partition("=")
        gcp.tpu.script(zone, outcome)
    waits = [float(x) for x in args.timings.split(",")]
    gcp.tpu.timings = dict(zip(("ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING"), waits, strict=True))
    gcp.tpu.latency_s = args.latency
    if args.secret:
        gcp.secrets.put("hf-token", "hf_" + "x" * 34)
    gcp.tpu.external_ip = "127.0.0.1"  # the node's endpoint is the fake vLLM on this machine, never beyond
    gcp.start(port=args.port)
    if getattr(args, "no_vllm", False):
        return gcp, None
    from tests.fakes.openai_server import FakeVllm

    def current_key() -> str | None:
        versions = gcp.secrets.secrets.get("vllm-api-key") or []
        return versions[-1].decode() if versions else None  # what the VM would read at boot

    vllm = FakeVllm(api_key=current_key).start()
    return gcp, vllm


if __name__ == "__main__":
    sys.exit(main())
