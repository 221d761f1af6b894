"""The TPU VM startup script and the one place vLLM serving flags are built.

`vllm_serve_flags` is the single builder of ``vllm serve`` flags: the startup script, the human-readable
deployment config and the create path (queued-resource metadata) all call it, so what is planned,
linted and deployed cannot drift apart.

`render_startup_script` fills ``startup_script.sh.tmpl`` (package data in ``tpu_devops/data/``; the
repository root links to it) with ``str.format``; every value is passed through `shlex.quote` first, and values with control characters (newline, NUL, ...)
are refused because no quoting makes a multi-line setting safe to show in a log. The script itself
never contains the Hugging Face token or the vLLM API key: the VM fetches both from Secret Manager at
boot (DESIGN §2) and hands them to the container through a root-only env file.

Where the serving flags are recorded on the VM (read later by endpoint tools): the guest attribute
``tpu-devops/serving-flags`` (TPU API ``nodes.getGuestAttributes``; JSON of `serving_flags_record`),
``/var/lib/tpu-devops/serving-flags.json``, and a ``SERVING_FLAGS {json}`` syslog line (tag
``tpu-devops``). Boot progress is the guest attribute ``tpu-devops/stage`` plus ``STAGE <name>`` syslog
lines. Container logs reach Cloud Logging as log ``gcplogs-docker-driver`` (Docker ``gcplogs`` driver).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

from pydantic import Field

from tpu_devops import __version__, names
from tpu_devops.catalog import safe_memory_utilization_advice
from tpu_devops.config import (
    GPU_MEMORY_UTILIZATION_RANGE,
    MAX_MODEL_LEN_RANGE,
    MAX_NUM_BATCHED_TOKENS_RANGE,
    Settings,
)
from tpu_devops.errors import ConfigError
from tpu_devops.host import artifacts
from tpu_devops.host.artifacts import Artifact
from tpu_devops.host.results import ToolResult
from tpu_devops.planning import multiengine
from tpu_devops.planning.shapes import shape_key

# Package data (in the wheel); the checkout's top-level startup_script.sh.tmpl is a link to it.
TEMPLATE_PATH = Path(__file__).resolve().parents[1] / "data" / "startup_script.sh.tmpl"
GEMMA4_PARSER = "gemma4"  # vLLM tool-call and reasoning parser name for Gemma 4 (seed serve command)
# Gemma 4 needs a batch budget of at least one multimodal item (2496 tokens): vLLM disables chunked MM
# input for it and refuses to boot at the 2048 default. 4096 is the seed's measured power-of-two value.
GEMMA4_BATCHED_TOKENS = 4096
COMPILE_CACHE_MOUNT = "/root/.cache/vllm"
GUEST_ATTRIBUTE_FLAGS = "tpu-devops/serving-flags"
GUEST_ATTRIBUTE_STAGE = "tpu-devops/stage"
CONTAINER_LOG_NAME = "gcplogs-docker-driver"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_gemma4(model: str) -> bool:
    """True for Gemma 4 repo ids / paths (``google/gemma-4-E2B-it``, ``.../gemma-4-31b``)."""
    return bool(re.search(r"gemma-?4", model, re.IGNORECASE))


def vllm_serve_flags(settings: Settings) -> list[str]:
    """The ``vllm serve MODEL`` flags for these settings (the model itself is not included).

    Always: ``--host 0.0.0.0 --port P --served-model-name MODEL --tensor-parallel-size N
    --gpu-memory-utilization U``; when set: ``--max-model-len``, ``--max-num-batched-tokens``,
    ``--limit-mm-per-prompt`` (compact JSON); for Gemma 4: ``--enable-auto-tool-choice
    --tool-call-parser gemma4 --reasoning-parser gemma4`` (tool calling needs both, DESIGN §3) and
    ``--max-num-batched-tokens 4096`` unless MAX_NUM_BATCHED_TOKENS is set (below the 2496-token
    multimodal item the boot fails with "Chunked MM input disabled ...").
    Not set on purpose: ``--block-size``, ``--max-num-seqs``, ``--kv-cache-dtype`` (seed: leave them).
    """
    flags = [
        "--host",
        "0.0.0.0",
        "--port",
        str(settings.vllm_port),
        "--served-model-name",
        settings.model_name,
        "--tensor-parallel-size",
        str(settings.tensor_parallel_size),
        "--gpu-memory-utilization",
        f"{settings.gpu_memory_utilization:g}",
    ]
    if settings.max_model_len:
        flags += ["--max-model-len", str(settings.max_model_len)]
    batched = settings.max_num_batched_tokens or (
        GEMMA4_BATCHED_TOKENS if is_gemma4(settings.model_name) else None
    )
    if batched:
        flags += ["--max-num-batched-tokens", str(batched)]
    if settings.limit_mm_per_prompt is not None:
        flags += ["--limit-mm-per-prompt", json.dumps(settings.limit_mm_per_prompt, separators=(",", ":"))]
    if is_gemma4(settings.model_name):
        flags += [
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            GEMMA4_PARSER,
            "--reasoning-parser",
            GEMMA4_PARSER,
        ]
    return flags


def vllm_serve_argv(settings: Settings) -> list[str]:
    """``["vllm", "serve", MODEL, *vllm_serve_flags(settings)]``."""
    return ["vllm", "serve", settings.model_name, *vllm_serve_flags(settings)]


def script_args(settings: Settings) -> list[str]:
    """The ``VLLM_ARGS`` array of the startup script (what follows ``vllm serve MODEL``; the script adds
    each engine's ``--port``): the one list both the rendered script and a reconfigure spec carry, so the
    watcher runs what a boot would."""
    return _without_port(vllm_serve_flags(settings))


def serving_flags_record(settings: Settings) -> dict[str, Any]:
    """What the VM records about how it serves: ``{model, image, port, argv, flags, rendered_by}``."""
    return {
        "model": settings.model_name,
        "image": settings.vllm_image,
        "port": settings.vllm_port,
        "argv": vllm_serve_argv(settings),
        "flags": vllm_serve_flags(settings),
        "engines": multiengine.engines_record(settings),
        "rendered_by": f"tpu-devops {__version__}",
    }


def _whole_number_in(field: str, value: int, bounds: tuple[int, int], example: str) -> int:
    """``value`` when it is a whole number within ``bounds`` (inclusive; a bool is not one), else a
    `ConfigError` naming ``field``, the range and ``example`` as the fix."""
    lo, hi = bounds
    if isinstance(value, bool) or not lo <= value <= hi:
        raise ConfigError(
            f"out of range [{lo:,}, {hi:,}]",
            field=field,
            value=value,
            fix=f"use {lo:,}..{hi:,}, e.g. {example}",
        )
    return value


def apply_overrides(
    settings: Settings,
    *,
    model_name: str | None = None,
    max_model_len: int | None = None,
    gpu_memory_utilization: float | None = None,
    vllm_image: str | None = None,
    max_num_batched_tokens: int | None = None,
) -> Settings:
    """A copy of ``settings`` with the given fields replaced, validated like `config.load_settings`.

    Raises:
        ConfigError: a value out of range, a model that is not a Hugging Face repo id, an image that is not
            one or not from an allowed repository (`tpu_devops.names`).
    """
    update: dict[str, Any] = {}
    if model_name is not None:
        update["model_name"] = names.check_model_id(model_name, "model_name")
    if max_model_len is not None:
        update["max_model_len"] = _whole_number_in(
            "max_model_len", max_model_len, MAX_MODEL_LEN_RANGE, "16384"
        )
    if gpu_memory_utilization is not None:
        lo_u, hi_u = GPU_MEMORY_UTILIZATION_RANGE
        if not lo_u <= gpu_memory_utilization <= hi_u:
            raise ConfigError(
                f"not a fraction between {lo_u} and {hi_u}",
                field="gpu_memory_utilization",
                value=gpu_memory_utilization,
                fix=f"use {safe_memory_utilization_advice()}",
            )
        update["gpu_memory_utilization"] = gpu_memory_utilization
    if max_num_batched_tokens is not None:
        update["max_num_batched_tokens"] = _whole_number_in(
            "max_num_batched_tokens",
            max_num_batched_tokens,
            MAX_NUM_BATCHED_TOKENS_RANGE,
            "4096 (at least 2,496 for Gemma 4: one image's tokens)",
        )
    if vllm_image is not None:
        names.check_image(vllm_image, settings.image_repositories, "vllm_image")
        update["vllm_image"] = vllm_image
    return settings.model_copy(update=update) if update else settings


def _reject_control(field: str, value: str) -> None:
    if _CONTROL.search(value):
        raise ConfigError(
            "contains a control character (newline, tab, NUL, ...)",
            field=field,
            value=value.encode("unicode_escape").decode(),
            fix="remove it: settings rendered into the startup script must be one plain line",
        )


def _q(field: str, value: Any) -> str:
    text = str(value)
    _reject_control(field, text)
    return shlex.quote(text)


class RenderedScript(ToolResult):
    """`render_startup_script` result: what the script will run, and the script itself as a file.

    The whole script (~30 KB) is larger than an answer every host takes whole (`tpu_devops.host.results`),
    so the answer carries its settings block (what a person checks), digest and size, and ``file``: the
    script written under the state directory, offered as an MCP resource (`tpu_devops.host.artifacts`).
    Without a file (the state directory cannot be written) the text carries the script instead.
    """

    metadata_key: str = Field("startup-script", description="instance metadata key the script goes under")
    script: str = Field(exclude=True)  # the file holds it: `file`, or the text when there is none
    sha256: str
    bytes: int
    image: str
    serve_command: str = Field(description="the vllm serve command line inside the container")
    flags: list[str]
    settings_block: str = Field(description="the script's rendered settings: project, secrets, image, flags")
    records: dict[str, str] = Field(description="where the VM records flags, progress and container logs")
    notes: list[str]
    file: Artifact | None = Field(None, description="the whole script, written under the state directory")

    def headline(self) -> str:
        """One line: size, digest, what it serves."""
        return f"startup script: {self.bytes:,} bytes, sha256 {self.sha256[:12]}, serves {self.serve_command}"

    def render_text(self) -> str:
        """Headline, the file, where it goes and what it records, notes, the settings block (the whole
        script instead when there is no file)."""
        notes = "\n".join(f"- {n}" for n in self.notes)
        records = "\n".join(f"records {k}: {v}" for k, v in self.records.items())
        meta = f"instance metadata key: {self.metadata_key}; sha256 {self.sha256}"
        if self.file is None:
            return f"{self.headline()}\n{meta}\n{records}\n{notes}\n\n{self.script}"
        where = f"file: {self.file.describe()}; pass it as --metadata-from-file {self.metadata_key}=PATH"
        return f"{self.headline()}\n{where}\n{meta}\n{records}\n{notes}\n\nsettings block:\n{self.settings_block}"

    def more_hint(self) -> str:
        return "read the script's file (file.path, or resources/read of file.uri)"

    def with_file(self, state_dir: str) -> RenderedScript:
        """This result with the script written under ``state_dir`` (`tpu_devops.host.artifacts.write`);
        unchanged (the text then carries the script) when it cannot be written."""
        try:
            file = artifacts.write(
                "startup-script",
                self.script,
                suffix=".sh",
                mime_type="text/x-shellscript",
                state_dir=state_dir,
            )
        except OSError as exc:
            self.notes.append(
                f"The script could not be saved under {state_dir} ({exc.strerror or exc}): it is inline."
            )
            return self
        return self.model_copy(update={"file": file})


def render_startup_script(settings: Settings) -> RenderedScript:
    """Render ``startup_script.sh.tmpl`` for ``settings``.

    Raises:
        ConfigError: a setting contains a control character; the template is missing.
    """
    try:
        template = TEMPLATE_PATH.read_text(encoding="utf-8")
    except OSError:
        raise ConfigError(
            "startup script template not found",
            field="template",
            value=str(TEMPLATE_PATH),
            fix="reinstall tpu-devops (the wheel carries tpu_devops/data/startup_script.sh.tmpl)",
        ) from None
    # Settings may be copies with fields replaced: the names are checked again where they become a script.
    names.check_model_id(settings.model_name, "MODEL_NAME")
    names.check_image(settings.vllm_image, settings.image_repositories, "VLLM_IMAGE")
    flags = vllm_serve_flags(settings)
    for i, flag in enumerate(flags):
        _reject_control(f"vllm flag {i}", flag)
    record = json.dumps(serving_flags_record(settings), separators=(",", ":"))
    ports = multiengine.engine_ports(settings)
    tpu_envs = [
        ";".join(f"{k}={v}" for k, v in multiengine.tpu_env(settings, i).items()) for i in range(len(ports))
    ]
    script = template.format(
        project_id=_q("GOOGLE_CLOUD_PROJECT", settings.project),
        hf_secret_id=_q("HF_SECRET_ID", settings.hf_secret_id),
        vllm_api_key_secret_id=_q("VLLM_API_KEY_SECRET_ID", settings.vllm_api_key_secret_id),
        vllm_image=_q("VLLM_IMAGE", settings.vllm_image),
        image_repositories=" ".join(_q("VLLM_IMAGE_REPOSITORIES", r) for r in settings.image_repositories),
        model_name=_q("MODEL_NAME", settings.model_name),
        vllm_port=_q("VLLM_PORT", settings.vllm_port),
        resource_id=_q("RESOURCE_ID", settings.resource_id),
        serving_flags_json=_q("serving flags", record),
        # The port is per engine: the script adds --port for each (VLLM_PORT when there is one engine).
        vllm_args="\n".join(f"  {line}" for line in _paired(script_args(settings))),
        engines=len(ports),
        engine_ports=" ".join(str(p) for p in ports),
        engine_tpu_env="\n".join(f"  {shlex.quote(e)}" for e in tpu_envs) if len(ports) > 1 else "",
        lb_image=_q("LB_IMAGE", multiengine.LB_IMAGE),
        lb_config="\n".join(
            f"  {_q('LB_CONFIG', line)}" for line in multiengine.haproxy_config(settings).splitlines()
        ),
        accelerator_type=_q("ACCELERATOR_TYPE", settings.accelerator_type),
        bucket=_q("TPU_DEVOPS_BUCKET", settings.bucket),
        cache_shape_key=_q("cache shape key", shape_key(flags)),
    )
    script = compact(script)
    notes = [
        "The Hugging Face token is not in this script: the VM reads secret "
        f"{settings.hf_secret_id!r} from Secret Manager at boot (retrying up to 30 min) with its service account, "
        "which needs roles/secretmanager.secretAccessor on that secret.",
        f"The vLLM API key is not in this script either: the VM reads secret {settings.vllm_api_key_secret_id!r} "
        "the same way and passes it to vLLM as VLLM_API_KEY through the container's env file, so vLLM answers "
        "/v1/* only to requests that carry it (its service account needs secretAccessor on that secret too).",
        f"Image {settings.vllm_image}"
        + (
            " is a floating tag: pin a digest you have tested."
            if _floating(settings.vllm_image)
            else " is pinned."
        ),
        *filter(None, [names.non_default_source(settings.vllm_image)]),
        f"The JAX compile cache persists in {COMPILE_CACHE_MOUNT} on the VM (warm boots skip most XLA compilation).",
        f"Container logs go to Cloud Logging (log {CONTAINER_LOG_NAME}) when the VM's service account has "
        "roles/logging.logWriter; otherwise the script falls back to local logs (docker logs vllm) and says so "
        "in the tpu-devops/stage guest attribute.",
        "Each engine gets Docker's unless-stopped restart policy once it has answered /health (a crash or a dockerd "
        "restart brings it back; a boot that fails stays failed); a change whose image pull fails leaves the "
        "serving container untouched.",
    ]
    if not settings.project:
        notes.append(
            "GOOGLE_CLOUD_PROJECT is not set: the script reads the project id from the metadata server."
        )
    notes.extend(engines_note(settings))
    return RenderedScript(
        script=script,
        sha256=hashlib.sha256(script.encode()).hexdigest(),
        bytes=len(script.encode()),
        image=settings.vllm_image,
        serve_command=shlex.join(vllm_serve_argv(settings)),
        flags=flags,
        settings_block=_settings_block(script),
        records={
            "serving_flags": f"guest attribute {GUEST_ATTRIBUTE_FLAGS}; /var/lib/tpu-devops/serving-flags.json; syslog 'SERVING_FLAGS'",
            "progress": f"guest attribute {GUEST_ATTRIBUTE_STAGE}; syslog tag tpu-devops 'STAGE <name>'; serial console",
            "container_logs": f"Cloud Logging log {CONTAINER_LOG_NAME} (Docker gcplogs driver), label tpu-devops.rig={settings.resource_id}",
        },
        notes=notes,
    )


def _settings_block(script: str) -> str:
    """The lines between the script's ``# ---- settings`` markers (the markers excluded)."""
    lines = script.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("# ---- settings")]
    ends = [i for i, line in enumerate(lines) if line.startswith("# ---- end settings")]
    if not starts or not ends or ends[0] < starts[0]:
        return ""
    return "\n".join(lines[starts[0] + 1 : ends[0]])


