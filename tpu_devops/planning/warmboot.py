"""Warm boots: the compile-cache key, what the bucket holds for this deployment, and the boot-time model.

**Cache key.** A compile cache is valid for one image build, one accelerator type, one model and one
set of flags that change compiled shapes. The object path carries all four, so caches never mix:
``compile-cache/<accelerator>/<model>/<shape key>/<image key>/cache.tar.gz``. The shape key hashes
every serving flag except the few that cannot change a compiled program (`tpu_devops.planning.shapes.SHAPE_NEUTRAL`: addresses,
names, parsers, logging); unknown flags count as shape-changing, so a new flag splits the cache rather
than mixing it. The image key is the first 16 hex digits of the pulled image's digest, known on the VM
after the pull (``docker image inspect``); the VM writes ``image`` and ``image_digest`` into the object's
metadata, which is how a tag is matched here.

**Staged weights.** ``weights/<model>/`` holds the Hugging Face snapshot copied by the VM after its
first healthy boot, with ``manifest.json`` written last (its presence means the copy is complete).

**Boot-time model** (seed measurements, DESIGN §3 and the seed's scale-out/restart article): on a
v5e-1 serving gemma-4-E2B-it, a cold start took 857 s and a start with a mounted compile cache 497 s;
XLA compilation is 738 of the 814 s engine start; replacing the container on the same node cost one
engine start, 503.54 s (vllm/vllm-tpu v0.30.0); 31B weights load in 5.6 min from in-region Cloud
Storage against 60-90 min from Hugging Face. Figures for other models or accelerators were not
measured: the answer says so rather than scaling them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.config import Settings
from tpu_devops.errors import TpuDevopsError
from tpu_devops.gcp.common import run_blocking
from tpu_devops.planning.shapes import shape_key
from tpu_devops.provisioning.bucket import CACHE_PREFIX, WEIGHTS_PREFIX, BucketStatus, inspect_bucket

CACHE_OBJECT = "cache.tar.gz"
WEIGHTS_MANIFEST = "manifest.json"

# Seed measurements (DESIGN §3; v5e-1 = v5litepod-1, google/gemma-4-E2B-it, vllm/vllm-tpu).
SEED_ACCELERATOR = "v5litepod-1"
SEED_MODEL = "google/gemma-4-E2B-it"
COLD_BOOT_S = 857.0  # VM up -> serving, no compile cache
WARM_BOOT_S = 497.0  # the same with the compile cache mounted
ENGINE_START_S = 814.0  # vLLM engine start of a cold boot, of which XLA compile:
XLA_COMPILE_S = 738.0
CONTAINER_REPLACE_S = 503.54  # new container on the same node (vllm/vllm-tpu v0.30.0)
WEIGHTS_31B_GCS_S = 5.6 * 60  # Gemma 4 31B weights from in-region Cloud Storage
WEIGHTS_31B_HF_S = (60 * 60.0, 90 * 60.0)  # the same from Hugging Face
SEED_SOURCE = (
    "seed measurements on v5e-1 (v5litepod-1), google/gemma-4-E2B-it, vllm/vllm-tpu (DESIGN §3): cold 857 s, "
    "warm 497 s (compile cache mounted), container replacement 503.54 s (v0.30.0)"
)


def model_path(model: str) -> str:
    """The model as an object path segment (``google/gemma-4-E2B-it``; a local path without its leading /).

    Raises:
        ConfigError: a model that is not a model id (`tpu_devops.names.check_model_id`): its name becomes
            a bucket path and a directory on the VM.
    """
    from tpu_devops import names

    path = names.check_model_id(model.strip().rstrip("/"), "MODEL_NAME").strip("/")
    return names.check_relative_name(path, "MODEL_NAME")


def cache_prefix(accelerator_type: str, model: str, flags: list[str]) -> str:
    """``compile-cache/<accelerator>/<model>/<shape key>/``: every image's cache for this shape."""
    return f"{CACHE_PREFIX}{accelerator_type}/{model_path(model)}/{shape_key(flags)}/"


def weights_prefix(model: str) -> str:
    """``weights/<model>/``."""
    return f"{WEIGHTS_PREFIX}{model_path(model)}/"


def image_key(image: str) -> str | None:
    """16 hex digits of a pinned image's digest (``...@sha256:<hex>``); None for a tag."""
    if "@sha256:" not in image:
        return None
    return image.rsplit("@sha256:", 1)[1][:16].lower()


class BootEstimate(BaseModel):
    """Expected seconds from a running VM to a serving endpoint, with where the figure comes from."""

    seconds: float | None
    measured: bool = Field(description="True when the seed measured this model on this accelerator")
    text: str


