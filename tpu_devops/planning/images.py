"""The vLLM image against the model: is the image's vLLM new enough to serve the model's architecture?

An image older than the first vLLM release that supports the architecture pulls fine and then fails
to load the model, minutes into a billed boot. `check_image` reads the vLLM version from
the image tag (``vllm/vllm-tpu:v0.30.0`` -> 0.30.0) and the architecture from the model's
``config.json`` (``model_type`` / ``architectures``; bundled or local copies only, never the network),
and compares them with `FIRST_SUPPORT`, one row per architecture with its source.

The default image, ``vllm/vllm-tpu:v0.30.0`` (`VERIFIED_IMAGE`), is the release the seed article served
google/gemma-4-E2B-it with on a v5e-1 (2026-10-25); the real boot logs in tests/data are 0.26.x builds.
A digest-only reference (``@sha256:...``) names no version: the answer says so. A moving tag
(``nightly``, ``latest``) is `lint`'s ``image-unpinned`` warning, never a refusal. A release inside a
known bad version range for the model (`tpu_devops.planning.version_traps`, e.g. vLLM 0.27.x with
transformers >= 5.15 on Gemma 4) is a warning from plan, create, the sweep and lint alike
(`image_traps`), and the same row gives `diagnose_vllm_boot` its fix when the log shows the failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from tpu_devops.planning.version_traps import VersionTrap, traps_for

VERIFIED_IMAGE = "vllm/vllm-tpu:v0.30.0"
VERIFIED_SOURCE = (
    "the seed article served google/gemma-4-E2B-it on v5e-1 with vllm/vllm-tpu:v0.30.0 (2026-10-25)"
)

FLOATING_TAGS = ("latest", "nightly")


@dataclass(frozen=True)
class ArchSupport:
    """First vLLM release that serves an architecture. A config matches when its ``model_type`` (or its
    ``text_config.model_type``) is in ``model_types`` or one of its ``architectures`` is listed, and,
    when ``rope_type`` is set, its ``rope_scaling.rope_type`` equals it."""

    name: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    min_version: str
    source: str
    rope_type: str | None = None


FIRST_SUPPORT: tuple[ArchSupport, ...] = (
    ArchSupport(
        "Gemma 4",
        ("gemma4", "gemma4_text"),
        ("Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"),
        "0.19.0",
        "vllm-project/vllm-metal PR #250 (bumps vLLM to 0.19.0 for Gemma 4); NVIDIA-NeMo/Gym#1141 "
        '("Gemma 4 which need vllm>=0.19.0")',
    ),
    ArchSupport(
        "Qwen3",
        ("qwen3",),
        ("Qwen3ForCausalLM",),
        "0.8.4",
        'vllm-project/vllm#17630, maintainer: "You need to update vLLM to at least V0.8.4" for Qwen3ForCausalLM',
    ),
    ArchSupport(
        "Llama 3.1 (llama3 RoPE scaling)",
        ("llama",),
        ("LlamaForCausalLM",),
        "0.5.3.post1",
        "vllm-project/vllm#6696 (v0.5.3.post1 released to resolve the Llama 3.1 rope scaling issue, #6689)",
        rope_type="llama3",
    ),
)


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference. ``version``: the vLLM version the tag names (None when it names none)."""

    image: str
    repository: str
    tag: str | None
    digest: str | None
    version: Version | None

    @property
    def floating(self) -> bool:
        """True for a tag that moves (``latest``, ``nightly``, ``nightly-...``) and carries no digest."""
        tag = self.tag or ("latest" if self.digest is None else None)
        return self.digest is None and tag is not None and tag.startswith(FLOATING_TAGS)


_VERSION_IN_TAG = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)(?:$|[-_+.])")


def parse_image(image: str) -> ImageRef:
    """Split ``registry/repo:tag@sha256:digest`` and read the vLLM version from the tag.

    ``v0.30.0``, ``0.30.0``, ``v0.5.3.post1`` and ``v0.30.0-tpu`` give a version; ``nightly``, ``latest``,
    ``nightly-2026...`` and a digest-only reference give none.
    """
    text = image.strip()
    ref, _, digest = text.partition("@")
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = last.split(":", 1)
        repository: str = ref[: len(ref) - len(last)] + name
    else:
        repository, tag = ref, None
    version = None
    if tag and (m := _VERSION_IN_TAG.match(tag)):
        try:
            version = Version(m.group(1))
        except InvalidVersion:
            version = None
    return ImageRef(text, repository, tag, digest or None, version)


def support_for(config: dict[str, Any]) -> ArchSupport | None:
    """The `FIRST_SUPPORT` row that matches a model ``config.json`` (None: no minimum known)."""
    types = {config.get("model_type"), (config.get("text_config") or {}).get("model_type")} - {None}
    archs = set(config.get("architectures") or [])
    rope = (config.get("rope_scaling") or {}).get("rope_type") or (config.get("rope_scaling") or {}).get(
        "type"
    )
    for row in FIRST_SUPPORT:
        if (types & set(row.model_types) or archs & set(row.architectures)) and (
            row.rope_type is None or rope == row.rope_type
        ):
            return row
    return None


def local_model_config(model: str | None) -> dict[str, Any] | None:
    """The model's ``config.json`` from a bundled copy or a local path; None otherwise (never downloads)."""
    if not model:
        return None
    from tpu_devops.errors import InputError
    from tpu_devops.planning import sizing

    text = model.strip()
    local = text.startswith((".", "/", "~")) or text.endswith(".json") or Path(text).expanduser().exists()
    if not local and sizing.bundled_config_path(text) is None:
        return None
    try:
        cfg, _, _ = sizing.load_model_config(text)
    except InputError:
        return None
    return cfg