def engines_note(settings: Settings) -> list[str]:
    """One note on a multi-engine host (engines, their chips and ports, the balancer); none for one engine."""
    ports = multiengine.engine_ports(settings)
    if len(ports) == 1:
        return []
    return [
        f"{len(ports)} engines, one per {settings.tensor_parallel_size} chip(s) (TPU_VISIBLE_CHIPS), on ports "
        f"{ports[0]}-{ports[-1]} behind HAProxy ({multiengine.LB_IMAGE}, least connections, /health checks) on "
        f"{settings.vllm_port}; /engines/<i>/ reaches engine i (get_serving_status(view='engines') reports each)."
    ]


_KEPT = re.compile(r"^# ---- (end )?settings")  # the settings block's markers: where a person edits
_HEREDOC = re.compile(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*$")


def compact(script: str) -> str:
    """``script`` without its comment lines (the shebang and the settings block's markers stay, a two-line
    header replaces the rest).

    The template documents every step for the people who change it; the rendered copy is what the VM runs
    and what ``render_startup_script`` writes as its file (`RenderedScript.file`), also for an eight-engine
    host. Only whole-line comments outside here-documents go;
    a ``#`` inside a line (``${#names[@]}``, a URL fragment) is never touched.
    """
    lines = script.splitlines()
    out = [lines[0], f"# tpu-devops {__version__} startup script for a Cloud TPU VM (comments stripped: they are in",
           "# startup_script.sh.tmpl). Progress: syslog tag tpu-devops 'STAGE <name>', guest attributes tpu-devops/*."]  # fmt: skip
    end: str | None = None
    for line in lines[1:]:
        if end is not None:
            out.append(line)
            if line.strip() == end:
                end = None
            continue
        if line.lstrip().startswith("#") and not _KEPT.match(line):
            continue
        if m := _HEREDOC.search(line):
            end = m.group(1)
        out.append(line)
    return "\n".join(out) + "\n"


def _without_port(flags: list[str]) -> list[str]:
    """``flags`` without the ``--port N`` pair."""
    out: list[str] = []
    skip = False
    for token in flags:
        if skip:
            skip = False
        elif token == "--port":
            skip = True
        else:
            out.append(token)
    return out


def _paired(flags: list[str]) -> list[str]:
    """Quoted flags, one ``--flag value`` pair per line (boolean flags alone)."""
    lines: list[str] = []
    for token in flags:
        if lines and not token.startswith("--") and lines[-1].startswith("--") and " " not in lines[-1]:
            lines[-1] += " " + shlex.quote(token)
        else:
            lines.append(shlex.quote(token))
    return lines


def _floating(image: str) -> bool:
    if "@sha256:" in image:
        return False
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "latest"
    return tag in ("latest", "nightly") or tag.startswith("nightly")


def docker_run_command(settings: Settings) -> str:
    """The ``docker run ... vllm serve`` line of one engine on the TPU VM, for a person (the startup
    script runs the same image and `vllm_serve_argv`, with the key and token in a root-only env file, and
    sets the same restart policy once the engine serves)."""
    return " \\\n  ".join(
        [
            "sudo docker run -d --name vllm --privileged --net host --shm-size 16G --restart unless-stopped",
            "--env-file /run/tpu-devops/vllm.env",
            f"-v /root/.cache/vllm:{COMPILE_CACHE_MOUNT}",
            "-v /root/.cache/huggingface:/root/.cache/huggingface",
            "--log-driver=gcplogs",
            shlex.quote(settings.vllm_image) + " " + shlex.join(vllm_serve_argv(settings)),
        ]
    )
