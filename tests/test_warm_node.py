"""The product bucket, the compile-cache key, the boot-time figures and reconfigure's guards, against the
strict fakes (every request checked against Google's discovery documents)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import gcp_environ
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError, NotFoundError, OwnershipError
from tpu_devops.planning import shapes, startup, warmboot
from tpu_devops.provisioning import bucket, reconfigure
from tpu_devops.provisioning.cloud import api, call
from tpu_devops.provisioning.queued import send_create
from tpu_devops.provisioning.requests import build_request, create_call

pytestmark = pytest.mark.anyio
ZONE = "us-west4-a"


def settings(**env: str):
    return load_settings(Path("/nonexistent/tpu.env"), env)


# ---- configuration -------------------------------------------------------------------------------


def test_bucket_default_explicit_off_and_bad_names() -> None:
    assert settings(GOOGLE_CLOUD_PROJECT="my-tpu-project").bucket == "my-tpu-project-tpu-devops"
    assert settings().bucket == ""  # no project, no default
    assert (
        settings(GOOGLE_CLOUD_PROJECT="my-tpu-project", TPU_DEVOPS_BUCKET="gs://team-cache/").bucket
        == "team-cache"
    )
    for off in ("off", "none", "0"):
        assert settings(GOOGLE_CLOUD_PROJECT="my-tpu-project", TPU_DEVOPS_BUCKET=off).bucket == ""
    for bad in ("Upper-Case", "a", "my_google_bucket", "-dash-first", "has space", "x" * 64):
        with pytest.raises(ConfigError) as err:
            settings(TPU_DEVOPS_BUCKET=bad)
        assert err.value.field == "TPU_DEVOPS_BUCKET" and "off" in (err.value.fix or "")


# ---- the cache key and the time model ------------------------------------------------------------


def test_shape_key_changes_with_shapes_only() -> None:
    base = startup.vllm_serve_flags(settings())
    key = shapes.shape_key(base)
    renamed = startup.vllm_serve_flags(settings(VLLM_PORT="9000"))
    assert shapes.shape_key(renamed) == key  # the port compiles nothing
    assert "--port" not in shapes.shape_flags(base) and "--served-model-name" not in shapes.shape_flags(base)
    for env in (
        {"MAX_MODEL_LEN": "8192"},
        {"GPU_MEMORY_UTILIZATION": "0.9"},
        {"MAX_NUM_BATCHED_TOKENS": "8192"},
    ):
        assert shapes.shape_key(startup.vllm_serve_flags(settings(**env))) != key, env
    assert shapes.shape_key([*base, "--some-new-flag", "1"]) != key  # unknown flags split the cache
    assert shapes.shape_key([*base, "--tool-call-parser=hermes"]) == key
    assert warmboot.image_key("vllm/vllm-tpu@sha256:ABCDEF0123456789ffff") == "abcdef0123456789"
    assert warmboot.image_key("vllm/vllm-tpu:v0.30.0") is None
    prefix = warmboot.cache_prefix("v5litepod-1", "/models/x/", base)
    assert prefix == f"compile-cache/v5litepod-1/models/x/{key}/"


def test_expected_boot_is_a_seed_figure_only_where_measured() -> None:
    e2b = settings()
    assert (
        warmboot.expected_boot(e2b, True).seconds == 497
        and "seed measurement" in warmboot.expected_boot(e2b, True).text
    )
    cold = warmboot.expected_boot(e2b, None)
    assert cold.seconds == 857 and "497" in cold.text and cold.measured
    other = warmboot.expected_boot(settings(MODEL_NAME="Qwen/Qwen3-8B"), True)
    assert other.seconds is None and not other.measured and "no seed measurement" in other.text


def test_bench_prints_the_time_model_with_its_source() -> None:
    from scripts.bench_warmboot import run

    text = "\n".join(run())
    assert "857.0 s" in text and "497.0 s" in text and "503.54 s" in text and "DESIGN §3" in text
    assert "353.5 s (same shape)" in text and "capacity wait" in text


# ---- the bucket ----------------------------------------------------------------------------------


async def test_bucket_is_created_ours_with_lifecycle_and_the_vm_grant_only(fake_gcp, tmp_path) -> None:
    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    before = await bucket.inspect_bucket(s)
    assert not before.exists and before.fix is None and "created in us-west4" in before.detail
    status = await bucket.ensure_bucket(s)
    assert status.created and status.usable and status.ours and status.granted
    made = fake_gcp.storage.buckets[s.bucket]
    assert made["labels"] == {"managed-by": "tpu-devops"} and made["location"] == "US-WEST4"
    assert made["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"] is True
    assert made["iamConfiguration"]["publicAccessPrevention"] == "enforced"
    assert made["lifecycle"]["rule"] == [
        {
            "action": {"type": "Delete"},
            "condition": {"age": bucket.CACHE_EXPIRY_DAYS, "matchesPrefix": ["compile-cache/"]},
        }
    ]
    roles = {b["role"]: b["members"] for b in fake_gcp.storage.policies[s.bucket]["bindings"]}
    assert roles[bucket.OBJECT_ROLE] == [f"serviceAccount:{fake_gcp.storage.vm_account()}"]
    again = await bucket.ensure_bucket(s)
    assert not again.created and not again.granted and again.vm_access  # idempotent
    assert fake_gcp.rejections == []


async def test_someone_elses_bucket_is_never_used(fake_gcp, tmp_path) -> None:
    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    fake_gcp.storage.foreign.add(s.bucket)  # the default name squatted in another project
    prepared, status = await bucket.prepare_for_create(s)
    assert not status.usable and prepared.bucket == "" and status.fix
    assert bucket.create_warnings(status)[0].startswith("WARM BOOT OFF")
    assert "BUCKET=''" in startup.render_startup_script(prepared).script
    # the same name in this project but without our label: not used either (the default name is ours only)
    fake_gcp.storage.foreign.clear()
    fake_gcp.storage.buckets[s.bucket] = {"name": s.bucket, "projectNumber": fake_gcp.storage.project_number,
                                          "location": "US-WEST4", "labels": {}, "iamConfiguration": {}}  # fmt: skip
    fake_gcp.storage.policies[s.bucket] = {"bindings": [], "etag": "CAE="}
    fake_gcp.storage.objects[s.bucket] = {}
    prepared, status = await bucket.prepare_for_create(s)
    assert not status.usable and prepared.bucket == "" and "label" in (status.fix or "")
    assert fake_gcp.storage.policies[s.bucket]["bindings"] == []  # nothing granted on it
    # another project's bucket named explicitly: refused by its project number
    other = "team-shared-cache"
    fake_gcp.storage.buckets[other] = {"name": other, "projectNumber": "999", "location": "US", "labels": {}}
    explicit = load_settings(environ=gcp_environ(fake_gcp, tmp_path, TPU_DEVOPS_BUCKET=other))
    status = await bucket.inspect_bucket(explicit)
    assert not status.usable and "another project" in status.detail


async def test_plan_says_what_the_bucket_holds_and_renders_what_create_sends(fake_gcp, tmp_path) -> None:
    from tpu_devops.provisioning.plan import plan_queued_resource

    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    plan = await plan_queued_resource(s, allowed_source_ranges=["198.51.100.7/32"])
    assert any("created in us-west4" in line for line in plan.warm_boot)
    assert any("857 s" in line and "seed measurement" in line for line in plan.warm_boot)
    await bucket.ensure_bucket(s)
    flags = startup.vllm_serve_flags(s)
    key = warmboot.cache_prefix(s.accelerator_type, s.model_name, flags)
    fake_gcp.storage.put(s.bucket, f"{key}0123456789abcdef/cache.tar.gz", b"x" * 2048,
                         {"image": s.vllm_image, "image_digest": "sha256:0123456789abcdef" + "0" * 48})  # fmt: skip
    fake_gcp.storage.put(s.bucket, "weights/google/gemma-4-E2B-it/manifest.json", b"{}")
    state = await warmboot.warm_state(s)
    assert state.warm_cache and state.staged_weights and state.expected_boot.seconds == 497
    plan = await plan_queued_resource(s, allowed_source_ranges=["198.51.100.7/32"])
    text = " ".join(plan.warm_boot)
    assert "compile cache: warm" in text and "staged in gs://" in text and "497 s" in text
    other_image = s.model_copy(update={"vllm_image": "vllm/vllm-tpu:v0.31.0"})
    assert (await warmboot.warm_state(other_image)).warm_cache is False  # never mixed across images
    assert fake_gcp.rejections == []


# ---- the TPU API calls reconfigure makes ---------------------------------------------------------


async def _active_node(fake_gcp, s, **labels: str) -> None:
    body = build_request(s, zone=ZONE, qr_id="gemma4-e2b", provisioning_model="flex-start")
    body["tpu"]["nodeSpec"][0]["node"]["labels"].update(labels)
    await send_create(s, create_call(ZONE, "gemma4-e2b", body))


async def test_patch_sends_the_whole_metadata_map_and_guest_attributes_read_back(fake_gcp, tmp_path) -> None:
    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    await _active_node(fake_gcp, s)
    rig = await reconfigure.find_rig_node(s)
    spec = reconfigure.serving_spec(startup.apply_overrides(s, max_model_len=8192), "rc-test")
    await reconfigure._write_spec(s, rig, spec)
    meta = fake_gcp.tpu.node_metadata(ZONE, "gemma4-e2b")
    assert set(meta) == {"startup-script", reconfigure.SPEC_ATTRIBUTE}
    assert meta["startup-script"] == rig.node["metadata"]["startup-script"]
    patch = next(r for r in fake_gcp.tpu.requests if r["method"] == "PATCH")
    assert "updateMask=metadata" in patch["query"]
    fake_gcp.tpu.put_guest_attribute(ZONE, "gemma4-e2b", "tpu-devops/stage", "ready")
    fake_gcp.tpu.put_guest_attribute(ZONE, "gemma4-e2b", "other/key", "x")
    attrs = await reconfigure.guest_attributes(s, rig)
    assert attrs == {"tpu-devops/stage": "ready"}
    assert fake_gcp.rejections == []
    accepted = set(fake_gcp.validator.accepted)
    assert {
        "tpu.projects.locations.nodes.patch",
        "tpu.projects.locations.nodes.getGuestAttributes",
    } <= accepted


def test_a_patch_without_update_mask_or_with_an_unknown_field_is_refused(fake_gcp) -> None:
    url = f"{fake_gcp.url}/v2/projects/demo-project/locations/{ZONE}/nodes/n1"
    resp = httpx.patch(url + "?updateMask=metadata", json={"metadata": {"a": 1}})
    assert (
        resp.status_code == 400 and "TYPE_STRING" in resp.json()["error"]["message"]
    )  # map values are strings
    resp = httpx.patch(url + "?updateMask=metadata", json={"metadatas": {}})
    assert resp.status_code == 400 and 'Unknown name "metadatas"' in resp.json()["error"]["message"]


async def test_only_this_rigs_node_is_ever_changed(fake_gcp, tmp_path) -> None:
    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    with pytest.raises(NotFoundError) as err:
        await reconfigure.find_rig_node(s)
    assert err.value.field == "RESOURCE_ID"
    fake_gcp.tpu.add_foreign(ZONE, "someone-else", labels={"managed-by": "tpu-devops", "rig": "other-rig"})
    with pytest.raises(NotFoundError):
        await reconfigure.find_rig_node(s)  # another rig's node is never a candidate
    other = load_settings(environ=gcp_environ(fake_gcp, tmp_path, RESOURCE_ID="other-rig"))
    assert (await reconfigure.find_rig_node(other)).node_id == "someone-else"
    # labels on the queued resource but not on the node itself: refused
    fake_gcp.tpu.nodes[(ZONE, "someone-else")]["labels"] = {}
    with pytest.raises(OwnershipError):
        await reconfigure.find_rig_node(other)
    assert not any(r["method"] == "PATCH" for r in fake_gcp.tpu.requests)


async def test_a_reconfigure_the_vm_is_still_applying_is_refused_by_its_generation(
    fake_gcp, tmp_path
) -> None:
    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    await _active_node(fake_gcp, s)
    fake_gcp.tpu.put_guest_attribute(ZONE, "gemma4-e2b", "tpu-devops/stage", "ready")
    with pytest.raises(
        ConfigError
    ) as err:  # a startup script from before the watcher: nothing would apply it
        await reconfigure.reconfigure_vllm(s, max_model_len=8192)
    assert "recreate the TPU" in (err.value.fix or "") and "older" in err.value.message
    fake_gcp.tpu.put_guest_attribute(
        ZONE, "gemma4-e2b", "tpu-devops/features", "reconfigure-watcher compile-cache"
    )
    running = {"generation": "rc-elsewhere", "stages": [{"stage": "container-started", "at": time.time()}]}
    fake_gcp.tpu.put_guest_attribute(ZONE, "gemma4-e2b", "tpu-devops/reconfigure", json.dumps(running))
    with pytest.raises(ConfigError) as err:
        await reconfigure.reconfigure_vllm(s, max_model_len=8192)
    assert err.value.value == "rc-elsewhere" and err.value.field == "job_id"
    running["stages"][0]["at"] = time.time() - reconfigure.STALE_AFTER_S - 60  # abandoned long ago
    fake_gcp.tpu.put_guest_attribute(ZONE, "gemma4-e2b", "tpu-devops/reconfigure", json.dumps(running))
    plan = await reconfigure.reconfigure_vllm(s, max_model_len=8192, dry_run=True)
    assert plan.changes == ["--max-model-len: 16384 -> 8192"] and "as configured" in plan.old_source
    plan = await reconfigure.reconfigure_vllm(s, max_num_batched_tokens=8192, dry_run=True)
    assert plan.changes == ["--max-num-batched-tokens: 4096 -> 8192"]
    plan = await reconfigure.reconfigure_vllm(s, max_num_batched_tokens=4096, dry_run=True)
    assert plan.changes == []  # the default budget already
    same = await reconfigure.reconfigure_vllm(s)
    assert same.changes == [] and same.job_id is None and "nothing to change" in same.next_step
    assert not any(r["method"] == "PATCH" for r in fake_gcp.tpu.requests)


def test_flag_changes_read_both_spellings() -> None:
    old = ["vllm", "serve", "m", "--max-model-len", "16384", "--enable-auto-tool-choice", "--x=1"]
    new = ["vllm", "serve", "m", "--max-model-len", "8192", "--x=2", "--y"]
    assert reconfigure.flag_changes(old, new) == [
        "--max-model-len: 16384 -> 8192",
        "--enable-auto-tool-choice: on -> (unset)",
        "--x: 1 -> 2",
        "--y: (unset) -> on",
    ]


async def test_the_create_path_makes_the_bucket_first(fake_gcp, tmp_path) -> None:
    from tpu_devops.provisioning.queued import create_queued_resource

    fake_gcp.secrets.put("hf-token", "hf_" + "x" * 34)
    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    result = await create_queued_resource(s, allowed_source_ranges=["198.51.100.7/32"])
    assert result.created and s.bucket in fake_gcp.storage.buckets
    script = fake_gcp.tpu.nodes[(ZONE, "gemma4-e2b")]["metadata"]["startup-script"]
    assert f"BUCKET={s.bucket}" in script
    assert not any(w.startswith("WARM BOOT OFF") for w in result.warnings)
    await call(api(s).delete_node, ZONE, "gemma4-e2b")
    assert fake_gcp.rejections == []


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize(
    ("creator", "warned"), [("0123456789ab", True), ("fedcba987654", True), (None, False)]
)
async def test_reconfiguring_a_node_someone_else_created_warns_first(
    fake_gcp, tmp_path, creator, warned, dry_run
) -> None:
    # Two installations with one RESOURCE_ID are one rig: a node of the rig that another
    # principal created is still changed, but the answer says loudly whose it is. None: created by these
    # credentials (the label build_request writes).
    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    await _active_node(fake_gcp, s, **({"created-by": creator} if creator else {}))
    fake_gcp.tpu.put_guest_attribute(ZONE, "gemma4-e2b", "tpu-devops/features", "reconfigure-watcher")
    out = await reconfigure.reconfigure_vllm(s, max_model_len=8192, dry_run=dry_run)
    said = out.headline() + out.render_text()
    assert ("created by someone else" in said) is warned
    if warned:
        assert f"created-by={creator}" in out.headline() and out.notes[0].startswith("WARNING:")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"vllm_image": "vllm/vllm-tpu:v0.12.0"}, "vllm_image"),
        ({"vllm_image": "vllm/vllm-tpu:0.18.1"}, "vllm_image"),
        ({"gpu_memory_utilization": 0.98}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 0.95}, "gpu_memory_utilization"),
    ],
)
async def test_a_blocking_lint_finding_names_the_argument_that_caused_it(
    fake_gcp, tmp_path, overrides, field
) -> None:
    # "image_too_old_for_model = ..." named a lint rule, not the argument to change (a clear error names the field).
    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path))
    await _active_node(fake_gcp, s)
    with pytest.raises(ConfigError) as err:
        await reconfigure.reconfigure_vllm(s, dry_run=True, **overrides)
    assert err.value.field == field and "blocking lint findings" in err.value.message