Status = Literal["supported", "too_old", "floating", "version_unknown", "no_minimum_known"]


@dataclass(frozen=True)
class ImageCheck:
    """The image against the model. ``status``: supported / too_old (refused by create unless overridden) /
    floating (a moving tag) / version_unknown (a digest or an unreadable tag) / no_minimum_known (no row
    for the model, or no local config). ``message`` is one sentence; ``fix`` is set when action is due."""

    image: str
    model: str | None
    status: Status
    version: str | None
    required: str | None
    architecture: str | None
    source: str | None
    message: str
    fix: str | None = None


def check_image(image: str, model: str | None, config: dict[str, Any] | None = None) -> ImageCheck:
    """Compare ``image``'s vLLM version with the first release that supports ``model``'s architecture.

    ``config``: the model's parsed ``config.json`` when the caller has it; else `local_model_config`.
    Sources: `FIRST_SUPPORT` rows; the suggested image is `VERIFIED_IMAGE` (`VERIFIED_SOURCE`).
    """
    ref = parse_image(image)
    row = support_for(config if config is not None else (local_model_config(model) or {}))
    version = str(ref.version) if ref.version else None
    base: dict[str, Any] = {"image": image, "model": model, "version": version}
    if ref.floating:
        return ImageCheck(
            **base, status="floating", required=row.min_version if row else None,
            architecture=row.name if row else None, source=row.source if row else None,
            message=f"{image} is a moving tag: which vLLM it brings is known only after the pull",
            fix=f"pin a release, e.g. VLLM_IMAGE={VERIFIED_IMAGE} ({VERIFIED_SOURCE})",
        )  # fmt: skip
    if row is None:
        return ImageCheck(
            **base, status="no_minimum_known", required=None, architecture=None, source=None,
            message=f"no known minimum vLLM release for {model or 'this model'}; the image is not checked against it",
        )  # fmt: skip
    facts = {"required": row.min_version, "architecture": row.name, "source": row.source}
    if ref.version is None:
        what = (
            "a digest names no version" if ref.digest and not ref.tag else f"tag '{ref.tag}' names no release"
        )
        return ImageCheck(
            **base, status="version_unknown", **facts,
            message=f"the vLLM version of {image} is unknown ({what}); {row.name} needs vLLM >= {row.min_version}",
            fix=f"make sure the image is vLLM {row.min_version} or newer, or pin a release tag such as {VERIFIED_IMAGE}",
        )  # fmt: skip
    if ref.version < Version(row.min_version):
        return ImageCheck(
            **base, status="too_old", **facts,
            message=(
                f"{image} is vLLM {ref.version}, older than {row.min_version}, the first release that serves "
                f"{row.name} ({model}): the pull succeeds and the server then fails to load the model"
            ),
            fix=f"set VLLM_IMAGE={VERIFIED_IMAGE} ({VERIFIED_SOURCE}) or another release >= v{row.min_version}",
        )  # fmt: skip
    return ImageCheck(
        **base, status="supported", **facts,
        message=f"{image} is vLLM {ref.version} >= {row.min_version} ({row.name})",
    )  # fmt: skip


def image_traps(image: str, model: str | None, config: dict[str, Any] | None = None) -> list[VersionTrap]:
    """The known bad version ranges (`tpu_devops.planning.version_traps`) the image's vLLM release
    falls into for ``model`` (config: its parsed config.json, else a bundled/local copy, else its id)."""
    ref = parse_image(image)
    if ref.version is None:
        return []
    cfg = config if config is not None else local_model_config(model)
    return traps_for(model, ref.version, cfg)


def image_gate(
    image: str, model: str | None, *, allow_unsupported_image: bool = False, dry_run: bool = False
) -> list[str]:
    """What plan, create and the sweep say about the image: warnings, or a refusal for one too old.

    Returns the warnings to show (a moving tag, an unknown version, a too-old image the caller
    explicitly allowed, or, with ``dry_run`` (a plan), that create will refuse it). Raises `ConfigError`
    (field ``VLLM_IMAGE``) for an image older than the model's first supporting release unless
    ``allow_unsupported_image`` or ``dry_run``.
    """
    from tpu_devops.errors import ConfigError

    check = check_image(image, model)
    if check.status == "too_old" and dry_run and not allow_unsupported_image:
        return [
            f"IMAGE TOO OLD: create refuses it (unless allow_unsupported_image=true): {check.message}. "
            f"Fix: {check.fix}"
        ]
    if check.status == "too_old" and not allow_unsupported_image:
        raise ConfigError(
            check.message,
            field="VLLM_IMAGE",
            value=image,
            fix=f"{check.fix}; or pass allow_unsupported_image=true to create it anyway",
        )
    if check.status == "too_old":
        return [f"UNSUPPORTED IMAGE (allow_unsupported_image=true): {check.message}"]
    if check.status in ("floating", "version_unknown"):
        return [f"{check.message}: {check.fix}"]
    # A trap that needs a transformers range is a warning: the tag does not say which transformers the
    # image ships (vllm/vllm-openai v0.27.1 shipped 5.15.0, the bad one).
    return [
        f"KNOWN VERSION TRAP ({trap.id}): {image} is vLLM {check.version} and {trap.symptom}. Fix: {trap.fix} "
        f"[{trap.source}]"
        for trap in image_traps(image, model)
    ]
