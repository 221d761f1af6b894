"""Benchmark (a model, no hardware): `plan_scale_out` against the seed's v5e-4 measurements.

The seed measured, on one v5litepod-4 serving Gemma 4 E2B, four one-chip engines at 1.39x / 2.52x /
3.36x the output of one TP=4 engine at 16 / 64 / 256 streams (DESIGN §3, seed 003). This prints what
the planner predicts for the same comparison from the bundled one-chip curve alone (v5e-1 sweep,
tpu_devops/data/bench), its ranking, and the ratio of prediction to measurement. The planner must rank
the one-chip engines first at every load; a ratio far from 1.00 means the step model needs a look.
`run()` returns the printed lines for `make bench`.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tpu_devops.config import load_settings  # noqa: E402
from tpu_devops.planning import scaleout  # noqa: E402

SEED = {16: 1.39, 64: 2.52, 256: 3.36}  # DESIGN §3: 4 one-chip engines / one TP=4 engine, v5e-4, E2B
SEED_PRICE = 0.60  # flex-start $/chip-hour, us-west4 (DESIGN §3): equal for both shapes, so ratios hold


def run() -> list[str]:
    with tempfile.TemporaryDirectory() as state:
        settings = load_settings(
            environ={"TPU_DEVOPS_ENV_FILE": str(Path(state) / "none.env"), "TPU_DEVOPS_STATE_DIR": state}
        )
        lines = [
            "seed v5e-4 (Gemma 4 E2B): 4 one-chip engines vs one TP=4 engine, from the bundled v5e-1 curve"
        ]
        lines.append("streams  ranked first       engines tok/s  TP=4 tok/s  predicted  measured  pred/meas")
        wrong = []
        for streams, measured in SEED.items():
            plan = asyncio.run(
                scaleout.plan_scale_out(settings, streams=streams, chips=4, usd_per_chip_hour=SEED_PRICE)
            )
            by = {o.shape: o for o in plan.options}
            engines, tp = by["engines-per-host"], by["tensor-parallel"]
            ranked = [o.shape for o in plan.options]
            if ranked.index("engines-per-host") > ranked.index("tensor-parallel"):
                wrong.append(streams)
            if engines.output_tokens_per_s is None or tp.output_tokens_per_s is None:
                raise SystemExit(
                    f"{streams} streams: a shape is infeasible ({engines.why_not or tp.why_not})"
                )
            ratio = engines.output_tokens_per_s / tp.output_tokens_per_s
            lines.append(
                f"{streams:>7}  {ranked[0]:<17}  {engines.output_tokens_per_s:>12,.0f}  {tp.output_tokens_per_s:>10,.0f}"
                f"  {ratio:>8.2f}x  {measured:>7.2f}x  {ratio / measured:>9.3f}"
            )
        model = plan.step_model
        lines.append(
            f"step model: {model.fixed_ms:.2f} ms + {model.per_stream_ms:.3f} ms/stream (host {model.host_fixed_ms:.2f} ms "
            f"+ {model.host_per_stream_ms:.3f} ms/stream; device {model.device_fixed_ms:.2f} ms weights)"
        )
        lines.append(
            "ranking: one-chip engines above TP=4 at every load"
            if not wrong
            else f"RANKING WRONG at {wrong} streams: TP=4 ranked above one-chip engines"
        )
        return lines


if __name__ == "__main__":
    print("\n".join(run()))
