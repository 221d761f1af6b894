"""Accelerator catalog: canonical spellings, prose translation, machine-type mix-ups, quota families."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tpu_devops.catalog import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    GENERATIONS,
    Generation,
    check_machine_type,
    resolve_accelerator_type,
    safe_memory_utilization_advice,
)
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


# ---- every generation fact on the catalog row ---------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[1] / "tpu_devops"


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _generation_literals(path: Path) -> list[str]:
    """Per-generation facts held outside the catalog in one module: a table keyed by a generation name,
    a row's safe memory utilisation as a number or in a message, a row's GKE label, or a generation
    name compared to a literal (the fp8 rules, not row facts, excepted)."""
    names = set(GENERATIONS)
    ceilings = {g.max_gpu_memory_utilization for g in GENERATIONS.values()} - {None}
    labels = {g.gke_accelerator for g in GENERATIONS.values()} - {None}
    ceiling_text = re.compile("|".join(rf"(?<![\d.]){re.escape(f'{c:g}')}(?!\d)" for c in ceilings))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    fp8 = {id(n) for b in ast.walk(tree) if isinstance(b, ast.BoolOp) and "fp8" in ast.unparse(b)
           for n in ast.walk(b)}  # fmt: skip
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
            flat = [e for k in keys for e in (k.elts if isinstance(k, ast.Tuple) else [k])]
            if any(isinstance(e, ast.Constant) and e.value in names for e in flat):
                found.append(f"{where} table keyed by generation")
        elif isinstance(node, ast.Compare) and id(node) not in fp8:
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Constant) and s.value in names for s in sides):
                found.append(f"{where} {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and id(node) not in docs:
            value = node.value
            if isinstance(value, float) and value in ceilings:
                found.append(f"{where} {value}")
            elif isinstance(value, str) and (
                ceiling_text.search(value) or any(label in value for label in labels)
            ):
                found.append(f"{where} {value[:60]!r}")
    return found


def test_no_module_outside_the_catalog_holds_generation_facts() -> None:
    modules = [p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "catalog.py"]
    assert len(modules) > 50
    found = [hit for p in modules for hit in _generation_literals(p)]
    assert found == [], "move these onto the catalog row (tpu_devops/catalog.py Generation):\n" + "\n".join(
        found
    )


def test_the_guard_finds_each_kind_of_literal(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        '''"""Module docstring may cite 0.92 on v5e and tpu-v5-lite-podslice (sources)."""
ICI = {"v5e": 200.0}
PRICES = {("v6e", "us-east5", "spot"): 1.0}
def f(gen, util, dtype):
    if gen.name == "v5e" and util > 0.92:
        return "use 0.92 on v5e", "tpu-v6e-slice"
    if dtype.startswith("fp8") and gen == "v5e":
        return "0.925 and 10.92 are other numbers"
''',
        encoding="utf-8",
    )
    kinds = sorted(hit.split(" ", 1)[1] for hit in _generation_literals(module))
    assert kinds == sorted(
        [
            "table keyed by generation",
            "table keyed by generation",
            "gen.name == 'v5e'",
            "0.92",
            "'use 0.92 on v5e'",
            "'tpu-v6e-slice'",
        ]
    )


def test_the_default_memory_utilisation_is_the_rows_ceiling() -> None:
    from tpu_devops.config import DEFAULTS

    assert DEFAULT_GPU_MEMORY_UTILIZATION == GENERATIONS["v5e"].max_gpu_memory_utilization == 0.92
    assert float(DEFAULTS["GPU_MEMORY_UTILIZATION"]) == DEFAULT_GPU_MEMORY_UTILIZATION
    assert safe_memory_utilization_advice() == "0.92 on v5e"


NEW_ROW = Generation(
    name="v9z",
    api_prefix="v9z",
    runtime_version="v2-alpha-tpuv9z",
    machine_type_prefix="ct9z-standard",
    hbm_gib_nominal=64.0,
    hbm_gib_visible=62.0,
    hbm_visible_source="a row made up for this test",
    bandwidth_gbps=4000.0,
    bf16_tflops=2000.0,
    int8_tops=4000.0,
    native_low_precision=("int8", "fp8"),
    sizes=(1, 4, 8),
    cores_per_chip=1,
    quota_ids={"on-demand": ("V9ZZone", "V9ZRegion"), "preemptible": ("V9ZPZone", "V9ZPRegion")},
    machine_types={1: "ct9z-standard-1t", 4: "ct9z-standard-4t", 8: "ct9z-standard-8t"},
    gke_accelerator="tpu-v9z-slice",
    gke_topologies={1: "1x1", 4: "2x2", 8: "2x4"},
    ici_gb_per_s=400.0,
    ici_source="made-up ICI page",
    fallback_prices={"us-south1": {"on-demand": 3.25, "spot": 1.125, "flex-start": 1.5}},
    flex_start_zones={"us-south1-b": "v9z serving"},
    max_gpu_memory_utilization=0.9,
    memory_ceiling_failure="0.93: made-up program wanted 1G, 0.5G free",
    memory_ceiling_headroom="2.0 GiB (0.9) to 1.1 GiB (0.93)",
    memory_ceiling_source="made-up measurement",
    aliases=("tpu9z",),
)


@pytest.fixture
def new_generation(monkeypatch: pytest.MonkeyPatch) -> Generation:
    """The catalog with one more row, and nothing else changed."""
    monkeypatch.setitem(GENERATIONS, NEW_ROW.name, NEW_ROW)
    return NEW_ROW


def test_a_new_row_resolves_by_every_spelling(new_generation: Generation) -> None:
    assert resolve_accelerator_type("v9z-4").chips == 4
    assert resolve_accelerator_type("tpu9z 8").name == "v9z-8"
    assert resolve_accelerator_type("ct9z-standard-4t").name == "v9z-4"
    with pytest.raises(ConfigError, match=r"v9z-N with N in \[1, 4, 8\]"):
        resolve_accelerator_type("v9z-2")


def test_a_new_row_flows_through_lint_and_plan(new_generation: Generation) -> None:
    from tpu_devops.planning import lint, sizing

    cmd = "vllm serve google/gemma-4-E2B-it --max-model-len 16384 --gpu-memory-utilization {}"
    over = lint.lint_vllm_flags(command=cmd.format("0.91"), accelerator_type="v9z-1")
    finding = next(f for f in over.findings if f.flag == "--gpu-memory-utilization")
    assert (finding.id, finding.severity, finding.fix) == (
        "memory-utilization-above-0.9",
        "error",
        "--gpu-memory-utilization 0.9",
    )
    assert finding.source == "made-up measurement" and "0.93: made-up program" in finding.what_happens
    under = lint.lint_vllm_flags(command=cmd.format("0.9"), accelerator_type="v9z-1")
    assert not [f for f in under.findings if f.flag == "--gpu-memory-utilization"]
    # 0.91 is under v5e's ceiling too, but v5e's row says 0.92: the row decides, not the name
    v5e = lint.lint_vllm_flags(command=cmd.format("0.91"), accelerator_type="v5litepod-1")
    assert not [f for f in v5e.findings if f.flag == "--gpu-memory-utilization"]

    plan = sizing.plan_capacity("google/gemma-4-E2B-it", "v9z-1", gpu_memory_utilization=0.91)
    assert any("above 0.9 on v9z" in w for w in plan.warnings)
    assert not any("above" in w for w in sizing.plan_capacity("google/gemma-4-E2B-it", "v9z-1", 0.9).warnings)


@pytest.mark.anyio
async def test_a_new_row_prices_from_its_fallback_table(
    new_generation: Generation, fake_gcp, tmp_path
) -> None:
    from tests.conftest import gcp_environ
    from tpu_devops.config import load_settings
    from tpu_devops.planning import pricing

    pricing.clear_cache()
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    try:
        quote = await pricing.get_price(
            settings, accelerator_type="v9z-4", region="us-south1", provisioning_model="spot"
        )
        assert (quote.source, quote.usd_per_chip_hour, quote.usd_per_hour) == ("fallback", 1.125, 4.5)
        with pytest.raises(ConfigError) as missing:
            await pricing.get_price(
                settings, accelerator_type="v9z-4", region="us-west4", provisioning_model="spot"
            )
        assert "v9z spot in us-south1" in missing.value.message
        assert "v5e spot in us-west4" in missing.value.message
    finally:
        pricing.clear_cache()


def test_a_new_row_renders_gke_manifests_and_flex_start_zones(
    new_generation: Generation, fake_gcp, tmp_path
) -> None:
    from tests.conftest import gcp_environ
    from tpu_devops.config import load_settings
    from tpu_devops.gke import manifests
    from tpu_devops.provisioning.quota import known_support

    env = gcp_environ(fake_gcp, tmp_path, ACCELERATOR_TYPE="v9z-1", TPU_RUNTIME_VERSION="v2-alpha-tpuv9z")
    plan = manifests.render(load_settings(environ=env), cluster="gemma")
    assert plan.node_pool["config"]["machineType"] == "ct9z-standard-1t"
    pod = {m.kind: m.manifest for m in plan.manifests}["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v9z-slice",
        "cloud.google.com/gke-tpu-topology": "1x1",
    }
    support = known_support("v9z-1", "flex-start", "us-south1-b")
    assert support.documented and support.documented_zones == ("us-south1-b",)
    assert not known_support("v9z-1", "flex-start", "us-west4-a").documented


@pytest.mark.anyio
async def test_a_new_row_brings_its_ici_into_the_scale_out_plan(new_generation: Generation, tmp_path) -> None:
    from tpu_devops.config import load_settings
    from tpu_devops.planning import scaleout

    env = {"TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"), "TPU_DEVOPS_STATE_DIR": str(tmp_path),
           "ACCELERATOR_TYPE": "v9z-8", "TPU_RUNTIME_VERSION": "v2-alpha-tpuv9z"}  # fmt: skip
    plan = await scaleout.plan_scale_out(load_settings(environ=env), streams=256, usd_per_chip_hour=1.0)
    assert any("at 400 GB/s per chip (made-up ICI page)" in a for a in plan.assumptions)
    v5e = {**env, "ACCELERATOR_TYPE": "v5litepod-8", "TPU_RUNTIME_VERSION": "v2-alpha-tpuv5-lite"}
    plan = await scaleout.plan_scale_out(load_settings(environ=v5e), streams=256, usd_per_chip_hour=1.0)
    assert any("at 200 GB/s per chip (cloud.google.com/tpu/docs/v5e)" in a for a in plan.assumptions)


@pytest.mark.parametrize(
    ("accelerator", "runtime", "label"),
    [
        ("v5litepod-1", "v2-alpha-tpuv5-lite", "tpu-v5-lite-podslice"),
        ("v6e-1", "v2-alpha-tpuv6e", "tpu-v6e-slice"),
    ],
)
def test_known_generations_keep_their_gke_labels(fake_gcp, tmp_path, accelerator, runtime, label) -> None:
    from tests.conftest import gcp_environ
    from tpu_devops.config import load_settings
    from tpu_devops.gke import manifests

    env = gcp_environ(fake_gcp, tmp_path, ACCELERATOR_TYPE=accelerator, TPU_RUNTIME_VERSION=runtime)
    plan = manifests.render(load_settings(environ=env), cluster="gemma")
    pod = {m.kind: m.manifest for m in plan.manifests}["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": label,
        "cloud.google.com/gke-tpu-topology": "1x1",
    }


def test_v5p_has_no_gke_serving(fake_gcp, tmp_path) -> None:
    from tests.conftest import gcp_environ
    from tpu_devops.config import load_settings
    from tpu_devops.errors import InputError
    from tpu_devops.gke import manifests

    env = gcp_environ(fake_gcp, tmp_path, ACCELERATOR_TYPE="v5p-8", TPU_RUNTIME_VERSION="v2-alpha-tpuv5")
    with pytest.raises(InputError) as refused:
        manifests.render(load_settings(environ=env), cluster="gemma")
    assert (refused.value.field, refused.value.fix) == ("ACCELERATOR_TYPE", "use v5e (v5litepod-N) or v6e")
