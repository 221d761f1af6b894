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
  ``cloud`` (the VM or the request around it).
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

Kind = Literal["failure", "symptom", "wrapper", "warning", "info", "noise"]
Scope = Literal["boot", "serving", "cloud"]

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
        if self.kind in ("failure", "symptom", "wrapper"):
            return "error"
        return self.kind


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


_FIX_UTIL = "--gpu-memory-utilization 0.92 (v5e: leave ~1.26 GiB above the cap for compiled programs)"

SIGNATURES: tuple[Signature, ...] = (
    # ---- boot failures: memory --------------------------------------------------------------------
    _rule(
        "program-allocation-oom",
        "failure",
        "boot",
        "hbm",
        (
            rf"Error loading program '?(?P<program>[^':\n]*)'?: Attempting to reserve (?P<wanted>{_SIZE}) at the "
            rf"bottom of memory\. That was not possible\. There are (?P<free>{_SIZE}) free",
            r"RuntimeProgramAllocationFailure|openxla\.org/xla/errors/error_0101",
        ),
        ("Error loading program", "RuntimeProgramAllocationFailure", "error_0101"),
        "compiled program does not fit in HBM (after KV init)",
        "--gpu-memory-utilization too high: the KV pool filled the cap and the HBM left above it cannot hold "
        "the compiled XLA programs (0.95 on v5e leaves 0.79 GiB; 0.92 leaves 1.26 GiB)",
        _FIX_UTIL,
        "XLA E0101 RuntimeProgramAllocationFailure (openxla.org/xla/errors/error_0101; older libtpu: "
        "'RESOURCE_EXHAUSTED: Error loading program ...: Attempting to reserve'); "
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
        "lower --max-model-len to what the pool holds, or raise --gpu-memory-utilization (at most 0.92 on v5e), "
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
            r"manifest unknown|repository does not exist or may require 'docker login'",
        ),
        ("manifest", "pull access denied", "repository does not exist"),
        "container image not found (pull failed)",
        "the image tag or name does not exist in the registry (vllm/vllm-tpu publishes no 'latest' tag), or the "
        "registry refused an anonymous pull of a private image",
        "pin an existing tag or digest (VLLM_IMAGE, e.g. vllm/vllm-tpu:v0.30.0; check it with docker manifest "
        "inspect), or log the VM in to the registry",
        "Docker daemon texts ('manifest for X not found: manifest unknown', 'pull access denied for X, repository "
        "does not exist or may require docker login'), podman ('reading manifest T in X: manifest unknown'); "
        "vllm-project/vllm#17114 (field report B08)",
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
        (r"provisioning model is not supported for accelerator type",),
        ("provisioning model is not supported", "PROVISIONING MODEL IS NOT SUPPORTED", "provisioning model"),
        "Provisioning model not offered here",
        "this (zone, provisioning model, accelerator) triple is not offered",
        "use a zone that lists the provisioning model for this accelerator",
        "DESIGN §3 (FLEX_START ... not supported ... in location)",
        weight=85,
        flags=re.I,
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
