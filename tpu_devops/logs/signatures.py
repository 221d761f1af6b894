"""How a log line is read: the rule table (`logs.rules`), the unrecognised-failure fallback, and the
evidence-conditioned reading of a match. Used by `diagnose_vllm_boot` and `summarize_logs` alike.

- `split_line`: a line's process tag, level and body, whatever the logger (vLLM old and new prefixes,
  absl/glog ``E0807 ...] ``, Python ``ERROR:root:``, uvicorn ``INFO:``, ``docker logs --timestamps``).
- `match_line` / `match`: the rules a line matches, most specific (highest weight) first.
- `classify`: what an unmatched line is: traceback furniture, an exception header, an ERROR/CRITICAL
  line, a failure worded at a lower level (``startup-script: docker: Error response ...`` is INFO), or
  nothing. `FALLBACK` gives each class its weight: an exception (45) outranks an ERROR line (40), a
  traceback with no exception line (35) and failure words at INFO (30); every rule of kind ``failure``
  (60-100) outranks them all, a symptom (25) or wrapper (-60) ranks below them.
- `explain`: the reading of a match: the numbers read out (needed vs available GiB, the estimated
  maximum length ...) and a cause/fix conditioned on them and on the logged arguments (a quantization
  config is named in a fix only when the log shows one).
- `root_key`: the order of root-cause candidates: weight first, then position (the first failure of a
  burst is usually the cause, the rest consequences).

Sources of the wordings are cited per rule in `logs.rules`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel

from tpu_devops.catalog import DEFAULT_GPU_MEMORY_UTILIZATION, safe_memory_utilization_advice
from tpu_devops.host.untrusted import inline
from tpu_devops.logs import failure_lines as fl
from tpu_devops.logs.rules import BY_ID, MILESTONES, SIGNATURES, Milestone, Signature

__all__ = [
    "BY_ID",
    "FALLBACK",
    "MILESTONES",
    "SIGNATURES",
    "Context",
    "LineClass",
    "LineParts",
    "Reading",
    "Signature",
    "SignatureHit",
    "classify",
    "context_from_args",
    "context_from_lines",
    "explain",
    "match",
    "match_line",
    "milestone_of",
    "parse_args_text",
    "read_continued",
    "split_line",
    "unrecognised",
]

# ---- line anatomy ----------------------------------------------------------------------------------

_LEVELS = {
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "WARNING": "WARNING",
    "WARN": "WARNING",
    "ERROR": "ERROR",
    "CRITICAL": "CRITICAL",
    "FATAL": "CRITICAL",
    "I": "INFO",
    "W": "WARNING",
    "E": "ERROR",
    "F": "CRITICAL",
}
_PREFIX = re.compile(
    r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?\s+)?"  # docker logs --timestamps
    r"(?:\((?P<proc>[^()\n]{1,60}?)(?: pid=\d+)?\) ?)?"  # (EngineCore_DP0 pid=283); keeps indentation
    r"(?:"
    r"\s*(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\s+(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)?\s+"
    r"\[?(?P<src>[\w./<>-]+:\d+)\]\s?"  # vLLM: "ERROR 07-17 10:21:33 [core.py:586] " (old: "core.py:586] ")
    r"|(?P<glevel>[IWEF])\d{4} [\d:.]+\s+\d+\s+(?P<gsrc>[\w./-]+:\d+)\]\s?"  # absl/glog
    r"|(?P<plevel>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?:[\w.]+:|\s+)"  # logging.basicConfig / uvicorn
    r")?"
)
_STARTUP = re.compile(r"^(?:startup-script|Metadata key\(\"startup-script\"\)[^:]*):\s?")


@dataclass(frozen=True)
class LineParts:
    """A log line split into its logger prefix and body (``level`` None: no level in the text)."""

    proc: str | None
    level: str | None
    src: str | None
    body: str


def split_line(line: str) -> LineParts:
    """``(EngineCore pid=1) ERROR 06-03 07:41:11 [core.py:1184] msg`` -> proc, ERROR, core.py:1184, msg."""
    m = _PREFIX.match(line)
    if not m or not m.end():
        body = _STARTUP.sub("", line, count=1)
        return LineParts(None, None, None, body)
    raw = m.group("level") or m.group("glevel") or m.group("plevel")
    body = _STARTUP.sub("", line[m.end() :], count=1)
    return LineParts(
        m.group("proc"), _LEVELS.get(raw) if raw else None, m.group("src") or m.group("gsrc"), body
    )


# ---- the rule table ----------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _rules_by_anchor() -> dict[str, tuple[Signature, ...]]:
    by: dict[str, list[Signature]] = {}
    for sig in SIGNATURES:
        for anchor in sig.anchors:
            by.setdefault(anchor, []).append(sig)
    return {a: tuple(v) for a, v in by.items()}


def match_line(line: str, anchors: Iterable[str] | None = None) -> list[Signature]:
    """The rules one line matches, highest weight (most specific) first. ``anchors``: the anchor words
    already found on the line (the boot scan's Aho-Corasick pass); only rules holding one are tried."""
    if anchors is None:
        pool: Iterable[Signature] = SIGNATURES
    else:
        by = _rules_by_anchor()
        pool = {id(s): s for a in anchors for s in by.get(a, ())}.values()
    found = [s for s in pool if s.search(line)]
    found.sort(key=lambda s: (-s.weight, _ORDER[s.id]))  # ties in table order, whatever the pool
    return found


_ORDER = {s.id: i for i, s in enumerate(SIGNATURES)}


def match(text: str) -> Signature | None:
    """The highest-weight rule found in ``text`` (a message body, any number of lines), or None."""
    best: Signature | None = None
    for line in text.splitlines() or [text]:
        for sig in match_line(line):
            if best is None or sig.weight > best.weight:
                best = sig
            break
    return best


def milestone_of(line: str) -> Milestone | None:
    """The boot milestone ``line`` logs (progress past every earlier error), or None."""
    for m in MILESTONES:
        if m.anchor in line and m.pattern.search(line):
            return m
    return None


# ---- the fallback for lines no rule explains -----------------------------------------------------------

LineClass = Literal["furniture", "traceback", "indented", "exception", "error", "failure_words"]
FALLBACK: dict[str, int] = {"exception": 45, "error": 40, "traceback": 35, "failure_words": 30}
# One definition of a failure line (`logs.failure_lines`): the anchors the boot scan looks for and the
# classes below come from the same words.
FALLBACK_ANCHORS = fl.ANCHORS
_TRACEBACK = fl.TRACEBACK
_FURNITURE = re.compile(
    r"""^\s*(?:$|File "[^"\n]*", line \d+|[\^~]+\s*$|[-=]{3,}\s*$|"""
    r"""The above exception was the direct cause|During handling of the above exception|"""
    r"""For simplicity, JAX has removed|Process [\w-]+:\s*$|\.\.\.\s*$|\[Previous line repeated)"""
)
EXCEPTION = fl.EXCEPTION
_ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})


