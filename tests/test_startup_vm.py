"""The rendered startup script and its watcher, run for real (bash) against a fake VM: the metadata
server (wait_for_change with ETags), Cloud Storage and Secret Manager (the strict discovery-checked
fakes), a docker shim and a fake vLLM, all on loopback. Covers the compile cache and staged weights in
the bucket, the reconfigure watcher with rollback, and secrets never on a command line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from tests.fakes.gcp import FakeGcp
from tests.fakes.vm import ACCESS_TOKEN, FakeEngine, FakeMetadata, VmShims
from tpu_devops.config import load_settings
from tpu_devops.planning import shapes, startup, warmboot
from tpu_devops.provisioning import bucket, reconfigure

ROOT = Path(__file__).resolve().parent.parent
HF_TOKEN = "hf_PLANTEDtokenValue0123456789abcd"
API_KEY = "vk-PLANTED-api-key-0123456789abcdef"
OOM_LOG = ROOT / "tests" / "data" / "vllm-logs" / "v5e1-e2b-util095-program-oom.log"
SNAPSHOT_FILES = {"config.json": b'{"model_type": "gemma4"}', "model.safetensors": b"\x00weights" * 100}


@pytest.fixture
def world(tmp_path):
    with FakeGcp() as gcp:
        gcp.secrets.put("hf-token", HF_TOKEN)
        gcp.secrets.put("vllm-api-key", API_KEY)
        gcp.storage.tokens[ACCESS_TOKEN] = gcp.storage.vm_account()
        md = FakeMetadata().start()
        engines: list[FakeEngine] = []
        try:
            yield gcp, md, engines, tmp_path
        finally:
            for e in engines:
                e.stop()
            md.stop()


def make_vm(world, name: str, **env: str):
    gcp, md, engines, tmp_path = world
    vm = VmShims(tmp_path / name, metadata_url=md.url, gcp_url=gcp.url)
    engine = FakeEngine(vm.containers).start()
    engines.append(engine)
    settings = load_settings(
        Path("/nonexistent"),
        {"GOOGLE_CLOUD_PROJECT": "demo-project", "TPU_DEVOPS_GCP_ENDPOINT": gcp.url,
         "VLLM_PORT": str(engine.port), **env},
    )  # fmt: skip
    return vm, engine, settings


def plant_snapshot(vm: VmShims) -> None:
    snap = vm.fs / "root/.cache/huggingface/hub/models--google--gemma-4-E2B-it/snapshots/0123abcd"
    snap.mkdir(parents=True)
    for name, data in SNAPSHOT_FILES.items():
        (snap / name).write_bytes(data)


def no_secret_on_a_command_line(vm: VmShims) -> None:
    for argv in vm.argv_lines():
        line = " ".join(argv)
        assert HF_TOKEN not in line and ACCESS_TOKEN not in line and API_KEY not in line, line


def test_cold_boot_fills_the_bucket_and_the_next_node_boots_warm_without_the_token(world):
    gcp = world[0]
    vm, _, settings = make_vm(world, "first")
    made = anyio.run(bucket.ensure_bucket, settings)
    assert made.created and made.usable and made.vm_access and made.granted
    plant_snapshot(vm)
    proc = vm.boot(startup.render_startup_script(settings).script)
    assert proc.returncode == 0, proc.stderr
    syslog = vm.syslog()
    for stage in (
        "cache-miss",
        "weights-from-hub",
        "ready",
        "cache-saved",
        "weights-staged",
        "watcher-started",
    ):
        assert f"STAGE {stage}" in syslog, stage
    assert syslog.index("STAGE cache-miss") < syslog.index("STAGE ready") < syslog.index("STAGE cache-saved")
    objects = gcp.storage.objects[settings.bucket]
    prefix = warmboot.cache_prefix(
        settings.accelerator_type, settings.model_name, startup.vllm_serve_flags(settings)
    )
    cache = [n for n in objects if n.startswith(prefix) and n.endswith("/cache.tar.gz")]
    assert len(cache) == 1
    meta = objects[cache[0]][1]["metadata"]
    assert meta["image"] == settings.vllm_image and meta["image_digest"].startswith("sha256:")
    assert meta["shape_key"] == shapes.shape_key(startup.vllm_serve_flags(settings))
    assert "weights/google/gemma-4-E2B-it/manifest.json" in objects
    assert (
        objects["weights/google/gemma-4-E2B-it/model.safetensors"][0] == SNAPSHOT_FILES["model.safetensors"]
    )
    assert "daemon-reload" in (vm.fake / "systemctl").read_text()
    assert (vm.state / "serve.sh").exists()
    no_secret_on_a_command_line(vm)

    state = anyio.run(warmboot.warm_state, settings)
    assert state.warm_cache and state.staged_weights
    assert (
        state.expected_boot.seconds == warmboot.WARM_BOOT_S and "seed measurement" in state.expected_boot.text
    )

    calls_before = sum("hf-token" in r["path"] for r in gcp.secrets.requests)
    second, _, _ = make_vm(world, "second")
    proc = second.boot(startup.render_startup_script(settings).script)
    assert proc.returncode == 0, proc.stderr
    syslog = second.syslog()
    assert "STAGE cache-restored" in syslog and "STAGE weights-restored" in syslog
    assert "STAGE cache-unchanged" in syslog and "STAGE weights-staged" not in syslog
    run = second.runs()[-1]
    assert run["model"] == "/models/google/gemma-4-E2B-it"  # the bucket copy, served under the HF id
    assert run["args"][run["args"].index("--served-model-name") + 1] == "google/gemma-4-E2B-it"
    assert any(m.endswith(":/models/google/gemma-4-E2B-it:ro") for m in run["mounts"])
    restored = second.fs / "var/lib/tpu-devops/models/google/gemma-4-E2B-it/model.safetensors"
    assert restored.read_bytes() == SNAPSHOT_FILES["model.safetensors"]
    env = json.loads((second.containers / "vllm.json").read_text())["env"]
    assert "HF_TOKEN" not in env and env.get("HF_HUB_OFFLINE") == "1" and env.get("VLLM_API_KEY") == API_KEY
    assert sum("hf-token" in r["path"] for r in gcp.secrets.requests) == calls_before  # token not fetched
    no_secret_on_a_command_line(second)
    assert gcp.rejections == []


def test_without_the_grant_the_node_still_serves_cold_and_says_why(world):
    gcp = world[0]
    vm, _, settings = make_vm(world, "nogrant")
    anyio.run(bucket.ensure_bucket, settings)
    gcp.storage.policies[settings.bucket]["bindings"] = [
        b for b in gcp.storage.policies[settings.bucket]["bindings"] if b["role"] != bucket.OBJECT_ROLE
    ]
    status = anyio.run(bucket.inspect_bucket, settings)
    assert status.vm_access is False and "add-iam-policy-binding" in (status.fix or "")
    plant_snapshot(vm)
    proc = vm.boot(startup.render_startup_script(settings).script)
    assert proc.returncode == 0, proc.stderr
    syslog = vm.syslog()
    assert "STAGE ready" in syslog and "STAGE cache-miss" in syslog
    assert "STAGE cache-save-failed" in syslog and "roles/storage.objectUser" in syslog
    assert not any(n.startswith("compile-cache/") for n in gcp.storage.objects[settings.bucket])


def wait_for_stage(md: FakeMetadata, generation: str, stages: tuple[str, ...], bound_s: float = 60) -> dict:
    deadline = time.monotonic() + bound_s  # a bound for a stuck watcher, not a speed assertion
    while time.monotonic() < deadline:
        data = json.loads(md.guest.get("tpu-devops/reconfigure") or "{}")
        if data.get("generation") == generation and data["stages"] and data["stages"][-1]["stage"] in stages:
            return data
        time.sleep(0.05)
    raise AssertionError(f"no stage {stages} for {generation}: {md.guest.get('tpu-devops/reconfigure')}")


def test_watcher_applies_new_flags_and_rolls_back_a_failing_boot(world):
    gcp, md = world[0], world[1]
    vm, engine, settings = make_vm(world, "watch")
    anyio.run(bucket.ensure_bucket, settings)
    md.attributes["startup-script"] = startup.render_startup_script(settings).script
    assert vm.boot(md.attributes["startup-script"]).returncode == 0
    vm.start_watcher(
        FAKE_FAIL_FLAGS=json.dumps(["--gpu-memory-utilization 0.95"]), FAKE_FAIL_LOG=str(OOM_LOG)
    )
    try:
        deadline = time.monotonic() + 60
        while not md.waits and time.monotonic() < deadline:  # the watcher now hangs on wait_for_change
            time.sleep(0.05)
        smaller = startup.apply_overrides(settings, max_model_len=8192)
        md.attributes[reconfigure.SPEC_ATTRIBUTE] = json.dumps(reconfigure.serving_spec(smaller, "rc-one"))
        data = wait_for_stage(md, "rc-one", reconfigure.TERMINAL)
        names = [s["stage"] for s in data["stages"]]
        assert names[0] == "received" and names[-1] == "serving", names
        assert names.index("container-started") < names.index("healthy") < names.index("serving")
        assert "cache-miss" in names  # a new max_model_len is a new shape: a new cache key
        run = vm.runs()[-1]
        assert run["args"][run["args"].index("--max-model-len") + 1] == "8192"
        record = json.loads(md.guest["tpu-devops/serving-flags"])
        assert record["flags"] == startup.vllm_serve_flags(smaller)
        waits = [w for w in md.waits if w.get("last_etag")]
        assert waits and all(w.get("timeout_sec") for w in waits)  # every wait sends the ETag back

        risky = startup.apply_overrides(settings, max_model_len=8192, gpu_memory_utilization=0.95)
        md.attributes[reconfigure.SPEC_ATTRIBUTE] = json.dumps(reconfigure.serving_spec(risky, "rc-two"))
        data = wait_for_stage(md, "rc-two", ("rolled-back", "rollback-failed", "rollback-impossible"))
        names = [s["stage"] for s in data["stages"]]
        assert names[-3:] == ["boot-failed", "rolling-back", "rolled-back"] or names[-1] == "rolled-back", (
            names
        )
        assert "RuntimeProgramAllocationFailure" in md.guest["tpu-devops/reconfigure-log"]
        running = json.loads((vm.containers / "vllm.json").read_text())
        assert running["running"] and "0.95" not in running["args"]
        assert running["args"][running["args"].index("--max-model-len") + 1] == "8192"  # the last that served
        assert json.loads(md.guest["tpu-devops/serving-flags"])["flags"] == startup.vllm_serve_flags(smaller)
        root, headline = reconfigure._diagnose(md.guest["tpu-devops/reconfigure-log"])
        assert root and "jit_structured_decode_fn" in root["title"] and "0.92" in root["fix"]
        assert (headline or "").startswith("boot FAILED")

        # the same generation again is not re-applied; a spec asking for --api-key is refused
        runs = len(vm.runs())
        bad = reconfigure.serving_spec(smaller, "rc-three")
        bad["args"] = [*bad["args"], "--api-key", "sk-on-the-command-line"]
        md.attributes[reconfigure.SPEC_ATTRIBUTE] = json.dumps(bad)
        data = wait_for_stage(md, "rc-three", ("refused",))
        assert "--api-key" in data["stages"][-1]["detail"] and len(vm.runs()) == runs
    finally:
        out = vm.stop_watcher()
    assert "Traceback" not in out

    # a reboot serves the flags the last reconfigure made serve, not the rendered ones ...
    assert vm.boot(md.attributes["startup-script"]).returncode == 0
    assert "STAGE spec-restored serving the flags of reconfigure rc-one" in vm.syslog()
    run = vm.runs()[-1]
    assert run["args"][run["args"].index("--max-model-len") + 1] == "8192"
    # ... unless the startup script itself was re-rendered with other flags: those win
    rerendered = startup.render_startup_script(startup.apply_overrides(settings, max_model_len=12288)).script
    syslog_before = len(vm.syslog())
    assert vm.boot(rerendered).returncode == 0
    assert "spec-restored" not in vm.syslog()[syslog_before:]
    run = vm.runs()[-1]
    assert run["args"][run["args"].index("--max-model-len") + 1] == "12288"
    no_secret_on_a_command_line(vm)
    assert gcp.rejections == []
