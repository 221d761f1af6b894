"""vLLM-on-TPU flag checks (the `lint_vllm_flags` tool): the known traps, each with what happens, why,
the source of the fact, and the fix.

Input is a ``vllm serve ...`` command line (optionally inside ``docker run ... IMAGE vllm serve ...``)
or a flag mapping. Flag names are normalised (``--max_model_len`` = ``--max-model-len``); ``--flag=value``
and ``--flag value`` both work. Values vLLM's CLI would reject (``--max-model-len abc``, ``-5``, a
trailing flag without its value) are errors; a flag name this lint does not know is a warning. Facts
come from DESIGN §3 (seed measurements on v5e-1 with Gemma 4 E2B), the fixture boot logs, and vLLM /
tpu-inference sources cited per rule.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from tpu_devops.catalog import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    AcceleratorType,
    machine_type_mixup,
    resolve_accelerator_type,
    safe_memory_utilization_advice,
)
from tpu_devops.config import Settings
from tpu_devops.errors import InputError, TpuDevopsError
from tpu_devops.host.results import ToolResult

Severity = Literal["error", "warning", "info"]

# vLLM's --kv-cache-dtype choices (CacheDType literal in vllm/config/cache.py; "float16" in some versions).
KV_DTYPE_CHOICES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
GEMMA4_MM_ITEM_TOKENS = 2496  # max_tokens_per_mm_item for Gemma 4 at {"image":4,"audio":1} (seed ValueError)
BOOLEAN_FLAGS = frozenset(
    {
        "enable-auto-tool-choice",
        "disable-chunked-mm-input",
        "enforce-eager",
        "trust-remote-code",
        "enable-prefix-caching",
        "enable-chunked-prefill",
        "disable-log-requests",
        "disable-log-stats",
        "enable-log-requests",
        "async-scheduling",
        "skip-tokenizer-init",
        "disable-frontend-multiprocessing",
        "headless",
        "enable-lora",
        "enable-sleep-mode",
        "enable-expert-parallel",
        "enable-prompt-tokens-details",
        "enable-force-include-usage",
        "enable-server-load-tracking",
        "enable-request-id-headers",
        "disable-custom-all-reduce",
        "disable-sliding-window",
        "disable-cascade-attn",
        "disable-uvicorn-access-log",
        "disable-fastapi-docs",
        "return-tokens-as-token-ids",
    }
)
SHORT_FLAGS = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size", "q": "quantization"}
# Typed vLLM serve flags (vllm/engine/arg_utils.py EngineArgs.add_cli_args and the OpenAI server's
# make_arg_parser); not every flag of every version, so an unknown name is a warning, never an error.
INT_FLAGS = frozenset(
    {
        "max-model-len",
        "max-num-batched-tokens",
        "max-num-seqs",
        "tensor-parallel-size",
        "pipeline-parallel-size",
        "data-parallel-size",
        "block-size",
        "port",
        "seed",
        "max-logprobs",
        "max-parallel-loading-workers",
        "max-seq-len-to-capture",
        "max-num-partial-prefills",
        "max-long-partial-prefills",
        "long-prefill-token-threshold",
        "num-scheduler-steps",
        "num-gpu-blocks-override",
        "max-lora-rank",
        "max-loras",
        "max-cpu-loras",
        "num-speculative-tokens",
        "api-server-count",
        "uvicorn-log-level-int",
    }
)
FLOAT_FLAGS = frozenset({"gpu-memory-utilization", "swap-space", "cpu-offload-gb"})
STRING_FLAGS = frozenset(
    {
        "model",
        "host",
        "served-model-name",
        "tokenizer",
        "tokenizer-mode",
        "revision",
        "tokenizer-revision",
        "code-revision",
        "download-dir",
        "load-format",
        "dtype",
        "kv-cache-dtype",
        "quantization",
        "limit-mm-per-prompt",
        "mm-processor-kwargs",
        "tool-call-parser",
        "reasoning-parser",
        "chat-template",
        "chat-template-content-format",
        "additional-config",
        "hf-overrides",
        "generation-config",
        "override-generation-config",
        "compilation-config",
        "speculative-config",
        "kv-transfer-config",
        "distributed-executor-backend",
        "api-key",
        "root-path",
        "uvicorn-log-level",
        "allowed-origins",
        "allowed-methods",
        "allowed-headers",
        "ssl-keyfile",
        "ssl-certfile",
        "response-role",
        "lora-modules",
        "tool-parser-plugin",
        "guided-decoding-backend",
        "structured-outputs-config",
        "task",
        "runner",
        "config",
        "scheduling-policy",
        "hf-token",
    }
)
KNOWN_FLAGS = BOOLEAN_FLAGS | INT_FLAGS | FLOAT_FLAGS | STRING_FLAGS
FLAG_EXAMPLES = {
    "max-model-len": "16384",
    "max-num-batched-tokens": "4096",
    "max-num-seqs": "256",
    "tensor-parallel-size": "1",
    "gpu-memory-utilization": f"{DEFAULT_GPU_MEMORY_UTILIZATION:g}",
    "port": "8000",
    "tool-call-parser": "gemma4",
    "reasoning-parser": "gemma4",
    "limit-mm-per-prompt": """'{"image":4,"audio":1}'""",
}
_SEED = "seed measurement on v5e-1, Gemma 4 E2B (DESIGN §3)"


class Finding(BaseModel):
    """One lint finding."""

    id: str
    severity: Severity
    flag: str | None = Field(None, description="the flag at fault, e.g. --gpu-memory-utilization")
    value: str | None = None
    what_happens: str
    why: str
    source: str
    fix: str


class LintResult(ToolResult):
    """`lint_vllm_flags` result."""

    accelerator_type: str
    model: str | None
    image: str | None
    flags: dict[str, Any] = Field(description="parsed flags, normalised names without dashes prefix")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="the container's environment as linted (docker run -e / --env-file / env); secret values hidden",
    )
    errors: int
    warnings: int
    findings: list[Finding]
    notices: list[str]

    def headline(self) -> str:
        """Counts and the verdict."""
        verdict = "will not serve as intended" if self.errors else "no blocking problems"
        return f"{self.errors} error(s), {self.warnings} warning(s) on {self.accelerator_type}: {verdict}"

    def render_text(self) -> str:
        """Headline, then one paragraph per finding: severity, flag and value, effect, why, fix, source."""
        lines = [self.headline(), *[f"note: {n}" for n in self.notices]]
        lines.append(
            f"model: {self.model or '(not given)'}" + (f"; image: {self.image}" if self.image else "")
        )
        if self.flags:
            shown = [f"--{k}" if v is True else f"--{k} {v}" for k, v in self.flags.items()]
            lines.append(f"flags read: {' '.join(shown)}")
        if self.env:
            lines.append("environment: " + " ".join(f"{k}={v}" for k, v in self.env.items()))
        for f in self.findings:
            where = " ".join(x for x in (f.flag, f.value) if x) or f.id
            lines.append(f"{f.severity.upper()} {where}: {f.what_happens}")
            lines.append(f"  why: {f.why}")
            lines.append(f"  fix: {f.fix}  [source: {f.source}]")
        if not self.findings:
            lines.append("no findings: none of the known vLLM-on-TPU traps applies to these flags")
        return "\n".join(lines)


@dataclass
class ServeSpec:
    """A parsed serve command: model, flags (name -> value, True for booleans), image, raw text, and for
    ``docker run``: the container's environment (``-e``/``--env``; None for ``-e VAR``, which passes the
    host's value through), the ``--env-file`` paths, and the mounts as (source, container path)."""

    model: str | None
    flags: dict[str, Any]
    image: str | None
    in_container: bool
    raw: str
    env: dict[str, str | None] = field(default_factory=dict)
    env_files: list[str] = field(default_factory=list)
    mounts: list[tuple[str, str]] = field(default_factory=list)


def _norm(name: str) -> str:
    name = name.lstrip("-").replace("_", "-")
    return SHORT_FLAGS.get(name, name)


