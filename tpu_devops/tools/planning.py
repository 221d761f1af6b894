"""Plan: what a deployment holds before you pay for it. Sizing (HBM, KV cache), the vLLM flag lint and the
startup script (or the same deployment as commands). No cloud account needed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

import tpu_devops
from tpu_devops.config import GPU_MEMORY_UTILIZATION_RANGE, MAX_MODEL_LEN_RANGE, get_settings
from tpu_devops.host.toolsets import READ, Toolset
from tpu_devops.tools.args import SANE, AcceleratorType, ServingOverrides

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.planning.deployment
    import tpu_devops.planning.lint
    import tpu_devops.planning.sizing
    import tpu_devops.planning.startup

toolset = Toolset("plan", "size, lint and render a deployment before paying for it", default=True)
tool = toolset.tool
toolset.renamed("get_vllm_deployment_config", "render_startup_script with form='commands'")

ModelRef = Annotated[str | None, Field(description="config.json path or repo id")]


@tool(title="Plan capacity: HBM budget and KV cache", kind=READ, open_world=True)
def plan_capacity(
    model: ModelRef = None,
    accelerator_type: AcceleratorType = None,
    gpu_memory_utilization: Annotated[
        float | None,
        Field(
            ge=GPU_MEMORY_UTILIZATION_RANGE[0],
            le=GPU_MEMORY_UTILIZATION_RANGE[1],
            description="HBM share vLLM may use",
        ),
    ] = None,
    max_model_len: Annotated[
        int | None,
        Field(ge=MAX_MODEL_LEN_RANGE[0], le=MAX_MODEL_LEN_RANGE[1], description="tokens per request"),
    ] = None,
    tensor_parallel_size: Annotated[
        int | None, Field(ge=1, le=256, description="chips per engine"), SANE
    ] = None,
    weights_gib: Annotated[
        float | None, Field(ge=0.01, le=4096, description="weights GiB, if unknown"), SANE
    ] = None,
    clients: Annotated[int | None, Field(ge=1, le=100_000, description="concurrent requests"), SANE] = None,
    context_tokens: Annotated[
        int | None, Field(ge=1, le=MAX_MODEL_LEN_RANGE[1], description="tokens per request"), SANE
    ] = None,
    kv_cache_dtype: Annotated[str, Field(description="KV cache dtype")] = "bfloat16",
) -> tpu_devops.planning.sizing.PlanResult:
    """HBM and KV-cache budget and max concurrency.

    What a deployment holds before you pay for it: KV bytes per token from the model's config geometry
    (per layer group: cache-owning vs KV-shared layers, sliding vs full attention, head_dim, KV heads and
    their replication under tensor parallelism), the HBM budget (total, cap, weights, KV pool, the
    remainder outside the cap that holds compiled programs), KV tokens in whole blocks, max concurrency at
    max_model_len, and whether clients x context_tokens fits. Without a known weight size it still gives
    every figure that needs no weights and says what the weights would add. Gemma 4 E2B on v5litepod-1 at
    0.92 and 16,384: 18,432 B/token, 321,376 tokens."""
    return tpu_devops.planning.sizing.plan_capacity_with_defaults(
        get_settings(),
        model=model,
        accelerator_type=accelerator_type,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        tensor_parallel_size=tensor_parallel_size,
        weights_gib=weights_gib,
        clients=clients,
        context_tokens=context_tokens,
        kv_cache_dtype=kv_cache_dtype,
    )


@tool(title="Lint vLLM serve flags for TPU", kind=READ, open_world=False)
def lint_vllm_flags(
    command: Annotated[
        str | None, Field(max_length=8_000, description="vllm serve or docker run line")
    ] = None,
    flags: Annotated[
        dict[str, Any] | None, Field(max_length=100, description="flags as {name: value}"), SANE
    ] = None,
    accelerator_type: AcceleratorType = None,
    model: Annotated[str | None, Field(description="model served")] = None,
    image: Annotated[str | None, Field(description="vLLM image")] = None,
    health_check_path: Annotated[str | None, Field(description="health check path")] = None,
    engines: Annotated[int, Field(ge=1, le=64, description="engines per host")] = 1,
) -> tpu_devops.planning.lint.LintResult:
    """Check vllm serve flags for TPU traps.

    Check vLLM-on-TPU flags for the known traps before a boot fails: memory utilization above 0.92 on
    v5e, fp8 or invalid KV cache dtypes, non-power-of-two or too-small max-num-batched-tokens, pinned
    block size, tensor parallelism beyond the chips or with one KV head, chips paid for and idle (engines x
    TP below the slice's chips), missing tool-calling flags, /v1/completions health checks on -it models,
    unpinned images, no compile-cache mount. A docker run line is read whole: its -e / --env / --env-file
    variables (an empty or gs:// XLA cache path), mounts, quantization against the TPU platform's list,
    parsers given to another model family, known bad vLLM/transformers version pairs. Each finding:
    severity, flag, value, what happens, why, source, fix."""
    return tpu_devops.planning.lint.lint_with_defaults(
        get_settings(),
        command=command,
        flags=flags,
        accelerator_type=accelerator_type,
        model=model,
        image=image,
        health_check_path=health_check_path,
        engines=engines,
    )


@tool(title="Render the TPU VM startup script", kind=READ, open_world=False)
async def render_startup_script(
    overrides: ServingOverrides,
    form: Annotated[
        Literal["script", "commands"],
        Field(description="script, or commands (vllm, docker, gcloud)"),
    ] = "script",
) -> tpu_devops.planning.deployment.DeploymentView:
    """The TPU VM startup script, or the same as commands.

    form=script: the startup script a TPU VM runs at boot: fetch the Hugging Face token from Secret Manager
    with the VM's service account (retrying up to 30 min; the token is never in the script), pull the pinned
    vLLM image, mount the compile cache, ship container logs to Cloud Logging, record the serving flags and
    progress in guest attributes. form=commands: the same deployment as human-readable commands: the vllm
    serve line (built by the same function), the docker run line, the equivalent gcloud commands (secret,
    IAM grant, queued resource create/describe/delete, logs) and a chat-completions health check."""
    settings = tpu_devops.planning.startup.apply_overrides(get_settings(), **overrides.values())
    return await tpu_devops.planning.deployment.deployment_view(settings, form)
