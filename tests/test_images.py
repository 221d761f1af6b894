"""The image against the model (`tpu_devops.planning.images`): versions read from tags, the first vLLM release per
architecture, and the gate used by lint, plan, create and the sweep."""

from __future__ import annotations

import json

import pytest

from tests.conftest import gcp_environ
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError
from tpu_devops.planning.images import FIRST_SUPPORT, VERIFIED_IMAGE, check_image, image_gate, parse_image
from tpu_devops.planning.lint import lint_vllm_flags

pytestmark = pytest.mark.anyio
E2B = "google/gemma-4-E2B-it"
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "version", "floating"),
    [
        ("vllm/vllm-tpu:v0.30.0", "0.30.0", False),
        ("vllm/vllm-tpu:0.19.0", "0.19.0", False),
        ("vllm/vllm-tpu:v0.5.3.post1", "0.5.3.post1", False),
        ("vllm/vllm-tpu:v0.26.1-tpu", "0.26.1", False),
        ("us-docker.pkg.dev:443/p/r/vllm-tpu:v0.30.0", "0.30.0", False),
        (f"vllm/vllm-tpu:v0.30.0@{DIGEST}", "0.30.0", False),
        ("vllm/vllm-tpu:nightly", None, True),
        ("vllm/vllm-tpu:nightly-20261020-abc123", None, True),
        ("vllm/vllm-tpu:latest", None, True),
        ("vllm/vllm-tpu", None, True),
        (f"vllm/vllm-tpu@{DIGEST}", None, False),
        ("vllm/vllm-tpu:gemma4-build", None, False),
    ],
)
def test_versions_are_read_from_tags(image: str, version: str | None, floating: bool) -> None:
    ref = parse_image(image)
    assert (str(ref.version) if ref.version else None) == version
    assert ref.floating is floating


def test_gemma4_needs_0_19_and_the_default_image_serves_it() -> None:
    assert check_image(VERIFIED_IMAGE, E2B).status == "supported"
    assert check_image("vllm/vllm-tpu:v0.19.0", "google/gemma-4-E4B-it").status == "supported"
    old = check_image("vllm/vllm-tpu:v0.13.0", E2B)
    assert old.status == "too_old" and old.required == "0.19.0" and old.version == "0.13.0"
    assert "fails to load the model" in old.message and VERIFIED_IMAGE in (old.fix or "")
    assert "vllm-metal PR #250" in (old.source or "") and "NVIDIA-NeMo/Gym#1141" in (old.source or "")
    assert check_image("vllm/vllm-tpu:v0.18.9", E2B).status == "too_old"
    unknown = check_image(f"vllm/vllm-tpu@{DIGEST}", E2B)
    assert unknown.status == "version_unknown" and "digest names no version" in unknown.message
    assert check_image("vllm/vllm-tpu:nightly", E2B).status == "floating"


def test_rows_for_the_other_bundled_configs(tmp_path) -> None:
    assert check_image("vllm/vllm-tpu:v0.8.3", "Qwen/Qwen3-8B").status == "too_old"
    assert check_image("vllm/vllm-tpu:v0.8.4", "Qwen/Qwen3-8B").status == "supported"
    # Llama 3.1's llama3 RoPE scaling came with 0.5.3.post1; a Llama config without it has no minimum here
    llama31 = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "rope_scaling": {"rope_type": "llama3"},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(llama31))
    assert check_image("vllm/vllm-tpu:v0.5.3", str(path)).status == "too_old"
    assert check_image("vllm/vllm-tpu:v0.5.3.post1", str(path)).status == "supported"
    assert (
        check_image("vllm/vllm-tpu:v0.5.3", "meta-llama/Llama-3.1-8B-Instruct").status == "no_minimum_known"
    )
    assert check_image("vllm/vllm-tpu:v0.1.0", "someone/unknown-model").status == "no_minimum_known"
    assert all(row.source for row in FIRST_SUPPORT)