def parse_serve_command(command: str) -> ServeSpec:
    """Parse ``[docker run ... IMAGE] vllm serve [MODEL] --flag value ...``.

    Raises:
        InputError: unbalanced quotes, or no ``vllm serve`` / ``--model`` in the text.
    """
    text = command.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise InputError(
            f"cannot split the command line: {exc}",
            field="command",
            value=command[:200],
            fix="balance the quotes",
        ) from None
    start = None
    for i, tok in enumerate(tokens):
        if tok == "serve" and i > 0 and tokens[i - 1].endswith("vllm"):
            start = i + 1
            break
        if tok.endswith("vllm.entrypoints.openai.api_server"):
            start = i + 1
            break
    if start is None:
        raise InputError(
            "no 'vllm serve' in the command",
            field="command",
            value=command[:200],
            fix="pass the command as you run it, e.g. vllm serve google/gemma-4-E2B-it --max-model-len 16384",
        )
    bad = [t for t in tokens[start:] if t.startswith("-") and not _norm(t.split("=", 1)[0])]
    if bad:
        raise InputError(
            f"malformed flag {bad[0]!r}: a flag needs a name",
            field="command",
            value=command[:200],
            fix="write flags as --name value or --name=value, e.g. --max-model-len 16384",
        )
    prefix = tokens[: start - 1]
    in_container = "docker" in prefix or "podman" in prefix or "run" in prefix
    image = None
    env: dict[str, str | None] = {}
    env_files: list[str] = []
    mounts: list[tuple[str, str]] = []
    if in_container:
        before = [t for t in prefix if t != "vllm"]
        image = before[-1] if before and not before[-1].startswith("-") else None
        env, env_files, mounts = docker_run_options(prefix)
    model = None
    flags: dict[str, Any] = {}
    rest = tokens[start:]
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok.startswith("-") and len(tok) > 1:
            if "=" in tok:
                name, value = tok.split("=", 1)
                flags[_norm(name)] = value
            else:
                name = _norm(tok)
                nxt = rest[i + 1] if i + 1 < len(rest) else None
                if name in BOOLEAN_FLAGS or name.startswith("no-") or nxt is None or (nxt.startswith("--")):
                    flags[name] = True
                else:
                    flags[name] = nxt
                    i += 1
        elif model is None:
            model = tok
        i += 1
    model = model or (str(flags["model"]) if "model" in flags else None)
    return ServeSpec(
        model=model,
        flags=flags,
        image=image,
        in_container=in_container,
        raw=command,
        env=env,
        env_files=env_files,
        mounts=mounts,
    )


def _option_value(tokens: list[str], i: int, short: str, long: str) -> tuple[str | None, int]:
    """The value of ``tokens[i]`` when it is ``short``/``long`` (``-e V``, ``-eV``, ``--env V``,
    ``--env=V``), and the index of the next token; (None, i + 1) otherwise."""
    tok = tokens[i]
    if tok in (short, long):
        return (tokens[i + 1] if i + 1 < len(tokens) else None), i + 2
    if tok.startswith(long + "="):
        return tok[len(long) + 1 :], i + 1
    if short and tok.startswith(short) and not tok.startswith("--") and len(tok) > len(short):
        return tok[len(short) :].lstrip("="), i + 1
    return None, i + 1


def docker_run_options(tokens: list[str]) -> tuple[dict[str, str | None], list[str], list[tuple[str, str]]]:
    """``docker run`` / ``podman run`` options before the image: the environment (``-e`` / ``--env``;
    ``VAR`` alone passes the host's value, recorded as None), the ``--env-file`` paths, and the volumes
    (``-v``/``--volume SRC:DST[:opts]``, ``--mount type=bind,source=SRC,target=DST``).

    Source: docs.docker.com/reference/cli/docker/container/run (--env, --env-file, --volume, --mount).
    """
    env: dict[str, str | None] = {}
    env_files: list[str] = []
    mounts: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        for short, long, kind in (
            ("-e", "--env", "env"),
            ("", "--env-file", "file"),
            ("-v", "--volume", "vol"),
        ):
            value, nxt = _option_value(tokens, i, short, long)
            if value is None:
                continue
            if kind == "env":
                name, eq, val = value.partition("=")
                if name:
                    env[name] = val if eq else None
            elif kind == "file":
                env_files.append(value)
            else:
                parts = value.split(":")
                if len(parts) >= 2:
                    mounts.append((parts[0], parts[1]))
            i = nxt
            break
        else:
            value, nxt = _option_value(tokens, i, "", "--mount")
            if value is not None:
                fields = dict(kv.partition("=")[::2] for kv in value.split(","))
                target = fields.get("target") or fields.get("destination") or fields.get("dst")
                if target:
                    mounts.append((fields.get("source") or fields.get("src") or "", target))
            i = nxt
    return env, env_files, mounts


def parse_env_file(text: str) -> dict[str, str | None]:
    """Variables of a ``docker run --env-file`` file: ``VAR=VALUE`` lines taken literally (no quote
    processing), ``VAR`` alone passes the host's value (None), ``#`` lines and blank lines skipped.

    Source: docs.docker.com/reference/cli/docker/container/run/#env.
    """
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        name, eq, value = stripped.partition("=")
        name = name.strip()
        if name:
            out[name] = value if eq else None
    return out


def spec_from_mapping(flags: Mapping[str, Any], model: str | None, image: str | None) -> ServeSpec:
    """A `ServeSpec` from ``{"max_model_len": 16384, "enable_auto_tool_choice": True, ...}``."""
    norm: dict[str, Any] = {}
    for key, value in flags.items():
        name = _norm(str(key))
        if not name:
            raise InputError(
                "a flag needs a name", field="flags", value=key, fix='use names such as "max_model_len"'
            )
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "false", "no", "off"):
            value = value.strip().lower() in ("true", "yes", "on")
        if value is None or value is False:
            continue  # JSON false / null: the flag is not set
        norm[name] = value
    return ServeSpec(
        model=model or (str(norm["model"]) if "model" in norm else None),
        flags=norm,
        image=image,
        in_container=False,
        raw="",
    )


# ---- rules -------------------------------------------------------------------------------------


@dataclass
class Context:
    spec: ServeSpec
    accel: AcceleratorType
    kv_heads: int | None
    health_check_path: str | None
    engines: int = 1  # vLLM engines on the host; each runs this command (one engine per chip)
    env_origin: dict[str, str] = field(default_factory=dict)  # variable -> where it was set (for findings)

    @property
    def gen(self) -> str:
        return self.accel.generation.name

    def get(self, name: str) -> Any:
        return self.spec.flags.get(name)

    @property
    def is_gemma4(self) -> bool:
        return bool(self.spec.model and re.search(r"gemma-?4", self.spec.model, re.IGNORECASE))


def _num(ctx: Context, name: str, out: list[Finding], kind: type = float) -> Any:
    """The flag's value as ``kind``, or None when unset or invalid (`rule_flag_values` reports invalid ones)."""
    raw = ctx.get(name)
    if raw is None or raw is True:
        return None
    parsed = parse_flag_number(str(raw), kind)
    return parsed if isinstance(parsed, kind) else None


def parse_flag_number(raw: str, kind: type) -> int | float | str:
    """``raw`` as ``kind`` the way vLLM's CLI reads it, or a reason string when the CLI would reject it.

    Whole-number flags accept vLLM's human-readable forms (``16k`` = 16,000, ``16K`` = 16,384, ``1M``);
    source: vllm/engine/arg_utils.py ``human_readable_int``.
    """
    text = raw.strip().replace("_", "")
    if kind is float:
        try:
            return float(text)
        except ValueError:
            return "not a number"
    m = re.fullmatch(r"([+-]?\d+(?:\.\d+)?)([kKmMgGtT]?)", text)
    if not m:
        return "not a whole number"
    number, suffix = m.groups()
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix.lower()]
    if suffix.isupper():
        scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    value = float(number) * scale
    if value != int(value) or ("." in number and not suffix):
        return "not a whole number"
    return int(value)


