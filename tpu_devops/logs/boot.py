"""Boot-log diagnosis for vLLM on TPU: parse what a boot logged and classify why it failed.

Public API (reused by the log summarizer and the Cloud Logging reader):

- `BOOT_SIGNATURES`: known log signatures, each a compiled pattern with ``id``, ``severity``
  (``error`` / ``warning`` / ``info`` / ``noise``), ``cause``, ``fix`` and ``source``. Listed most
  specific first: the first error signature present is the root cause.
- `match_line(line) -> list[Signature]`: the signatures one line matches.
- `diagnose_boot_text(text) -> BootDiagnosis`: facts (vLLM version, non-default args, phase timeline,
  HBM budget, KV tokens, compile seconds), findings, root cause, and a cross-check of the logged KV
  pool against `sizing` for the same arguments.
- `diagnose_vllm_boot(log_text=None, path=None)`: the tool entry point.

Performance: each signature lists literal ``anchors``; the whole buffer is scanned with ``str.find`` per
anchor (C speed) and the pattern runs only on the lines that contain one, instead of a Python loop over
every line. Facts are single ``re.search`` calls. Line numbers come from a bisect over newline offsets,
so the work stays linear in the log size (``scripts/bench_planning.py``). Patterns never match across
a newline.

Sources of the strings: the three fixture logs (``fixtures/vllm-logs``), vLLM / tpu-inference / XLA /
huggingface_hub error texts (cited per signature).
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from tpu_devops.errors import InputError
from tpu_devops.results import ToolResult
from tpu_devops.untrusted import UntrustedContent, UntrustedData, fence, inline, untrusted_data

SignatureSeverity = Literal["error", "warning", "info", "noise"]
MAX_LOG_BYTES = 512 * 1024 * 1024
_FIX_UTIL = "--gpu-memory-utilization 0.92 (v5e: leave ~1.26 GiB above the cap for compiled programs)"


@dataclass(frozen=True)
class Signature:
    """A known log signature. ``pattern`` matches within one line (never across a newline)."""

    id: str
    severity: SignatureSeverity
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]  # literal substrings; a matching line contains at least one (fast prefilter)
    title: str
    cause: str
    fix: str
    source: str


def _sig(
    id: str,
    anchors: tuple[str, ...],
    severity: SignatureSeverity,
    pattern: str,
    title: str,
    cause: str,
    fix: str,
    source: str,
) -> Signature:
    return Signature(id, severity, re.compile(pattern), anchors, title, cause, fix, source)


BOOT_SIGNATURES: list[Signature] = [
    _sig(
        "program-allocation-oom",
        ("RuntimeProgramAllocationFailure",),
        "error",
        r"RuntimeProgramAllocationFailure",
        "compiled program does not fit in HBM (after KV init)",
        "--gpu-memory-utilization too high: the KV pool filled the cap and the HBM left above it cannot hold "
        "the compiled XLA programs (0.95 on v5e leaves 0.79 GiB; 0.92 leaves 1.26 GiB)",
        _FIX_UTIL,
        "XLA error E0101; fixtures/vllm-logs/v5e1-e2b-util095-program-oom.log; seed (DESIGN §3)",
    ),
    _sig(
        "smem-oom",
        ("smem", "SMEM", "Smem"),
        "error",
        r"(?i:memory space smem|\bsmem\b[^\n]*(?:exhausted|exceed|out of memory)|(?:exhausted|exceed|out of memory)[^\n]*\bsmem\b)",
        "compile ran out of SMEM",
        "the per-request block table does not fit in the 1 MiB SMEM: a pinned small --block-size or a huge "
        "--max-num-seqs x --max-model-len",
        "drop --block-size and --max-num-seqs (tpu-inference sizes blocks to keep 512 per request)",
        "tpu-inference PallasAttentionBackend.get_min_page_size (SMEM budget)",
    ),
    _sig(
        "hbm-oom",
        (
            "memory space hbm",
            "Error allocating device buffer",
            "RESOURCE_EXHAUSTED: Out of memory",
            "out of memory while trying",
        ),
        "error",
        r"Ran out of memory in memory space hbm|Error allocating device buffer|RESOURCE_EXHAUSTED: Out of memory|out of memory while trying to allocate",
        "HBM exhausted while loading or warming up",
        "the weights plus temporaries exceed HBM (with weight quantization: the full-precision weights and "
        "their quantized copies coexist during load)",
        "serve bf16 weights without the quantization config, or use a larger accelerator type",
        "XLA RESOURCE_EXHAUSTED texts; seed quantization runs (DESIGN §3)",
    ),
    _sig(
        "weight-load-mismatch",
        ("There is no module or parameter named",),
        "error",
        r"There is no module or parameter named '[^'\n]+' in \w+",
        "checkpoint parameter has no place in the model",
        "the weight-quantization path (qwix int8 on the abstract model) does not map this model's weights on "
        "this vLLM/tpu-inference build",
        "serve bf16: remove the quantization settings (additional_config quantization / --quantization)",
        "vllm model_executor/models/utils.py _load_module ValueError; fixtures/vllm-logs/v5e1-e2b-qwix-int8-abstract-fail.log",
    ),
    _sig(
        "chunked-mm-floor",
        ("Chunked MM input disabled",),
        "error",
        r"Chunked MM input disabled but max_tokens_per_mm_item \(\d+\) is larger than max_num_batched_tokens \(\d+\)",
        "batch budget smaller than one multimodal item",
        "with --disable-chunked-mm-input a whole multimodal item must fit in one batch; Gemma 4 needs 2496 tokens",
        "--max-num-batched-tokens 4096 (a power of two at or above the item size)",
        "vLLM scheduler ValueError (encoder budget check); seed (DESIGN §3)",
    ),
    _sig(
        "invalid-kv-cache-dtype",
        ("argument --kv-cache-dtype",),
        "error",
        r"argument --kv-cache-dtype: invalid choice: '[^'\n]*'",
        "--kv-cache-dtype value rejected by the CLI",
        "the value is not one of vLLM's cache dtypes (int8 is not one)",
        "drop --kv-cache-dtype (auto = bf16; fp8 gains nothing on v5e)",
        "vLLM CacheDType (vllm/config/cache.py); seed (DESIGN §3)",
    ),
    _sig(
        "hf-gated-repo",
        ("GatedRepoError", "gated repo", "is restricted", "403 Client Error", "awaiting a review"),
        "error",
        r"GatedRepoError|Cannot access gated repo|Access to model \S+ is restricted|403 Client Error[^\n]*huggingface\.co|awaiting a review from the repo authors",
        "Hugging Face: gated repository (403)",
        "the token's account has not been granted access to the gated model (license not accepted, or the "
        "request is pending)",
        "accept the model's license on huggingface.co with the account that owns the token, then restart",
        "huggingface_hub GatedRepoError text",
    ),
    _sig(
        "hf-repo-not-found",
        (
            "RepositoryNotFoundError",
            "Repository Not Found",
            "404 Client Error",
            "is not a valid model identifier",
        ),
        "error",
        r"RepositoryNotFoundError|Repository Not Found for url: https://huggingface\.co|404 Client Error[^\n]*huggingface\.co|is not a valid model identifier listed on 'https://huggingface\.co/models'",
        "Hugging Face: repository not found (404)",
        "the model id is misspelled, or the repo is private and the request carried no valid token",
        "check MODEL_NAME against the model page (e.g. google/gemma-4-E2B-it); for a private repo check the token",
        "huggingface_hub RepositoryNotFoundError / transformers OSError texts",
    ),
    _sig(
        "hf-unauthorized",
        ("401 Client Error", "Invalid credentials", "Invalid user token", "Invalid username or password"),
        "error",
        r"401 Client Error[^\n]*huggingface\.co|Invalid credentials in Authorization header|Invalid user token|Invalid username or password",
        "Hugging Face: token missing or invalid (401)",
        "the container got no token or a revoked/mistyped one (the secret value, not access rights, is wrong)",
        "store a valid read token in the Secret Manager secret (HF_SECRET_ID) and restart the VM",
        "huggingface_hub HTTP 401 texts",
    ),
    _sig(
        "hf-unreachable",
        ("couldn't connect to 'https://huggingface.co'", "Max retries exceeded"),
        "error",
        r"We couldn't connect to 'https://huggingface\.co'|Max retries exceeded with url: [^\n]*huggingface\.co",
        "Hugging Face unreachable",
        "the VM has no route to huggingface.co (no external IP / Cloud NAT) or DNS failed",
        "give the node an external IP or Cloud NAT, or pre-stage the weights",
        "transformers / requests connection error texts",
    ),
    _sig(
        "tool-parser-missing",
        ("tool choice requires", "--tool-call-parser"),
        "error",
        r"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser|--tool-call-parser[^\n]*must be (?:set|provided)",
        "tool calling not enabled",
        "the server was started without --enable-auto-tool-choice / --tool-call-parser, so tool requests get HTTP 400",
        "--enable-auto-tool-choice --tool-call-parser gemma4 (and --reasoning-parser gemma4)",
        "vLLM OpenAI server error text; DESIGN §3",
    ),
    _sig(
        "tpu-busy",
        ("TPU initialization failed", "Device or resource busy", "Unable to initialize backend"),
        "error",
        r"TPU initialization failed|open\(/dev/(?:vfio|accel)\d*[^\n]*Device or resource busy|Unable to initialize backend 'tpu'",
        "TPU device unavailable",
        "another process (an earlier container or a notebook) holds the TPU, or the runtime does not match the chip",
        "stop the other container (docker ps; docker rm -f ...), then restart vLLM",
        "libtpu / JAX backend initialization errors",
    ),
    _sig(
        "cli-argument-error",
        ("vllm serve: error:", "unrecognized arguments"),
        "error",
        r"vllm serve: error: [^\n]+|error: unrecognized arguments: [^\n]+",
        "vLLM CLI rejected an argument",
        "a flag name or value is invalid for this vLLM version",
        "fix the flag named in the message (lint_vllm_flags checks the known traps)",
        "argparse error text",
    ),
    _sig(
        "engine-core-failed",
        ("Engine core initialization failed", "EngineCore failed to start"),
        "error",
        r"Engine core initialization failed|EngineCore failed to start",
        "engine core failed to start",
        "see the first specific error before this line",
        "read the root-cause finding above; if there is none, search the log for the first ERROR line",
        "vllm v1 engine core startup",
    ),
    _sig(
        "kv-fp8-auto-logged",
        ("for FP8 KV cache",),
        "info",
        r"Automatically using fp8\w* for FP8 KV cache",
        "fp8 KV cache announced",
        "the platform logs an fp8 KV dtype; the Init kv-cache line shows what was really allocated",
        "check regular_attn_dtype before counting on 2x capacity",
        "fixtures/vllm-logs/v6e1-e2b-boot-ok.log",
    ),
    _sig(
        "block-size-scaled",
        ("to avoid SMEM OOM",),
        "info",
        r"Increase the page size from \d+ to \d+ to avoid SMEM OOM",
        "KV block size scaled with max_model_len",
        "tpu-inference keeps 512 blocks per request (harmless)",
        "none needed",
        "tpu-inference PallasAttentionBackend.get_min_page_size",
    ),
    _sig(
        "vllm-c-missing",
        ("Failed to import from vllm._C",),
        "noise",
        r"Failed to import from vllm\._C",
        "vllm._C not present",
        "CUDA kernels are not built in TPU images (harmless)",
        "none needed",
        "fixture logs",
    ),
    _sig(
        "triton-absent",
        ("Triton",),
        "noise",
        r"Triton is installed but 0 active driver|Triton not installed or not compatible|requires Triton",
        "Triton unavailable",
        "Triton is a GPU compiler; TPU builds do not use it (harmless)",
        "none needed",
        "fixture logs",
    ),
    _sig(
        "pin-memory",
        ("Pin memory is not supported",),
        "noise",
        r"Pin memory is not supported on TPU",
        "pin memory unsupported",
        "informational on TPU (harmless)",
        "none needed",
        "fixture logs",
    ),
    _sig(
        "inductor-disabled",
        ("Inductor compilation was disabled",),
        "noise",
        r"Inductor compilation was disabled",
        "Inductor disabled",
        "TPU compiles with XLA, not Inductor (harmless)",
        "none needed",
        "fixture logs",
    ),
    _sig(
        "donated-buffers",
        ("donated buffers were not usable",),
        "noise",
        r"Some donated buffers were not usable",
        "JAX donated buffers unused",
        "a JAX warning during precompile (harmless)",
        "none needed",
        "fixture logs",
    ),
    _sig(
        "metadata-404",
        ("metadata.google.internal",),
        "noise",
        r"metadata\.google\.internal[^\n]*\b404\b|\b404\b[^\n]*metadata\.google\.internal",
        "metadata server 404",
        "an optional metadata key is absent (harmless)",
        "none needed",
        "GCE metadata server",
    ),
]

_BY_ID = {s.id: s for s in BOOT_SIGNATURES}
_PRIORITY = {s.id: i for i, s in enumerate(BOOT_SIGNATURES)}


def match_line(line: str) -> list[Signature]:
    """The signatures (most specific first) that one log line matches."""
    return [s for s in BOOT_SIGNATURES if any(a in line for a in s.anchors) and s.pattern.search(line)]


# ---- facts ---------------------------------------------------------------------------------------

_TS = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")
_SECRET_ARG = re.compile(r"(?:^|_)(?:key|token|secret|password)(?:$|_)", re.IGNORECASE)
_FACTS: dict[str, re.Pattern[str]] = {
    "version": re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+-]*)"),
    "engine_version": re.compile(r"Initializing a V1 LLM engine \(v([^)\n]+)\)"),
    "banner_model": re.compile(r"█ +model +(\S+)"),
    "tpu": re.compile(r"tpu_type=(\S+) \| worker_id=\d+ \| num_chips=(\d+)"),
    "args": re.compile(r"non-default args: (\{[^\n]*\})"),
    "max_len": re.compile(r"Using max model len (\d+)"),
    "memory": re.compile(
        r"Memory statistics \| total_hbm_limit_gb=([\d.]+)GiB \| total_hbm_limit_cap_gb=([\d.]+)GiB \| "
        r"total_hbm_used_gb=([\d.]+)GiB \| total_hbm_avail_gb=([\d.]+)GiB"
    ),
    "kv_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
    "kv_init": re.compile(r"Init kv-cache \| num_total_layers=(\d+) \| num_blocks=\[(\d+)"),
    "kv_shape": re.compile(r"regular_attn_shape=\(num_blocks, \((\d+), (\d+), (\d+), (\d+)\)\)"),
    "kv_dtype": re.compile(r"regular_attn_dtype=(\w+)"),
    "weights_loaded": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "checkpoint": re.compile(r"Checkpoint size: ([\d.]+) GiB"),
    "engine_init": re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s \(compilation: ([\d.]+) s\)"
    ),
    "warmup": re.compile(r"Warm-up call pass finished in ([\d.]+) \[secs\]"),
    "compile_cache": re.compile(r"Enabling JAX compile cache"),
    "server_url": re.compile(r"Starting vLLM server on (http\S+)"),
    "startup_complete": re.compile(r"Application startup complete"),
    "program": re.compile(
        r"Error loading program '([^'\n]+)': Attempting to reserve ([\d.]+[KMGT]?i?B?) at the bottom of memory\. "
        r"That was not possible\. There are ([\d.]+[KMGT]?i?B?) free"
    ),
    "chunked": re.compile(
        r"max_tokens_per_mm_item \((\d+)\) is larger than max_num_batched_tokens \((\d+)\)"
    ),
    "bad_kv_dtype": re.compile(r"argument --kv-cache-dtype: invalid choice: '([^'\n]*)'"),
    "missing_param": re.compile(r"There is no module or parameter named '([^'\n]+)' in (\w+)"),
}


class BootFinding(BaseModel):
    """A classified finding: one signature (or a derived check) with where it was seen."""

    id: str
    severity: SignatureSeverity
    signature: str | None = Field(
        None, description="the BOOT_SIGNATURES id that matched (None: derived check)"
    )
    title: str
    cause: str
    fix: str
    source: str
    count: int = Field(1, description="matching lines")
    first_line: int | None = Field(None, description="1-based line number of the first match")
    timestamp: str | None = None
    excerpt: str | None = Field(None, description="first matching line, up to 300 characters")
    details: dict[str, str] = Field(default_factory=dict)


class Phase(BaseModel):
    """A boot milestone."""

    phase: str
    line: int
    timestamp: str | None
    elapsed_s: float | None = Field(None, description="seconds since the first timestamped line")
    detail: str | None = None


class LoggedBudget(BaseModel):
    """The HBM budget the boot logged (GiB) and the KV pool it sized."""

    total_hbm_gib: float | None = None
    cap_gib: float | None = None
    used_gib: float | None = Field(None, description="weights after loading")
    kv_avail_gib: float | None = None
    kv_tokens: int | None = None
    kv_blocks: int | None = None
    block_size: int | None = None
    kv_layers: int | None = None
    kv_dtype: str | None = None
    max_concurrency: float | None = None
    concurrency_at_tokens: int | None = None


class CrossCheck(BaseModel):
    """Logged KV pool vs `sizing` for the same model, accelerator and arguments."""

    model: str
    accelerator_type: str
    gpu_memory_utilization: float
    max_model_len: int
    bytes_per_token_config: int
    bytes_per_token_implied: float | None = Field(None, description="logged KV GiB / logged tokens")
    predicted_kv_tokens: int
    logged_kv_tokens: int
    deviation_pct: float
    catalog_hbm_gib: float
    logged_hbm_gib: float
    verdict: str


class BootDiagnosis(UntrustedContent, ToolResult):
    """`diagnose_vllm_boot` result. Values copied from the log (excerpts, arguments, names) are untrusted
    data (`tpu_devops.untrusted`); excerpts are fenced in the text rendering."""

    untrusted: UntrustedData = untrusted_data(
        "logs",
        "findings[].excerpt",
        "findings[].details",
        "root_cause.excerpt",
        "non_default_args",
        "model",
        "vllm_version",
        "tpu_type",
    )
    source: str
    lines: int
    status: Literal["ready", "failed", "incomplete"]
    vllm_version: str | None
    model: str | None
    tpu_type: str | None
    non_default_args: dict[str, Any]
    phases: list[Phase]
    budget: LoggedBudget
    weights_load_s: float | None
    compile_s: float | None = Field(
        description="XLA compilation seconds from the 'init engine' line, else the sum of warm-up passes logged so far"
    )
    engine_init_s: float | None = Field(
        description="profile + KV cache + warm-up seconds ('init engine ... took')"
    )
    compile_cache_enabled: bool
    cross_check: CrossCheck | None
    root_cause: BootFinding | None
    findings: list[BootFinding]
    noise: dict[str, int] = Field(description="harmless known lines by signature id")

    def recognised(self) -> bool:
        """False when nothing in the text is a vLLM boot line (a wrong file, a pasted non-log)."""
        return bool(
            self.vllm_version
            or self.non_default_args
            or self.findings
            or self.noise
            or any(p.phase != "first log line" for p in self.phases)
            or any(v is not None for v in self.budget.model_dump().values())
        )

    def render_text(self) -> str:
        """Headline, what booted, the timeline, the budget, the cross-check, then each finding."""
        lines = [self.headline()]
        what = ", ".join(
            x
            for x in (
                f"vLLM {self.vllm_version}" if self.vllm_version else None,
                inline(self.model) if self.model else None,
                inline(self.tpu_type) if self.tpu_type else None,
                f"{self.lines:,} lines from {self.source}",
            )
            if x
        )
        lines.append(what)
        for p in self.phases:
            at = f"{p.elapsed_s:>7,.0f} s" if p.elapsed_s is not None else f"line {p.line:>5}"
            lines.append(f"  {at}  {p.phase}" + (f": {p.detail}" if p.detail else ""))
        b = self.budget
        if b.total_hbm_gib is not None:
            lines.append(
                f"HBM (GiB): total {b.total_hbm_gib}, cap {b.cap_gib}, weights {b.used_gib}, KV {b.kv_avail_gib}"
                + (f"; {b.kv_tokens:,} KV tokens" if b.kv_tokens else "")
            )
        if self.cross_check:
            lines.append(f"cross-check: {self.cross_check.verdict}")
        timing = [
            f"weights {self.weights_load_s:g} s" if self.weights_load_s else None,
            f"compile {self.compile_s:g} s" if self.compile_s else None,
            "compile cache on" if self.compile_cache_enabled else "compile cache off",
        ]
        lines.append("timing: " + ", ".join(t for t in timing if t))
        for f in self.findings:
            where = f" (line {f.first_line}{f', x{f.count}' if f.count > 1 else ''})" if f.first_line else ""
            lines.append(f"{f.severity.upper()} {f.title}{where}")
            lines.append(f"  cause: {f.cause}")
            lines.append(f"  fix: {f.fix}")
            if f.excerpt:
                lines.append(f"  log: {fence(f.excerpt[:200])}")
        if self.noise:
            lines.append("harmless noise: " + ", ".join(f"{k} x{v}" for k, v in self.noise.items()))
        return "\n".join(lines)

    def headline(self) -> str:
        """Status and the root cause (or the pool size when it booted)."""
        if self.root_cause:
            return f"boot FAILED: {self.root_cause.title}. Fix: {self.root_cause.fix}"
        if self.status == "ready":
            tokens = f", {self.budget.kv_tokens:,} KV tokens" if self.budget.kv_tokens else ""
            return f"boot OK (vLLM {self.vllm_version}{tokens})"
        return "boot incomplete: no failure and no 'Application startup complete' yet"


# ---- scanning ------------------------------------------------------------------------------------


class _Text:
    """The log with fast offset -> line lookups."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._newlines: list[int] | None = None

    @property
    def newlines(self) -> list[int]:
        if self._newlines is None:
            self._newlines = [m.start() for m in re.finditer("\n", self.text)]
        return self._newlines

    def line_no(self, pos: int) -> int:
        return bisect.bisect_right(self.newlines, pos - 1) + 1 if pos else 1

    def line_at(self, pos: int) -> str:
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        return self.text[start : end if end >= 0 else len(self.text)]