def expected_boot(settings: Settings, warm: bool | None) -> BootEstimate:
    """The seed's cold (857 s) or warm (497 s) boot for E2B on v5e-1; for anything else, no figure.

    ``warm`` None (unknown) gives the cold figure with the warm one beside it.
    """
    measured = settings.accelerator_type == SEED_ACCELERATOR and settings.model_name == SEED_MODEL
    if not measured:
        return BootEstimate(
            seconds=None,
            measured=False,
            text=f"no seed measurement for {settings.model_name} on {settings.accelerator_type} "
            f"(for E2B on v5e-1: cold {COLD_BOOT_S:.0f} s, warm {WARM_BOOT_S:.0f} s; seed measurement)",
        )
    seconds = WARM_BOOT_S if warm else COLD_BOOT_S
    kind = "warm (compile cache restored)" if warm else "cold (no compile cache)"
    other = "" if warm else f"; {WARM_BOOT_S:.0f} s once the bucket holds a warm cache"
    return BootEstimate(
        seconds=seconds,
        measured=True,
        text=f"about {seconds:.0f} s to serve, {kind}{other} (seed measurement, v5e-1, E2B)",
    )


class WarmState(BaseModel):
    """What the bucket holds for this deployment (image, accelerator, model, shape flags).

    ``warm_cache`` / ``staged_weights``: True / False, or None when the bucket could not be read.
    """

    bucket: BucketStatus
    cache_prefix: str
    warm_cache: bool | None = None
    cache_detail: str = ""
    staged_weights: bool | None = None
    weights_detail: str = ""
    expected_boot: BootEstimate

    def line(self) -> str:
        """One line: cache, weights, expected boot."""
        if not self.bucket.configured:
            return f"{self.bucket.line()}; {self.expected_boot.text}"
        return (
            f"compile cache: {self.cache_detail}; weights: {self.weights_detail}; {self.expected_boot.text}"
        )

    def lines(self) -> list[str]:
        """The bucket line, then `line`."""
        return (
            [self.bucket.line(), *self.bucket.notes, self.line()] if self.bucket.configured else [self.line()]
        )


def match_cache(objects: list[Any], image: str) -> tuple[Any | None, int]:
    """(the cache object built from ``image``, count of caches for other images) among ``objects``
    (`gcp.storage.ObjectInfo` under one shape prefix). A digest matches the path's image key; a tag
    matches the ``image`` the VM recorded in the object's metadata."""
    caches = [o for o in objects if o.name.endswith("/" + CACHE_OBJECT)]
    pinned = image_key(image)
    for obj in caches:
        key = obj.name.rsplit("/", 2)[-2]
        if (pinned and key == pinned) or (not pinned and obj.metadata.get("image") == image):
            return obj, len(caches) - 1
    return None, len(caches)


async def warm_state(settings: Settings, bucket: BucketStatus | None = None) -> WarmState:
    """Whether a warm compile cache and staged weights exist for this deployment, and the boot estimate.

    Read-only; never raises for a cloud failure (it is said in the details).
    """
    from tpu_devops.gcp import storage
    from tpu_devops.planning.startup import vllm_serve_flags

    bucket = bucket or await inspect_bucket(settings)
    prefix = cache_prefix(settings.accelerator_type, settings.model_name, vllm_serve_flags(settings))
    state = WarmState(bucket=bucket, cache_prefix=prefix, expected_boot=expected_boot(settings, None))
    if not (bucket.configured and bucket.exists and bucket.usable):
        state.cache_detail = state.weights_detail = "no usable bucket"
        return state
    try:
        objects = await run_blocking(storage.list_objects, settings, bucket.name, prefix)
        found, others = match_cache(objects, settings.vllm_image)
        state.warm_cache = found is not None
        if found is not None:
            digest = found.metadata.get("image_digest", "")
            state.cache_detail = (
                f"warm ({found.size / 2**20:,.0f} MiB, saved {found.updated or '?'}"
                + (f", image digest {digest[:19]}" if digest else "")
                + ")"
            )
            if "@sha256:" not in settings.vllm_image:
                state.cache_detail += f"; {settings.vllm_image} is a tag: if it moved, the VM compiles cold"
        else:
            state.cache_detail = "none for this image, accelerator, model and shape flags" + (
                f" ({others} for other images)" if others else ""
            )
        manifest = weights_prefix(settings.model_name) + WEIGHTS_MANIFEST
        staged = [
            o for o in await run_blocking(storage.list_objects, settings, bucket.name, manifest, limit=1)
        ]
        state.staged_weights = any(o.name == manifest for o in staged)
        state.weights_detail = (
            f"staged in gs://{bucket.name}/{weights_prefix(settings.model_name)} (boot loads them from the bucket, "
            "no Hugging Face token needed)"
            if state.staged_weights
            else "not staged yet (the VM copies them after its first healthy boot)"
        )
    except TpuDevopsError as exc:
        state.cache_detail = state.weights_detail = f"unknown ({exc.message})"
    state.expected_boot = expected_boot(settings, state.warm_cache)
    return state


async def annotate(settings: Settings, diagnosis: Any) -> Any:
    """``diagnosis`` (a `logs.boot.BootDiagnosis`) with the configured deployment's warm-boot lines:
    a cold boot's compile time reads differently when a warm cache exists. Nothing without a project."""
    if settings.project:
        diagnosis.warm_boot = (await warm_state(settings)).lines()
    return diagnosis