def _value_finding(finding_id: str, name: str, raw: Any, what: str, why: str, fix: str) -> Finding:
    return Finding(
        id=finding_id,
        severity="error",
        flag=f"--{name}",
        value=None if raw is True else str(raw),
        what_happens=what,
        why=why,
        source="vLLM serve argument types (vllm/engine/arg_utils.py EngineArgs.add_cli_args)",
        fix=fix,
    )


def rule_flag_values(ctx: Context, out: list[Finding]) -> None:
    """Unknown flags (warning), valued flags without a value, and values the CLI would reject (errors)."""
    for name, raw in ctx.spec.flags.items():
        if name.startswith("_") or name == "model":
            continue
        base = name[3:] if name.startswith("no-") else name
        if name not in KNOWN_FLAGS and base not in BOOLEAN_FLAGS:
            close = difflib.get_close_matches(name, sorted(KNOWN_FLAGS), n=1)
            out.append(
                Finding(
                    id="unknown-flag",
                    severity="warning",
                    flag=f"--{name}",
                    value=None if raw is True else str(raw),
                    what_happens="if vLLM does not know it either, the CLI exits: unrecognized arguments",
                    why="it is not a vLLM serve flag this lint knows, so none of its checks cover it",
                    source="vLLM serve flags (vllm serve --help=all)",
                    fix=f"did you mean --{close[0]}?"
                    if close
                    else "check the spelling with vllm serve --help=all",
                )
            )
            continue
        if name in BOOLEAN_FLAGS or name.startswith("no-"):
            continue
        if raw is True:
            example = FLAG_EXAMPLES.get(name, "VALUE")
            out.append(
                _value_finding(
                    "flag-missing-value",
                    name,
                    raw,
                    f"the CLI exits: argument --{name}: expected one argument",
                    f"--{name} takes a value and none was given",
                    f"--{name} {example}",
                )
            )
            continue
        kind = int if name in INT_FLAGS else float if name in FLOAT_FLAGS else None
        if kind is None:
            continue
        if name == "max-model-len" and str(raw).strip().lower() in ("auto", "-1"):
            continue  # vLLM: fit the longest context the KV pool allows
        example = FLAG_EXAMPLES.get(name, "1")
        parsed = parse_flag_number(str(raw), kind)
        if isinstance(parsed, str):
            out.append(
                _value_finding(
                    "not-a-number",
                    name,
                    raw,
                    f"the CLI exits: argument --{name}: invalid value {str(raw)!r}",
                    f"--{name} takes a {'whole number' if kind is int else 'number'} and {str(raw)!r} is {parsed}",
                    f"--{name} {example}",
                )
            )
        elif kind is int and parsed < 1 and name not in ("port", "seed"):
            out.append(
                _value_finding(
                    "flag-value-range",
                    name,
                    raw,
                    "vLLM refuses to start",
                    f"--{name} must be >= 1",
                    f"--{name} {example}",
                )
            )


def rule_memory_utilization(ctx: Context, out: list[Finding]) -> None:
    util = _num(ctx, "gpu-memory-utilization", out)
    if util is None:
        return
    flag, value = "--gpu-memory-utilization", f"{util:g}"
    if not 0 < util <= 1:
        out.append(
            Finding(
                id="memory-utilization-range",
                severity="error",
                flag=flag,
                value=value,
                what_happens="vLLM refuses to start",
                why="the flag is a fraction of HBM in (0, 1]",
                source="vLLM CacheConfig.gpu_memory_utilization",
                fix=f"use {safe_memory_utilization_advice()}",
            )
        )
    elif (ceiling := ctx.accel.generation.max_gpu_memory_utilization) is not None and util > ceiling:
        row = ctx.accel.generation
        out.append(
            Finding(
                id=f"memory-utilization-above-{ceiling:g}",
                severity="error",
                flag=flag,
                value=value,
                what_happens="boot fails ~14 min in, after KV init, with RuntimeProgramAllocationFailure loading a "
                f"compiled program ({row.memory_ceiling_failure})",
                why="the KV pool grows to fill the cap, and compiled XLA programs live in the HBM above the cap, "
                f"which shrinks from {row.memory_ceiling_headroom}",
                source=row.memory_ceiling_source,
                fix=f"--gpu-memory-utilization {ceiling:g}",
            )
        )
    elif util > 0.95:
        out.append(
            Finding(
                id="memory-utilization-high",
                # measured on v5e only; maintainer-verified v6e commands run at 0.98 (tpu-inference#2333)
                severity="info",
                flag=flag,
                value=value,
                what_happens="compiled programs may not fit above the cap (late RuntimeProgramAllocationFailure)",
                why="HBM above the cap holds XLA programs; the flag does not govern it",
                source=f"{_SEED} (v5e; not measured on {ctx.gen}); vllm-project/tpu-inference#2333 runs 0.98 on v6e-4",
                fix="if the boot fails late with RuntimeProgramAllocationFailure, lower it to "
                f"{DEFAULT_GPU_MEMORY_UTILIZATION:g}-0.95",
            )
        )


def rule_kv_cache_dtype(ctx: Context, out: list[Finding]) -> None:
    raw = ctx.get("kv-cache-dtype")
    if raw is None or raw is True:
        return  # True: no value given (rule_flag_values)
    value = str(raw)
    flag = "--kv-cache-dtype"
    if value not in KV_DTYPE_CHOICES:
        out.append(
            Finding(
                id="kv-cache-dtype-invalid",
                severity="error",
                flag=flag,
                value=value,
                what_happens=f"the CLI exits at once: argument --kv-cache-dtype: invalid choice: '{value}'",
                why=f"accepted values are {', '.join(KV_DTYPE_CHOICES)} (int8 is not a KV cache dtype)",
                source="vLLM CacheDType (vllm/config/cache.py); seed: int8 rejected by the CLI",
                fix="drop --kv-cache-dtype (auto = model dtype, bf16)",
            )
        )
    elif value in ("fp8_inc", "fp8_ds_mla"):
        out.append(
            Finding(
                id="kv-cache-dtype-unsupported-on-tpu",
                severity="error",
                flag=flag,
                value=value,
                what_happens="the TPU backend cannot allocate this cache type",
                why=f"{value} is for Intel Gaudi / DeepSeek MLA kernels, not the TPU Pallas attention",
                source="vLLM CacheDType documentation",
                fix="drop --kv-cache-dtype",
            )
        )
    elif value.startswith("fp8") and ctx.gen == "v5e":
        out.append(
            Finding(
                id="kv-cache-fp8-on-v5e",
                severity="warning",
                flag=flag,
                value=value,
                what_happens="1.000x KV capacity (no gain) and ~2% slower decode",
                why="v5e has no fp8 in the MXU and stores fp8 KV in word-aligned blocks, so a token costs the same HBM",
                source=_SEED,
                fix="drop --kv-cache-dtype on v5e",
            )
        )
    elif value.startswith("fp8"):
        out.append(
            Finding(
                id="kv-cache-fp8-check-allocation",
                severity="info",
                flag=flag,
                value=value,
                what_happens="the log may say fp8 while the cache is allocated as bf16",
                why="the v6e boot log prints 'Automatically using fp8_e5m2 for FP8 KV cache' yet Init kv-cache shows "
                "regular_attn_dtype=bfloat16 and the token count matches 18,432 B/token (bf16)",
                source="fixtures/vllm-logs/v6e1-e2b-boot-ok.log",
                fix="check regular_attn_dtype in the boot log (diagnose_vllm_boot) before counting on 2x capacity",
            )
        )


