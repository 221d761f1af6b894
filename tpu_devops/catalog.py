"""Accelerator facts: gcloud spellings, runtime versions, machine types, HBM, bandwidth, quota ids.

Sources (DESIGN §3 unless noted):
- v5e: the TPU API and gcloud call it ``v5litepod``; accelerator type ``v5litepod-N``, runtime version
  ``v2-alpha-tpuv5-lite``, GCE machine type ``ct5lp-hightpu-{1,4,8}t``. 16 GiB HBM per chip, 15.75 GiB
  visible to the runtime (measured boot log ``total_hbm_limit_gb=15.75``), 800 GiB/s (= 859 GB/s),
  197 TFLOPS bf16, 393 TOPS int8, no fp8 in the MXU.
- v6e: accelerator type ``v6e-N``, runtime ``v2-alpha-tpuv6e``, machine type ``ct6e-standard-{1,4,8}t``;
  32 GB HBM, 31.24 GiB visible (fixture ``v6e1-e2b-boot-ok.log``), 1,638 GB/s, 918 TFLOPS bf16,
  1,836 TOPS int8 (Google's v6e product page).
- v5p: accelerator type ``v5p-N`` where N counts TensorCores (2 per chip), runtime ``v2-alpha-tpuv5``,
  machine type ``ct5p-hightpu-4t``; 95 GB HBM, 2,765 GB/s, 459 TFLOPS bf16, 918 TOPS int8 (Google's v5p
  product page). Runtime-visible HBM was not measured here: the nominal figure is used and said so.
- Quota ids: the Cloud Quotas ``quotaId`` of ``tpu.googleapis.com``. v5e on-demand
  ``TPUV5sLitepodPerProjectPer{Zone,Region}ForTPUAPI``; spot and flex-start use the Preemptible family
  ``TPUV5sPreemptibleLitepodPerProjectPer{Zone,Region}ForTPUAPI`` (seed quota scan). The v6e and v5p ids
  follow the same pattern and are matched by prefix, since Google has renamed families before.
- GKE quota: TPU nodes of a GKE node pool are Compute Engine VMs and draw Compute Engine quota
  (``compute.googleapis.com``), not the TPU API quota above (GKE "Troubleshoot TPUs in GKE": on-demand
  and Spot TPU slice node pools need Compute Engine API quota, which differs from the Cloud TPU API
  quota). The metric of v5e podslice machine types (``ct5lp-hightpu-*``) is ``TPU_LITE_PODSLICE_V5``,
  ``PREEMPTIBLE_TPU_LITE_PODSLICE_V5`` for spot and for flex-start, whose VMs "consume preemptible quota"
  (Google Cloud blog "Introducing Flex-start VMs"). Names from the ``Quota.metric`` enum of the Compute
  v1 discovery document (rev. 20261106, as bundled in google-api-python-client); that enum lists no
  v6e or v5p podslice metric, so none is claimed for them.
- GKE node labels: ``cloud.google.com/gke-tpu-accelerator`` is ``tpu-v5-lite-podslice`` (v5e) or
  ``tpu-v6e-slice`` (v6e), ``cloud.google.com/gke-tpu-topology`` ``1x1`` for one chip, ``2x2`` for 4 and
  ``2x4`` for 8 on one host (GKE "Plan TPUs in GKE"; Google's kubernetes-engine-samples
  ``ai-ml/vllm-tpu/vllm-llama3-70b.yaml``). v5p has no GKE label here: single-host GKE serving is not
  built for it.
- ICI: v5e 1,600 Gbps = 200 GB/s per chip (cloud.google.com/tpu/docs/v5e); no figure is used for the others.
- Fallback prices (USD per chip-hour, region -> provisioning model): the seed's measured us-west4 v5e
  prices, on-demand $1.20, flex-start $0.60, spot $0.5779 (DESIGN §3, xbill9/gemma4-dev build log,
  2026-08). Pricing answers from them only when the Billing Catalog cannot be read (`planning.pricing`).
- Flex-start zones (Google's "Request Cloud TPUs using Flex-start" page): v5e serving ``us-central1-a``,
  v5e training ``us-west4-a``, v6e ``asia-northeast1-b`` and ``us-east5-a``.
- Safe ``--gpu-memory-utilization``: 0.92 on v5e (seed measurement, DESIGN §3: 0.95 fails ~14 min into
  boot with RuntimeProgramAllocationFailure, fixture ``v5e1-e2b-util095-program-oom.log``, since compiled
  XLA programs live in the HBM above the cap: 1.26 GiB at 0.92, 0.79 GiB at 0.95). Not measured on v6e or
  v5p, so no ceiling is claimed for them (maintainer-verified v6e commands run 0.98, tpu-inference#2333).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tpu_devops.errors import ConfigError
from tpu_devops.types import PROVISIONING_MODELS, provisioning_model_name

__all__ = [
    "PROVISIONING_MODELS",
    "provisioning_model_name",
]  # re-exported: callers read them with the catalog

GIB = 1024**3
GB = 1000**3

# Provisioning models and their spellings are a shared value type: `tpu_devops.types`.


@dataclass(frozen=True)
class Generation:
    """One TPU generation. Memory in GiB, bandwidth in GB/s (decimal), compute in TFLOPS/TOPS per chip."""

    name: str  # "v5e"
    api_prefix: str  # "v5litepod" as the TPU API spells it
    runtime_version: str
    machine_type_prefix: str  # "ct5lp-hightpu" -> ct5lp-hightpu-1t
    hbm_gib_nominal: float
    hbm_gib_visible: float
    hbm_visible_source: str
    bandwidth_gbps: float
    bf16_tflops: float
    int8_tops: float
    native_low_precision: tuple[str, ...]
    sizes: tuple[int, ...]  # valid N in "<api_prefix>-N"
    cores_per_chip: int  # N counts chips (v5e, v6e) or TensorCores (v5p: 2 per chip)
    quota_ids: dict[str, tuple[str, str]] = field(default_factory=dict)  # family -> (zone id, region id)
    machine_types: dict[int, str] = field(default_factory=dict)  # chips per host -> machine type
    # family -> Compute Engine regional quota metric a GKE TPU node draws (module docstring)
    compute_quota_metrics: dict[str, str] = field(default_factory=dict)
    # GKE node-selector value of cloud.google.com/gke-tpu-accelerator; None: no GKE serving for it
    gke_accelerator: str | None = None
    gke_topologies: dict[int, str] = field(default_factory=dict)  # chips per host -> gke-tpu-topology
    ici_gb_per_s: float | None = None  # inter-chip interconnect per chip, GB/s; None: not modelled
    ici_source: str = ""  # where ici_gb_per_s comes from, as plans cite it
    # region -> provisioning model -> USD per chip-hour, used only when the Billing Catalog is unreadable
    fallback_prices: dict[str, dict[str, float]] = field(default_factory=dict)
    flex_start_zones: dict[str, str] = field(default_factory=dict)  # documented zone -> what it offers
    # the highest --gpu-memory-utilization measured to boot; None: not measured (no ceiling claimed)
    max_gpu_memory_utilization: float | None = None
    memory_ceiling_failure: str = ""  # what was measured above the ceiling, as findings quote it
    memory_ceiling_headroom: str = ""  # HBM left above the cap, at the ceiling and above it
    memory_ceiling_source: str = ""
    aliases: tuple[str, ...] = ()  # other prose spellings that mean this generation ("v5lite")


GENERATIONS: dict[str, Generation] = {
    "v5e": Generation(
        name="v5e",
        api_prefix="v5litepod",
        runtime_version="v2-alpha-tpuv5-lite",
        machine_type_prefix="ct5lp-hightpu",
        hbm_gib_nominal=16.0,
        hbm_gib_visible=15.75,
        hbm_visible_source="measured: vLLM boot log total_hbm_limit_gb=15.75 (fixtures/vllm-logs)",
        bandwidth_gbps=859.0,
        bf16_tflops=197.0,
        int8_tops=393.0,
        native_low_precision=("int8",),
        sizes=(1, 4, 8, 16, 32, 64, 128, 256),
        cores_per_chip=1,
        quota_ids={
            "on-demand": (
                "TPUV5sLitepodPerProjectPerZoneForTPUAPI",
                "TPUV5sLitepodPerProjectPerRegionForTPUAPI",
            ),
            "preemptible": (
                "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI",
                "TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI",
            ),
        },
        machine_types={1: "ct5lp-hightpu-1t", 4: "ct5lp-hightpu-4t", 8: "ct5lp-hightpu-8t"},
        compute_quota_metrics={
            "on-demand": "TPU_LITE_PODSLICE_V5",
            "preemptible": "PREEMPTIBLE_TPU_LITE_PODSLICE_V5",
        },
        gke_accelerator="tpu-v5-lite-podslice",
        gke_topologies={1: "1x1", 4: "2x2", 8: "2x4"},
        ici_gb_per_s=200.0,
        ici_source="cloud.google.com/tpu/docs/v5e",
        fallback_prices={"us-west4": {"on-demand": 1.20, "flex-start": 0.60, "spot": 0.5779}},
        flex_start_zones={"us-central1-a": "v5e serving", "us-west4-a": "v5e training"},
        max_gpu_memory_utilization=0.92,
        memory_ceiling_failure="0.95: jit_structured_decode_fn wanted 384.11M, 346.77M free",
        memory_ceiling_headroom="1.26 GiB (0.92) to 0.79 GiB (0.95)",
        memory_ceiling_source="seed measurement on v5e-1, Gemma 4 E2B (DESIGN §3); "
        "fixtures/vllm-logs/v5e1-e2b-util095-program-oom.log",
        aliases=("v5lite",),
    ),
    "v6e": Generation(
        name="v6e",
        api_prefix="v6e",
        runtime_version="v2-alpha-tpuv6e",
        machine_type_prefix="ct6e-standard",
        hbm_gib_nominal=32 * GB / GIB,
        hbm_gib_visible=31.24,
        hbm_visible_source="measured: vLLM boot log total_hbm_limit_gb=31.24 (fixtures/vllm-logs/v6e1-e2b-boot-ok.log)",
        bandwidth_gbps=1638.0,
        bf16_tflops=918.0,
        int8_tops=1836.0,
        native_low_precision=("int8", "fp8"),
        sizes=(1, 4, 8, 16, 32, 64, 128, 256),
        cores_per_chip=1,
        quota_ids={
            "on-demand": ("TPUV6EPerProjectPerZoneForTPUAPI", "TPUV6EPerProjectPerRegionForTPUAPI"),
            "preemptible": (
                "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI",
                "TPUV6EPreemptiblePerProjectPerRegionForTPUAPI",
            ),
        },
        machine_types={1: "ct6e-standard-1t", 4: "ct6e-standard-4t", 8: "ct6e-standard-8t"},
        gke_accelerator="tpu-v6e-slice",
        gke_topologies={1: "1x1", 4: "2x2", 8: "2x4"},
        flex_start_zones={
            "asia-northeast1-b": "v6e training and serving",
            "us-east5-a": "v6e training and serving",
        },
    ),
    "v5p": Generation(
        name="v5p",
        api_prefix="v5p",
        runtime_version="v2-alpha-tpuv5",
        machine_type_prefix="ct5p-hightpu",
        hbm_gib_nominal=95 * GB / GIB,
        hbm_gib_visible=95 * GB / GIB,
        hbm_visible_source="nominal 95 GB: runtime-visible HBM not measured for v5p",
        bandwidth_gbps=2765.0,
        bf16_tflops=459.0,
        int8_tops=918.0,
        native_low_precision=("int8",),
        sizes=(8, 16, 32, 64, 128, 256, 512, 1024, 2048),
        cores_per_chip=2,
        quota_ids={
            "on-demand": ("TPUV5PPerProjectPerZoneForTPUAPI", "TPUV5PPerProjectPerRegionForTPUAPI"),
            "preemptible": (
                "TPUV5PPreemptiblePerProjectPerZoneForTPUAPI",
                "TPUV5PPreemptiblePerProjectPerRegionForTPUAPI",
            ),
        },
        machine_types={4: "ct5p-hightpu-4t"},
    ),
}


# The default --gpu-memory-utilization: the lowest ceiling measured on any generation, so the default
# boots wherever a ceiling is known (0.92, v5e). Settings' GPU_MEMORY_UTILIZATION default is derived from it.
DEFAULT_GPU_MEMORY_UTILIZATION: float = min(
    g.max_gpu_memory_utilization for g in GENERATIONS.values() if g.max_gpu_memory_utilization is not None
)


def safe_memory_utilization_advice() -> str:
    """The measured ceilings as a fix reads them: ``"0.92 on v5e"`` (one clause per generation with a
    measured ``max_gpu_memory_utilization``, joined by ``", "``)."""
    return ", ".join(
        f"{g.max_gpu_memory_utilization:g} on {g.name}"
        for g in GENERATIONS.values()
        if g.max_gpu_memory_utilization is not None
    )


@dataclass(frozen=True)
class AcceleratorType:
    """A canonical accelerator type such as ``v5litepod-1``.

    ``chips`` is the chip count (v5p-8 has 4 chips); ``notice`` is set when the input was a prose or
    machine-type spelling that was translated.
    """

    name: str
    generation: Generation
    chips: int
    notice: str | None = None

    @property
    def machine_type(self) -> str | None:
        """GCE machine type of one host of this slice, e.g. ``ct5lp-hightpu-1t`` (None if unknown)."""
        per_host = min(self.chips, max(self.generation.machine_types))
        return self.generation.machine_types.get(per_host)

    @property
    def hbm_gib_visible_total(self) -> float:
        """Runtime-visible HBM of the whole slice, GiB."""
        return self.generation.hbm_gib_visible * self.chips

    def quota_ids_for(self, provisioning_model: str) -> tuple[str, str]:
        """(zone quota id, region quota id) that a create with this provisioning model consumes.

        Spot and flex-start both draw on the Preemptible family (DESIGN §3, seed quota scan).
        """
        family = "on-demand" if provisioning_model == "on-demand" else "preemptible"
        return self.generation.quota_ids[family]

    def compute_quota_metric_for(self, provisioning_model: str) -> str | None:
        """The Compute Engine regional quota metric a GKE node of this generation draws with this
        provisioning model (spot and flex-start: the preemptible one); None where none is documented."""
        family = "on-demand" if provisioning_model == "on-demand" else "preemptible"
        return self.generation.compute_quota_metrics.get(family)


def _spellings() -> dict[str, Generation]:
    """Every prose spelling of a generation (its name, TPU API prefix and aliases) -> its row."""
    return {
        spelling: gen for gen in GENERATIONS.values() for spelling in (gen.name, gen.api_prefix, *gen.aliases)
    }


def _prose() -> re.Pattern[str]:
    # longest first, so that a spelling is not cut short by a shorter one it starts with
    names = "|".join(re.escape(s) for s in sorted(_spellings(), key=len, reverse=True))
    return re.compile(rf"^(?:tpu[-_ ]?)?({names})(?:[-_ ]?(\d+))?$")


def _machine() -> re.Pattern[str]:
    prefixes = "|".join(re.escape(g.machine_type_prefix) for g in GENERATIONS.values())
    return re.compile(rf"^({prefixes})-(\d+)t$")


def resolve_accelerator_type(value: str, *, field_name: str = "accelerator_type") -> AcceleratorType:
    """Resolve any common spelling to the canonical TPU API accelerator type.

    ``v5litepod-1`` passes unchanged. ``v5e-1``, ``v5e``, ``TPU v5e 1`` and ``ct5lp-hightpu-1t`` resolve to
    ``v5litepod-1`` with a ``notice``; ``v6e``/``ct6e-standard-1t`` to ``v6e-1``.

    Raises:
        ConfigError: unknown generation or a size that the generation does not offer.
    """
    raw = (value or "").strip()
    text = raw.lower().replace(" ", "-")
    fix = "use a TPU API accelerator type such as v5litepod-1, v5litepod-4, v6e-1 or v5p-8"
    machine = _machine().match(text)
    if machine:
        prefix, per_host = machine.group(1), int(machine.group(2))
        gen = next(g for g in GENERATIONS.values() if g.machine_type_prefix == prefix)
        if per_host not in gen.machine_types:
            raise ConfigError(
                f"{gen.name} hosts come as {', '.join(gen.machine_types.values())}",
                field=field_name,
                value=raw,
                fix=f"use one of those, or the accelerator type {gen.api_prefix}-N (N in {list(gen.sizes)})",
            )
        size = per_host * gen.cores_per_chip
        canonical = f"{gen.api_prefix}-{size}"
        notice: str | None = f"{raw!r} is a GCE machine type; the TPU API accelerator type is {canonical!r}"
        return AcceleratorType(canonical, gen, per_host, notice)
    m = _prose().match(text)
    if not m:
        raise ConfigError("unknown accelerator type", field=field_name, value=raw, fix=fix)
    gen = _spellings()[m.group(1)]
    size = int(m.group(2)) if m.group(2) else gen.sizes[0]
    if size not in gen.sizes:
        raise ConfigError(
            f"{gen.name} is offered as {gen.api_prefix}-N with N in {list(gen.sizes)}",
            field=field_name,
            value=raw,
            fix=f"pick one of: {', '.join(f'{gen.api_prefix}-{n}' for n in gen.sizes[:4])}, ...",
        )
    canonical = f"{gen.api_prefix}-{size}"
    notice = None
    if canonical != text:
        notice = (
            f"{raw!r} translated to the TPU API spelling {canonical!r} (gcloud and the API reject {raw!r})"
        )
    return AcceleratorType(canonical, gen, size // gen.cores_per_chip, notice)


def check_machine_type(accelerator: AcceleratorType, machine_type: str) -> None:
    """Refuse a machine type from another generation (``ct6e-standard-1t`` for a v5e plan doubles HBM).

    Raises:
        ConfigError: the machine type belongs to a different generation.
    """
    other = resolve_accelerator_type(machine_type, field_name="machine_type")
    if other.generation.name != accelerator.generation.name:
        raise ConfigError(
            f"{machine_type} is a {other.generation.name} machine type "
            f"({other.generation.hbm_gib_nominal:.0f} GiB HBM per chip), but the plan is for "
            f"{accelerator.name} ({accelerator.generation.name}, {accelerator.generation.hbm_gib_nominal:.0f} GiB)",
            field="machine_type",
            value=machine_type,
            fix=f"use {accelerator.machine_type} for {accelerator.name}, or plan for {other.name}",
        )


def machine_type_mixup(given: str, configured: str) -> str | None:
    """A warning when ``given`` is a GCE machine type of another generation than ``configured`` (e.g.
    ``ct6e-standard-1t`` while ACCELERATOR_TYPE is ``v5litepod-1``): the mix-up that doubles every
    memory figure (DESIGN §3). None when they agree, when ``given`` is not a machine type, or when either
    does not resolve (the caller reports that itself)."""
    if not given.strip().lower().startswith("ct") or not configured:
        return None
    try:
        check_machine_type(resolve_accelerator_type(configured), given)
    except ConfigError as exc:
        return f"{exc.message}. Used {given} as asked; if you meant ACCELERATOR_TYPE, {exc.fix}"
    return None