def test_the_gate_refuses_too_old_unless_overridden_and_warns_otherwise() -> None:
    with pytest.raises(ConfigError) as err:
        image_gate("vllm/vllm-tpu:v0.13.0", E2B)
    assert err.value.field == "VLLM_IMAGE" and "allow_unsupported_image=true" in err.value.fix
    allowed = image_gate("vllm/vllm-tpu:v0.13.0", E2B, allow_unsupported_image=True)
    assert allowed[0].startswith("UNSUPPORTED IMAGE")
    assert image_gate("vllm/vllm-tpu:v0.13.0", E2B, dry_run=True)[0].startswith(
        "IMAGE TOO OLD: create refuses it"
    )
    assert "moving tag" in image_gate("vllm/vllm-tpu:nightly", E2B)[0]
    assert image_gate(VERIFIED_IMAGE, E2B) == []


def test_lint_flags_an_image_too_old_for_the_model() -> None:
    cmd = "docker run -d -v /root/.cache/vllm:/root/.cache/vllm vllm/vllm-tpu:v0.13.0 vllm serve google/gemma-4-E2B-it"
    found = {f.id: f for f in lint_vllm_flags(cmd).findings}
    assert found["image-too-old-for-model"].severity == "error"
    assert "0.19.0" in found["image-too-old-for-model"].why
    ok = lint_vllm_flags("vllm serve google/gemma-4-E2B-it", image=VERIFIED_IMAGE)
    assert "image-too-old-for-model" not in {f.id for f in ok.findings}


async def test_plan_warns_and_create_and_sweep_refuse_an_old_image(fake_gcp, tmp_path) -> None:
    from tpu_devops.provisioning.plan import plan_queued_resource
    from tpu_devops.provisioning.queued import create_queued_resource
    from tpu_devops.provisioning.sweep import SweepOptions, check_sweep_options

    fake_gcp.secrets.put("hf-token", "hf_PlantedTokenValue9876543210zyxwvu")
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path, VLLM_IMAGE="vllm/vllm-tpu:v0.13.0"))
    plan = await plan_queued_resource(settings)
    assert any(w.startswith("IMAGE TOO OLD") for w in plan.warnings)
    with pytest.raises(ConfigError) as err:
        await create_queued_resource(settings)
    assert err.value.field == "VLLM_IMAGE" and fake_gcp.tpu.creates() == []
    with pytest.raises(ConfigError):
        check_sweep_options(settings, SweepOptions("flex-start", None, 60, 1, 3, None, None))
    created = await create_queued_resource(settings, allow_unsupported_image=True)
    assert created.created and any(w.startswith("UNSUPPORTED IMAGE") for w in created.warnings)
    assert "UNSUPPORTED IMAGE" in created.headline()


def test_known_version_traps_are_warnings_for_plan_create_and_the_sweep() -> None:
    from tpu_devops.planning.images import image_traps
    from tpu_devops.planning.version_traps import VERSION_TRAPS, traps_for

    (warning,) = image_gate("vllm/vllm-tpu:v0.27.1", E2B)
    assert warning.startswith("KNOWN VERSION TRAP") and "0.28.0" in warning and "5.15" in warning
    assert image_gate("vllm/vllm-tpu:v0.27.1", E2B, dry_run=True) == [warning]  # never a refusal
    assert image_gate("vllm/vllm-tpu:v0.28.0", E2B) == []
    assert image_traps("vllm/vllm-tpu:v0.27.0-tpu", "google/gemma-4-31B-it")  # by the model id
    assert not image_traps("vllm/vllm-tpu:v0.27.1", "Qwen/Qwen3-8B")
    assert not image_traps("vllm/vllm-tpu@sha256:" + "a" * 64, E2B)  # a digest names no version
    # a dev build of 0.27.1 is 0.27.1
    assert traps_for(E2B, "0.27.1.dev364+gabcdef01") and not traps_for(E2B, "not-a-version")
    for trap in VERSION_TRAPS:
        assert trap.source and trap.fix and trap.rule and trap.fixed_in
        from tpu_devops.logs.rules import BY_ID

        assert trap.rule in BY_ID  # the log wording it produces is a row of the one rule table