def rule_batched_tokens(ctx: Context, out: list[Finding]) -> None:
    tokens = _num(ctx, "max-num-batched-tokens", out, int)
    disabled_chunking = ctx.get("disable-chunked-mm-input") is True
    flag = "--max-num-batched-tokens"
    if tokens is not None and tokens <= 0:
        return  # reported by rule_flag_values
    unset = ctx.get("max-num-batched-tokens") is None
    too_small = unset or (tokens is not None and tokens < GEMMA4_MM_ITEM_TOKENS)
    if ctx.is_gemma4 and disabled_chunking and too_small:
        shown = "default (2048)" if tokens is None else str(tokens)
        out.append(
            Finding(
                id="chunked-mm-floor",
                severity="error",
                flag=flag,
                value=shown,
                what_happens="boot fails: ValueError: Chunked MM input disabled but max_tokens_per_mm_item (2496) is "
                f"larger than max_num_batched_tokens ({2048 if tokens is None else tokens})",
                why="with --disable-chunked-mm-input one whole multimodal item (2496 tokens for Gemma 4) must fit in a batch",
                source=f"vLLM scheduler ValueError; {_SEED}",
                fix="--max-num-batched-tokens 4096",
            )
        )
    # An explicit value under one item (2048, 1024) fails the same way as the default does.
    if ctx.is_gemma4 and not disabled_chunking and too_small:
        out.append(
            Finding(
                id="gemma4-batched-tokens-default",
                severity="warning",
                flag=flag,
                value="default (2048)" if tokens is None else str(tokens),
                what_happens="the boot may fail with 'Chunked MM input disabled but max_tokens_per_mm_item (2496) "
                f"is larger than max_num_batched_tokens ({2048 if tokens is None else tokens})'",
                why="vLLM's CUDA platform forces chunked multimodal input off for Gemma 4 ('Forcing "
                "--disable_chunked_mm_input for models with multimodal-bidirectional attention'); the seed set it on "
                "TPU too, and then one 2496-token item must fit the batch budget",
                source="vllm/platforms/cuda.py check_and_update_config; seed serve command (4096)",
                fix="--max-num-batched-tokens 4096",
            )
        )
    if tokens is not None and tokens & (tokens - 1):
        bucket = 1 << (tokens - 1).bit_length()
        out.append(
            Finding(
                id="batched-tokens-not-power-of-two",
                severity="warning",
                flag=flag,
                value=str(tokens),
                what_happens=f"it compiles as the {bucket} bucket: the memory of {bucket} without its throughput "
                "(2496 compiled as 4096 cost 24.7% throughput)",
                why="the TPU runner pads token counts to power-of-two buckets ('Prepared token paddings: [16, ..., 4096]')",
                source=_SEED,
                fix=f"use {bucket} (or {bucket // 2} if it still fits one multimodal item)",
            )
        )


def rule_block_size(ctx: Context, out: list[Finding]) -> None:
    raw = ctx.get("block-size")
    if raw is None or raw is True:
        return
    pinned = _num(ctx, "block-size", out, int)
    max_len = _num(ctx, "max-model-len", out, int) or 0
    from tpu_devops.planning.sizing import block_size_for

    chosen = block_size_for(max_len) if max_len else None
    small = pinned is not None and chosen is not None and pinned < chosen
    out.append(
        Finding(
            id="block-size-pinned" if small or chosen is None else "block-size-pinned-large",
            severity="warning" if small else "info",
            flag="--block-size",
            value=str(raw),
            what_happens=(
                f"blocks of {pinned} tokens put more than 512 block-table entries per request into SMEM at "
                f"--max-model-len {max_len:,} (tpu-inference would use {chosen}): compile can run out of SMEM"
                if small
                else "the block size is pinned instead of sized by tpu-inference"
                + (f" ({chosen} at --max-model-len {max_len:,})" if chosen else "")
            ),
            why="tpu-inference sizes blocks from max_model_len to keep 512 blocks per request "
            "(16,384 -> 32, 32,768 -> 64; log: 'Increase the page size from 16 to 32 to avoid SMEM OOM')",
            source="tpu-inference PallasAttentionBackend.get_min_page_size; " + _SEED,
            fix="drop --block-size" if small else "fine if a boot proved it; otherwise drop --block-size",
        )
    )


def rule_max_num_seqs(ctx: Context, out: list[Finding]) -> None:
    if ctx.get("max-num-seqs") is not None:
        out.append(
            Finding(
                id="max-num-seqs-set",
                severity="info",
                flag="--max-num-seqs",
                value=str(ctx.get("max-num-seqs")),
                what_happens="changes request padding buckets and the SMEM block-table budget",
                why="the default (256) is what the seed measured; throughput was bound by the KV pool, not by this",
                source=_SEED,
                fix="leave --max-num-seqs at its default unless a benchmark says otherwise",
            )
        )


def rule_tensor_parallel(ctx: Context, out: list[Finding]) -> None:
    tp = _num(ctx, "tensor-parallel-size", out, int)
    if tp is None:
        return
    flag = "--tensor-parallel-size"
    if tp < 1:
        return  # reported by rule_flag_values (must be >= 1)
    if tp > ctx.accel.chips:
        out.append(
            Finding(
                id="tensor-parallel-exceeds-chips",
                severity="error",
                flag=flag,
                value=str(tp),
                what_happens="vLLM fails at start: it cannot place the shards",
                why=f"{ctx.accel.name} has {ctx.accel.chips} chip(s)",
                source="catalog: chips per accelerator type",
                fix=f"--tensor-parallel-size {ctx.accel.chips}",
            )
        )
    elif tp > 1 and ctx.kv_heads is not None and tp > ctx.kv_heads:
        out.append(
            Finding(
                id="tensor-parallel-replicates-kv",
                severity="warning",
                flag=flag,
                value=str(tp),
                what_happens=f"each chip keeps a full copy of the KV cache: the KV cost per token is {tp // ctx.kv_heads}x, not 1/{tp}",
                why=f"the model has {ctx.kv_heads} KV head(s), which cannot be split over {tp} chips",
                source="DESIGN §3 (KV per token)",
                fix="run TP=1 replicas per chip instead, or a model with more KV heads",
            )
        )


def _one_chip_weights_gib(model: str | None, generation: str) -> float | None:
    """HBM of the model's weights when known without the network (bundled / measured), else None."""
    if not model:
        return None
    from tpu_devops.planning import sizing

    try:
        _, _, local_dir = (
            sizing.load_model_config(model) if sizing.bundled_config_path(model) else (None, None, None)
        )
        return sizing.resolve_weights(model, local_dir, None, generation)[0]
    except InputError:
        return None


def rule_idle_chips(ctx: Context, out: list[Finding]) -> None:
    """Chips paid for and idle: engines x TP below the chips of the accelerator type."""
    tp = _num(ctx, "tensor-parallel-size", out, int) or 1
    if tp < 1 or tp > ctx.accel.chips:
        return  # reported by rule_flag_values / rule_tensor_parallel
    used = tp * ctx.engines
    if ctx.accel.chips <= 1 or used >= ctx.accel.chips:
        return
    idle = ctx.accel.chips - used
    gen = ctx.accel.generation
    weights = _one_chip_weights_gib(ctx.spec.model, gen.name)
    util = gen.max_gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    small = weights is not None and weights < gen.hbm_gib_visible * util
    engines = f"{ctx.engines} engine(s)" if ctx.engines > 1 else "one engine"
    fix = (
        f"the model fits one chip ({weights:.2f} GiB of weights): serve {ctx.accel.chips} one-chip engines, one "
        "per chip behind a load balancer (plan_scale_out sizes and prices it), or use a smaller accelerator type"
        if small
        else f"serve {ctx.accel.chips // tp} engine(s) of --tensor-parallel-size {tp}, raise the tensor-parallel "
        f"size to {ctx.accel.chips}, or use a smaller accelerator type"
    )
    out.append(
        Finding(
            id="chips-idle",
            severity="warning",
            flag="--tensor-parallel-size",
            value=str(tp),
            what_happens=f"{idle} of the {ctx.accel.chips} chips of {ctx.accel.name} are paid for and idle: "
            f"{engines} x --tensor-parallel-size {tp} uses {used}",
            why="a TPU slice bills every chip whether an engine uses it or not",
            source="catalog: chips per accelerator type; pricing per chip-hour (DESIGN §3)",
            fix=fix,
        )
    )


