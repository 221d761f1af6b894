"""Warm boots and reconfigure: the time model, as figures with their source.

Every figure is a seed measurement (`tpu_devops.planning.warmboot`, DESIGN §3: v5e-1 = v5litepod-1, gemma-4-E2B-it,
vllm/vllm-tpu); ratios are against the cold boot of the same model. What the seed did not measure (the
wait for flex-start capacity, the VM's own provisioning) is named as an unknown added to a new request,
never filled in.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tpu_devops.planning import warmboot as w  # noqa: E402


def run() -> list[str]:
    cold, warm = w.COLD_BOOT_S, w.WARM_BOOT_S
    saved = cold - warm
    hf_lo, hf_hi = w.WEIGHTS_31B_HF_S
    lines = [
        f"source: {w.SEED_SOURCE}",
        "new node, VM up -> serving (excludes the capacity wait and VM provisioning, not measured):",
        f"  no bucket cache (cold compile)        {cold:7.1f} s   1.00x  (baseline)",
        f"  warm compile cache from the bucket    {warm:7.1f} s   {warm / cold:.2f}x  saves {saved:.0f} s per new node",
        f"  of a cold engine start, XLA compile   {w.XLA_COMPILE_S:7.1f} s of {w.ENGINE_START_S:.0f} s "
        f"({w.XLA_COMPILE_S / w.ENGINE_START_S:.0%})",
        f"  31B weights: bucket {w.WEIGHTS_31B_GCS_S / 60:.1f} min vs Hugging Face {hf_lo / 60:.0f}-{hf_hi / 60:.0f} min "
        f"({w.WEIGHTS_31B_GCS_S / hf_hi:.2f}-{w.WEIGHTS_31B_GCS_S / hf_lo:.2f}x): saves "
        f"{(hf_lo - w.WEIGHTS_31B_GCS_S) / 60:.0f}-{(hf_hi - w.WEIGHTS_31B_GCS_S) / 60:.0f} min per boot",
        "reconfigure on the same node vs a new request:",
        f"  reconfigure, same shape flags (warm)  {w.CONTAINER_REPLACE_S:7.2f} s   {w.CONTAINER_REPLACE_S / cold:.2f}x",
        f"  reconfigure, new shape flags (cold)   {w.ENGINE_START_S:7.1f} s   {w.ENGINE_START_S / cold:.2f}x "
        "(upper bound: one cold engine start)",
        f"  new request, cold boot                {cold:7.1f} s + capacity wait + provisioning",
        f"  new request, warm bucket cache        {warm:7.1f} s + capacity wait + provisioning",
        f"  saved per reconfigure vs a new cold request: {cold - w.CONTAINER_REPLACE_S:.1f} s "
        f"(same shape) / {cold - w.ENGINE_START_S:.1f} s (new shape) + the capacity wait + provisioning",
        f"  saved vs a new request with a warm bucket: {warm - w.CONTAINER_REPLACE_S:+.1f} s (same shape) "
        "+ the capacity wait + provisioning; the node keeps its flex-start clock and IP",
    ]
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
