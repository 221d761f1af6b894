"""The one rule table for logs: every known failure, symptom, wrapper and harmless line, as data.

`diagnose_vllm_boot` (`logs.boot`) and `summarize_logs` / `analyze_cloud_logging` (`logs.evidence`)
read this table through `logs.signatures`; nothing else holds log rules, so the tools cannot disagree
on what a line means.

A row (`Signature`):

- ``patterns``: wording variants of the same failure, matched by meaning (older and newer vLLM, XLA,
  libtpu, huggingface_hub, Docker and the guest agent word the same fault differently). Each is searched
  within one line. Named groups (``(?P<needed>...)``) are the numbers read out of the line.
- ``anchors``: literal substrings; every line a pattern matches contains one. They let a whole log be
  scanned with ``str.find`` (C speed) before any regex runs.
- ``kind``: ``failure`` (a root cause), ``symptom`` (a consequence that names no cause: a script's exit
  status), ``wrapper`` ("See root cause above"), ``warning``, ``info``, ``noise`` (known harmless,
  never a root cause whatever its severity).
- ``scope``: ``boot`` (the server does not start), ``serving`` (the server started; requests fail),
  ``cloud`` (the VM or the request around it), ``autoscaling`` (the scaling around a server that
  serves: an HPA that cannot read its metric stops neither the boot nor a request).
- ``weight``: ranks root causes: failures 60-100 by specificity, the unrecognised-failure fallback
  30-45 (`logs.signatures.FALLBACK`), symptoms 25, warnings 20, info 0, wrappers -60, noise -100.
- ``cause`` / ``fix``: the generic reading; `logs.signatures.explain` conditions them on the evidence
  (the numbers read out, the logged arguments).
- ``source``: where the wording and the fix come from.

``MILESTONES`` are the lines a successful boot passes; an error followed by a later milestone did not
stop the boot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tpu_devops.catalog import GENERATIONS, safe_memory_utilization_advice

Kind = Literal["failure", "symptom", "wrapper", "warning", "info", "noise"]
Scope = Literal["boot", "serving", "cloud", "autoscaling"]

_SIZE = r"[\d.]+\s?[KMGT]?i?B?"


@dataclass(frozen=True)
class Signature:
    """One rule of the table (see the module docstring for the fields)."""

    id: str
    kind: Kind
    scope: Scope
    category: str
    weight: int
    patterns: tuple[re.Pattern[str], ...]
    anchors: tuple[str, ...]
    title: str
    cause: str
    fix: str
    source: str

    def search(self, line: str) -> re.Match[str] | None:
        """The first wording variant found in ``line`` (one line, no newline), or None."""
        if not any(a in line for a in self.anchors):
            return None
        for pattern in self.patterns:
            m = pattern.search(line)
            if m:
                return m
        return None

    @property
    def severity(self) -> Literal["error", "warning", "info", "noise"]:
        """The boot-diagnosis severity of a finding of this rule."""
        kind = self.kind
        if kind == "warning" or kind == "info" or kind == "noise":
            return kind
        return "error"  # failure, symptom, wrapper


_WEIGHT = {"symptom": 25, "warning": 20, "info": 0, "wrapper": -60, "noise": -100}


def _rule(
    id: str,
    kind: Kind,
    scope: Scope,
    category: str,
    patterns: tuple[str, ...],
    anchors: tuple[str, ...],
    title: str,
    cause: str,
    fix: str,
    source: str,
    weight: int | None = None,
    flags: int = 0,
) -> Signature:
    if weight is None:
        weight = _WEIGHT[kind]
    return Signature(
        id=id,
        kind=kind,
        scope=scope,
        category=category,
        weight=weight,
        patterns=tuple(re.compile(p, flags) for p in patterns),
        anchors=anchors,
        title=title,
        cause=cause,
        fix=fix,
        source=source,
    )


# The generation whose memory ceiling and GKE labels the fixes quote: the seed's (every fixture is v5e).
_V5E = GENERATIONS["v5e"]
_FIX_UTIL = (
    f"--gpu-memory-utilization {_V5E.max_gpu_memory_utilization:g} "
    "(v5e: leave ~1.26 GiB above the cap for compiled programs)"
)

SIGNATURES: tuple[Signature, ...] = (
    # ---- boot failures: memory --------------------------------------------------------------------
    _rule(
        "program-allocation-oom",
        "failure",
        "boot",
        "hbm",
        (
            # libtpu names the program ("Error loading program 'jit_x': Attempting ...") or, in other builds,
            # not ("Error loading program: Attempting to reserve 1.04G ..."): the same allocation failure.
            rf"Error loading program(?: '?(?P<program>[^':\n]*)'?)?: Attempting to reserve (?P<wanted>{_SIZE}) at "
            rf"the bottom of memory\. That was not possible\. There are (?P<free>{_SIZE}) free",
            r"RuntimeProgramAllocationFailure|openxla\.org/xla/errors/error_0101",
        ),
        ("Error loading program", "RuntimeProgramAllocationFailure", "error_0101"),
        "compiled program does not fit in HBM (after KV init)",
        "--gpu-memory-utilization too high: the KV pool filled the cap and the HBM left above it cannot hold "
        "the compiled XLA programs (0.95 on v5e leaves 0.79 GiB; "
        f"{_V5E.max_gpu_memory_utilization:g} leaves 1.26 GiB)",
        _FIX_UTIL,
        "XLA E0101 RuntimeProgramAllocationFailure (openxla.org/xla/errors/error_0101; older libtpu: "
        "'RESOURCE_EXHAUSTED: Error loading program ...: Attempting to reserve', with or without the program's "
        "name); "
        "fixtures/vllm-logs/v5e1-e2b-util095-program-oom.log; seed (DESIGN §3)",
        weight=95,
    ),
    _rule(
        "kv-cache-too-small",
        "failure",
        "boot",
        "kv_cache",
        (
            r"To serve at least one request with the models?'s max seq len \((?P<max_len>[\d,]+)\),? \(?"
            r"(?P<needed>[\d.]+ ?GiB) KV cache is needed, which is larger than the available KV cache memory "
            r"\((?P<available>[\d.]+ ?GiB)\)(?:\. Based on the available memory, the estimated maximum model "
            r"length is (?P<estimated>[\d,]+))?",
            r"The models?'s max seq len \((?P<max_len>[\d,]+)\) is larger than the maximum number of tokens that "
            r"can be stored in KV cache \((?P<estimated>[\d,]+)\)",
            r"No available memory for the cache blocks",
        ),
        (
            "To serve at least one request",
            "is larger than the maximum number of tokens",
            "No available memory",
        ),
        "KV cache smaller than one max-model-len request",
        "after the weights, the KV pool cannot hold even one request of --max-model-len tokens",
        "lower --max-model-len to what the pool holds, or raise --gpu-memory-utilization "
        f"(at most {safe_memory_utilization_advice()}), "
        "or use a larger slice",
        "vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (vLLM 0.9-0.11 'models's ... (X GiB'; "
        "later 'model's ... X GiB'); V0 'is larger than the maximum number of tokens that can be stored in KV "
        "cache'; tpu-inference PR #223 (field report B01)",
        weight=92,
    ),
    _rule(
        "hbm-oom",
        "failure",
        "boot",
        "hbm",
        (
            r"Ran out of memory in memory space hbm\. Used (?P<needed>[\d.]+[KMGT]) of (?P<available>[\d.]+[KMGT]) hbm",
            r"Ran out of memory on HBM,? the total memory required for HLO temporaries \((?P<needed>[\d.]+[KMGT])\) "
            r"exceeds available HBM \((?P<available>[\d.]+[KMGT])\)",
            r"Error allocating device buffer: Attempting to allocate (?P<needed>[\d.]+[KMGT]?i?B?)\. That was not "
            r"possible\. There are (?P<available>[\d.]+[KMGT]?i?B?) free",
            r"Ran out of memory in memory space hbm|Ran out of memory on HBM|CompileTimeHbmOom|Program hbm requirement",
            r"Error allocating device buffer|RESOURCE_EXHAUSTED: Out of memory|out of memory while trying to allocate",
        ),
        (
            "memory space hbm",
            "memory on HBM",
            "CompileTimeHbmOom",
            "Program hbm requirement",
            "Error allocating device buffer",
            "RESOURCE_EXHAUSTED: Out of memory",
            "out of memory while trying",
        ),
        "HBM exhausted while loading or compiling",
        "the weights plus XLA temporaries need more HBM than the chip(s) have",
        "use a larger slice (more chips with --tensor-parallel-size, or v6e at 32 GiB per chip), lower "
        "--max-num-batched-tokens, or a smaller model",
        "XLA TPU RESOURCE_EXHAUSTED texts: 'Ran out of memory in memory space hbm. Used X of Y hbm' (compile), "
        "'Ran out of memory on HBM, the total memory required for HLO temporaries (X) exceeds available HBM (Y)' "
        "(newer libtpu), 'Error allocating device buffer: Attempting to allocate X' (runtime); vllm-project/vllm#9331",
        weight=90,
    ),
    _rule(
        "vmem-oom",
        "failure",
        "boot",
        "vmem",
        (
            r"Ran out of memory in memory space vmem\. Used (?P<needed>[\d.]+[KMGT]) of (?P<available>[\d.]+[KMGT]) vmem",
            r"CompileTimeScopedVmemOom|Ran out of memory in memory space vmem|Program vmem requirement",
        ),
        ("memory space vmem", "CompileTimeScopedVmemOom", "Program vmem requirement"),
        "a TPU kernel does not fit in VMEM (compile time, not HBM)",
        "a compiled kernel (usually Pallas ragged paged attention, or a vision encoder's attention) needs more "
        "of the core's on-chip VMEM scratchpad than it has; HBM headroom and --gpu-memory-utilization do not "
        "change it",
        "lower --max-num-batched-tokens and --max-model-len (smaller attention blocks), for multimodal models "
        "cap the image size (--mm-processor-kwargs / --limit-mm-per-prompt), or use a newer vllm-tpu image "
        "(tpu-inference raised its VMEM limits)",
        "XLA 'Ran out of memory in memory space vmem. Used X of Y vmem' and E1001 CompileTimeScopedVmemOom; "
        "vllm-project/tpu-inference#2803, #2458, PR #508; vllm-project/vllm#19490 (worked at --max-model-len 1024)",
        weight=88,
    ),
    _rule(
        "smem-oom",
        "failure",
        "boot",
        "smem",
        (
            r"Ran out of memory in memory space smem\. Used (?P<needed>[\d.]+[KMGT]) of (?P<available>[\d.]+[KMGT]) smem",
            r"(?i:memory space smem|\bsmem\b[^\n]*(?:exhausted|exceed|out of memory)|(?:exhausted|exceed|out of memory)[^\n]*\bsmem\b)",
        ),
        ("smem", "SMEM", "Smem"),
        "compile ran out of SMEM",
        "the per-request block table (max-model-len / block size entries per sequence, times max-num-seqs) does "
        "not fit in the 1 MiB SMEM",
        "lower --max-model-len (vllm-project/vllm#8318: 8192 booted where 16384 failed on v5e); do not pin a "
        "small --block-size; leave --max-num-seqs at its default",
        "XLA 'Ran out of memory in memory space smem. Used X of Y smem'; vllm-project/vllm#8318, PR #9350; "
        "tpu-inference PallasAttentionBackend.get_min_page_size (SMEM budget)",
        weight=88,
    ),
    # ---- boot failures: configuration ------------------------------------------------------------
    _rule(
        "weight-load-mismatch",
        "failure",
        "boot",
        "weights",
        (
            r"There is no module or parameter named '(?P<parameter>[^'\n]+)' in (?P<model_class>\w+)",
            r"KeyError: '(?P<parameter>(?:model|language_model|lm_head)\.[\w.]*(?:weight|bias|scale)\w*)'",
        ),
        ("There is no module or parameter named", "KeyError: '"),
        "checkpoint parameter has no place in the model",
        "the checkpoint's parameter names do not match this vLLM build's model class",
        "use an image whose vLLM supports this checkpoint, or the model's original weights",
        "vllm model_executor/models/utils.py AutoWeightsLoader._load_module ValueError; older model "
        "load_weights params_dict[name] KeyError; fixtures/vllm-logs/v5e1-e2b-qwix-int8-abstract-fail.log",
        weight=80,
    ),
    _rule(
        "chunked-mm-floor",
        "failure",
        "boot",
        "flags",
        (
            r"Chunked MM input disabled but max_tokens_per_mm_item \((?P<mm_item_tokens>\d+)\) is larger than "
            r"max_num_batched_tokens \((?P<max_num_batched_tokens>\d+)\)",
        ),
        ("Chunked MM input disabled",),
        "batch budget smaller than one multimodal item",
        "with --disable-chunked-mm-input a whole multimodal item must fit in one batch; Gemma 4 needs 2496 tokens",
        "--max-num-batched-tokens 4096 (a power of two at or above the item size)",
        "vLLM scheduler ValueError (encoder budget check); seed (DESIGN §3)",
        weight=85,
    ),
    _rule(
        "invalid-kv-cache-dtype",
        "failure",
        "boot",
        "flags",
        (r"argument --kv-cache-dtype: invalid choice: '(?P<value>[^'\n]*)'",),
        ("argument --kv-cache-dtype",),
        "--kv-cache-dtype value rejected by the CLI",
        "the value is not one of vLLM's cache dtypes (int8 is not one)",
        "drop --kv-cache-dtype (auto = bf16; fp8 gains nothing on v5e)",
        "vLLM CacheDType (vllm/config/cache.py); seed (DESIGN §3)",
        weight=86,
    ),
    _rule(
        "tp-sharding-mismatch",
        "failure",
        "boot",
        "parallelism",
        (
            r"Total number of attention heads \((?P<heads>\d+)\) must be divisible by tensor parallel size "
            r"\((?P<tp>\d+)\)",
            r"tp_size \(?(?P<tp>\d+)\)? must be divisible by (?:total_)?num_kv_heads \(?(?P<kv_heads>\d+)\)?",
            r"Dimension size (?P<dim>\d+) is not divisible by TP size (?P<tp>\d+)",
            r"implies that the global size of its dimension \d+ should be divisible by (?P<tp>\d+), but it is "
            r"equal to (?P<dim>\d+)",
        ),
        ("must be divisible by", "not divisible by TP size", "should be divisible by"),
        "tensor-parallel size does not divide the model",
        "--tensor-parallel-size must divide the model's attention heads (and, when it exceeds them, be a "
        "multiple of its KV heads) so every chip gets equal shards",
        "pick a --tensor-parallel-size that divides the head counts and is at most the chips of the slice; for a "
        "small model serve one replica per chip instead of TP",
        "vllm/config ModelConfig.verify_with_parallel_config ('Total number of attention heads (X) must be "
        "divisible by tensor parallel size (Y)'); tpu-inference layers/common/attention_interface.py ('For "
        "GQA/MQA, tp_size X must be divisible by num_kv_heads Y'), layers/vllm/custom_ops/linear.py, "
        "runner/compilation_manager.py; JAX pjit sharding ValueError",
        weight=84,
    ),
    _rule(
        "torchax-model-failure",
        "failure",
        "boot",
        "model_impl",
        (
            r"OperatorNotFound: Operator with name (?P<operator>\S+) has no lowering",
            r"torchax Tensors can only do math within the torchax environment",
        ),
        ("OperatorNotFound", "torchax Tensors"),
        "the PyTorch (torchax) model path cannot run this model",
        "tpu-inference runs architectures without a JAX-native implementation through torchax, which lacks an "
        "operator or feature this model uses",
        "use a vllm-tpu image whose tpu-inference implements the architecture natively (or newer torchax "
        "lowerings), or a model with a JAX-native implementation (MODEL_IMPL_TYPE=flax_nnx)",
        "google/torchax#12 (OperatorNotFound ... has no lowering); vllm-project/tpu-inference PR #76 (torchax "
        "Tensors can only do math ...), #2126, PR #739 (fallback to the torchax path)",
        weight=75,
    ),
    _rule(
        "cli-argument-error",
        "failure",
        "boot",
        "flags",
        (
            r"(?:vllm serve|vllm|api_server\.py): error: (?P<message>[^\n]+)",
            r"error: unrecognized arguments: (?P<message>[^\n]+)",
        ),
        ("error: ",),
        "vLLM CLI rejected an argument",
        "a flag name or value is invalid for this vLLM version",
        "fix the flag named in the message (lint_vllm_flags checks the known traps)",
        "argparse error texts of vllm serve / python -m vllm.entrypoints.openai.api_server",
        weight=70,
    ),
    _rule(
        "tool-parser-invalid",
        "failure",
        "boot",
        "flags",
        (
            r"invalid tool call parser: (?P<parser>[\w.-]+)",
            r"--enable-auto-tool-choice requires --tool-call-parser",
        ),
        ("invalid tool call parser", "requires --tool-call-parser"),
        "tool-call parser missing or unknown to this vLLM",
        "--enable-auto-tool-choice was given without a --tool-call-parser, or with one this vLLM build does not "
        "have (gemma4 arrived with Gemma 4 support in vLLM 0.19)",
        "--tool-call-parser gemma4 on an image with vLLM >= 0.19 (with --enable-auto-tool-choice)",
        "vllm/entrypoints/openai/cli_args.py validate_parsed_serve_args (TypeError 'Error: "
        "--enable-auto-tool-choice requires --tool-call-parser'); api_server.py (KeyError 'invalid tool call "
        "parser: X (chose from { ... })')",
        weight=80,
    ),
    _rule(
        "tpu-busy",
        "failure",
        "boot",
        "device",
        (
            r"The TPU is already in use by process with pid (?P<pid>\d+)",
            r"TPU initialization failed|open\(/dev/(?:vfio|accel)\d*[^\n]*Device or resource busy|"
            r"Unable to initialize backend 'tpu'",
        ),
        (
            "TPU initialization failed",
            "Device or resource busy",
            "Unable to initialize backend",
            "already in use",
        ),
        "TPU device unavailable",
        "another process (an earlier container or a notebook) holds the TPU, or the runtime does not match the chip",
        "stop the other container (docker ps; docker rm -f ...), then restart vLLM",
        "libtpu / JAX backend initialization errors",
        weight=85,
    ),
    _rule(
        "quantization-unsupported-on-platform",
        "failure",
        "boot",
        "quantization",
        (
            r"(?P<method>[\w.-]+) quantization is currently not supported in (?P<platform>\w+)",
            r"(?P<method>[\w.-]+) quantization method not supported\. Supported methods are",
            r"Unknown quantization method: (?P<method>[\w.-]+)\. Must be one of",
        ),
        (
            "quantization is currently not supported in",
            "quantization method not supported",
            "Unknown quantization method",
        ),
        "quantization method not supported on this platform",
        "the checkpoint's or --quantization's method is not one the platform's kernels implement, so vLLM "
        "refuses the model config before loading anything",
        "serve the unquantized (bf16) checkpoint without --quantization, or a checkpoint in a method the "
        "platform lists",
        "vLLM Platform.verify_quantization ('X quantization is currently not supported in tpu.', raised inside "
        "pydantic's ValidationError for ModelConfig); tpu-inference get_tpu_quantization_config ('X "
        "quantization method not supported. Supported methods are ...'); TPU list: "
        "tpu_devops.planning.quantization (field report C15)",
        weight=87,
    ),
    _rule(
        "parser-tokens-missing",
        "failure",
        "boot",
        "flags",
        (
            r"(?P<parser>\w+) reasoning parser could not locate think start/end tokens in the tokenizer",
            r"(?P<parser>[\w][\w .-]*?) Tool parser could not locate tool call start/end tokens in the tokenizer",
        ),
        ("could not locate think start/end tokens", "could not locate tool call start/end tokens"),
        "reasoning / tool-call parser of another model family",
        "the parser looks for its model family's special tokens (thinking or tool-call delimiters) in the "
        "tokenizer and this model has none, so the server refuses to start",
        "use the parsers of the served model's family, or drop --reasoning-parser / --tool-call-parser",
        "vllm/reasoning/basic_parsers.py ('X reasoning parser could not locate think start/end tokens in the "
        "tokenizer!'); vLLM tool parsers ('X Tool parser could not locate tool call start/end tokens in the "
        "tokenizer!'); vllm-project/recipes#515 (field report C16)",
        weight=84,
    ),
    _rule(
        "transformers-per-layer-attribute",
        "failure",
        "boot",
        "versions",
        (
            r"AmbiguousGlobalPerLayerAttributeError: '(?P<attribute>\w+)' is a per-layer attribute",
            # the exception type alone on its line, the message on the next one (vllm-rbln#1092's log)
            r"^\s*'(?P<attribute>\w+)' is a per-layer attribute and may vary across layers",
            r"AmbiguousGlobalPerLayerAttributeError",
        ),
        ("AmbiguousGlobalPerLayerAttributeError", "is a per-layer attribute"),
        "the image's vLLM cannot read this transformers' per-layer model config",
        "the image pairs a vLLM that reads a global config attribute with a transformers that keeps that "
        "attribute per layer and refuses the global read",
        "an image whose vLLM reads the per-layer configs, or transformers pinned to a release that still "
        "allows the global read",
        "transformers heterogeneity configuration_utils AmbiguousGlobalPerLayerAttributeError; version ranges "
        "in tpu_devops.planning.version_traps (vllm-project/vllm#52768, #51744, PR #49797; field report C13)",
        weight=86,
    ),
    _rule(
        "transformers-unknown-model-type",
        "failure",
        "boot",
        "versions",
        (
            r"has model type [`'\"]?(?P<model_type>[\w.-]+)[`'\"]? but Transformers does not recognize this "
            r"architecture",
            r"Model architectures \[(?P<architectures>[^\]\n]*)\] are not supported for now",
        ),
        ("Transformers does not recognize this architecture", "are not supported for now"),
        "the image is too old for this model's architecture",
        "the transformers (or vLLM) in the image predates the model type, so it cannot even read the "
        "model's config",
        "use a newer vllm-tpu image (one released after the model; e.g. vllm/vllm-tpu:v0.30.0)",
        "transformers AutoConfig ValueError ('The checkpoint you are trying to load has model type X but "
        "Transformers does not recognize this architecture'); vLLM model registry ('Model architectures [...] "
        "are not supported for now'); first releases in tpu_devops.planning.images.FIRST_SUPPORT",
        weight=84,
    ),
    _rule(
        "torchax-tensor-elem",
        "failure",
        "boot",
        "model_impl",
        (r"'Tensor' object has no attribute '_elem'",),
        ("no attribute '_elem'",),
        "the PyTorch (torchax) path crashes on this model's in-place tensor update",
        "on the torchax path vLLM's model fills a plain tensor attribute in place (Gemma 4's "
        "per_layer_embeddings in embed_input_ids), which torchax never converted: the precompile mixes torch "
        "and torchax tensors and fails",
        "serve through tpu-inference's JAX implementation: -e MODEL_IMPL_TYPE=flax_nnx (Gemma 4 E2B/E4B are "
        "enabled there), or use a tpu-inference with the torchax fix",
        "vllm-project/tpu-inference PR #3176 (Gemma 4 E2B/E4B on MODEL_IMPL_TYPE=vllm: torchax _aten_copy "
        "AttributeError: 'Tensor' object has no attribute '_elem'; pinned to flax_nnx), #2126",
        weight=77,
    ),
    _rule(
        "killed-by-startup-probe",
        "failure",
        "boot",
        "lifecycle",
        (
            r"KeyboardInterrupt: terminated",
            r"Container (?P<container>\S+) failed startup probe, will be restarted",
        ),
        ("KeyboardInterrupt: terminated", "failed startup probe"),
        "stopped from outside by SIGTERM (on GKE: a startup probe shorter than the boot), not a vLLM error",
        "vLLM turns SIGTERM into KeyboardInterrupt('terminated'): something stopped the container while it "
        "loaded weights and compiled. On GKE that is the kubelet restarting a container whose startup probe "
        "(periodSeconds x failureThreshold) is shorter than weight load + XLA compile; elsewhere a docker "
        "stop, a node drain or a preemption. Not a vLLM error",
        "lengthen the startup probe so periodSeconds x failureThreshold is above the boot time (cold 857 s on "
        "v5e-1 with Gemma 4 E2B, plus the image pull on a fresh node: e.g. periodSeconds 10, "
        "failureThreshold 180 = 30 min), or boot warm from a mounted compile cache; after 'Application "
        "startup complete' or on a VM, look for who stopped the container (liveness probe, docker stop, "
        "a node drain, a preemption)",
        "vLLM api_server signal_handler (raise KeyboardInterrupt('terminated') on SIGTERM); kubelet event "
        "'Container X failed startup probe, will be restarted'; vllm-project/vllm#17386, PR #19377 (field "
        "report C04); boot time: seed (DESIGN §3)",
        weight=74,
    ),
    # ---- boot failures: Hugging Face -----------------------------------------------------------------
    _rule(
        "hf-rate-limited",
        "failure",
        "boot",
        "huggingface",
        (
            r"429 Client Error: Too Many Requests for (?i:url): https://huggingface\.co",
            r"HTTP Error 429 thrown while requesting \w+ https://huggingface\.co",
            r"429 Client Error[^\n]*huggingface\.co|huggingface\.co[^\n]*\b429\b[^\n]*Too Many Requests",
        ),
        ("429",),
        "Hugging Face rate limit (429)",
        "the Hub throttled this IP or token (too many requests in its window); the repository itself is fine",
        "wait and restart (the Hub's limit resets within minutes), send an HF token (authenticated limits are "
        "higher) and keep the weights in a cache or Cloud Storage so restarts do not download again",
        "requests/huggingface_hub HTTP 429 texts: huggingface/transformers#21129, #34841; "
        "huggingface/huggingface_hub#3312 (limit per IP, higher with a token); vllm-project/guidellm#778",
        weight=84,
    ),
    # A gated repo refuses with 401 (no token, or one the Hub does not accept) or 403 (a valid token whose
    # account has not been granted access): the status and wording on the line decide which, and a line
    # that carries neither (``Cannot access gated repo``) gets the reading that names both.
    _rule(
        "hf-gated-unauthenticated",
        "failure",
        "boot",
        "huggingface",
        (
            r"GatedRepoError: 401\b|401 Client Error[^\n]*gated repo|"
            r"is restricted\. You must (?:have access to it and )?be authenticated to access it|"
            r"is gated\. You must be authenticated to access it",
        ),
        (
            "GatedRepoError: 401",
            "401 Client Error",
            "You must have access to it and be",
            "You must be authenticated",
        ),
        "Hugging Face: gated repository, token missing or invalid (401)",
        "the download of a gated model carried no token, or one the Hub does not accept (mistyped, revoked); "
        "the Hub answers 401 before it looks at the account's access",
        "put a valid read token of an account that accepted the model's license in the HF token secret "
        "(HF_TOKEN for this server), then restart",
        "huggingface_hub utils/_http.py hf_raise_for_status (GatedRepo, 401) with the Hub's 'You must have access "
        "to it and be authenticated' text: city96/ComfyUI_ExtraModels#99, ml-explore/mlx-examples#759",
        weight=83,
    ),
    _rule(
        "hf-gated-repo",
        "failure",
        "boot",
        "huggingface",
        (
            r"GatedRepoError: 403\b|403 Client Error[^\n]*(?:huggingface\.co|gated repo)|"
            r"is restricted and you are not in the authorized list|awaiting a review from the repo authors|"
            r"enable access to public gated repositories in your fine-grained token settings",
        ),
        (
            "GatedRepoError: 403",
            "403 Client Error",
            "not in the authorized list",
            "awaiting a review",
            "public gated",
        ),
        "Hugging Face: gated repository, token has no access (403)",
        "the token is valid but its account has not been granted access to the gated model (license not "
        "accepted, the request is pending review, or a fine-grained token without access to gated repos)",
        "accept the model's license on huggingface.co with the account that owns the token (or let the "
        "fine-grained token read public gated repos), then restart",
        "huggingface_hub utils/_http.py hf_raise_for_status (GatedRepo, 403) with the Hub's 'not in the authorized "
        "list' / 'awaiting a review' texts: ariG23498/gemma3-object-detection#5",
        weight=83,
    ),
    _rule(
        "hf-gated-access",
        "failure",
        "boot",
        "huggingface",
        (
            r"GatedRepoError|Cannot access gated repo|You are trying to access a gated repo|Access to model \S+ is restricted",
        ),
        ("GatedRepoError", "gated repo", "is restricted"),
        "Hugging Face: gated repository refused (401 or 403; status not in the log)",
        "the Hub refused a gated model: either no valid token was sent (401) or the token's account has no "
        "access (403); the line with the status is not in this log",
        "check the HF token secret holds a valid read token (HF_TOKEN for this server) and that its account "
        "accepted the model's license on huggingface.co, then restart",
        "huggingface_hub GatedRepoError / transformers 'You are trying to access a gated repo' texts",
        weight=81,
    ),
    _rule(
        "hf-repo-not-found",
        "failure",
        "boot",
        "huggingface",
        (
            r"RepositoryNotFoundError|Repository Not Found for url: https://huggingface\.co|"
            r"404 Client Error[^\n]*huggingface\.co|is not a valid model identifier listed on 'https://huggingface\.co/models'",
        ),
        (
            "RepositoryNotFoundError",
            "Repository Not Found",
            "404 Client Error",
            "is not a valid model identifier",
        ),
        "Hugging Face: repository not found (404)",
        "the model id is misspelled, or the repo is private and the request carried no valid token",
        "check MODEL_NAME against the model page (e.g. google/gemma-4-E2B-it); for a private repo check the token",
        "huggingface_hub RepositoryNotFoundError / transformers OSError texts",
        weight=82,
    ),
    _rule(
        "hf-unauthorized",
        "failure",
        "boot",
        "huggingface",
        (
            r"401 Client Error[^\n]*huggingface\.co|Invalid credentials in Authorization header|Invalid user token|"
            r"Invalid username or password",
        ),
        ("401 Client Error", "Invalid credentials", "Invalid user token", "Invalid username or password"),
        "Hugging Face: token missing or invalid (401)",
        "the container got no token or a revoked/mistyped one (the secret value, not access rights, is wrong)",
        "store a valid read token in the Secret Manager secret (HF_SECRET_ID) and restart the VM",
        "huggingface_hub HTTP 401 texts",
        weight=82,
    ),
    _rule(
        "hf-unreachable",
        "failure",
        "boot",
        "huggingface",
        (
            r"We couldn't connect to 'https://huggingface\.co'",
            r"host='huggingface\.co'[^\n]*Max retries exceeded|Max retries exceeded with url: [^\n]*huggingface\.co",
            r"LocalEntryNotFoundError",
        ),
        ("couldn't connect to 'https://huggingface.co'", "Max retries exceeded", "LocalEntryNotFoundError"),
        "Hugging Face unreachable",
        "the VM has no route to huggingface.co (no external IP / Cloud NAT) or DNS failed",
        "give the node an external IP or Cloud NAT, or pre-stage the weights",
        "transformers OSError / requests ConnectionError (HTTPSConnectionPool(host='huggingface.co'): Max "
        "retries exceeded) / huggingface_hub LocalEntryNotFoundError texts",
        weight=78,
    ),
    # ---- boot failures: the VM's startup script and container image ------------------------------
    _rule(
        "image-pull-failed",
        "failure",
        "boot",
        "image",
        (
            r"manifest for (?P<image>\S+?) not found",
            r"reading manifest (?P<tag>\S+) in (?P<image>\S+?): manifest unknown",
            r"pull access denied for (?P<image>[^,\s]+)",
            # containerd (GKE's kubelet): 'Failed to pull image "X": ... failed to resolve reference "X": X: not
            # found'; 'pull access denied, repository does not exist or may require authorization'
            r"failed to resolve reference \\?\"(?P<image>[^\"\\\s]+)\\?\": (?:[^\n]*?: )?not found",
            r"Failed to pull image \\?\"(?P<image>[^\"\\\s]+)\\?\"[^\n]*\bnot found\b",
            r"manifest unknown|repository does not exist or may require (?:'docker login'|authorization)",
        ),
        (
            "manifest",
            "pull access denied",
            "repository does not exist",
            "failed to resolve reference",
            "Failed to pull image",
        ),
        "container image not found (pull failed)",
        "the image tag or name does not exist in the registry (vllm/vllm-tpu publishes no 'latest' tag), or the "
        "registry refused an anonymous pull of a private image",
        "pin an existing tag or digest (VLLM_IMAGE, e.g. vllm/vllm-tpu:v0.30.0; check it with docker manifest "
        "inspect), or log the VM in to the registry",
        "Docker daemon texts ('manifest for X not found: manifest unknown', 'pull access denied for X, repository "
        "does not exist or may require docker login'), podman ('reading manifest T in X: manifest unknown'), "
        'containerd via the kubelet (\'Failed to pull image "X": ... failed to resolve reference "X": X: not '
        "found'); vllm-project/vllm#17114 (field report B08)",
        weight=90,
    ),
    _rule(
        "image-pull-rate-limited",
        "failure",
        "boot",
        "image",
        (r"toomanyrequests: You have reached your (?:unauthenticated )?pull rate limit",),
        ("toomanyrequests",),
        "Docker Hub pull rate limit",
        "Docker Hub throttles anonymous pulls per IP; the TPU VM's image pull was refused",
        "pull through a mirror (Artifact Registry remote repository or mirror.gcr.io), or authenticate the pull; "
        "then restart the VM",
        "Docker Hub texts 'toomanyrequests: You have reached your pull rate limit' and '... your unauthenticated "
        "pull rate limit' (docs.docker.com/docker-hub/usage/)",
        weight=88,
    ),
    _rule(
        "startup-script-failed",
        "symptom",
        "boot",
        "startup_script",
        (
            r"startup-script exit status (?P<code>[1-9]\d*)",
            r"Script \"startup-script\" failed with error: exit status (?P<code>\d+)",
        ),
        ("exit status",),
        "startup script exited with an error",
        "a command in the VM's startup script failed, so vLLM was never started (or stopped)",
        "read the startup-script lines just before this one; render_startup_script shows what ran",
        "GCE guest agent google_metadata_script_runner: '<key> exit status N' (older agent) and 'Script "
        '"startup-script" failed with error: exit status N\' (guest-agent metadata_script_runner)',
    ),
    _rule(
        "container-name-conflict",
        "failure",
        "boot",
        "container",
        (
            r"Conflict\. The container name \\?\"(?P<name>/?[\w.-]+)\\?\" is already in use",
            r"the container name \\?\"(?P<name>[\w.-]+)\\?\" is already in use",
        ),
        ("The container name", "the container name"),
        "container name already taken (docker run exits 125)",
        "a container of that name from an earlier boot or restart still exists (running or stopped), so "
        "docker run --name refuses to create the new one and vLLM is never started",
        "remove the old container first (docker rm -f NAME; the startup script does so before each run), or "
        "run with --rm so a stopped container does not keep the name",
        'Docker daemon text (\'Conflict. The container name "/vllm" is already in use by container "...". You '
        "have to remove (or rename) that container to be able to reuse that name.', docker run exit status "
        "125); podman ('the container name \"vllm\" is already in use')",
        weight=88,
    ),
    _rule(
        "port-in-use",
        "failure",
        "boot",
        "container",
        (
            r"\[Errno 98\] error while attempting to bind on address \((?P<address>[^)\n]*)\): address already in use",
            r"\[Errno 98\] Address already in use",
            r"Bind for (?P<address>[\d.:\[\]]+) failed: port is already allocated",
            r"listen tcp (?P<address>[\d.:\[\]]+): bind: address already in use",
        ),
        ("Errno 98", "port is already allocated", "bind: address already in use"),
        "the API port is already in use",
        "another process listens on the port vLLM binds: an earlier vLLM container still running with "
        "--net host, or a second engine started with the same --port",
        "find it (docker ps; ss -ltnp 'sport = :8000'), stop the old container (docker rm -f NAME), or give "
        "each engine its own --port",
        "Python OSError '[Errno 98] Address already in use' at vLLM's socket bind; uvicorn 'error while "
        "attempting to bind on address (...): address already in use'; Docker 'Bind for 0.0.0.0:8000 failed: "
        "port is already allocated' (with -p)",
        weight=85,
    ),
    _rule(
        "image-pull-unauthorized",
        "failure",
        "boot",
        "image",
        (
            r"failed to authorize: failed to fetch (?:oauth|anonymous) token: unexpected status[^\n]*?(?P<status>401|403)",
            r"Permission \\?[\"']?artifactregistry\.repositories\.downloadArtifacts\\?[\"']? denied",
            r"(?:pkg\.dev|gcr\.io)[^\n]*(?P<status>403 Forbidden|401 Unauthorized)",
        ),
        ("failed to authorize", "downloadArtifacts", "403 Forbidden", "401 Unauthorized"),
        "the registry refused the image pull (401/403)",
        "the node pulls from a private registry (Artifact Registry / Container Registry) without read access: "
        "its service account lacks the reader role, or the image is in another project",
        "grant the node's service account roles/artifactregistry.reader on the repository (or pull a public "
        "image such as vllm/vllm-tpu:v0.30.0)",
        "containerd pull errors ('failed to authorize: failed to fetch oauth token: unexpected status: 403 "
        "Forbidden'); Artifact Registry 'Permission \"artifactregistry.repositories.downloadArtifacts\" denied'",
        weight=89,
    ),
    _rule(
        "image-pull-backoff",
        "symptom",
        "boot",
        "image",
        (
            r"Back-off pulling image \\?\"(?P<image>[^\"\\\s]+)",
            r"\b(?:ErrImagePull|ImagePullBackOff)\b",
        ),
        ("Back-off pulling image", "ErrImagePull", "ImagePullBackOff"),
        "the kubelet cannot pull the image (ErrImagePull / ImagePullBackOff)",
        "the kubelet failed to pull the container image and waits before it retries; the reason is in the "
        "'Failed to pull image' event",
        "read the 'Failed to pull image' event (kubectl describe pod): not found = a tag that does not exist "
        "(pin e.g. vllm/vllm-tpu:v0.30.0), 401/403 = registry access",
        "kubelet events ErrImagePull, ImagePullBackOff, 'Back-off pulling image \"X\"' (Kubernetes images "
        "documentation)",
    ),
    # ---- serving problems: the server started, requests fail -------------------------------------
    _rule(
        "chat-template-missing",
        "failure",
        "serving",
        "chat_template",
        (
            r"default chat template is no longer allowed",
            r"Cannot use chat template functions because tokenizer\.chat_template is not set",
            r"ChatTemplateResolutionError",
        ),
        ("chat template is no longer allowed", "chat_template is not set", "ChatTemplateResolutionError"),
        "no chat template: every chat request fails (400)",
        "the served checkpoint has no chat template (a base, not instruction-tuned, model), so "
        "/v1/chat/completions cannot format messages",
        "serve the instruction-tuned model (e.g. google/gemma-4-E2B-it), or pass --chat-template FILE; a base "
        "model answers /v1/completions only",
        "vLLM chat_utils (ChatTemplateResolutionError in 0.19; ValueError before) and transformers "
        "('Cannot use chat template functions because tokenizer.chat_template is not set'); "
        "vllm-project/vllm#39279 (field report B06)",
        weight=70,
    ),
    _rule(
        "tool-choice-not-enabled",
        "failure",
        "serving",
        "tool_calling",
        (r"\\?\"auto\\?\" tool choice requires --enable-auto-tool-choice and --tool-call-parser",),
        ("tool choice requires",),
        "tool calling not enabled: tool requests are rejected (400)",
        "the server was started without --enable-auto-tool-choice / --tool-call-parser, so requests with tools "
        "get HTTP 400 (plain chat still works)",
        "--enable-auto-tool-choice --tool-call-parser gemma4 (and --reasoning-parser gemma4)",
        "vLLM OpenAI server error text (ValueError in older releases, HTTP 400 body in newer); DESIGN §3",
        weight=65,
    ),
    _rule(
        "llamacpp-context-exceeded",
        "failure",
        "serving",
        "context",
        (
            r"request \((?P<prompt>\d+) tokens\) exceeds the available context size \((?P<n_ctx>\d+) tokens\)",
            r"the request exceeds the available context size[^\n]*?\"n_prompt_tokens\":\s*(?P<prompt>\d+)"
            r"[^\n]*?\"n_ctx\":\s*(?P<n_ctx>\d+)",
            r"the request exceeds the available context size|exceed_context_size_error",
        ),
        ("exceeds the available context size", "exceed_context_size_error"),
        "llama-server: the prompt does not fit one slot's context (400)",
        "llama-server gives each of its --parallel slots --ctx-size / --parallel tokens (n_ctx is per slot), "
        "and this request's prompt plus output needs more",
        "shorten the prompt, raise --ctx-size (to --parallel x the longest request), or lower --parallel",
        "llama.cpp tools/server exceed_context_size_error (older 'the request exceeds the available context "
        "size, try increasing it' with n_prompt_tokens / n_ctx in the body; newer 'request (N tokens) "
        "exceeds the available context size (C tokens)'); field report C17",
        weight=66,
    ),
    # ---- wrappers: they only report a failure raised elsewhere ---------------------------------------
    _rule(
        "engine-core-failed",
        "wrapper",
        "boot",
        "wrapper",
        (
            r"Engine core initialization failed|EngineCore failed to start|"
            r"Engine process failed to start\. See stack trace",
        ),
        ("Engine core initialization failed", "EngineCore failed to start", "Engine process failed to start"),
        "engine core failed to start",
        "the engine core raised an error while starting; the specific error is logged by the engine process",
        "the engine's own error was not found in this text: pass the whole container log (docker logs vllm "
        "2>&1, including the EngineCore process lines)",
        "vllm v1 engine core startup (core.py 'EngineCore failed to start.', 'Engine core initialization "
        "failed. See root cause above.'); V0 MQLLMEngine ('Engine process failed to start. See stack trace for "
        "the root cause.')",
    ),
    _rule(
        "engine-dead",
        "wrapper",
        "serving",
        "wrapper",
        (r"EngineDeadError|EngineCore encountered an issue\. See stack trace",),
        ("EngineDeadError", "EngineCore encountered an issue"),
        "engine died while serving",
        "the engine core stopped while the API server was up; the error that killed it is logged before",
        "the engine's own error was not found in this text: pass the whole container log, then restart the "
        "container",
        "vllm/v1/engine/exceptions.py EngineDeadError ('EngineCore encountered an issue. See stack trace "
        "(above) for the root cause.')",
    ),
    # ---- cloud events around the VM ----------------------------------------------------------------------
    _rule(
        "tpu-preempted",
        "failure",
        "cloud",
        "preemption",
        (
            r"compute\.instances\.preempted|Instance was preempted|"
            r"\b(?:node|VM|instance|TPU|worker)\b[^.\n]{0,40}\bpreempted\b|\bstate:? PREEMPTED\b",
        ),
        ("preempted", "PREEMPTED"),
        "TPU VM preempted",
        "spot / preemptible capacity was reclaimed by Google Cloud",
        "recreate the queued resource (flex-start or on-demand if interruptions are not acceptable)",
        "cloud.google.com/tpu/docs/preemptible (preemption notice, audit system_event)",
        weight=85,
        flags=re.I,
    ),
    _rule(
        "tpu-maintenance",
        "failure",
        "cloud",
        "maintenance",
        (
            r"maintenance event|onHostMaintenance|TERMINATE_ON_HOST_MAINTENANCE|"
            r"compute\.instances\.(?:hostError|terminateOnHostMaintenance)|host maintenance",
        ),
        ("aintenance", "hostError", "AINTENANCE"),
        "Host maintenance event",
        "the TPU host went through maintenance and the VM was stopped or restarted",
        "restart the container or recreate the node; schedule around maintenance windows",
        "cloud.google.com/tpu/docs/maintenance-events",
        weight=80,
        flags=re.I,
    ),
    _rule(
        "api-rate-limited",
        "failure",
        "cloud",
        "quota",
        (
            r"Quota exceeded for quota metric '[^'\n]*' and limit '[^'\n]*per minute",
            r"RATE_LIMIT_EXCEEDED|rateLimitExceeded",
        ),
        ("per minute", "RATE_LIMIT_EXCEEDED", "rateLimitExceeded"),
        "API request rate limit (per minute)",
        "too many API requests in a minute (a request-rate quota, not the TPU chip quota): transient",
        "back off and retry after a minute; do not skip the region or ask for more TPU quota",
        "Google API per-minute quota wording ('Quota exceeded for quota metric ... and limit '... per minute "
        "per project''); google.rpc ErrorInfo reason RATE_LIMIT_EXCEEDED; field report B13 (marin PR #6198)",
        weight=87,
    ),
    _rule(
        "quota-exhausted",
        "failure",
        "cloud",
        "quota",
        (r"Quota .*exhausted|Quota exceeded|QUOTA_EXCEEDED|RESOURCE_EXHAUSTED: Quota|Insufficient quota",),
        ("uota", "QUOTA"),
        "Quota exhausted",
        "the project's TPU quota in this region is used up",
        "free quota (delete FAILED/SUSPENDED queued resources) or request more in Cloud Quotas",
        "DESIGN §3 provisioning errors",
        weight=85,
        flags=re.I,
    ),
    _rule(
        "capacity-stockout",
        "failure",
        "cloud",
        "capacity",
        (
            r"There is no more capacity in the zone|\bstockout\b|ZONE_RESOURCE_POOL_EXHAUSTED|"
            r"Insufficient reserved capacity",
        ),
        ("capacity", "stockout", "ZONE_RESOURCE_POOL_EXHAUSTED", "Stockout", "STOCKOUT"),
        "No TPU capacity in the zone",
        "the zone has no free capacity for this accelerator type right now",
        "try another zone (find_tpu) or wait; flex-start requests wait in WAITING_FOR_RESOURCES",
        "DESIGN §3 provisioning errors (SkyPilot failover classes)",
        weight=85,
        flags=re.I,
    ),
    _rule(
        "provisioning-model-unsupported",
        "failure",
        "cloud",
        "capacity",
        (
            r"provisioning model is not supported for accelerator type",
            # Cloud TPU error glossary ("Invalid Accelerator Type"): the type is not offered in the zone with
            # these flags
            r"[Aa]ccelerator type \S+ as (?:preemptible|spot) \((?:true|false)\) and reserved \((?:true|false)\) "
            r"is not available in zone",
        ),
        (
            "provisioning model is not supported",
            "PROVISIONING MODEL IS NOT SUPPORTED",
            "provisioning model",
            "is not available in zone",
        ),
        "Provisioning model not offered here",
        "this (zone, provisioning model, accelerator) triple is not offered",
        "use a zone that lists the provisioning model for this accelerator",
        "DESIGN §3 (FLEX_START ... not supported ... in location); Cloud TPU error glossary ('Accelerator type "
        "v2-512 as preemptible (false) and reserved (false) is not available in zone us-central1-a')",
        weight=85,
        flags=re.I,
    ),
    # ---- Kubernetes: scheduler, cluster autoscaler, kubelet and HPA events -----------------------------
    _rule(
        "k8s-node-selector-mismatch",
        "failure",
        "boot",
        "scheduling",
        # Only when every node (or the only reason of a scale-up refusal) is a selector mismatch: CPU nodes
        # that do not match a TPU selector are normal, and then another reason on the line is the cause.
        (
            r"0/(?P<nodes>\d+) nodes are available: [^\n]*?\b(?P=nodes) node\(s\) didn't match "
            r"(?:Pod's node affinity(?:/selector)?|node selector)",
            r"pod didn't trigger scale-up[^:\n]*: (?P<groups>\d+) node\(s\) didn't match Pod's node "
            r"affinity(?:/selector)?(?: \(x\d+\))?\s*$",
        ),
        ("didn't match Pod's node affinity", "didn't match node selector"),
        "pod unschedulable: its TPU nodeSelector matches no node pool",
        "the pod's node selector (cloud.google.com/gke-tpu-accelerator / cloud.google.com/gke-tpu-topology) "
        "matches no node's labels, and the cluster autoscaler has no node pool it could grow to match "
        "(NotTriggerScaleUp): the pod stays Pending and vLLM never starts",
        "set the selector to the TPU pool's labels (v5e, one chip: cloud.google.com/gke-tpu-accelerator: "
        f"{_V5E.gke_accelerator}, cloud.google.com/gke-tpu-topology: {_V5E.gke_topologies[1]}; see kubectl "
        "get nodes -L cloud.google.com/gke-tpu-accelerator,cloud.google.com/gke-tpu-topology), or create a "
        f"node pool with those labels (machine type {_V5E.machine_types[1]})",
        "kube-scheduler NodeAffinity filter ('N node(s) didn't match Pod's node affinity/selector'; before "
        "1.22 'didn't match node selector'); cluster-autoscaler NotTriggerScaleUp ('pod didn't trigger "
        "scale-up: ...'); GKE TPU node labels (kubernetes-engine-samples ai-ml/vllm-tpu); "
        "huggingface/optimum-tpu#43, #74 (field report C02)",
        weight=86,
    ),
    _rule(
        "k8s-tpu-taint-not-tolerated",
        "failure",
        "boot",
        "scheduling",
        (
            r"untolerated taint \{google\.com/tpu: [^}\n]*\}",
            r"had taints? \{google\.com/tpu: [^}\n]*\}, that the pod didn't tolerate",
        ),
        ("untolerated taint {google.com/tpu", "{google.com/tpu:"),
        "pod unschedulable: it does not tolerate the TPU nodes' taint",
        "GKE taints TPU nodes google.com/tpu:NoSchedule and adds the toleration only to pods that request "
        "google.com/tpu, so a pod without the request (or without the toleration) is kept off them",
        "request the chips in the container (resources.limits google.com/tpu: 1 for a 1x1 v5e node, the "
        "same as requests), which also brings the toleration; or add a toleration for google.com/tpu",
        "kube-scheduler TaintToleration filter ('N node(s) had untolerated taint {google.com/tpu: present}'; "
        "older 'had taint {...}, that the pod didn't tolerate'); GKE TPU docs (ExtendedResourceToleration)",
        weight=80,
    ),
    _rule(
        "k8s-insufficient-tpu",
        "failure",
        "boot",
        "scheduling",
        (
            r"Node didn't have enough resource: google\.com/tpu, requested: (?P<requested>\d+), used: "
            r"(?P<used>\d+), capacity: (?P<capacity>\d+)",
            r"(?P<nodes>\d+) Insufficient google\.com/tpu",
            r"Insufficient google\.com/tpu|OutOfgoogle\.com/tpu",
        ),
        ("Insufficient google.com/tpu", "enough resource: google.com/tpu", "OutOfgoogle.com/tpu"),
        "no free TPU chips on the node (google.com/tpu)",
        "the TPU node does not offer the chips the pod requests: right after a node is created the TPU "
        "device plugin registers google.com/tpu a minute or two after the node is Ready (capacity 0 until "
        "then); later it means another pod holds the chips, or the pod requests more chips than the node "
        "has",
        "if the node is new, wait for its device plugin (kubectl describe node: Allocatable google.com/tpu) "
        "and the pod schedules by itself; otherwise request exactly the node's chips (1 on a 1x1 v5e node) "
        "and delete the pod that holds them",
        "kube-scheduler NodeResourcesFit ('N Insufficient google.com/tpu'); kubelet admission 'Node didn't "
        "have enough resource: google.com/tpu, requested: 1, used: 0, capacity: 0' (OutOfgoogle.com/tpu); "
        "GKE TPU device plugin",
        weight=78,
    ),
    _rule(
        "k8s-scale-up-quota",
        "failure",
        "boot",
        "quota",
        (
            r"Quota '(?P<quota>(?:PREEMPTIBLE_)?TPU_[A-Z0-9_]+)' exceeded\.\s+Limit: (?P<limit>[\d.]+) in region "
            r"(?P<region>[\w-]+)",
            r"scale up in zones? (?P<zones>[\w, -]+?) associated with this pod failed: GCE quota exceeded",
            r"GCE quota exceeded|scale\.up\.error\.quota\.exceeded",
        ),
        ("GCE quota exceeded", "scale.up.error.quota.exceeded", "TPU_"),
        "node pool cannot grow: Compute Engine TPU quota exceeded",
        "GKE node pools draw Compute Engine quota (regional TPU chips: TPU_LITE_PODSLICE_V5 for on-demand "
        "v5e, PREEMPTIBLE_TPU_LITE_PODSLICE_V5 for spot), not the Cloud TPU API quota that queued resources "
        "use (TPUV5sLitepodPerProjectPer...ForTPUAPI): the autoscaler could not add a TPU node",
        "request more Compute Engine TPU chip quota for the region (Cloud Quotas, service "
        "compute.googleapis.com: TPU_LITE_PODSLICE_V5, or PREEMPTIBLE_TPU_LITE_PODSLICE_V5 for spot), free "
        "chips held by other node pools, or use a region that has it",
        "cluster-autoscaler FailedScaleUp ('Node scale up in zones Z associated with this pod failed: GCE "
        "quota exceeded. Pod is at risk of not being scheduled.'; noScaleUp scale.up.error.quota.exceeded); "
        "Compute Engine regional TPU quota metrics (gcloud compute regions describe); cloud.google.com/tpu/"
        "docs/quota (GKE quota is separate)",
        weight=88,
    ),
    _rule(
        "k8s-scale-up-stockout",
        "failure",
        "boot",
        "capacity",
        (
            r"scale up in zones? (?P<zones>[\w, -]+?) associated with this pod failed: GCE out of resources",
            r"GCE out of resources|scale\.up\.error\.out\.of\.resources",
        ),
        ("GCE out of resources", "scale.up.error.out.of.resources"),
        "node pool cannot grow: no TPU capacity in the zone",
        "the autoscaler asked Compute Engine for a TPU node and the zone had none (a stockout), not a quota "
        "limit",
        "wait and let the autoscaler retry, add a node pool in another zone that offers the TPU, or use "
        "spot / flex-start / a reservation",
        "cluster-autoscaler FailedScaleUp ('... failed: GCE out of resources'; noScaleUp "
        "scale.up.error.out.of.resources)",
        weight=86,
    ),
    _rule(
        "killed-by-liveness-probe",
        "failure",
        "serving",
        "lifecycle",
        (
            r"Container (?P<container>\S+) failed liveness probe, will be restarted",
            r"Container failed liveness probe\.\.? Container will be killed and recreated",
        ),
        ("failed liveness probe",),
        "the kubelet restarted a serving container (liveness probe failed)",
        "the liveness probe (GET /health) failed failureThreshold times in a row, so the kubelet killed a "
        "running server: the engine died or stalled, or the probe's timeout is shorter than /health takes "
        "under load; every restart costs a full boot",
        "read the container log just before the restart (diagnose_vllm_boot); if the engine was only busy, "
        "raise the probe's timeoutSeconds / failureThreshold",
        "kubelet event 'Container X failed liveness probe, will be restarted' (Kubernetes probes documentation)",
        weight=66,
    ),
    _rule(
        "k8s-hpa-no-custom-metrics",
        "failure",
        "autoscaling",
        "autoscaling",
        (
            r"no custom metrics API \(custom\.metrics\.k8s\.io\) registered",
            r"the server could not find the requested resource \(get [\w.]+\.custom\.metrics\.k8s\.io[^)\n]*\)",
            r"no external metrics API \(external\.metrics\.k8s\.io\) registered",
        ),
        ("no custom metrics API", "custom.metrics.k8s.io", "no external metrics API"),
        "the HPA cannot read its metric: no custom metrics API in the cluster (serving is fine)",
        "no adapter serves custom.metrics.k8s.io, so the HorizontalPodAutoscaler cannot read "
        "vllm:num_requests_waiting and never scales; the pods themselves serve normally",
        "install the Custom Metrics Stackdriver Adapter (GoogleCloudPlatform/k8s-stackdriver "
        "custom-metrics-stackdriver-adapter, new resource model) and give its Kubernetes service account "
        "roles/monitoring.viewer through Workload Identity; the metric reaches Cloud Monitoring through a "
        "PodMonitoring on vLLM's /metrics",
        "Kubernetes custom metrics client ('unable to fetch metrics from custom metrics API: no custom metrics "
        "API (custom.metrics.k8s.io) registered'; prometheus-operator/kube-prometheus#1232); GKE 'Autoscale "
        "LLM inference' guide and kubernetes-engine-samples ai-ml/vllm-tpu/vllm-hpa.yaml (field report C06)",
        weight=62,
    ),
    _rule(
        "k8s-hpa-metric-missing",
        "failure",
        "autoscaling",
        "autoscaling",
        (
            r"the server could not find the metric (?P<metric>\S+) for pods",
            r"no metrics returned from custom metrics API",
        ),
        ("could not find the metric", "no metrics returned from custom metrics API"),
        "the HPA's metric has no samples (serving is fine)",
        "the custom metrics adapter answers but Cloud Monitoring holds no series of the metric for these "
        "pods: nothing exports it (no PodMonitoring scraping vLLM's /metrics) or the HPA names it "
        "differently; the HPA does not scale, the pods serve normally",
        "apply a PodMonitoring that scrapes the vLLM port's /metrics and wait for the first samples (about 2 "
        "min); check the HPA's metric name (prometheus.googleapis.com|vllm:num_requests_waiting|gauge)",
        "Kubernetes HPA metrics client ('no metrics returned from custom metrics API'); custom metrics adapter "
        "NotFound ('the server could not find the metric X for pods'); Managed Service for Prometheus "
        "PodMonitoring",
        weight=61,
    ),
    _rule(
        "k8s-unschedulable",
        "failure",
        "boot",
        "scheduling",
        (r"0/(?P<nodes>\d+) nodes are available: (?P<reasons>[^\n]*?)(?:\. preemption:|\.?\s*$)",),
        ("nodes are available:",),
        "pod unschedulable",
        "the scheduler found no node for the pod; each reason counts the nodes one filter ruled out",
        "read the reasons: the TPU node pool must match the pod's node selector, its taint google.com/tpu "
        "must be tolerated and its chips free; CPU nodes failing a TPU selector are expected",
        "kube-scheduler FailedScheduling ('0/N nodes are available: <count> <reason>, ...')",
        weight=70,
    ),
    _rule(
        "k8s-no-scale-up",
        "failure",
        "boot",
        "scheduling",
        (
            r"pod didn't trigger scale-up(?: \(it wouldn't fit if a new node is added\))?: (?P<reasons>[^\n]*)",
        ),
        ("pod didn't trigger scale-up",),
        "the cluster autoscaler will not add a node for the pod",
        "no node pool the autoscaler may grow would fit the pod (its reasons count node pools per cause), so "
        "the pod stays Pending",
        "make a TPU node pool fit the pod (selector labels, chips per node, autoscaling enabled with room "
        "under its max node count), or create one",
        "cluster-autoscaler NotTriggerScaleUp ('pod didn't trigger scale-up: <count> <reason>, ...')",
        weight=69,
    ),
    # ---- warnings and information worth showing ------------------------------------------------------
    _rule(
        "kv-fp8-auto-logged",
        "info",
        "boot",
        "kv_cache",
        (r"Automatically using fp8\w* for FP8 KV cache",),
        ("for FP8 KV cache",),
        "fp8 KV cache announced",
        "the platform logs an fp8 KV dtype; the Init kv-cache line shows what was really allocated",
        "check regular_attn_dtype before counting on 2x capacity",
        "fixtures/vllm-logs/v6e1-e2b-boot-ok.log",
    ),
    _rule(
        "k8s-probe-not-passing",
        "info",
        "boot",
        "lifecycle",
        (r"(?P<probe>Startup|Readiness|Liveness) probe failed: ",),
        ("probe failed: ",),
        "a probe is not passing yet",
        "the kubelet's probe got no 200 from /health: expected while vLLM loads and compiles; only a "
        "'failed ... probe, will be restarted' event stops the container",
        "none while the boot goes on; if the container is restarted, see the startup-probe finding",
        'kubelet Unhealthy events (\'Startup probe failed: Get "http://IP:8000/health": dial tcp ...: connect: '
        "connection refused', 'Readiness probe failed: HTTP probe failed with statuscode: 503')",
    ),
    _rule(
        "block-size-scaled",
        "info",
        "boot",
        "kv_cache",
        (r"Increase the page size from \d+ to \d+ to avoid SMEM OOM",),
        ("to avoid SMEM OOM",),
        "KV block size scaled with max_model_len",
        "tpu-inference keeps 512 blocks per request (harmless)",
        "none needed",
        "tpu-inference PallasAttentionBackend.get_min_page_size",
    ),
    _rule(
        "torchax-fallback",
        "info",
        "boot",
        "model_impl",
        (r"not registered in tpu-inference\. Falling back to vLLM-native Pytorch definition",),
        ("not registered in tpu-inference",),
        "model runs through the PyTorch (torchax) path",
        "tpu-inference has no JAX-native implementation of this architecture and uses vLLM's PyTorch model "
        "through torchax (slower; some operators are missing)",
        "none needed if it boots; a JAX-native architecture is faster",
        "tpu-inference models/common/model_loader.py UnsupportedArchitectureError (PR #739 fallback)",
    ),
    # ---- known harmless lines: never a root cause, whatever their severity ----------------------------
    _rule(
        "vllm-c-missing",
        "noise",
        "boot",
        "noise",
        (r"Failed to import from vllm\._C",),
        ("Failed to import from vllm._C",),
        "vllm._C not present",
        "CUDA kernels are not built in TPU images (harmless)",
        "none needed",
        "fixture logs (vLLM 0.26 'Failed to import from vllm._C: ModuleNotFoundError'); older vLLM 'Failed to "
        "import from vllm._C with ModuleNotFoundError'",
    ),
    _rule(
        "triton-absent",
        "noise",
        "boot",
        "noise",
        (r"Triton is installed but 0 active driver|Triton not installed|requires Triton",),
        ("Triton",),
        "Triton unavailable",
        "Triton is a GPU compiler; TPU builds do not use it (harmless)",
        "none needed",
        "fixture logs; vllm-project/vllm#9331 ('Triton not installed; certain GPU-related functions will not be "
        "available')",
    ),
    _rule(
        "pin-memory",
        "noise",
        "boot",
        "noise",
        (r"Pin memory is not supported on (?:TPU|XLA)",),
        ("Pin memory is not supported",),
        "pin memory unsupported",
        "informational on TPU (harmless)",
        "none needed",
        "fixture logs (tpu_platform.py); vLLM TPU platform of 0.6-0.9",
    ),
    _rule(
        "inductor-disabled",
        "noise",
        "boot",
        "noise",
        (r"Inductor compilation was disabled",),
        ("Inductor compilation was disabled",),
        "Inductor disabled",
        "TPU compiles with XLA, not Inductor (harmless)",
        "none needed",
        "fixture logs",
    ),
    _rule(
        "donated-buffers",
        "noise",
        "boot",
        "noise",
        (r"Some donated buffers were not usable",),
        ("donated buffers were not usable",),
        "JAX donated buffers unused",
        "a JAX warning during precompile (harmless)",
        "none needed",
        "JAX UserWarning text",
    ),
    _rule(
        "metadata-404",
        "noise",
        "boot",
        "noise",
        (
            r"metadata\.google\.internal[^\n]*\b404\b|\b404\b[^\n]*metadata\.google\.internal",
            r"Unable to poll (?:the )?TPU GCE Metadata\. Got status code: 404",
        ),
        ("metadata.google.internal", "Unable to poll"),
        "metadata server 404",
        "an optional metadata key is absent; tpu-inference logs it at ERROR (harmless)",
        "none needed",
        "GCE metadata server; tpu-inference tpu_info.py get_tpu_metadata (logger.error 'Unable to poll TPU GCE "
        "Metadata. Got status code: 404')",
    ),
)

BY_ID: dict[str, Signature] = {s.id: s for s in SIGNATURES}


@dataclass(frozen=True)
class Milestone:
    """A line a successful boot logs: progress past every earlier error."""

    phase: str
    anchor: str
    pattern: re.Pattern[str]


MILESTONES: tuple[Milestone, ...] = tuple(
    Milestone(phase, anchor, re.compile(pattern))
    for phase, anchor, pattern in (
        # Kubernetes: the scheduler placed the pod, the kubelet pulled the image (kubelet / scheduler events)
        ("pod scheduled", "Successfully assigned", r"Successfully assigned \S+ to \S+"),
        ("image pulled", "Successfully pulled image", r"Successfully pulled image \S+"),
        ("arguments parsed", "non-default args:", r"non-default args: \{"),
        ("weights loaded", "Loading weights took", r"Loading weights took [\d.]+ seconds"),
        ("weights loaded", "Loading model weights took", r"Loading model weights took [\d.]+ ?G"),
        ("memory statistics", "Memory statistics |", r"Memory statistics \| total_hbm_limit_gb="),
        ("KV cache sized", "KV cache size:", r"GPU KV cache size: [\d,]+ tokens"),
        ("KV cache initialized", "Init kv-cache |", r"Init kv-cache \| num_total_layers="),
        ("engine ready (compile done)", "init engine (profile", r"init engine \(profile, create kv cache"),
        ("application startup complete", "Application startup complete", r"Application startup complete"),
    )
)
STARTED = "application startup complete"