def rule_tool_calling(ctx: Context, out: list[Finding]) -> None:
    auto = ctx.get("enable-auto-tool-choice") is True
    parser = ctx.get("tool-call-parser")
    if parser is True:
        parser = None  # no value given (rule_flag_values)
    if auto and not parser:
        out.append(
            Finding(
                id="tool-parser-missing",
                severity="error",
                flag="--tool-call-parser",
                value=None,
                what_happens="vLLM refuses to start: --enable-auto-tool-choice needs --tool-call-parser",
                why="auto tool choice parses the model's tool-call syntax with a named parser",
                source="vLLM serve argument validation",
                fix="--tool-call-parser gemma4" if ctx.is_gemma4 else "add --tool-call-parser",
            )
        )
    if ctx.is_gemma4 and not auto:
        out.append(
            Finding(
                id="tool-calling-disabled",
                severity="warning",
                flag="--enable-auto-tool-choice",
                value=None,
                what_happens='requests with tools fail: 400 "auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set",
                why="tool calling is off unless both flags are given",
                source="vLLM OpenAI server error text; DESIGN §3",
                fix="--enable-auto-tool-choice --tool-call-parser gemma4",
            )
        )
    if ctx.is_gemma4 and parser and parser != "gemma4":
        out.append(
            Finding(
                id="tool-parser-mismatch",
                severity="warning",
                flag="--tool-call-parser",
                value=str(parser),
                what_happens="tool calls come back as plain text",
                why="Gemma 4 emits its own tool-call syntax",
                source="seed serve command",
                fix="--tool-call-parser gemma4",
            )
        )
    if ctx.is_gemma4 and not ctx.get("reasoning-parser"):
        out.append(
            Finding(
                id="reasoning-parser-missing",
                severity="info",
                flag="--reasoning-parser",
                value=None,
                what_happens="thinking text stays inside the answer content",
                why="the reasoning parser splits Gemma 4's thinking into reasoning_content",
                source="seed serve command",
                fix="--reasoning-parser gemma4",
            )
        )


def rule_limit_mm(ctx: Context, out: list[Finding]) -> None:
    raw = ctx.get("limit-mm-per-prompt")
    if raw is None or raw is True or isinstance(raw, dict):
        return
    try:
        value = json.loads(str(raw))
        ok = isinstance(value, dict)
    except json.JSONDecodeError:
        ok = False
    if not ok:
        out.append(
            Finding(
                id="limit-mm-not-json",
                severity="error",
                flag="--limit-mm-per-prompt",
                value=str(raw),
                what_happens="the CLI rejects the value",
                why="it takes a JSON object of modality -> count",
                source="vLLM MultiModalConfig",
                fix="""--limit-mm-per-prompt '{"image":4,"audio":1}' (quote it for the shell)""",
            )
        )


def _additional_config(ctx: Context, out: list[Finding]) -> dict[str, Any] | None:
    """``--additional-config`` as a dict (None when unset); a value that is not a JSON object is an error."""
    raw = ctx.get("additional-config")
    if raw is None or raw is True:
        return None
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(str(raw))
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        out.append(
            Finding(
                id="additional-config-not-json",
                severity="error",
                flag="--additional-config",
                value=str(raw)[:120],
                what_happens="the CLI rejects the value",
                why="--additional-config takes a JSON object",
                source="vLLM EngineArgs (--additional-config is parsed as JSON)",
                fix="""quote a JSON object for the shell, e.g. --additional-config '{"quantization": {...}}'""",
            )
        )
        return None
    return value


def rule_quantization(ctx: Context, out: list[Finding]) -> None:
    """Only the weight-quantization shape known to fail: qwix int8 weights on the abstract model with Gemma 4.

    Other qwix configurations are not flagged: a maintainer-verified Gemma 4 31B command on v6e-4 quantizes
    weights and activations to float8 with qwix (vllm-project/tpu-inference#2333; field report B11)."""
    extra = _additional_config(ctx, out)
    qwix = ((extra or {}).get("quantization") or {}).get("qwix") if isinstance(extra, dict) else None
    if not isinstance(qwix, dict):
        return
    rules = rules_ if isinstance(rules_ := qwix.get("rules"), list) else []
    int8 = any(isinstance(r, dict) and str(r.get("weight_qtype", "")).lower() == "int8" for r in rules)
    if ctx.is_gemma4 and int8 and qwix.get("use_abstract_model") is True:
        out.append(
            Finding(
                id="qwix-int8-abstract-gemma4",
                severity="warning",
                flag="--additional-config",
                value=json.dumps(qwix, separators=(",", ":"))[:120],
                what_happens="Gemma 4 fails to load: ValueError: There is no module or parameter named "
                "'model.language_model.layers.0.mlp.down_proj.weight'",
                why="on the abstract-model path qwix int8 weight quantization does not map Gemma 4's weights "
                "(vLLM 0.26 / tpu-inference of the seed runs)",
                source="fixtures/vllm-logs/v5e1-e2b-qwix-int8-abstract-fail.log",
                fix="serve bf16 weights (drop the quantization config), or quantize without use_abstract_model",
            )
        )


def rule_completions_health(ctx: Context, out: list[Finding]) -> None:
    path = ctx.health_check_path or ""
    mentioned = "/v1/completions" in ctx.spec.raw or path.rstrip("/").endswith("/v1/completions")
    model = ctx.spec.model or ""
    if mentioned and model.lower().endswith("-it"):
        out.append(
            Finding(
                id="completions-health-check",
                severity="warning",
                flag=None,
                value=path or "/v1/completions",
                what_happens="the check sees empty text and reports a healthy server as broken (or a broken one as fine)",
                why="/v1/completions returns empty text on -it models; they answer through the chat template",
                source=_SEED,
                fix="check /health, then POST /v1/chat/completions with max_tokens 8",
            )
        )


def rule_image(ctx: Context, out: list[Finding]) -> None:
    image = ctx.spec.image
    if not image:
        return
    last = image.rsplit("/", 1)[-1]
    tag = None if "@sha256:" in image else (last.split(":", 1)[1] if ":" in last else "latest")
    if tag is not None and (tag in ("latest", "nightly") or tag.startswith("nightly")):
        out.append(
            Finding(
                id="image-unpinned",
                severity="warning",
                flag=None,
                value=image,
                what_happens="the next pull can bring a different vLLM and break the build",
                why=f"'{tag}' moves; a nightly once broke the seed's builds",
                source=_SEED,
                fix="pin a tested tag or digest: vllm/vllm-tpu@sha256:...",
            )
        )


def rule_image_version(ctx: Context, out: list[Finding]) -> None:
    """The image's vLLM release against the first one that serves the model (`tpu_devops.planning.images`).

    Moving tags are `rule_image`'s; this rule speaks only when the version is known to be too old, or
    cannot be read from the reference (a digest).
    """
    from tpu_devops.planning.images import check_image

    if not ctx.spec.image:
        return
    check = check_image(ctx.spec.image, ctx.spec.model)
    if check.status not in ("too_old", "version_unknown"):
        return
    too_old = check.status == "too_old"
    out.append(
        Finding(
            id="image-too-old-for-model" if too_old else "image-version-unknown",
            severity="error" if too_old else "warning",
            flag=None,
            value=ctx.spec.image,
            what_happens=(
                "the pull succeeds and the server then fails to load the model"
                if too_old
                else f"cannot tell whether the image serves {check.architecture}"
            ),
            why=check.message,
            source=check.source or "",
            fix=check.fix or "",
        )
    )


