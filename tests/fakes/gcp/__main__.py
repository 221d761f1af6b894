"""Run the Google Cloud fake on its own for manual sessions: ``python -m tests.fakes.gcp``.

Prints the base URL and the variables to export so that the MCP server (``./mcp-run.sh``, an MCP
inspector, Claude Desktop ...) talks to it instead of Google. Every node the fake creates boots a
simulated TPU VM (`tests.fakes.vm.fleet`) that runs the startup script the server rendered, unmodified:
it reads its secrets from the fake Secret Manager, starts the fake vLLM engine in its docker stand-in,
installs the reconfigure watcher (so ``reconfigure_vllm`` completes end to end) and writes its syslog,
startup-script output and container log into the fake Cloud Logging (so the log tools find them). Each
node's external IP is its own 127.0.0.N; ``VLLM_PORT`` is exported. The VMs need network namespaces
(root and iproute2); without them, or with ``--no-vm``, nodes run no startup script and the endpoint
of every node is one fake vLLM on 127.0.0.1 (no reconfigure, no node logs), and the fake says so.
Options script the TPU surface:

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
        "--no-vllm",
        action="store_true",
        help="no endpoint behind the fake nodes at all (no VM, no fake vLLM)",
    )
    parser.add_argument(
        "--no-vm", action="store_true", help="one fake vLLM for every node instead of a simulated VM per node"
    )
    parser.add_argument(
        "--boot-s", type=float, default=5.0, help="seconds a simulated VM's vLLM takes to answer /health"
    )
    args = parser.parse_args(argv)

    gcp, vllm = build(args)
    print(f"fake Google Cloud APIs at {gcp.url} (surfaces: {', '.join(gcp.surfaces)})")
    fleet = getattr(gcp, "fleet", None)
    if fleet is not None:
        print(
            "every node the fake TPU API creates boots a simulated VM (network namespace, loopback only) that runs "
            f"its startup script; its endpoint is http://127.0.0.N:{fleet.vllm_port} (the node's external IP), "
            "reconfigure_vllm completes there and its logs are in the fake Cloud Logging"
        )
    elif vllm is not None:
        print(
            f"fake vLLM at {vllm.url}: every node the fake TPU API creates has external IP 127.0.0.1, so the "
            "endpoint is found there; it requires the API key create stores in the fake Secret Manager"
        )
    if getattr(gcp, "fleet_unavailable", None):
        print(f"note: nodes run no startup script ({gcp.fleet_unavailable}): reconfigure jobs will not complete "
              "and the node log tools find nothing")  # fmt: skip
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
        if getattr(gcp, "fleet", None) is not None:
            gcp.fleet.close()
        gcp.stop()
    return 0


def exports(gcp: FakeGcp, vllm: object | None, project: str) -> dict[str, str]:
    """The variables that point the MCP server at these fakes (VLLM_PORT: the nodes' / fake vLLM's port)."""
    out = {"TPU_DEVOPS_GCP_ENDPOINT": gcp.url, "GOOGLE_CLOUD_PROJECT": project}
    if getattr(gcp, "fleet", None) is not None:
        out["VLLM_PORT"] = str(gcp.fleet.vllm_port)
    elif vllm is not None:
        out["VLLM_PORT"] = vllm.url.rsplit(":", 1)[1]  # type: ignore[attr-defined]
    return out


def build(args: argparse.Namespace) -> tuple[FakeGcp, object | None]:
    """Start the fake Google APIs and what answers behind their nodes: a simulated VM per node
    (``gcp.fleet``) when this machine can make network namespaces, else (or with ``--no-vm``) one fake vLLM;
    nothing with ``--no-vllm``. ``gcp.fleet_unavailable`` says why there is no fleet."""
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
    gcp.fleet = None  # type: ignore[attr-defined]
    gcp.fleet_unavailable = None  # type: ignore[attr-defined]
    if getattr(args, "no_vllm", False):
        return gcp, None
    from tests.fakes.vm import unusable

    why = "--no-vm" if getattr(args, "no_vm", False) else unusable()
    if why is None:
        from tests.fakes.http_runner import _free_port
        from tests.fakes.vm.fleet import VmFleet

        gcp.fleet = VmFleet(gcp, vllm_port=_free_port("127.0.0.1"), boot_s=getattr(args, "boot_s", 5.0),  # type: ignore[attr-defined]
                            project=args.project)  # fmt: skip
        return gcp, None
    gcp.fleet_unavailable = why  # type: ignore[attr-defined]
    from tests.fakes.openai_server import FakeVllm

    def current_key() -> str | None:
        versions = gcp.secrets.secrets.get("vllm-api-key") or []
        return versions[-1].decode() if versions else None  # what the VM would read at boot

    vllm = FakeVllm(api_key=current_key).start()
    return gcp, vllm


if __name__ == "__main__":
    sys.exit(main())