def classify(parts: LineParts) -> LineClass | None:
    """What a line no rule explains is (None: an ordinary line).

    Furniture and indented lines belong to the traceback or exception around them; the caller decides
    by position. A failure worded at INFO counts only on lines without a vLLM level: vLLM's own INFO
    lines are deliberate, a startup-script or container line is not triaged by the runner's severity.
    """
    body = parts.body
    if _TRACEBACK.match(body):
        return "traceback"
    if _FURNITURE.match(body):
        return "furniture"
    if fl.exception_header(body) is not None:
        return "exception"
    if body[:1].isspace():
        return "indented"
    if parts.level in _ERROR_LEVELS:
        return "error"
    if parts.level is None and fl.has_failure_words(body):
        return "failure_words"
    return None


_FRAME = re.compile(r'^\s*File "[^"\n]*", line \d+')


def is_frame(body: str) -> bool:
    """A traceback frame line (``File "...", line N, in f``)."""
    return bool(_FRAME.match(body))


def exception_type(body: str) -> str | None:
    """``jax.errors.JaxRuntimeError`` for an exception header line, else None."""
    return fl.exception_header(body)


# ---- context: what else the log says (arguments, platform) ---------------------------------------------

_SECRET_ARG = re.compile(r"(?:^|_)(?:key|token|secret|password)(?:$|_)", re.IGNORECASE)
_ARGS = re.compile(r"non-default args: (\{[^\n]*\})")


