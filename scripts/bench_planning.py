"""Benchmark: `diagnose_vllm_boot` on a 200k-line synthetic boot log (real fixture lines repeated), and
reading a GGUF's metadata.

Prints lines/s for the diagnosis and the ratio to a baseline measured in the same process: a plain
``for line in text.splitlines()`` loop with one regex search per line (the cheapest useful Python
line scan). The ratio, not the absolute speed, is the number to watch; it must stay roughly
constant as the log grows (linear parsing).

GGUF: `tpu_devops.planning.model_files.gguf_metadata` (the header up to the keys it needs) against
``gguf.GGUFReader`` (every key, tensor infos) on a GGUF with Gemma's 262,144-token vocabulary, in the
same process. `run()` returns the printed lines for `make bench`.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tpu_devops.logs.boot import diagnose_boot_text  # noqa: E402

LOGS = ROOT / "tests" / "data" / "vllm-logs"
TARGET_LINES = 200_000


def synthetic_log(target_lines: int = TARGET_LINES) -> str:
    """Real fixture lines (success log body repeated to ``target_lines``, ending with the OOM failure).

    The failure comes last: a failure followed by a later ``Application startup complete`` is a boot
    that recovered, not the root cause."""
    ok = (LOGS / "v6e1-e2b-boot-ok.log").read_text(encoding="utf-8").splitlines()
    oom = (LOGS / "v5e1-e2b-util095-program-oom.log").read_text(encoding="utf-8").splitlines()
    body = ok[:1000]
    lines: list[str] = []
    while len(lines) < target_lines - len(oom):
        lines.extend(body[: target_lines - len(oom) - len(lines)])
    lines.extend(oom)
    return "\n".join(lines[:target_lines]) + "\n"


def _best_of(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def vocab_gguf(path: Path, tokens: int = 262_144) -> Path:
    """A tensor-less GGUF with a Gemma-sized vocabulary, keys in llama.cpp's converter order."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "gemma3")
    writer.add_name("bench-vocab")
    writer.add_block_count(18)
    writer.add_context_length(32768)
    writer.add_head_count_kv(1)
    writer.add_key_length(256)
    writer.add_file_type(15)
    writer.add_token_list([f"tok{i}" for i in range(tokens)])
    writer.add_token_scores([float(-i) for i in range(tokens)])
    writer.add_token_types([1] * tokens)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_lines() -> list[str]:
    """Header read vs the library's full parse, on the same file."""
    import tempfile

    from gguf import GGUFReader

    from tpu_devops.planning.model_files import gguf_metadata

    with tempfile.TemporaryDirectory() as tmp:
        path = vocab_gguf(Path(tmp) / "vocab.gguf")
        assert gguf_metadata(path)["block_count"] == 18
        t_ours = _best_of(lambda: gguf_metadata(path))
        t_lib = _best_of(lambda: GGUFReader(path, "r"), repeats=1)
    return [
        f"GGUF metadata (262,144-token vocabulary): header read {t_ours * 1000:.2f} ms, gguf.GGUFReader "
        f"{t_lib:.2f} s: {t_lib / t_ours:,.0f}x faster",
    ]


def run() -> list[str]:
    """Measure and return the report lines."""
    text = synthetic_log()
    n = text.count("\n")
    baseline_re = re.compile(r"RuntimeProgramAllocationFailure")

    def baseline() -> int:
        hits = 0
        for line in text.splitlines():
            if baseline_re.search(line):
                hits += 1
        return hits

    diag = diagnose_boot_text(text)
    assert diag.root_cause is not None and diag.root_cause.id == "program-allocation-oom"
    t_diag = _best_of(lambda: diagnose_boot_text(text))
    t_base = _best_of(baseline)
    half = synthetic_log(TARGET_LINES // 2)
    t_half = _best_of(lambda: diagnose_boot_text(half))
    return [
        f"diagnose_vllm_boot: {n:,} lines in {t_diag:.3f} s = {n / t_diag:,.0f} lines/s",
        f"baseline (splitlines + 1 regex): {n / t_base:,.0f} lines/s; diagnosis/baseline time ratio {t_diag / t_base:.2f}x",
        f"linearity: time(200k) / time(100k) = {t_diag / t_half:.2f} (2.00 = linear)",
        *gguf_lines(),
    ]


if __name__ == "__main__":
    for line in run():
        print(line)
