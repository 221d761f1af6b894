"""What hosts pay per model request and per answer (issues #17 §4, #18 §1-2).

Declarations: the bytes of our function declarations as Gemini CLI sends them to the model on every
turn (all tools, and the read-only set a headless run offers), against the 30,000-byte budget. Answers:
every tool called once on the bundled inputs through the official MCP client (`tests.host_scenarios`):
text and structured sizes, their ratio (goal `RATIO_GOAL`) and the largest of each (cap 40,000 characters).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run() -> list[str]:
    from tests.host_scenarios import DECLARATION_BUDGET, RATIO_GOAL, declaration_bytes, run_every_tool
    from tpu_devops.host.results import MAX_RESULT_CHARS

    with tempfile.TemporaryDirectory() as state:
        transcript = asyncio.run(run_every_tool(Path(state)))
    read_only = [t for t in transcript.listed if t.annotations.read_only_hint]
    out = [
        f"declarations, all {len(transcript.listed)} tools: {declaration_bytes(transcript.listed):,} bytes "
        f"(budget {DECLARATION_BUDGET:,}: {declaration_bytes(transcript.listed) / DECLARATION_BUDGET:.2f}x)",
        f"declarations, {len(read_only)} read-only tools: {declaration_bytes(read_only):,} bytes "
        f"({declaration_bytes(read_only) / DECLARATION_BUDGET:.2f}x)",
    ]
    ratios = []
    for a in transcript.answers:
        ratio = a.structured_chars / max(1, a.text_chars)
        ratios.append(ratio)
        flag = "" if ratio <= RATIO_GOAL else f"  > {RATIO_GOAL}"
        out.append(
            f"{a.tool:32s} text {a.text_chars:6,d}  structured {a.structured_chars:6,d}  ratio {ratio:4.2f}{flag}"
        )
    biggest_text = max(transcript.answers, key=lambda a: a.text_chars)
    biggest_json = max(transcript.answers, key=lambda a: a.structured_chars)
    out.append(
        f"largest text {biggest_text.text_chars:,} ({biggest_text.tool}), largest structured "
        f"{biggest_json.structured_chars:,} ({biggest_json.tool}); cap {MAX_RESULT_CHARS:,} characters"
    )
    out.append(
        f"structured/text ratio: max {max(ratios):.2f}, tools over {RATIO_GOAL}: {sum(r > RATIO_GOAL for r in ratios)}"
    )
    return out
