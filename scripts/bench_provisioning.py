"""Benchmark: list queued resources across all 44 zones of the fake with 200 ms injected latency per call.

The product lists zones concurrently (bounded by `tpu_devops.provisioning.cloud.MAX_CONCURRENT_CALLS`), so the whole
listing (one ``locations`` call plus 44 ``queuedResources`` calls) should take about two call
latencies, not 45. Printed as the ratio to one call's latency measured in the same process (one
zone's listing through the same client); target <= 3x. `run()` returns the printed lines.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from tests.fakes.gcp import FakeGcp  # noqa: E402
from tpu_devops.config import load_settings  # noqa: E402
from tpu_devops.provisioning import cloud, queued  # noqa: E402

LATENCY_S = 0.2
TARGET_RATIO = 3.0


async def _measure(settings) -> tuple[float, float, int]:
    api = cloud.api(settings)
    await cloud.call(api.list_queued_resources, settings.zone)  # warm the client and connection
    one = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        await cloud.call(api.list_queued_resources, settings.zone)
        one = min(one, time.perf_counter() - start)
    best = float("inf")
    zones = 0
    for _ in range(3):
        start = time.perf_counter()
        listing = await queued.list_queued_resources(settings, "all")
        best = min(best, time.perf_counter() - start)
        zones = listing.zones_listed
    return one, best, zones


def run() -> list[str]:
    """Measure and return the report lines."""
    with FakeGcp() as gcp, tempfile.TemporaryDirectory() as state:
        gcp.tpu.latency_s = LATENCY_S
        settings = load_settings(
            environ={
                "GOOGLE_CLOUD_PROJECT": gcp.tpu.project,
                "TPU_DEVOPS_GCP_ENDPOINT": gcp.url,
                "TPU_DEVOPS_STATE_DIR": state,
                "TPU_DEVOPS_ENV_FILE": str(Path(state) / "none.env"),
            }
        )
        one, all_zones, zones = anyio.run(_measure, settings)
    ratio = all_zones / one
    verdict = "OK" if ratio <= TARGET_RATIO else "SLOW"
    return [
        f"list_queued_resources across {zones} zones, {LATENCY_S * 1000:.0f} ms injected per call: "
        f"{all_zones * 1000:.0f} ms = {ratio:.2f}x one call ({one * 1000:.0f} ms); target <= {TARGET_RATIO:.0f}x [{verdict}]",
    ]


if __name__ == "__main__":
    for line in run():
        print(line)
