"""Accelerator catalog: canonical spellings, prose translation, machine-type mix-ups, quota families."""

from __future__ import annotations

import pytest

from tpu_devops.catalog import check_machine_type, resolve_accelerator_type
from tpu_devops.errors import ConfigError


@pytest.mark.parametrize(
    ("spelling", "canonical", "chips", "translated"),
    [
        ("v5litepod-1", "v5litepod-1", 1, False),
        ("v5e-1", "v5litepod-1", 1, True),
        ("v5e", "v5litepod-1", 1, True),
        ("TPU v5e 4", "v5litepod-4", 4, True),
        ("ct5lp-hightpu-1t", "v5litepod-1", 1, True),
        ("ct5lp-hightpu-8t", "v5litepod-8", 8, True),
        ("v6e-1", "v6e-1", 1, False),
        ("ct6e-standard-4t", "v6e-4", 4, True),
        ("v5p-8", "v5p-8", 4, False),
    ],
)
def test_spellings_resolve_to_the_api_name(
    spelling: str, canonical: str, chips: int, translated: bool
) -> None:
    accel = resolve_accelerator_type(spelling)
    assert (accel.name, accel.chips) == (canonical, chips)
    assert (accel.notice is not None) == translated
    if translated:
        assert canonical in accel.notice


def test_v5e_facts_are_the_seed_figures() -> None:
    accel = resolve_accelerator_type("v5litepod-1")
    assert accel.generation.runtime_version == "v2-alpha-tpuv5-lite"
    assert accel.machine_type == "ct5lp-hightpu-1t"
    assert accel.generation.hbm_gib_visible == 15.75
    assert accel.hbm_gib_visible_total == 15.75
    assert "fp8" not in accel.generation.native_low_precision


def test_spot_and_flex_start_use_the_preemptible_quota_family() -> None:
    accel = resolve_accelerator_type("v5litepod-1")
    assert accel.quota_ids_for("on-demand")[0] == "TPUV5sLitepodPerProjectPerZoneForTPUAPI"
    assert accel.quota_ids_for("spot") == accel.quota_ids_for("flex-start")
    assert accel.quota_ids_for("spot")[0] == "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"


@pytest.mark.parametrize("bad", ["h100-8", "v5e-3", "v6e-1000", "", "tpu"])
def test_unknown_types_fail_with_the_fix(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_accelerator_type(bad)
    assert info.value.field == "accelerator_type"
    assert info.value.fix


def test_v6e_machine_type_for_a_v5e_plan_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        check_machine_type(resolve_accelerator_type("v5litepod-1"), "ct6e-standard-1t")
    assert "ct5lp-hightpu-1t" in str(info.value)
    check_machine_type(resolve_accelerator_type("v5litepod-1"), "ct5lp-hightpu-1t")


@pytest.mark.parametrize("spelling", ["ct5lp-hightpu-3t", "ct5lp-hightpu-0t", "ct6e-standard-2t"])
def test_machine_types_that_do_not_exist_are_refused(spelling: str) -> None:
    # regression: ct5lp-hightpu-3t became "v5litepod-3" and -0t a 0-chip plan ("use 1..0")
    with pytest.raises(ConfigError) as err:
        resolve_accelerator_type(spelling)
    assert err.value.field == "accelerator_type" and err.value.value == spelling
    assert "-1t" in str(err.value)


def test_machine_type_mixup_is_a_warning_text_only_for_another_generation() -> None:
    from tpu_devops.catalog import machine_type_mixup

    warning = machine_type_mixup("ct6e-standard-1t", "v5litepod-1")
    assert warning and "v6e" in warning and "ct5lp-hightpu-1t" in warning
    assert machine_type_mixup("ct5lp-hightpu-1t", "v5litepod-1") is None
    assert machine_type_mixup("v6e-1", "v5litepod-1") is None  # an explicit what-if, not a mix-up


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("flex-start", "flex-start"), ("FLEX_START", "flex-start"), ("flexstart", "flex-start"),
        (" Spot ", "spot"), ("preemptible", "spot"), ("SPOT", "spot"),
        ("on-demand", "on-demand"), ("on_demand", "on-demand"), ("STANDARD", "on-demand"),
        ("reserved", None), ("", None), ("flex start", None),
    ],
)  # fmt: skip
def test_every_entry_point_reads_provisioning_model_spellings_alike(spelling: str, name: str | None) -> None:
    """One table of spellings: tpu.env, tool arguments and the price lookup cannot disagree."""
    from pathlib import Path

    from tpu_devops.catalog import provisioning_model_name
    from tpu_devops.config import load_settings
    from tpu_devops.errors import InputError
    from tpu_devops.planning.pricing import validate_provisioning_model
    from tpu_devops.provisioning.requests import check_provisioning_model

    assert provisioning_model_name(spelling) == name
    settings = load_settings(Path("/nonexistent/tpu.env"), {})
    if name is None:
        with pytest.raises((ConfigError, InputError)):
            check_provisioning_model(spelling, settings)
        with pytest.raises(InputError):
            validate_provisioning_model(spelling)
        if spelling.strip():
            with pytest.raises(ConfigError):
                load_settings(Path("/nonexistent/tpu.env"), {"PROVISIONING_MODEL": spelling})
        return
    assert check_provisioning_model(spelling, settings) == name
    assert validate_provisioning_model(spelling) == name
    assert (
        load_settings(Path("/nonexistent/tpu.env"), {"PROVISIONING_MODEL": spelling}).provisioning_model
        == name
    )