def parse_args_text(text: str) -> dict[str, Any]:
    """The ``{...}`` of vLLM's ``non-default args:`` line as a dict (secrets replaced); {} if unparsable."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    # vLLM logs --api-key among the non-default args: never pass a secret on.
    return {k: "(redacted)" if _SECRET_ARG.search(str(k)) and v else v for k, v in value.items()}


_NAMESPACE = re.compile(r"\bargs: Namespace\(([^\n]*)\)\s*$")


def parse_namespace_text(text: str) -> dict[str, Any]:
    """The ``k=v`` pairs of an older vLLM's ``args: Namespace(...)`` line with literal values (others
    skipped; secrets replaced); {} if unparsable."""
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    out: dict[str, Any] = {}
    for kw in getattr(call, "keywords", []):
        try:
            value = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if kw.arg and value is not None and value is not False:
            out[kw.arg] = "(redacted)" if _SECRET_ARG.search(kw.arg) and value else value
    return out


def logged_args(text: str) -> tuple[dict[str, Any], re.Match[str] | None]:
    """The logged serve arguments of a log (``non-default args: {...}``, or an older vLLM's ``args:
    Namespace(...)`` line) and the match (None when the log has neither)."""
    m = _ARGS.search(text)
    if m:
        return parse_args_text(m.group(1)), m
    pos = text.find("args: Namespace(")
    if pos >= 0:
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        n = _NAMESPACE.search(text, start, len(text) if end < 0 else end)
        if n:
            return parse_namespace_text(n.group(1)), n
    return {}, None


@dataclass
class Context:
    """What the log says besides the failing line: the logged arguments and signs of quantization.

    ``quantized`` is None when the log shows no arguments at all (unknown), so a fix never advises
    dropping a quantization config that may not exist.
    """

    args: dict[str, Any] = field(default_factory=dict)
    quantized: bool | None = None
    quantization: str | None = None
    vllm_version: str | None = None  # from the banner / "vLLM API server version X" line

    def get(self, key: str) -> Any:
        return self.args.get(key)

    @property
    def model(self) -> str | None:
        """The served model as logged (``model`` or ``model_tag``), or None."""
        value = self.args.get("model") or self.args.get("model_tag")
        return str(value) if value else None


def _quantization_of(args: dict[str, Any]) -> str | None:
    extra = str(args.get("additional_config") or "")
    if "qwix" in extra:
        m = re.search(r"weight_qtype['\"]?\s*:\s*['\"]([\w.]+)", extra)
        return f"qwix ({m.group(1)} weights)" if m else "qwix"
    if args.get("quantization"):
        return str(args["quantization"])
    return None


def context_from_args(args: dict[str, Any]) -> Context:
    """A `Context` from a parsed ``non-default args`` dict ({} = unknown)."""
    if not args:
        return Context()
    q = _quantization_of(args)
    return Context(args=dict(args), quantized=q is not None, quantization=q)


QWIX_LINE = re.compile(r"Applying Qwix quantization|Qwix rules: \[")
# vLLM's version: "vLLM API server version 0.11.0" (older) or the banner's "... version 0.30.0".
VERSION_LINE = re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+-]*)")


def context_from_lines(lines: Iterable[str]) -> Context:
    """A `Context` from log lines: the first parsable ``non-default args`` line, the first vLLM version
    line, plus qwix log lines."""
    ctx = Context()
    qwix = False
    version = None
    for line in lines:
        if not ctx.args and "args: " in line:
            args, _ = logged_args(line)
            if args:
                ctx = context_from_args(args)
        if version is None and "version " in line and (m := VERSION_LINE.search(line)):
            version = m.group(1)
        if "Qwix" in line and QWIX_LINE.search(line):
            qwix = True
    if qwix and not ctx.quantized:
        ctx.quantized, ctx.quantization = True, ctx.quantization or "qwix"
    ctx.vllm_version = version
    return ctx


# ---- the reading of a match ------------------------------------------------------------------------


class Reading(BaseModel):
    """What a matched line means here: the rule, the numbers read out, and the conditioned cause/fix."""

    id: str
    rule: str | None = None  # the table row (None: unrecognised failure)
    kind: str
    scope: str
    weight: int
    title: str
    cause: str
    fix: str
    source: str
    details: dict[str, str] = {}


_UNIT = {"": 1.0, "B": 1.0, "K": 2.0**10, "M": 2.0**20, "G": 2.0**30, "T": 2.0**40}


def gib(size: str | None) -> float | None:
    """``"16.23G"`` / ``"384.11M"`` / ``"0.71 GiB"`` -> GiB. XLA and vLLM print binary units (G = GiB)."""
    if not size:
        return None
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)i?B?\s*", size)
    if not m:
        return None
    try:
        return float(m.group(1)) * _UNIT[m.group(2)] / 2**30
    except ValueError:
        return None


def _num(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def _overshoot(d: dict[str, str], what: str) -> str | None:
    needed, available = gib(d.get("needed")), gib(d.get("available"))
    if needed is None or available is None:
        return None
    d["needed_gib"], d["available_gib"] = f"{needed:.2f}", f"{available:.2f}"
    d["over_gib"] = f"{needed - available:.2f}"
    return (
        f"needs {needed:.2f} GiB of {what}, {available:.2f} GiB available ({needed - available:.2f} GiB over)"
    )


def _r_program(r: Reading, ctx: Context) -> None:
    d = r.details
    if d.get("program") and d.get("wanted"):
        r.title = f"program '{inline(d['program'])}' needs {d['wanted']} but {d.get('free', '?')} is free"
    elif d.get("wanted"):
        r.title = f"a compiled program needs {d['wanted']} of HBM but {d.get('free', '?')} is free"
    util = ctx.get("gpu_memory_utilization")
    if util is not None:
        d["gpu_memory_utilization"] = str(util)
        try:
            low = float(util) <= DEFAULT_GPU_MEMORY_UTILIZATION
        except (TypeError, ValueError):
            low = False
        if low:
            r.cause = (
                f"compiled programs do not fit above the cap even at {util}: the model or batch buckets need "
                "more room"
            )
            r.fix = "lower --gpu-memory-utilization to 0.90 or lower --max-num-batched-tokens"


def _r_hbm(r: Reading, ctx: Context) -> None:
    over = _overshoot(r.details, "HBM")
    if over:
        r.title = f"HBM exhausted: {over}"
    if ctx.quantized:
        r.details["quantization"] = ctx.quantization or "yes"
        r.cause = (
            f"weight quantization at load ({ctx.quantization}) keeps the full-precision weights and their "
            "quantized copies in HBM at once" + (f"; {over}" if over else "")
        )
        r.fix = (
            "serve bf16 weights without the quantization config (drop the additional_config quantization / "
            "--quantization), or load a checkpoint quantized ahead of time, or use a larger slice"
        )
    elif over:
        r.cause = f"the weights plus XLA temporaries exceed HBM: {over}"


def _r_vmem(r: Reading, ctx: Context) -> None:
    d = r.details
    needed, available = gib(d.get("needed")), gib(d.get("available"))
    if needed is not None and available is not None:
        mib = 1024
        d["needed_mib"], d["available_mib"] = f"{needed * mib:.2f}", f"{available * mib:.2f}"
        d["over_mib"] = f"{(needed - available) * mib:.2f}"
        r.title = (
            f"VMEM exhausted at compile: needs {needed * mib:.2f} MiB, {available * mib:.2f} MiB on the core "
            f"({(needed - available) * mib:.2f} MiB over)"
        )
    mml = ctx.get("max_model_len")
    if mml:
        r.fix = (
            f"lower --max-model-len (now {int(mml):,}) and --max-num-batched-tokens (smaller attention blocks); "
            + (
                "for multimodal models cap the image size (--mm-processor-kwargs / --limit-mm-per-prompt), or use a "
                "newer vllm-tpu image (tpu-inference raised its VMEM limits)"
            )
        )


def _r_smem(r: Reading, ctx: Context) -> None:
    mml = ctx.get("max_model_len")
    bits = []
    if mml:
        r.details["max_model_len"] = str(mml)
        bits.append(
            f"lower --max-model-len (now {int(mml):,}; vllm-project/vllm#8318 booted at 8192 where 16384 failed)"
        )
    else:
        bits.append("lower --max-model-len (vllm-project/vllm#8318: 8192 booted where 16384 failed on v5e)")
    if ctx.get("block_size"):
        bits.append(f"drop --block-size {ctx.get('block_size')}")
    if ctx.get("max_num_seqs"):
        bits.append(f"drop --max-num-seqs {ctx.get('max_num_seqs')}")
    if not ctx.get("block_size"):
        bits.append("do not pin a small --block-size")
    r.fix = "; ".join(bits)


def _r_kv_small(r: Reading, ctx: Context) -> None:
    d = r.details
    est, max_len = _num(d.get("estimated")), _num(d.get("max_len"))
    if est is not None:
        d["estimated_max_model_len"] = str(est)
    if max_len is not None:
        d["max_model_len"] = str(max_len)
    if est is not None and max_len:
        r.title = f"KV cache holds {est:,} tokens, less than one max-model-len request ({max_len:,})"
        r.fix = (
            f"lower --max-model-len to {est:,} or less, or raise --gpu-memory-utilization "
            f"(at most {safe_memory_utilization_advice()}), "
            "or use a larger slice"
        )
    elif est is None and max_len is None:
        r.title = "no HBM left for the KV cache"
        r.cause = "the weights (and activations) leave no memory for KV cache blocks"
        r.fix = (
            "use a larger slice or a smaller model; raise --gpu-memory-utilization only up to "
            f"{safe_memory_utilization_advice()}"
        )
    if d.get("needed") and d.get("available") and max_len:
        r.cause = (
            f"one request of {max_len:,} tokens needs {d['needed']} of KV cache; only {d['available']} is left "
            "after the weights"
        )


def _r_weights(r: Reading, ctx: Context) -> None:
    if ctx.quantized:
        r.id, r.title = (
            "weight-quantization-unsupported",
            "weight-quantization path unsupported for this model",
        )
        r.details["quantization"] = ctx.quantization or "yes"
        r.cause = (
            f"the weight-quantization path ({ctx.quantization}) does not map this model's weights on this "
            "vLLM/tpu-inference build"
        )
        r.fix = (
            "serve bf16: remove the quantization settings (additional_config quantization / --quantization)"
        )


def _r_tp(r: Reading, ctx: Context) -> None:
    d = r.details
    tp = d.get("tp") or (str(ctx.get("tensor_parallel_size")) if ctx.get("tensor_parallel_size") else None)
    if tp:
        r.title = f"--tensor-parallel-size {tp} does not divide the model"
    if d.get("heads") and tp:
        r.cause = f"the model has {d['heads']} attention heads, which {tp} chips cannot split evenly"
    elif d.get("kv_heads") and tp:
        r.cause = f"{tp} chips cannot share the model's {d['kv_heads']} KV heads evenly"


def _r_image(r: Reading, ctx: Context) -> None:
    image = r.details.get("image")
    if image:
        tag = r.details.get("tag")
        shown = f"{image}:{tag}" if tag and ":" not in image else image
        r.title = f"container image {inline(shown)} not found (pull failed)"
        r.details["image"] = shown


def _r_exit(r: Reading, ctx: Context) -> None:
    code = r.details.get("code")
    meaning = {
        "125": "docker run itself failed (image pull, a bad flag, or a device it could not map)",
        "126": "a command was not executable",
        "127": "a command was not found",
        "137": "a process was killed (SIGKILL: host out of memory or a stop)",
    }.get(code or "")
    if code:
        r.title = f"startup script exited with status {code}"
    if meaning:
        r.cause = f"exit status {code}: {meaning}; vLLM was never started"


def _r_cli(r: Reading, ctx: Context) -> None:
    msg = r.details.get("message")
    if msg:
        r.title = f"vLLM CLI rejected an argument: {inline(msg[:120])}"


def _r_tool_parser(r: Reading, ctx: Context) -> None:
    parser = r.details.get("parser")
    if parser:
        r.title = f"tool-call parser '{inline(parser)}' unknown to this vLLM"


def _r_429(r: Reading, ctx: Context) -> None:
    model = ctx.get("model") or ctx.get("model_tag")
    if model:
        r.details["model"] = str(model)


def _r_quantization(r: Reading, ctx: Context) -> None:
    from tpu_devops.planning.quantization import QUANTIZATION_SOURCE, check_tpu_quantization, supported_text

    method = r.details.get("method") or ctx.get("quantization")
    platform = (r.details.get("platform") or "").lower()
    if method:
        r.details["method"] = str(method)
    if platform and platform != "tpu":
        r.title = f"{inline(str(method))} quantization is not supported on {inline(platform)}"
        return
    if not method:
        return
    check = check_tpu_quantization(str(method))
    r.title = f"{inline(check.method)} quantization is not supported on TPU"
    r.cause = (
        f"{check.method} is not a quantization the TPU platform implements ({check.note}; GPTQ, bitsandbytes, GGUF "
        "and Marlin are GPU kernels), so vLLM refuses the model config before loading anything"
    )
    r.fix = (
        f"serve the bf16 checkpoint without --quantization (e.g. google/gemma-4-E2B-it), or a checkpoint in a "
        f"method the TPU platform lists (tpu-inference supported_quantization: {supported_text()})"
    )
    r.source = f"{r.source}; {QUANTIZATION_SOURCE}"


def _is_gemma4(model: str | None) -> bool:
    return bool(model and re.search(r"gemma-?4", model, re.I))


def _r_parser(r: Reading, ctx: Context) -> None:
    parser = r.details.get("parser") or ""
    model = ctx.model
    gemma4_parser = "gemma4" in parser.lower() or (
        not parser and "gemma4" in (str(ctx.get("reasoning_parser")), str(ctx.get("tool_call_parser")))
    )
    given = [
        f"--{flag.replace('_', '-')} {ctx.get(flag)}"
        for flag in ("reasoning_parser", "tool_call_parser")
        if ctx.get(flag) and str(ctx.get(flag)).lower() == "gemma4"
    ]
    if parser:
        r.title = f"{inline(parser)} does not fit " + (inline(model) if model else "this model")
    if gemma4_parser and model and not _is_gemma4(model):
        flags = " and ".join(given) or "--reasoning-parser gemma4 / --tool-call-parser gemma4"
        r.cause = (
            f"{flags} are Gemma 4's parsers: they look for Gemma 4's thinking and tool-call tokens, which "
            f"{model}'s tokenizer does not have, so the server refuses to start"
        )
        r.fix = (
            f"drop {flags} for {model} (Gemma 4 parsers fit only Gemma 4 models), or serve a Gemma 4 -it model "
            "(e.g. google/gemma-4-E2B-it) with them"
        )


def _r_per_layer(r: Reading, ctx: Context) -> None:
    from tpu_devops.planning.version_traps import traps_for_rule

    traps = traps_for_rule(r.rule or r.id)
    version = ctx.vllm_version
    hit = next((t for t in traps if t.hits_vllm(version)), None) or (traps[0] if traps else None)
    attr = r.details.get("attribute", "head_dim")
    if version:
        r.details["vllm_version"] = version
    if hit is None:
        return
    what = f"vLLM {version}" if version else "this image's vLLM"
    r.title = (
        f"{what} cannot read {inline(ctx.model) if ctx.model else 'the model'}'s per-layer '{inline(attr)}' "
        f"(transformers {hit.transformers})"
    )
    r.cause = f"{hit.symptom} (vLLM {hit.vllm}, transformers {hit.transformers})"
    r.fix = hit.fix
    r.source = f"{r.source}; {hit.source}"


def _r_unknown_type(r: Reading, ctx: Context) -> None:
    from tpu_devops.planning.images import VERIFIED_IMAGE, support_for

    mt = r.details.get("model_type")
    archs = [a.strip(" '\"") for a in (r.details.get("architectures") or "").split(",") if a.strip(" '\"")]
    row = support_for({"model_type": mt, "architectures": archs})
    what = inline(mt) if mt else ", ".join(inline(a) for a in archs) or "this model type"
    version = f" (vLLM {ctx.vllm_version})" if ctx.vllm_version else ""
    r.title = f"the image{version} is too old for model type {what}"
    if row is not None:
        r.fix = (
            f"use an image with vLLM >= {row.min_version} (the first release that serves {row.name}), e.g. "
            f"{VERIFIED_IMAGE}"
        )
    else:
        r.fix = f"use a newer vllm-tpu image whose transformers knows {what} (e.g. {VERIFIED_IMAGE} or later)"


def _r_name(r: Reading, ctx: Context) -> None:
    name = r.details.get("name")
    if name:
        r.title = f"container name {inline(name)} already in use (docker run exits 125)"
        r.fix = (
            f"remove the old container first (docker rm -f {inline(name.lstrip('/'))}; the startup script does so "
            "before each run), or run with --rm so a stopped container does not keep the name"
        )


def _r_port(r: Reading, ctx: Context) -> None:
    address = r.details.get("address")
    port = ctx.get("port") or (address.rsplit(",", 1)[-1].rsplit(":", 1)[-1].strip(" '") if address else None)
    if port:
        r.title = f"port {inline(str(port))} is already in use: vLLM cannot bind its API server"
        r.fix = (
            f"find what listens (docker ps; ss -ltnp 'sport = :{inline(str(port))}'), stop the old container "
            "(docker rm -f NAME), or give each engine its own --port"
        )


def _r_tpu_insufficient(r: Reading, ctx: Context) -> None:
    if r.details.get("capacity") == "0":
        r.title = "the node advertises no TPU chips yet (google.com/tpu capacity 0)"
        r.cause = (
            "the pod reached a TPU node before its TPU device plugin registered the chips (capacity 0), so the "
            "kubelet rejected it"
        )


def _r_scale_up(r: Reading, ctx: Context) -> None:
    d = r.details
    if d.get("quota"):
        limit = d.get("limit", "?")
        r.title = (
            f"Compute Engine quota {inline(d['quota'])} exceeded (limit {inline(limit)} in "
            f"{inline(d.get('region', '?'))}): the TPU node cannot be created"
        )
    elif d.get("zones"):
        r.title = f"{r.title} ({inline(d['zones'].strip())})"


def _r_reasons(r: Reading, ctx: Context) -> None:
    reasons = r.details.get("reasons")
    if reasons:
        r.title = f"{r.title}: {inline(reasons.strip()[:200])}"


def _r_llamacpp(r: Reading, ctx: Context) -> None:
    prompt, n_ctx = _num(r.details.get("prompt")), _num(r.details.get("n_ctx"))
    if prompt is None or not n_ctx:
        return
    r.title = f"llama-server: a {prompt:,}-token prompt does not fit one slot's {n_ctx:,}-token context"
    r.fix = (
        f"shorten the prompt below {n_ctx:,} tokens (with room for the output), raise --ctx-size to at least "
        f"{prompt:,} x --parallel, or lower --parallel"
    )


_REFINE: dict[str, Callable[[Reading, Context], None]] = {
    "program-allocation-oom": _r_program,
    "hbm-oom": _r_hbm,
    "vmem-oom": _r_vmem,
    "smem-oom": _r_smem,
    "kv-cache-too-small": _r_kv_small,
    "weight-load-mismatch": _r_weights,
    "tp-sharding-mismatch": _r_tp,
    "image-pull-failed": _r_image,
    "startup-script-failed": _r_exit,
    "cli-argument-error": _r_cli,
    "tool-parser-invalid": _r_tool_parser,
    "hf-rate-limited": _r_429,
    "quantization-unsupported-on-platform": _r_quantization,
    "parser-tokens-missing": _r_parser,
    "transformers-per-layer-attribute": _r_per_layer,
    "transformers-unknown-model-type": _r_unknown_type,
    "container-name-conflict": _r_name,
    "port-in-use": _r_port,
    "k8s-insufficient-tpu": _r_tpu_insufficient,
    "k8s-scale-up-quota": _r_scale_up,
    "k8s-scale-up-stockout": _r_scale_up,
    "k8s-unschedulable": _r_reasons,
    "k8s-no-scale-up": _r_reasons,
    "llamacpp-context-exceeded": _r_llamacpp,
}


def explain(sig: Signature, groups: dict[str, str | None], ctx: Context | None = None) -> Reading:
    """The reading of a match of ``sig`` with the named groups it captured, conditioned on ``ctx``."""
    reading = Reading(
        id=sig.id,
        rule=sig.id,
        kind=sig.kind,
        scope=sig.scope,
        weight=sig.weight,
        title=sig.title,
        cause=sig.cause,
        fix=sig.fix,
        source=sig.source,
        details={k: v.strip() for k, v in groups.items() if v},
    )
    refine = _REFINE.get(sig.id)
    if refine is not None:
        refine(reading, ctx or Context())
    return reading


def read_line(line: str, ctx: Context | None = None) -> Reading | None:
    """The reading of the best rule ``line`` matches, or None."""
    for sig in match_line(line):
        m = sig.search(line)
        if m is not None:
            return explain(sig, m.groupdict(), ctx)
    return None


def unrecognised(line: str, kind: LineClass, continuation: str | None = None) -> Reading:
    """The fallback reading of a failure line no rule explains (kind: exception / error / traceback /
    failure_words). ``continuation``: the reason the exception's message gives on its next lines
    (`logs.failure_lines.continuation`: pydantic's ``Value error, ...``), quoted with the header."""
    from tpu_devops.host.redact import redact_text

    parts = split_line(line)
    # The line is quoted in the title and details, which leave the process: redact it here, since a
    # diagnosis of raw text (diagnose_vllm_boot) would otherwise carry a token on an ERROR line verbatim.
    body = redact_text(parts.body.strip())
    exc = exception_type(body) if kind == "exception" else None
    what = {
        "exception": f"unrecognised failure ({exc})",
        "error": "unrecognised failure (ERROR line)",
        "traceback": "unrecognised failure (traceback without an exception line)",
        "failure_words": "unrecognised failure",
    }[kind]
    details = {"line": body[:300]}
    if exc:
        details["exception_type"] = exc
    shown = body[:160]
    if continuation:
        reason = redact_text(continuation.strip())[:300]
        details["cause"] = reason
        # The header names only the exception; the reason is what a reader needs first.
        shown = f"{body[:100]} -> {reason[:160]}"
    return Reading(
        id="unrecognised-failure",
        rule=None,
        kind="failure",
        scope="boot",
        weight=FALLBACK[kind],
        title=f"{what}: {inline(shown)}",
        cause=(
            f"no known rule explains this failure; its message gives the reason on the next line: {inline(details['cause'])}"
            if continuation
            else "no known rule explains this line; it is the "
            + ("first exception" if kind == "exception" else "first failure line")
            + " logged where nothing later shows progress"
        ),
        fix="read the line and the lines just before it; if it recurs, report it with the log so a rule can be added",
        source="fallback for unexplained ERROR/CRITICAL, exception and traceback lines",
        details=details,
    )


def read_continued(
    header: str, following: Iterable[str], ctx: Context | None = None
) -> tuple[Reading | None, str | None]:
    """For an exception header whose message continues on the next lines (`failure_lines.continued`):
    the rule reading of the reason (None when no rule explains it) and the reason itself. ``following``:
    the raw lines after the header, in log order. (None, None) when the header announces no reason."""
    head = split_line(header)
    if not fl.continued(head.body):
        return None, None
    # Only the same process continues the message (the engine's and the API server's lines interleave).
    parts = (split_line(x) for x in following)
    reason = fl.continuation(p.body for p in parts if p.proc == head.proc)
    if not reason:
        return None, None
    return read_line(reason, ctx), reason


class SignatureHit(BaseModel):
    """A matched rule with the entries that show it (summaries)."""

    id: str
    category: str
    title: str
    weight: int
    cause: str
    fix: str
    source: str
    kind: str = "failure"
    scope: str = "boot"
    details: dict[str, str] = {}
    templates: list[str] = []
    insert_ids: list[str] = []
    count: int = 0


def root_key(weight: int, position: float) -> tuple[float, float]:
    """Sort key of root-cause candidates: highest weight first, then the earliest."""
    return (-weight, position)
