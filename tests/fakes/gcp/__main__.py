"""Run the Google Cloud fake on its own for manual sessions: ``python -m tests.fakes.gcp``.

Prints the base URL and the variables to export so that the MCP server (``./mcp-run.sh``, an MCP
inspector, Claude Desktop ...) talks to it instead of Google. Options script the TPU surface:

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
    args = parser.parse_args(argv)

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
    gcp.start(port=args.port)
    print(f"fake Google Cloud APIs at {gcp.url} (surfaces: {', '.join(gcp.surfaces)})")
    print("export these before starting the MCP server:")
    print(f"  export TPU_DEVOPS_GCP_ENDPOINT={gcp.url}")
    print(f"  export GOOGLE_CLOUD_PROJECT={args.project}")
    print("Ctrl-C to stop.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        gcp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