def _redact(line: str) -> str:
    """Excerpts leave this module redacted (tokens, keys, emails, IPs) by `tpu_devops.logs.redact`."""
    try:
        from tpu_devops.logs.redact import redact_text
    except ImportError:  # the redaction module ships with the log tools; planning works without it
        return line
    return redact_text(line)


def _timestamp(line: str) -> str | None:
    m = _TS.search(line)
    return m.group(1) if m else None


def _timestamp_near(log: _Text, pos: int) -> str | None:
    """The timestamp of the line at ``pos``, else of the closest earlier line (within 4 KiB)."""
    own = _timestamp(log.line_at(pos))
    if own:
        return own
    found = _TS.findall(log.text, max(0, pos - 4096), pos)
    return found[-1] if found else None


def _seconds(ts: str | None, first: str | None) -> float | None:
    if not ts or not first:
        return None
    try:
        a = datetime.strptime("2000-" + first, "%Y-%m-%d %H:%M:%S")
        b = datetime.strptime("2000-" + ts, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return (b - a).total_seconds()


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _literal_dict(text: str) -> dict[str, Any]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {"_unparsed": _redact(text[:500])}
    if not isinstance(value, dict):
        return {"_unparsed": _redact(text[:500])}
    # vLLM logs --api-key among the non-default args: never pass a secret on.
    return {k: "(redacted)" if _SECRET_ARG.search(str(k)) and v else v for k, v in value.items()}


def _signature_hits(log: _Text, sig: Signature) -> list[int]:
    """Sorted start offsets of the lines that match ``sig``: ``str.find`` on each anchor (fast, C),
    then the pattern on just those lines. Linear in the text size."""
    text = log.text
    starts: set[int] = set()
    for anchor in sig.anchors:
        pos = text.find(anchor)
        while pos >= 0:
            start = text.rfind("\n", 0, pos) + 1
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            if start not in starts and sig.pattern.search(text, start, end):
                starts.add(start)
            pos = text.find(anchor, end)
    return sorted(starts)


def _find(log: _Text, key: str) -> re.Match[str] | None:
    return _FACTS[key].search(log.text)


def diagnose_boot_text(text: str, *, source: str = "log_text") -> BootDiagnosis:
    """Diagnose one vLLM TPU boot log (container output, any length). Never raises on odd input."""
    log = _Text(text)
    first_ts_match = _TS.search(text)
    first_ts = first_ts_match.group(1) if first_ts_match else None

    # Signatures: anchor prefilter (str.find) over the whole text, then the pattern on candidate lines.
    findings: list[BootFinding] = []
    noise: dict[str, int] = {}
    for sig in BOOT_SIGNATURES:
        hits = _signature_hits(log, sig)
        if not hits:
            continue
        count, first_pos = len(hits), hits[0]
        if sig.severity == "noise":
            noise[sig.id] = count
            continue
        line = log.line_at(first_pos)
        findings.append(
            BootFinding(
                id=sig.id,
                severity=sig.severity,
                signature=sig.id,
                title=sig.title,
                cause=sig.cause,
                fix=sig.fix,
                source=sig.source,
                count=count,
                first_line=log.line_no(first_pos),
                timestamp=_timestamp_near(log, first_pos),
                excerpt=_redact(line.strip()[:300]),
            )
        )

    # Facts.
    version = _find(log, "version") or _find(log, "engine_version")
    banner = _find(log, "banner_model")
    tpu = _find(log, "tpu")
    args_m = _find(log, "args")
    args = _literal_dict(args_m.group(1)) if args_m else {}
    model = str(args.get("model") or args.get("model_tag") or (banner.group(1) if banner else "")) or None
    budget = LoggedBudget()
    mem = _find(log, "memory")
    if mem:
        budget.total_hbm_gib, budget.cap_gib, budget.used_gib, budget.kv_avail_gib = (
            float(g) for g in mem.groups()
        )
    kv_tokens = _find(log, "kv_tokens")
    if kv_tokens:
        budget.kv_tokens = _num(kv_tokens.group(1))
    conc = _find(log, "concurrency")
    if conc:
        budget.concurrency_at_tokens, budget.max_concurrency = _num(conc.group(1)), float(conc.group(2))
    kv_init = _find(log, "kv_init")
    if kv_init:
        budget.kv_layers, budget.kv_blocks = int(kv_init.group(1)), int(kv_init.group(2))
    shape = _find(log, "kv_shape")
    if shape:
        budget.block_size = int(shape.group(1))
    dtype = _find(log, "kv_dtype")
    if dtype:
        budget.kv_dtype = dtype.group(1)
    weights = _find(log, "weights_loaded")
    engine = _find(log, "engine_init")
    warmups = [float(m.group(1)) for m in _FACTS["warmup"].finditer(text)]
    compile_s = float(engine.group(2)) if engine else (round(sum(warmups), 2) if warmups else None)
    started = _find(log, "startup_complete")
    failed = any(f.severity == "error" for f in findings)

    # Phase timeline.
    phases: list[Phase] = []

    def phase(name: str, m: re.Match[str] | None, detail: str | None = None) -> None:
        if m is None:
            return
        ts = _timestamp_near(log, m.start())
        phases.append(
            Phase(
                phase=name,
                line=log.line_no(m.start()),
                timestamp=ts,
                elapsed_s=_seconds(ts, first_ts),
                detail=detail,
            )
        )

    if first_ts_match:
        phase("first log line", first_ts_match)
    phase("arguments parsed", args_m)
    phase("weights loaded", weights, f"{weights.group(1)} s" if weights else None)
    phase("memory statistics", mem, f"cap {budget.cap_gib} GiB, used {budget.used_gib} GiB" if mem else None)
    phase("KV cache sized", kv_tokens, f"{budget.kv_tokens:,} tokens" if budget.kv_tokens else None)
    phase(
        "KV cache initialized",
        kv_init,
        f"{budget.kv_blocks} blocks x {budget.block_size}" if kv_init else None,
    )
    phase(
        "engine ready (compile done)",
        engine,
        f"{engine.group(1)} s, compilation {engine.group(2)} s" if engine else None,
    )
    phase("application startup complete", started)
    root = _root_cause(findings)
    if root is not None and root.first_line:
        phases.append(
            Phase(
                phase="failure",
                line=root.first_line,
                timestamp=root.timestamp,
                elapsed_s=_seconds(root.timestamp, first_ts),
                detail=root.title,
            )
        )
    phases.sort(key=lambda p: p.line)

    _refine(findings, log, args, budget, kv_init is not None)
    cross = _cross_check(model, tpu.group(1) if tpu else None, args, budget, _find(log, "max_len"))
    if cross is not None and abs(cross.deviation_pct) > 2:
        findings.append(
            BootFinding(
                id="kv-pool-mismatch",
                severity="warning",
                title="logged KV pool differs from the plan",
                cause=cross.verdict,
                fix="check the model config, kv dtype and accelerator type used for planning",
                source="sizing cross-check",
            )
        )
    if not _find(log, "compile_cache") and (mem or started):
        findings.append(
            BootFinding(
                id="compile-cache-off",
                severity="info",
                title="JAX compile cache not enabled",
                cause="no 'Enabling JAX compile cache' line: every boot recompiles (cold 857 s vs warm 497 s)",
                fix="mount ~/.cache/vllm into the container",
                source="seed (DESIGN §3)",
            )
        )
    if model and re.search(r"gemma-?4", model, re.I) and args and not args.get("enable_auto_tool_choice"):
        findings.append(
            BootFinding(
                id="tool-flags-not-set",
                severity="warning",
                title="tool calling flags not set",
                cause="Gemma 4 was started without --enable-auto-tool-choice / --tool-call-parser: tool requests get HTTP 400",
                fix="--enable-auto-tool-choice --tool-call-parser gemma4 --reasoning-parser gemma4",
                source="DESIGN §3",
            )
        )
    order = {"error": 0, "warning": 1, "info": 2, "noise": 3}
    findings.sort(key=lambda f: (order[f.severity], _PRIORITY.get(f.signature or "", 999)))
    root = _root_cause(findings)
    status: Literal["ready", "failed", "incomplete"] = (
        "failed" if failed else ("ready" if started else "incomplete")
    )
    return BootDiagnosis(
        source=source,
        lines=len(log.newlines) + (0 if text.endswith("\n") or not text else 1),
        status=status,
        vllm_version=version.group(1) if version else None,
        model=model,
        tpu_type=tpu.group(1) if tpu else None,
        non_default_args=args,
        phases=phases,
        budget=budget,
        weights_load_s=float(weights.group(1)) if weights else None,
        compile_s=compile_s,
        engine_init_s=float(engine.group(1)) if engine else None,
        compile_cache_enabled=bool(_find(log, "compile_cache")),
        cross_check=cross,
        root_cause=root,
        findings=findings,
        noise=noise,
    )


def _root_cause(findings: list[BootFinding]) -> BootFinding | None:
    errors = [f for f in findings if f.severity == "error"]
    return min(errors, key=lambda f: _PRIORITY.get(f.signature or "", 999)) if errors else None


def _refine(
    findings: list[BootFinding], log: _Text, args: dict[str, Any], budget: LoggedBudget, kv_inited: bool
) -> None:
    """Attach extracted values and context-specific causes to the signature findings."""
    quantized = "qwix" in str(args.get("additional_config", "")) or bool(args.get("quantization"))
    util = args.get("gpu_memory_utilization")
    for f in findings:
        if f.id == "program-allocation-oom":
            m = _find(log, "program")
            if m:
                f.details = {"program": m.group(1), "wanted": m.group(2), "free": m.group(3)}
                f.title = f"program '{inline(m.group(1))}' needs {m.group(2)} but {m.group(3)} is free"
            if kv_inited:
                f.details["after"] = "KV cache init"
            if util is not None:
                f.details["gpu_memory_utilization"] = str(util)
                if float(util) <= 0.92:
                    f.cause = (
                        f"compiled programs do not fit above the cap even at {util}: the model or batch "
                        "buckets need more room"
                    )
                    f.fix = "lower --gpu-memory-utilization to 0.90 or lower --max-num-batched-tokens"
            if budget.cap_gib and budget.total_hbm_gib:
                f.details["hbm_above_cap_gib"] = f"{budget.total_hbm_gib - budget.cap_gib:.2f}"
        elif f.id == "hbm-oom" and quantized:
            f.id, f.title = "hbm-oom-quantization", "HBM exhausted by weight-quantization temporaries"
            f.cause = "quantizing at load keeps full-precision weights and quantized copies in HBM at once"
        elif f.id == "weight-load-mismatch":
            m = _find(log, "missing_param")
            if m:
                f.details = {"parameter": m.group(1), "model_class": m.group(2)}
            if quantized:
                f.id, f.title = (
                    "weight-quantization-unsupported",
                    "weight-quantization path unsupported for this model",
                )
            else:
                f.cause = "the checkpoint's parameter names do not match this vLLM build's model class"
                f.fix = "use an image whose vLLM supports this checkpoint, or the model's original weights"
        elif f.id == "chunked-mm-floor":
            m = _find(log, "chunked")
            if m:
                f.details = {"mm_item_tokens": m.group(1), "max_num_batched_tokens": m.group(2)}
        elif f.id == "invalid-kv-cache-dtype":
            m = _find(log, "bad_kv_dtype")
            if m:
                f.details = {"value": m.group(1)}
        elif (
            f.id == "kv-fp8-auto-logged"
            and budget.kv_dtype
            and not budget.kv_dtype.startswith(("fp8", "float8"))
        ):
            f.id, f.title = "fp8-logged-bf16-allocated", f"fp8 KV announced but {budget.kv_dtype} allocated"
            f.cause = (
                f"the platform logged an fp8 KV dtype, but Init kv-cache allocated {budget.kv_dtype}: "
                "capacity is the bf16 figure"
            )
            f.fix = "plan with bf16 KV (18,432 B/token for E2B); do not count on fp8 capacity"


def _cross_check(
    model: str | None,
    tpu_type: str | None,
    args: dict[str, Any],
    b: LoggedBudget,
    max_len_m: re.Match[str] | None,
) -> CrossCheck | None:
    """Compare the logged KV tokens with `sizing` (bundled configs only: no network here)."""
    if not (model and tpu_type and b.kv_tokens and b.total_hbm_gib and b.cap_gib and b.used_gib):
        return None
    from tpu_devops import sizing
    from tpu_devops.catalog import resolve_accelerator_type
    from tpu_devops.errors import TpuDevopsError

    if sizing.bundled_config_path(model) is None:
        return None
    try:
        accel = resolve_accelerator_type(tpu_type)
        cfg, _, _ = sizing.load_model_config(model)
        geom = sizing.geometry_from_config(cfg, model=model)
        util = float(args.get("gpu_memory_utilization") or round(b.cap_gib / b.total_hbm_gib, 2))
        max_len = int(
            args.get("max_model_len")
            or (max_len_m.group(1) if max_len_m else 0)
            or geom.max_position_embeddings
            or 8192
        )
        plan = sizing.plan_from_geometry(
            geom,
            accel,
            weights_gib=b.used_gib,
            weights_source="logged total_hbm_used_gb",
            gpu_memory_utilization=util,
            max_model_len=max_len,
            tensor_parallel_size=int(args.get("tensor_parallel_size") or 1),
        )
    except (TpuDevopsError, ValueError, TypeError):
        return None
    deviation = (plan.kv_tokens - b.kv_tokens) / b.kv_tokens * 100
    implied = round(b.kv_avail_gib * 2**30 / b.kv_tokens, 1) if b.kv_avail_gib else None
    agree = abs(deviation) <= 0.5
    verdict = (
        f"plan {plan.kv_tokens:,} vs logged {b.kv_tokens:,} tokens ({deviation:+.2f}%): "
        + ("agrees" if agree else "differs")
        + f"; config geometry gives {plan.kv.bytes_per_token:,} B/token"
        + (f", the log implies {implied:,.0f}" if implied else "")
    )
    return CrossCheck(
        model=model,
        accelerator_type=accel.name,
        gpu_memory_utilization=util,
        max_model_len=max_len,
        bytes_per_token_config=plan.kv.bytes_per_token,
        bytes_per_token_implied=implied,
        predicted_kv_tokens=plan.kv_tokens,
        logged_kv_tokens=b.kv_tokens,
        deviation_pct=round(deviation, 3),
        catalog_hbm_gib=accel.generation.hbm_gib_visible,
        logged_hbm_gib=b.total_hbm_gib,
        verdict=verdict,
    )


def refuse_two_sources(node: str, log_text: str | None, path: str | None) -> None:
    """With ``node`` the log comes from Cloud Logging: a pasted log or a path as well is ambiguous.

    Raises:
        InputError: ``log_text`` or ``path`` given together with ``node``.
    """
    if log_text or path:
        raise InputError(
            "give one log source: node (read from Cloud Logging), log_text or path",
            field="node",
            value=node,
            fix="drop node to diagnose the pasted text or the file, or drop log_text/path to read the node's log",
        )


def _looks_like_json(p: Path) -> bool:
    """True when the file's first non-blank character opens a JSON array or object (a log export)."""
    with p.open("rb") as fh:
        head = fh.read(4096).lstrip()
    return head[:1] in (b"[", b"{")


def read_export_text(path: str) -> tuple[str, int]:
    """The messages of a Cloud Logging export (``gcloud logging read --format=json`` array, JSON lines,
    or ``{"entries": [...]}``), redacted, oldest first, one per line: the text ``docker logs`` would show.

    Exports list the newest entry first; entries are sorted by ``timestamp`` (stable; entries without one
    keep their place at the start). Returns ``(text, entry_count)``.

    Raises:
        InputError: malformed JSON, or no LogEntry with a message in the file.
    """
    from tpu_devops.logs.sources import FileSource

    source = FileSource(path, max_entries=500_000)
    records = [r for page in source.pages() for r in page]
    records = [r for r in records if r.message.strip()]
    if not records:
        raise InputError(
            "a JSON file with no log entries (no LogEntry with textPayload or jsonPayload.message)",
            field="path",
            value=path,
            fix="pass a Cloud Logging export (gcloud logging read --format=json) or the container's plain-text "
            "output (docker logs vllm > boot.log); summarize_logs reads other exports",
        )
    records.sort(key=lambda r: r.epoch() or 0.0)
    return "\n".join(r.message for r in records), len(records)


def diagnose_vllm_boot(log_text: str | None = None, path: str | None = None) -> BootDiagnosis:
    """Tool entry point: diagnose a boot log given as text or as a file path.

    A file may be plain text (``docker logs vllm``) or a Cloud Logging export (JSON array / JSON lines of
    LogEntry, newest first): an export's messages are diagnosed in timestamp order.

    Raises:
        InputError: neither or both inputs, missing/unreadable file, not a regular file, file over
        512 MiB, empty log, a JSON file without log entries.
    """
    if (log_text is None or log_text == "") == (path is None or path == ""):
        raise InputError(
            "give exactly one of log_text, path or node",
            field="log_text" if not path else "path",
            value=None,
            fix="paste the container log as log_text, pass the path of a saved log file (plain text or a "
            "Cloud Logging JSON export), or pass node (a TPU node / queued resource id) to read it from "
            "Cloud Logging",
        )
    if path:
        p = Path(path).expanduser()
        if not p.is_file():
            exists = p.exists()
            raise InputError(
                ("not a regular file (a directory or a device)" if exists else "no such file"),
                field="path",
                value=path,
                fix="pass the path of a saved vLLM log (e.g. docker logs vllm > boot.log)",
            )
        size = p.stat().st_size
        if size > MAX_LOG_BYTES:
            raise InputError(
                f"file is {size / 2**20:.0f} MiB (limit 512 MiB)",
                field="path",
                value=path,
                fix="pass the boot part of the log",
            )
        try:
            if _looks_like_json(p):
                text, entries = read_export_text(path)
                source = f"{p} (Cloud Logging export, {entries:,} entries, oldest first)"
            else:
                # newline="" keeps lone \r (progress bars) inside their line, so line numbers match grep -n.
                with p.open(encoding="utf-8", errors="replace", newline="") as fh:
                    text = fh.read()
                source = str(p)
        except OSError as exc:
            raise InputError(
                f"cannot read: {exc.strerror}", field="path", value=path, fix="check permissions"
            ) from None
    else:
        text = log_text or ""
        source = "log_text"
    if not text.strip():
        raise InputError(
            "the log is empty",
            field="path" if path else "log_text",
            value=path,
            fix="pass the vLLM container output",
        )
    diagnosis = diagnose_boot_text(text, source=source)
    if not diagnosis.recognised():
        raise InputError(
            f"no vLLM boot line found in {diagnosis.lines:,} line(s): no version, no 'non-default args', "
            "no memory statistics or KV cache lines, no known failure",
            field="path" if path else "log_text",
            value=path or text[:80],
            fix="pass the vLLM container's output (docker logs vllm), or the node id to read it from Cloud Logging",
        )
    return diagnosis