# vLLM envs.py: VLLM_XLA_CACHE_PATH defaults to <XDG_CACHE_HOME or ~/.cache>/vllm/xla_cache; the vllm-tpu
# image runs as root. tpu-inference's CompilationManager hands it to jax_compilation_cache_dir unless
# VLLM_DISABLE_COMPILE_CACHE is set; an empty value leaves JAX without a cache (vllm PR #15567: "disable it
# by export VLLM_XLA_CACHE_PATH=").
DEFAULT_XLA_CACHE = "/root/.cache/vllm/xla_cache"
_CACHE_SOURCE = (
    "vLLM envs.py VLLM_XLA_CACHE_PATH (default ~/.cache/vllm/xla_cache); vllm-project/vllm PR #15567 (an empty "
    "VLLM_XLA_CACHE_PATH disables the cache); tpu-inference runner/compilation_manager.py "
    "(jax_compilation_cache_dir = VLLM_XLA_CACHE_PATH unless VLLM_DISABLE_COMPILE_CACHE); " + _SEED
)
_COLD = "every boot compiles cold: 857 s against 497 s warm on v5e-1 (80% of a cold start is XLA compile)"


def xla_cache_path(env: Mapping[str, str | None]) -> str | None:
    """The compile cache directory vLLM uses inside the container: VLLM_XLA_CACHE_PATH ('' = off), else
    <XDG_CACHE_HOME or /root/.cache>/vllm/xla_cache; None when the value comes from the host (``-e VAR``)."""
    if "VLLM_XLA_CACHE_PATH" in env:
        return env["VLLM_XLA_CACHE_PATH"]
    root = env.get("XDG_CACHE_HOME")
    return f"{root.rstrip('/')}/vllm/xla_cache" if root else DEFAULT_XLA_CACHE


def _under(path: str, mount: str) -> bool:
    mount = mount.rstrip("/") or "/"
    return path == mount or path.startswith(mount if mount.endswith("/") else mount + "/")


def _env_flag(ctx: Context, name: str) -> str:
    return ctx.env_origin.get(name, f"-e {name}")


def rule_version_traps(ctx: Context, out: list[Finding]) -> None:
    """The image's vLLM release in a known bad range for the model (`tpu_devops.planning.version_traps`)."""
    from tpu_devops.planning.images import image_traps

    if not ctx.spec.image:
        return
    for trap in image_traps(ctx.spec.image, ctx.spec.model):
        out.append(
            Finding(
                id="image-version-trap",
                # The transformers an image ships is not in its tag: a trap that needs one is a warning.
                severity="warning" if trap.transformers else "error",
                flag=None,
                value=ctx.spec.image,
                what_happens=f"the server fails at boot reading the model config: {trap.symptom}",
                why=f"vLLM {trap.vllm}"
                + (f" with transformers {trap.transformers}" if trap.transformers else "")
                + f" cannot serve {trap.family}",
                source=trap.source,
                fix=trap.fix,
            )
        )


def rule_compile_cache(ctx: Context, out: list[Finding]) -> None:
    """The JAX compile cache as the container will see it: switched off (an empty VLLM_XLA_CACHE_PATH,
    VLLM_DISABLE_COMPILE_CACHE), on Cloud Storage (no hits), or outside every mount (lost with the
    container)."""
    env = ctx.spec.env
    if not ctx.spec.in_container and not env:
        return
    disabled = str(env.get("VLLM_DISABLE_COMPILE_CACHE") or "").strip().lower() in ("1", "true", "yes")
    path = xla_cache_path(env)
    mounted = any(_under(path, target) for _, target in ctx.spec.mounts) if path else False
    if disabled:
        out.append(
            Finding(
                id="compile-cache-disabled",
                severity="warning",
                flag=_env_flag(ctx, "VLLM_DISABLE_COMPILE_CACHE"),
                value=str(env.get("VLLM_DISABLE_COMPILE_CACHE")),
                what_happens=_COLD,
                why="VLLM_DISABLE_COMPILE_CACHE makes tpu-inference skip the JAX compile cache altogether"
                + ("; the cache mount is then useless" if mounted else ""),
                source=_CACHE_SOURCE,
                fix="drop VLLM_DISABLE_COMPILE_CACHE (a development switch)",
            )
        )
    elif path == "":
        out.append(
            Finding(
                id="xla-cache-path-empty",
                severity="warning",
                flag=_env_flag(ctx, "VLLM_XLA_CACHE_PATH"),
                value="(empty)",
                what_happens=_COLD,
                why="an empty VLLM_XLA_CACHE_PATH leaves JAX without a compile cache directory: nothing is written "
                "or read" + (", so the ~/.cache/vllm mount stays empty" if ctx.spec.mounts else ""),
                source=_CACHE_SOURCE,
                fix="drop VLLM_XLA_CACHE_PATH (the default /root/.cache/vllm/xla_cache lies in the "
                "-v /root/.cache/vllm mount), or set it to a mounted directory",
            )
        )
    caches = {k: env.get(k) for k in ("VLLM_XLA_CACHE_PATH", "JAX_COMPILATION_CACHE_DIR")}
    remote = {k: v for k, v in caches.items() if v and v.startswith(("gs://", "gcs://"))}
    for name, value in remote.items():
        out.append(
            Finding(
                id="xla-cache-on-cloud-storage",
                severity="warning",
                flag=_env_flag(ctx, name),
                value=value,
                what_happens="boots stay cold: a JAX compile cache on a gs:// path is not hit across restarts",
                why="reported with vllm-tpu on TPU: a local cache directory cut the second boot from 357 s to 154 s, "
                "the same cache on gs:// gave no speed-up (marin-community/marin#2318)",
                source="marin-community/marin#2318; " + _CACHE_SOURCE,
                fix="keep the cache on local disk (the default /root/.cache/vllm/xla_cache, mounted from the host) "
                "and copy it to or from the bucket around the boot (the startup script's warm boot does so)",
            )
        )
    if remote or disabled or path in ("", None) or not ctx.spec.in_container or mounted:
        return
    out.append(
        Finding(
            id="compile-cache-not-mounted",
            severity="warning",
            flag=None,
            value=path,
            what_happens=_COLD,
            why=f"the JAX compile cache ({path}) is written inside the container and lost with it: no -v mount "
            "covers it",
            source=_CACHE_SOURCE,
            fix="-v /root/.cache/vllm:/root/.cache/vllm on docker run"
            if path == DEFAULT_XLA_CACHE
            else f"mount a host directory at {path} (-v /var/cache/xla:{path})",
        )
    )


def rule_quantization_method(ctx: Context, out: list[Finding]) -> None:
    """``--quantization`` against the TPU platform's list (`tpu_devops.planning.quantization`), and a
    checkpoint whose own config (or name) says it is quantized in a method TPU does not run."""
    from tpu_devops.planning.quantization import QUANTIZATION_SOURCE, check_tpu_quantization, supported_text

    raw = ctx.get("quantization")
    fix = (
        "serve the bf16 checkpoint without --quantization (e.g. google/gemma-4-E2B-it), or a checkpoint in a "
        f"method the TPU platform lists: {supported_text()}"
    )
    if raw is not None and raw is not True:
        check = check_tpu_quantization(str(raw))
        if check.status == "unsupported":
            out.append(
                Finding(
                    id="quantization-unsupported-on-tpu",
                    severity="error",
                    flag="--quantization",
                    value=str(raw),
                    what_happens=f"vLLM refuses the model config at boot: {check.method} quantization is currently "
                    "not supported in tpu",
                    why=f"{check.method} is not on the TPU platform's supported_quantization list ({check.note}; "
                    "GPTQ, bitsandbytes, GGUF and Marlin are GPU kernels)",
                    source=QUANTIZATION_SOURCE,
                    fix=fix,
                )
            )
        elif check.status == "earlier_only":
            out.append(
                Finding(
                    id="quantization-name-changed",
                    severity="warning",
                    flag="--quantization",
                    value=str(raw),
                    what_happens="a current vllm-tpu image refuses it; an older one may boot",
                    why=f"tpu-inference accepted '{check.method}' once ({check.note})",
                    source=QUANTIZATION_SOURCE,
                    fix=f"use the current name (supported: {supported_text()}) with a current image",
                )
            )
        return
    method = _checkpoint_quantization(ctx.spec.model)
    if method is None:
        return
    name, how = method
    check = check_tpu_quantization(name)
    if check.status == "supported":
        return
    out.append(
        Finding(
            id="checkpoint-quantization-unsupported-on-tpu",
            severity="error" if how == "config.json" else "warning",
            flag=None,
            value=ctx.spec.model,
            what_happens=f"vLLM reads the quantization from the checkpoint and refuses it at boot: {check.method} "
            "quantization is currently not supported in tpu",
            why=f"the checkpoint is quantized with {check.method} ({how}), which the TPU platform does not run",
            source=QUANTIZATION_SOURCE,
            fix=fix.replace("without --quantization", "instead of the quantized checkpoint"),
        )
    )


