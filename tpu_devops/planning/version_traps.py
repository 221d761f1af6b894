"""Known bad version combinations of the serving image, as data with their sources.

An image can be new enough for a model (`tpu_devops.planning.images.FIRST_SUPPORT`) and still fail on
it: a vLLM release paired with a transformers release that changed an API it reads. Each `VersionTrap`
names the model family it hits, the vLLM range, the transformers range (None: any), the log wording it
produces (the rule id of `tpu_devops.logs.rules`), the way out, and where the fact comes from. Three
readers use the same rows:

- `lint_vllm_flags` and plan / create (`images.image_gate`): the image tag's vLLM version falls in a
  trap's range for the model (the transformers an image ships is not in its tag, so a trap that needs
  a transformers range is a warning, never a refusal);
- `diagnose_vllm_boot` / `summarize_logs`: the trap's wording in a log gets the trap's fix, with the
  logged vLLM version.

Versions are PEP 440 specifiers (`packaging.specifiers.SpecifierSet`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class VersionTrap:
    """A vLLM x transformers combination that cannot serve a model family.

    ``model_types`` / ``architectures`` match a config.json as in `images.ArchSupport`; ``name_pattern``
    (lower case substring of a model id) is used when no config is at hand."""

    id: str
    family: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    name_patterns: tuple[str, ...]
    vllm: str  # PEP 440 specifier of the vLLM versions hit
    transformers: str | None  # of the transformers versions hit; None: any
    rule: str  # the logs.rules id of the wording it produces
    symptom: str
    fix: str
    fixed_in: str  # the first vLLM release without the trap
    source: str

    def hits_vllm(self, version: str | Version | None) -> bool:
        """True when ``version`` (a vLLM version) is in the trap's range; False when unknown or unparsable."""
        if version is None:
            return False
        try:
            v = version if isinstance(version, Version) else Version(str(version))
        except InvalidVersion:
            return False
        # A dev or local build of 0.27.1 (0.27.1.dev364+gabc) is still 0.27.1 for this purpose.
        return Version(v.base_version) in SpecifierSet(self.vllm)

    def hits_model(self, model: str | None, config: dict[str, Any] | None = None) -> bool:
        """True when the model (its config when given, else its id) is of the trap's family."""
        if config:
            types = {config.get("model_type"), (config.get("text_config") or {}).get("model_type")} - {None}
            archs = set(config.get("architectures") or [])
            return bool(types & set(self.model_types) or archs & set(self.architectures))
        text = (model or "").lower().replace("_", "-")
        return any(p in text for p in self.name_patterns)


VERSION_TRAPS: tuple[VersionTrap, ...] = (
    VersionTrap(
        id="vllm-0.27-transformers-5.15-gemma4",
        family="Gemma 4",
        model_types=("gemma4", "gemma4_text"),
        architectures=("Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"),
        name_patterns=("gemma-4", "gemma4"),
        vllm=">=0.27.0,<0.28.0",
        transformers=">=5.15",
        rule="transformers-per-layer-attribute",
        symptom="AmbiguousGlobalPerLayerAttributeError: 'head_dim' is a per-layer attribute: vLLM 0.27.x reads "
        "config.head_dim, which transformers >= 5.15 refuses on Gemma 4's per-layer config",
        fix="use an image with vLLM >= 0.28.0 (vllm PR #49797 reads the per-layer configs), e.g. "
        "vllm/vllm-tpu:v0.30.0, or pin transformers below 5.15 in the image",
        fixed_in="0.28.0",
        source="vllm-project/vllm#52768, #51744; fixed by vllm PR #49797 (v0.28.0); field report C13",
    ),
)


def traps_for(
    model: str | None, vllm_version: str | Version | None, config: dict[str, Any] | None = None
) -> list[VersionTrap]:
    """The traps a model on a vLLM version falls into (a version in range and the model's family)."""
    return [t for t in VERSION_TRAPS if t.hits_vllm(vllm_version) and t.hits_model(model, config)]


def traps_for_rule(rule: str) -> list[VersionTrap]:
    """The traps whose log wording is the rule ``rule`` of `tpu_devops.logs.rules`."""
    return [t for t in VERSION_TRAPS if t.rule == rule]