# Checkpoint names that say how they were quantized (Hub naming, e.g. "...-GPTQ-Int4", "...-bnb-4bit").
_QUANT_IN_NAME = re.compile(r"(?i)(?:^|[-_/.])(gptq|bnb|bitsandbytes|gguf|exl2|hqq|marlin)(?=$|[-_/.])")


def _checkpoint_quantization(model: str | None) -> tuple[str, str] | None:
    """(method, how it is known) of a pre-quantized checkpoint: its local or bundled config.json's
    ``quantization_config.quant_method``, else its name; None when neither says."""
    from tpu_devops.planning.images import local_model_config

    cfg = local_model_config(model)
    q = (cfg or {}).get("quantization_config") or {}
    if isinstance(q, dict) and q.get("quant_method"):
        return str(q["quant_method"]).lower(), "config.json"
    m = _QUANT_IN_NAME.search(model or "")
    if m:
        name = m.group(1).lower()
        return ("bitsandbytes" if name == "bnb" else name), "its name"
    return None


# Parsers that belong to one model family: vLLM's gemma4 reasoning parser looks for Gemma 4's thinking
# tokens and refuses to start without them (vllm/reasoning/basic_parsers.py; vllm-project/recipes#515);
# the gemma4 tool parser reads Gemma 4's <|tool_call>call:...<tool_call|> syntax
# (vllm/tool_parsers/gemma4_tool_parser.py), which no other family emits.
PARSER_FAMILIES: dict[str, tuple[str, re.Pattern[str]]] = {
    "gemma4": ("Gemma 4", re.compile(r"gemma-?4", re.I)),
}


def rule_parser_family(ctx: Context, out: list[Finding]) -> None:
    model = ctx.spec.model
    if not model or _local_path(model):
        return  # a local path does not say its family
    for flag, severity, what in (
        (
            "reasoning-parser",
            "error",
            "vLLM refuses to start: {parser}ReasoningParser could not locate think start/end tokens in the tokenizer",
        ),
        (
            "tool-call-parser",
            "warning",
            "tool calls come back as plain text: {family} tool-call syntax is never seen",
        ),
    ):
        parser = ctx.get(flag)
        if not parser or parser is True:
            continue
        family = PARSER_FAMILIES.get(str(parser).lower())
        if family is None or family[1].search(model):
            continue
        name = str(parser)
        out.append(
            Finding(
                id="parser-family-mismatch",
                severity=severity,  # type: ignore[arg-type]
                flag=f"--{flag}",
                value=name,
                what_happens=what.format(parser=name.capitalize(), family=family[0]),
                why=f"--{flag} {name} is {family[0]}'s parser and {model} is not a {family[0]} model",
                source="vllm/reasoning/basic_parsers.py; vllm/tool_parsers/gemma4_tool_parser.py; "
                "vllm-project/recipes#515 (field report C16)",
                fix=f"drop --{flag} {name} for {model} (use its own family's parser, if any), or serve a "
                f"{family[0]} -it model (e.g. google/gemma-4-E2B-it)",
            )
        )


def _local_path(model: str) -> bool:
    return model.startswith((".", "/", "~"))


VLLM_DEFAULT_MEMORY_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default (vllm/engine/arg_utils.py)


def rule_model_fit(ctx: Context, out: list[Finding]) -> None:
    """The weights plus one request's KV cache against the HBM cap (`tpu_devops.planning.fit`): vLLM
    refuses to start when they do not fit, after the pull and the download. Judged only when the model's
    config is on this machine."""
    from tpu_devops.errors import TpuDevopsError
    from tpu_devops.planning.fit import check_fit

    tp = _num(ctx, "tensor-parallel-size", out, int) or 1
    util = _num(ctx, "gpu-memory-utilization", out, float) or VLLM_DEFAULT_MEMORY_UTILIZATION
    if not ctx.spec.model or not 1 <= tp <= ctx.accel.chips or not 0 < util < 1:
        return  # no model, or flags rule_flag_values / rule_tensor_parallel report
    try:
        verdict = check_fit(
            ctx.spec.model, ctx.accel.name, tensor_parallel_size=tp, gpu_memory_utilization=util,
            max_model_len=_num(ctx, "max-model-len", out, int),
        )  # fmt: skip
    except TpuDevopsError:
        return
    if verdict.fits is False:
        out.append(
            Finding(
                id="model-does-not-fit", severity="error", flag="--model", value=ctx.spec.model,
                what_happens=verdict.message(),
                why="vLLM needs the KV cache of one max_model_len request beside the weights, under the cap",
                source="vLLM kv_cache_utils.check_enough_kv_cache_memory; sizing from config.json (plan_capacity)",
                fix=verdict.fix().replace("ACCELERATOR_TYPE=", "accelerator type ").replace("MAX_MODEL_LEN=", "--max-model-len "),
            )
        )  # fmt: skip


def rule_chat_checkpoint(ctx: Context, out: list[Finding]) -> None:
    """A base (not instruction-tuned) checkpoint served for chat and tool calls (`planning.checkpoint`)."""
    from tpu_devops.planning.checkpoint import chat_checkpoint

    tools = ctx.get("enable-auto-tool-choice") is True or bool(ctx.get("tool-call-parser"))
    warning = chat_checkpoint(ctx.spec.model).warning(
        "tool calling (--enable-auto-tool-choice) and chat completions" if tools else "chat completions"
    )
    if warning:
        out.append(
            Finding(
                id="base-model-for-chat", severity="warning", flag="--model", value=ctx.spec.model,
                what_happens=warning.split(": ", 1)[1],
                why="only the instruction-tuned checkpoint is trained on the chat template and the tool-call syntax",
                source="the publishers' model naming (Gemma -it, Llama / Mistral / Qwen2 -Instruct, Qwen3 -Base)",
                fix=f"serve {chat_checkpoint(ctx.spec.model).suggested or 'the instruction-tuned checkpoint'}",
            )
        )  # fmt: skip


RULES: list[Callable[[Context, list[Finding]], None]] = [
    rule_flag_values,
    rule_memory_utilization,
    rule_kv_cache_dtype,
    rule_batched_tokens,
    rule_block_size,
    rule_max_num_seqs,
    rule_tensor_parallel,
    rule_idle_chips,
    rule_tool_calling,
    rule_limit_mm,
    rule_quantization,
    rule_completions_health,
    rule_image,
    rule_image_version,
    rule_version_traps,
    rule_compile_cache,
    rule_quantization_method,
    rule_parser_family,
    rule_model_fit,
    rule_chat_checkpoint,
]


def _kv_heads(model: str | None) -> int | None:
    """KV heads from a bundled or local config (no network), else None."""
    if not model:
        return None
    from tpu_devops.planning import sizing

    try:
        if (
            "/" in model
            and not model.startswith((".", "/", "~"))
            and sizing.bundled_config_path(model) is None
        ):
            return None
        cfg, _, _ = sizing.load_model_config(model)
        return sizing.geometry_from_config(cfg, model=model).kv_heads
    except InputError:
        return None


def lint_vllm_flags(
    command: str | None = None,
    flags: Mapping[str, Any] | None = None,
    accelerator_type: str = "v5litepod-1",
    model: str | None = None,
    image: str | None = None,
    health_check_path: str | None = None,
    engines: int = 1,
    env: Mapping[str, str] | None = None,
    read_env_file: Callable[[str], str] | None = None,
) -> LintResult:
    """Check a ``vllm serve`` command line (or a flag mapping) for the known vLLM-on-TPU traps.

    ``engines`` is how many engines run this command on the host (one per chip when scaling out);
    engines x tensor-parallel size below the chips of the accelerator type leaves chips idle.

    The container's environment is read as Docker builds it: ``--env-file`` files first (each read with
    ``read_env_file(path) -> text`` when given, else named in a notice as not read), then ``-e`` /
    ``--env``, then ``env`` (variables given by the caller, e.g. the env file's contents). Values of
    variables named like secrets (token, key, secret, password) are never shown.

    Raises:
        InputError: neither or both of command/flags given; unparsable command; ``env`` not a mapping of
        names to strings.
        ConfigError: unknown accelerator type.
    """
    if (command is None or not command.strip()) == (flags is None):
        raise InputError(
            "give exactly one of command or flags",
            field="command" if flags is None else "flags",
            value=None,
            fix='pass command="vllm serve google/gemma-4-E2B-it --max-model-len 16384 ..." or flags={"max_model_len": 16384}',
        )
    accel = resolve_accelerator_type(accelerator_type)
    if isinstance(engines, bool) or not 1 <= engines <= accel.chips:
        raise InputError(
            f"{accel.name} has {accel.chips} chip(s): at most one engine per chip",
            field="engines",
            value=engines,
            fix=f"use 1..{accel.chips} engines",
        )
    spec = parse_serve_command(command) if command else spec_from_mapping(flags or {}, model, image)
    if model:
        spec.model = model
    if image:
        spec.image = image
    notices = [accel.notice] if accel.notice else []
    origin = _merge_env(spec, env, read_env_file, notices)
    ctx = Context(
        spec=spec,
        accel=accel,
        kv_heads=_kv_heads(spec.model),
        health_check_path=health_check_path,
        engines=engines,
        env_origin=origin,
    )
    findings: list[Finding] = []
    for rule in RULES:
        rule(ctx, findings)
    order = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: order[f.severity])
    return LintResult(
        accelerator_type=accel.name,
        model=spec.model,
        image=spec.image,
        flags={k: v for k, v in spec.flags.items() if not k.startswith("_")},
        errors=sum(f.severity == "error" for f in findings),
        warnings=sum(f.severity == "warning" for f in findings),
        findings=findings,
        notices=notices,
        env={k: _shown(k, v) for k, v in spec.env.items()},
    )


_SECRET_NAME = re.compile(r"(?i)(?:^|_)(?:key|token|secret|password|passwd|credentials?)(?:$|_)")


def _shown(name: str, value: str | None) -> str:
    """A variable's value as the result shows it: secrets never, a host pass-through as such."""
    if value is None:
        return "(from the host environment)"
    if _SECRET_NAME.search(name):
        return "(set)" if value else "(empty)"
    return value


def _merge_env(
    spec: ServeSpec,
    env: Mapping[str, str] | None,
    read_env_file: Callable[[str], str] | None,
    notices: list[str],
) -> dict[str, str]:
    """``spec.env`` as the container gets it (env files, then -e, then ``env``); returns where each
    variable was set. Unreadable env files are named in ``notices``."""
    if env is not None and (
        not isinstance(env, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    ):
        raise InputError(
            "env must map variable names to string values",
            field="env",
            value=str(env)[:200],
            fix='pass e.g. {"VLLM_XLA_CACHE_PATH": "/root/.cache/vllm/xla_cache"}',
        )
    merged: dict[str, str | None] = {}
    origin: dict[str, str] = {}
    for path in spec.env_files:
        if read_env_file is None:
            notices.append(
                f"--env-file {path} was not read (lint sees no file): its variables are not checked; pass them as env"
            )
            continue
        try:
            text = read_env_file(path)
        except (TpuDevopsError, OSError, UnicodeDecodeError) as exc:
            notices.append(
                f"--env-file {path} was not read ({getattr(exc, 'message', exc)}): its variables are not checked"
            )
            continue
        for name, value in parse_env_file(text).items():
            merged[name], origin[name] = value, f"--env-file {path}: {name}"
    for name, value in spec.env.items():
        merged[name], origin[name] = value, f"-e {name}"
    for name, value in (env or {}).items():
        merged[name], origin[name] = value, f"env {name}"
    spec.env = merged
    return origin


MAX_ENV_FILE_BYTES = 1 << 20


def _env_file_reader(settings: Any) -> Callable[[str], str]:
    """Reads an ``--env-file`` named in a command from the directories tools may read
    (`tpu_devops.host.files`), at most 1 MiB; raises InputError otherwise."""
    from tpu_devops.host import files

    def read(path: str) -> str:
        real = files.readable_file(settings, path, field="--env-file", max_bytes=MAX_ENV_FILE_BYTES)
        return files.read_text(real, field="--env-file", value=path, max_bytes=MAX_ENV_FILE_BYTES)

    return read


def _vm_env_file(path: str) -> str:
    """The configured deployment's env file exists only on the TPU VM (the startup script writes it)."""
    raise InputError(
        "written on the TPU VM at boot by the startup script; it holds the HF token and the API key only",
        field="--env-file",
        value=path,
        fix="nothing to do: it sets no cache or serving variable",
    )


def lint_with_defaults(settings: Any, **args: Any) -> LintResult:
    """`lint_vllm_flags` with ``accelerator_type`` defaulting to ACCELERATOR_TYPE; with neither ``command``
    nor ``flags`` it lints the configured deployment: the ``docker run ... vllm serve`` line the startup
    script runs (`tpu_devops.planning.startup.docker_run_command`, built by ``vllm_serve_flags``), with the engines
    per host the rig runs.

    Raises:
        InputError / ConfigError: as `lint_vllm_flags`; a configuration error of the deployment itself.
    """
    if not args.get("accelerator_type"):
        args["accelerator_type"] = settings.accelerator_type
    configured = not (args.get("command") or "").strip() and args.get("flags") is None
    args.setdefault("read_env_file", _vm_env_file if configured else _env_file_reader(settings))
    if configured:
        from tpu_devops.planning.multiengine import engines_per_host
        from tpu_devops.planning.startup import docker_run_command, vllm_serve_argv

        args["command"] = docker_run_command(settings)
        if args.get("engines") in (None, 1):
            args["engines"] = engines_per_host(settings)
    result = lint_vllm_flags(**args)
    if configured:
        result.notices.insert(
            0,
            f"no command or flags given: linted the configured deployment (tpu.env) as the startup script runs it: "
            f"{settings.vllm_image} {shlex.join(vllm_serve_argv(settings))}",
        )
    mixup = machine_type_mixup(str(args["accelerator_type"]), settings.accelerator_type)
    if mixup:
        result.notices.append(mixup)
    return result


def lint_notes(settings: Settings) -> list[str]:
    """`lint.lint_vllm_flags` errors and warnings for the flags these settings render (e.g. a
    ``--gpu-memory-utilization 0.95`` override on v5e), one note each; none for a clean command."""
    from tpu_devops.planning.multiengine import engines_in_slice
    from tpu_devops.planning.startup import vllm_serve_argv

    result = lint_vllm_flags(
        command=shlex.join(vllm_serve_argv(settings)),
        accelerator_type=settings.accelerator_type,
        image=settings.vllm_image,
        engines=engines_in_slice(settings),
    )
    return [
        f"LINT {f.severity.upper()} {f.flag or ''} {f.value or ''}: {f.what_happens}. Fix: {f.fix}".replace(
            "  ", " "
        )
        for f in result.findings
        if f.severity in ("error", "warning") and f.id != "image-unpinned"  # the image note says it already
    ]
