"""The shipped startup script, rendered by tpu_devops/planning/startup.py and run unmodified by bash in a
simulated TPU VM (tests/fakes/vm): its own network namespace with loopback only, the metadata server
(node metadata, guest attributes) and the strict Secret Manager and Cloud Storage fakes reached by the
real curl over TLS under Google's host names, a docker daemon stand-in whose containers are the fake
vLLM engine (or the real HAProxy) with Docker's restart policies, and a systemd stand-in that runs the
reconfigure watcher's unit.

Cases: cold boot, warm boot from the bucket, reconfigure, a reconfigure whose pull fails (nothing is
touched), one whose engine fails (rollback), reboot, four engines behind HAProxy, a watcher without a
project, an engine crash and a dockerd restart, staged weights not copied twice, bounded guest
attributes and reported write failures, failures named by their cause."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes.gcp import FakeGcp
from tests.fakes.vm import ACCESS_TOKEN, FakeMetadata, haproxy_missing, unusable
from tpu_devops.config import load_settings
from tpu_devops.planning import shapes, startup, warmboot
from tpu_devops.provisioning import bucket, reconfigure

pytestmark = pytest.mark.skipif(
    unusable() is not None, reason=f"the simulated TPU VM runs in its own network namespace: {unusable()}"
)
ROOT = Path(__file__).resolve().parent.parent
HF_TOKEN = "hf_PLANTEDtokenValue0123456789abcd"
API_KEY = "vk-PLANTED-api-key-0123456789abcdef"
OOM_LOG = ROOT / "tests" / "data" / "vllm-logs" / "v5e1-e2b-util095-program-oom.log"
SNAPSHOT_FILES = {"config.json": b'{"model_type": "gemma4"}', "model.safetensors": b"\x00weights" * 100}
BAD_IMAGE = "vllm/vllm-tpu:v0.99.0"
PULL_ERROR = (
    f"Error response from daemon: manifest for {BAD_IMAGE} not found: manifest unknown: manifest unknown"
)
GUEST_VALUE_MAX = 8192  # the bound the startup script keeps every guest attribute under (bytes)


@dataclass
class World:
    gcp: FakeGcp
    tmp: Path
    vms: list

    def vm(self, name: str, *, metadata: FakeMetadata | None = None, **outcomes: Any):
        from tests.fakes.vm import SimulatedVm

        vm = SimulatedVm(self.tmp / name, gcp=self.gcp, metadata=metadata, docker_script=outcomes).start()
        self.vms.append(vm)
        return vm


@pytest.fixture
def world(tmp_path):
    with FakeGcp() as gcp:
        gcp.secrets.put("hf-token", HF_TOKEN)
        gcp.secrets.put("vllm-api-key", API_KEY)
        gcp.storage.tokens[ACCESS_TOKEN] = gcp.storage.vm_account()
        w = World(gcp, tmp_path, [])
        try:
            yield w
        finally:
            for vm in w.vms:
                vm.stop()


def settings(world: World, **env: str):
    return load_settings(
        Path("/nonexistent"),
        {"GOOGLE_CLOUD_PROJECT": "demo-project", "TPU_DEVOPS_GCP_ENDPOINT": world.gcp.url, **env},
    )


def plant_snapshot(vm) -> None:
    snap = vm.fs / "root/.cache/huggingface/hub/models--google--gemma-4-E2B-it/snapshots/0123abcd"
    snap.mkdir(parents=True)
    for name, data in SNAPSHOT_FILES.items():
        (snap / name).write_bytes(data)


def no_secret_on_a_command_line(vm) -> None:
    for argv in vm.argv_lines():
        line = " ".join(argv)
        assert HF_TOKEN not in line and ACCESS_TOKEN not in line and API_KEY not in line, line


def stages_of(md: FakeMetadata, generation: str) -> list[dict]:
    data = json.loads(md.guest.get("tpu-devops/reconfigure") or "{}")
    return data.get("stages", []) if data.get("generation") == generation else []


def wait_for_stage(vm, generation: str, stages: tuple[str, ...]) -> list[str]:
    def done():
        got = stages_of(vm.metadata, generation)
        return got if got and got[-1]["stage"] in stages else None

    got = vm.wait_for(
        done, f"reconfigure {generation} reaching {stages}: {vm.metadata.guest.get('tpu-devops/reconfigure')}"
    )
    return [s["stage"] for s in got]


def reconfigure_to(vm, new_settings, generation: str) -> None:
    vm.metadata.attributes[reconfigure.SPEC_ATTRIBUTE] = json.dumps(
        reconfigure.serving_spec(new_settings, generation)
    )


def booted(vm, s) -> subprocess.CompletedProcess:
    vm.metadata.attributes["startup-script"] = startup.render_startup_script(s).script
    proc = vm.boot(vm.metadata.attributes["startup-script"])
    assert proc.returncode == 0, proc.stdout[-3000:] + vm.syslog()[-3000:]
    vm.wait_for(lambda: vm.metadata.waits, "the watcher waiting on the metadata server")
    return proc


def flag(run: dict, name: str) -> str:
    return run["args"][run["args"].index(name) + 1]


# ---- cold boot, warm boot from the bucket ----------------------------------------------------------


def test_cold_boot_fills_the_bucket_and_the_next_node_boots_warm_without_the_token(world) -> None:
    gcp = world.gcp
    s = settings(world)
    made = anyio.run(bucket.ensure_bucket, s)
    assert made.created and made.usable and made.vm_access and made.granted
    vm = world.vm("first")
    plant_snapshot(vm)
    booted(vm, s)
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
    assert "STAGE ready" in vm.serial()  # the serial console too
    objects = gcp.storage.objects[s.bucket]
    prefix = warmboot.cache_prefix(s.accelerator_type, s.model_name, startup.vllm_serve_flags(s))
    cache = [n for n in objects if n.startswith(prefix) and n.endswith("/cache.tar.gz")]
    assert len(cache) == 1
    meta = objects[cache[0]][1]["metadata"]
    assert meta["image"] == s.vllm_image and meta["image_digest"].startswith("sha256:")
    assert meta["shape_key"] == shapes.shape_key(startup.vllm_serve_flags(s))
    assert (
        objects["weights/google/gemma-4-E2B-it/model.safetensors"][0] == SNAPSHOT_FILES["model.safetensors"]
    )
    assert "weights/google/gemma-4-E2B-it/manifest.json" in objects
    assert ["systemctl", "daemon-reload"] in vm.calls("systemctl") and (vm.state / "serve.sh").exists()
    no_secret_on_a_command_line(vm)
    state = anyio.run(warmboot.warm_state, s)
    assert state.warm_cache and state.staged_weights

    calls_before = sum("hf-token" in r["path"] for r in gcp.secrets.requests)
    second = world.vm("second")
    booted(second, s)
    syslog = second.syslog()
    assert "STAGE cache-restored" in syslog and "STAGE weights-restored" in syslog
    assert "STAGE cache-unchanged" in syslog and "STAGE weights-staged" not in syslog
    run = second.runs()[-1]
    assert run["model"] == "/models/google/gemma-4-E2B-it"  # the bucket copy, served under the HF id
    assert flag(run, "--served-model-name") == "google/gemma-4-E2B-it"
    assert any(m.endswith(":/models/google/gemma-4-E2B-it:ro") for m in run["mounts"])
    restored = second.fs / "var/lib/tpu-devops/models/google/gemma-4-E2B-it/model.safetensors"
    assert restored.read_bytes() == SNAPSHOT_FILES["model.safetensors"]
    env = second.containers()["vllm"]["env"]
    assert "HF_TOKEN" not in env and env.get("HF_HUB_OFFLINE") == "1" and env.get("VLLM_API_KEY") == API_KEY
    assert sum("hf-token" in r["path"] for r in gcp.secrets.requests) == calls_before  # token not fetched
    no_secret_on_a_command_line(second)
    assert gcp.rejections == []


def test_without_the_grant_the_node_still_serves_cold_and_says_why(world) -> None:
    gcp = world.gcp
    s = settings(world)
    anyio.run(bucket.ensure_bucket, s)
    gcp.storage.policies[s.bucket]["bindings"] = [
        b for b in gcp.storage.policies[s.bucket]["bindings"] if b["role"] != bucket.OBJECT_ROLE
    ]
    vm = world.vm("nogrant")
    plant_snapshot(vm)
    booted(vm, s)
    syslog = vm.syslog()
    assert "STAGE ready" in syslog and "STAGE cache-miss" in syslog
    assert "STAGE cache-save-failed" in syslog and "roles/storage.objectUser" in syslog
    assert not any(n.startswith("compile-cache/") for n in gcp.storage.objects[s.bucket])


def test_secrets_reach_only_the_env_file_and_a_late_grant_is_waited_for(world) -> None:
    world.gcp.secrets.deny_times["hf-token"] = 2  # IAM lands after the VM first asks
    vm = world.vm("secrets")
    s = settings(world, TPU_DEVOPS_BUCKET="off")
    proc = booted(vm, s)
    syslog = vm.syslog()
    assert (
        "STAGE waiting-for-secret hf-token attempt 1" in syslog
        and "STAGE secret-fetched hf-token attempt 3" in syslog
    )
    # the refusal is named as Secret Manager answered it, not guessed
    assert "403" in syslog and "secretmanager.versions.access" in syslog
    run = vm.runs()[-1]
    assert run["env_file_modes"] == ["600"] and set(run["env_keys"]) >= {"HF_TOKEN", "VLLM_API_KEY"}
    assert not (vm.fs / "run/tpu-devops/vllm.env").exists()  # removed once the container started
    for secret in (HF_TOKEN, API_KEY):
        assert (
            secret not in syslog + proc.stdout + vm.serial()
            and secret not in vm.metadata.attributes["startup-script"]
        )
    no_secret_on_a_command_line(vm)
    assert "--api-key" not in run["args"]
    # pinned image, gcplogs, one compile-cache directory per cache key, the flags from vllm_serve_flags
    assert run["log_driver"] == "gcplogs" and run["image"] == "vllm/vllm-tpu:v0.30.0"
    assert run["model"] == "google/gemma-4-E2B-it" and run["args"] == [
        *startup.script_args(s),
        "--port",
        "8000",
    ]
    assert any(
        m.startswith(f"{vm.fs}/root/.cache/vllm/") and m.endswith(":/root/.cache/vllm") for m in run["mounts"]
    )
    assert ["docker", "pull", "vllm/vllm-tpu:v0.30.0"] in vm.calls("docker")
    record = json.loads((vm.state / "serving-flags.json").read_text())
    assert (
        record["flags"] == startup.vllm_serve_flags(s)
        and json.loads(vm.metadata.guest["tpu-devops/serving-flags"]) == record
    )
    assert oct((vm.fs / "run/tpu-devops").stat().st_mode & 0o777) == "0o700"
    paths = [r["path"] for r in world.gcp.secrets.requests]
    assert "/v1/projects/demo-project/secrets/hf-token/versions/latest:access" in paths
    assert vm.request(8000, "/v1/models")[0] == 401  # vLLM answers /v1 only with the key
    assert vm.request(8000, "/v1/models", Authorization=f"Bearer {API_KEY}")[0] == 200


def test_the_script_gives_up_on_a_secret_after_its_deadline_naming_why(world) -> None:
    # The one altered constant in these tests: the 30-minute wait for an IAM grant, made 0 (bash's SECONDS
    # cannot be sped up like the VM's sleep).
    world.gcp.secrets.denied.add("hf-token")
    vm = world.vm("deadline")
    script = startup.render_startup_script(settings(world, TPU_DEVOPS_BUCKET="off")).script
    assert "readonly SECRET_WAIT_S=1800" in script
    proc = vm.boot(script.replace("readonly SECRET_WAIT_S=1800", "readonly SECRET_WAIT_S=0"))
    assert proc.returncode != 0
    failed = [x for x in vm.syslog().splitlines() if "STAGE failed" in x]
    assert (
        failed
        and "hf-token" in failed[0]
        and "403" in failed[0]
        and "roles/secretmanager.secretAccessor" in failed[0]
    )
    assert not [c for c in vm.calls("docker") if c[1] == "run"]


def test_a_secret_that_does_not_exist_is_named_as_missing(world) -> None:
    del world.gcp.secrets.secrets["hf-token"]
    vm = world.vm("missing")
    s = settings(world, TPU_DEVOPS_BUCKET="off")
    vm.metadata.attributes["startup-script"] = startup.render_startup_script(s).script
    proc = vm.start_boot(vm.metadata.attributes["startup-script"])
    try:
        vm.wait_for(lambda: "waiting-for-secret hf-token attempt 2" in vm.syslog(), "a second attempt")
    finally:
        proc.kill()
        proc.communicate()
    line = next(x for x in vm.syslog().splitlines() if "waiting-for-secret hf-token attempt 1" in x)
    assert "404" in line and "not found" in line and "secretAccessor" not in line


# ---- what docker says, and what it does not --------------------------------------------------------


def test_gcplogs_refused_falls_back_to_local_logs_and_says_why(world) -> None:
    vm = world.vm("gcplogs", gcplogs_fail="unable to connect or authenticate with Google Cloud Logging")
    booted(vm, settings(world, TPU_DEVOPS_BUCKET="off"))
    syslog = vm.syslog()
    assert (
        "STAGE log-driver-fallback" in syslog
        and "roles/logging.logWriter" in syslog
        and "STAGE ready" in syslog
    )
    assert "unable to connect or authenticate" in syslog  # docker's own words are kept
    runs = [c for c in vm.calls("docker") if c[1] == "run"]
    assert "--log-driver=gcplogs" in runs[0] and "--log-driver=json-file" in runs[1]
    assert vm.containers()["vllm"]["log_driver"] == "json-file"


def test_a_run_failure_is_named_by_docker_not_blamed_on_the_log_driver(world) -> None:
    why = 'error gathering device information while adding custom device "/dev/accel0": no such file or directory'
    vm = world.vm("runfail", run_fail={"vllm": why})
    s = settings(world, TPU_DEVOPS_BUCKET="off")
    proc = vm.boot(startup.render_startup_script(s).script)
    assert proc.returncode != 0
    syslog = vm.syslog()
    failed = [x for x in syslog.splitlines() if "STAGE failed" in x]
    assert failed and "/dev/accel0" in failed[-1], syslog
    assert "log-driver-fallback" not in syslog and "logWriter" not in syslog


@pytest.mark.parametrize("engines", [1, 4])
def test_a_boot_whose_pull_fails_stops_naming_the_pull(world, engines: int) -> None:
    if engines == 4 and haproxy_missing():
        pytest.skip(haproxy_missing())
    vm = world.vm(f"pull{engines}", pull_fail={BAD_IMAGE: PULL_ERROR})
    env = {"ACCELERATOR_TYPE": "v5litepod-4"} if engines == 4 else {}
    s = startup.apply_overrides(settings(world, TPU_DEVOPS_BUCKET="off", **env), vllm_image=BAD_IMAGE)
    proc = vm.boot(startup.render_startup_script(s).script)
    assert proc.returncode != 0
    failed = [x for x in vm.syslog().splitlines() if "STAGE failed" in x]
    assert failed and "pull" in failed[-1] and BAD_IMAGE in failed[-1] and "manifest unknown" in failed[-1]
    assert not [
        c for c in vm.calls("docker") if c[1] == "run"
    ]  # nothing started on an image that is not there
    assert "logWriter" not in vm.syslog()
    pulls = [c for c in vm.calls("docker") if c[:2] == ["docker", "pull"]]
    assert len(pulls) == 1  # a manifest that does not exist is not retried


# ---- the reconfigure watcher -------------------------------------------------------------------------


def test_watcher_applies_new_flags_and_rolls_back_a_failing_boot(world) -> None:
    s = settings(world)
    anyio.run(bucket.ensure_bucket, s)
    vm = world.vm(
        "watch",
        engines=[{"match": "--gpu-memory-utilization 0.95", "exit_after_s": 0.3, "log": str(OOM_LOG)}],
    )
    booted(vm, s)
    md = vm.metadata
    smaller = startup.apply_overrides(s, max_model_len=8192)
    reconfigure_to(vm, smaller, "rc-one")
    names = wait_for_stage(vm, "rc-one", reconfigure.TERMINAL)
    assert names[0] == "received" and names[-1] == "serving", names
    assert names.index("container-started") < names.index("healthy") < names.index("serving")
    assert "cache-miss" in names  # a new max_model_len is a new shape: a new cache key
    assert flag(vm.runs()[-1], "--max-model-len") == "8192"
    assert json.loads(md.guest["tpu-devops/serving-flags"])["flags"] == startup.vllm_serve_flags(smaller)
    waits = [w for w in md.waits if w.get("last_etag")]
    assert waits and all(w.get("timeout_sec") for w in waits)  # every wait sends the ETag back

    risky = startup.apply_overrides(s, max_model_len=8192, gpu_memory_utilization=0.95)
    reconfigure_to(vm, risky, "rc-two")
    names = wait_for_stage(vm, "rc-two", ("rolled-back", "rollback-failed", "rollback-impossible"))
    assert names[-1] == "rolled-back" and names.index("boot-failed") < names.index("rolling-back"), names
    failure = next(x for x in stages_of(md, "rc-two") if x["stage"] == "boot-failed")
    assert "engine 0 exited" in failure["detail"]  # the real cause, not a generic one
    log = md.guest["tpu-devops/reconfigure-log"]
    assert "RuntimeProgramAllocationFailure" in log and len(log.encode()) <= GUEST_VALUE_MAX
    root, headline = reconfigure._diagnose(log)
    assert root and "jit_structured_decode_fn" in root["title"] and "0.92" in root["fix"]
    running = vm.containers()["vllm"]
    assert running["status"] == "running" and "0.95" not in running["cmd"]
    assert flag(vm.runs()[-1], "--max-model-len") == "8192"  # the last flags that served
    assert vm.request(8000, "/health")[0] == 200

    # the same generation again is not re-applied; a spec asking for --api-key is refused
    runs = len(vm.runs())
    bad = reconfigure.serving_spec(smaller, "rc-three")
    bad["args"] = [*bad["args"], "--api-key", "sk-on-the-command-line"]
    md.attributes[reconfigure.SPEC_ATTRIBUTE] = json.dumps(bad)
    wait_for_stage(vm, "rc-three", ("refused",))
    assert "--api-key" in stages_of(md, "rc-three")[-1]["detail"] and len(vm.runs()) == runs
    assert "Traceback" not in vm.journal("tpu-devops-watcher.service")
    no_secret_on_a_command_line(vm)
    assert world.gcp.rejections == []


def test_a_reconfigure_whose_pull_fails_keeps_the_old_container_serving(world) -> None:
    vm = world.vm("pullfail", pull_fail={BAD_IMAGE: PULL_ERROR})
    s = settings(world, TPU_DEVOPS_BUCKET="off")
    booted(vm, s)
    before = vm.containers()["vllm"]
    runs, calls = len(vm.runs()), len(vm.calls("docker"))
    reconfigure_to(vm, startup.apply_overrides(s, vllm_image=BAD_IMAGE), "rc-pull")
    names = wait_for_stage(vm, "rc-pull", reconfigure.TERMINAL)
    assert names[-1] == "pull-failed", names
    assert "rolling-back" not in names and "container-started" not in names
    detail = stages_of(vm.metadata, "rc-pull")[-1]["detail"]
    assert BAD_IMAGE in detail and "manifest unknown" in detail and "still serves" in detail
    after = vm.containers()["vllm"]
    assert after["id"] == before["id"] and after["status"] == "running" and len(vm.runs()) == runs
    assert not [c for c in vm.calls("docker")[calls:] if c[1] in ("rm", "run", "stop", "update")]
    assert "No such container" not in vm.metadata.guest.get("tpu-devops/reconfigure-log", "")
    assert vm.request(8000, "/health")[0] == 200
    out = reconfigure.outcome_of_stage("pull-failed")
    assert out == "unchanged"


def test_a_pull_that_fails_twice_then_works_is_retried(world) -> None:
    vm = world.vm("pullretry", pull_fail_times={"vllm/vllm-tpu:v0.30.1": 2})
    s = settings(world, TPU_DEVOPS_BUCKET="off")
    booted(vm, s)
    reconfigure_to(vm, startup.apply_overrides(s, vllm_image="vllm/vllm-tpu:v0.30.1"), "rc-retry")
    names = wait_for_stage(vm, "rc-retry", reconfigure.TERMINAL)
    assert names[-1] == "serving" and names.count("image-pull-retry") == 2, names
    assert "Client.Timeout" in stages_of(vm.metadata, "rc-retry")[names.index("image-pull-retry")]["detail"]


def test_a_reboot_serves_the_last_flags_that_served(world) -> None:
    s = settings(world, TPU_DEVOPS_BUCKET="off")
    vm = world.vm("reboot")
    booted(vm, s)
    reconfigure_to(vm, startup.apply_overrides(s, max_model_len=8192), "rc-one")
    assert wait_for_stage(vm, "rc-one", reconfigure.TERMINAL)[-1] == "serving"
    proc = vm.reboot(vm.metadata.attributes["startup-script"])
    assert proc.returncode == 0, vm.syslog()[-2000:]
    assert "STAGE spec-restored serving the flags of reconfigure rc-one" in vm.syslog()
    assert flag(vm.runs()[-1], "--max-model-len") == "8192"
    assert vm.containers()["vllm"]["status"] == "running" and vm.request(8000, "/health")[0] == 200
    vm.wait_for(lambda: len([w for w in vm.metadata.waits if w.get("last_etag")]) > 0, "the watcher back")
    # ... unless the startup script itself was re-rendered with other flags: those win
    rerendered = startup.render_startup_script(startup.apply_overrides(s, max_model_len=12288)).script
    mark = len(vm.syslog())
    assert vm.reboot(rerendered).returncode == 0
    assert "spec-restored" not in vm.syslog()[mark:] and flag(vm.runs()[-1], "--max-model-len") == "12288"


def test_a_watcher_without_a_project_reads_it_from_the_metadata_server(world) -> None:
    s = settings(world, GOOGLE_CLOUD_PROJECT="", TPU_DEVOPS_BUCKET="off")
    assert not s.project
    vm = world.vm("noproject")
    booted(vm, s)
    reconfigure_to(vm, startup.apply_overrides(s, max_model_len=8192), "rc-one")
    assert wait_for_stage(vm, "rc-one", reconfigure.TERMINAL)[-1] == "serving"
    assert not any("/projects//" in r["path"] for r in world.gcp.secrets.requests)


def test_a_watcher_that_cannot_learn_the_project_refuses_and_says_so(world) -> None:
    s = settings(world, GOOGLE_CLOUD_PROJECT="", TPU_DEVOPS_BUCKET="off")
    vm = world.vm("noproject2")
    booted(vm, s)
    vm.metadata.project = None  # the metadata server cannot say (project/project-id answers 404)
    before = vm.containers()["vllm"]["id"]
    reconfigure_to(vm, startup.apply_overrides(s, max_model_len=8192), "rc-np")
    names = wait_for_stage(vm, "rc-np", reconfigure.TERMINAL)
    assert names[-1] == "refused", names
    assert "project" in stages_of(vm.metadata, "rc-np")[-1]["detail"]
    assert not any("/projects//" in r["path"] for r in world.gcp.secrets.requests)
    assert vm.containers()["vllm"]["id"] == before and vm.request(8000, "/health")[0] == 200


# ---- engines and the balancer restart; the balancer admits only healthy engines --------------------


def test_an_engine_crash_and_a_dockerd_restart_bring_serving_back(world) -> None:
    vm = world.vm("crash")
    booted(vm, settings(world, TPU_DEVOPS_BUCKET="off"))
    assert vm.containers()["vllm"]["restart"] == "unless-stopped"  # set once it served
    vm.crash("vllm")
    vm.wait_for(lambda: vm.containers()["vllm"]["restart_count"] >= 1, "docker restarting the engine")
    vm.wait_for(lambda: vm.request(8000, "/health")[0] == 200, "the engine healthy again")
    vm.restart_dockerd()
    vm.wait_for(lambda: vm.request(8000, "/health")[0] == 200, "the engine back after dockerd restarted")


def test_a_boot_failure_is_not_restarted_in_a_loop(world) -> None:
    vm = world.vm("noloop", engines=[{"match": "--max-model-len", "exit_after_s": 0.2, "log": str(OOM_LOG)}])
    proc = vm.boot(startup.render_startup_script(settings(world, TPU_DEVOPS_BUCKET="off")).script)
    assert proc.returncode != 0
    c = vm.containers()["vllm"]
    assert c["status"] == "exited" and c["restart_count"] == 0 and c["restart"] in ("no", "")
    assert "engine 0 exited before serving" in vm.syslog()


@pytest.mark.skipif(haproxy_missing() is not None, reason=str(haproxy_missing()))
def test_four_engines_behind_a_real_haproxy_serve_once_every_engine_is_admitted(world) -> None:
    # the engines answer /health at different times, as four engines compiling never finish together
    vm = world.vm(
        "four", engines=[{"match": f"--port {8001 + i}", "boot_s": 0.5 + 1.5 * i} for i in range(4)]
    )
    s = settings(world, ACCELERATOR_TYPE="v5litepod-4", TPU_DEVOPS_BUCKET="off")
    cfg = vm.root / "haproxy-check.cfg"
    cfg.write_text(startup.multiengine.haproxy_config(s))
    check = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    booted(vm, s)
    # "ready" means every engine is admitted by the balancer, not just answering on its own port
    for i in range(4):
        status, _ = vm.request(8000, f"/engines/{i}/health")
        assert status == 200, f"engine {i} not admitted by HAProxy when the VM said ready"
    served = {vm.request(8000, "/v1/models", Authorization=f"Bearer {API_KEY}")[0] for _ in range(8)}
    assert served == {200}
    runs = [r for r in vm.runs() if r["image"].startswith("vllm/")]
    assert len(runs) == 4 and all(c["restart"] == "unless-stopped" for c in vm.containers().values())
    for i, run in enumerate(runs):
        env = vm.containers()[f"vllm-{i}"]["env"]
        assert (
            run["name"] == f"vllm-{i}"
            and flag(run, "--port") == str(8001 + i)
            and run["args"].count("--port") == 1
        )
        assert env["TPU_VISIBLE_CHIPS"] == str(i) and env["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,1,1"
        assert env["TPU_PROCESS_BOUNDS"] == "1,1,1" and env["TPU_PROCESS_PORT"] == str(8476 + i)
        assert env["VLLM_API_KEY"] == API_KEY and run["env_file_modes"] == [
            "600"
        ]  # the key by the env file only
        # each engine's compile cache under the cache key's directory (tpu_devops.planning.warmboot)
        assert any(m.endswith(f"/engine-{i}:/root/.cache/vllm") for m in run["mounts"])
    lb = next(r for r in vm.runs() if r["name"] == "vllm-lb")
    assert lb["image"] == "haproxy:3.2" and any(
        m.endswith("haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro") for m in lb["mounts"]
    )
    assert (vm.state / "haproxy.cfg").read_text() == startup.multiengine.haproxy_config(s)
    assert ["docker", "pull", "haproxy:3.2"] in vm.calls("docker")
    syslog = vm.syslog()
    assert "4 engines of google/gemma-4-E2B-it on ports 8001 8002 8003 8004" in syslog
    assert "STAGE ready vLLM answers on port 8000 (4 engine(s))" in syslog
    record = json.loads((vm.state / "serving-flags.json").read_text())
    assert record["engines"]["engines"] == 4 and record["engines"]["engine_ports"] == [8001, 8002, 8003, 8004]
    no_secret_on_a_command_line(vm)
    # an engine crash: docker restarts it and the balancer admits it again once it is healthy
    vm.crash("vllm-2")
    vm.wait_for(lambda: vm.containers()["vllm-2"]["restart_count"] >= 1, "engine 2 restarted")
    vm.wait_for(
        lambda: vm.request(8000, "/engines/2/health")[0] == 200, "engine 2 admitted again", bound_s=120
    )
    # the balancer itself restarts on failure
    vm.crash("vllm-lb")
    vm.wait_for(lambda: vm.containers()["vllm-lb"]["restart_count"] >= 1, "the balancer restarted")
    vm.wait_for(
        lambda: vm.request(8000, "/engines/0/health")[0] == 200, "the balancer serving again", bound_s=120
    )


def test_a_dead_engine_among_four_is_named(world) -> None:
    vm = world.vm("dead", engines=[{"match": "--port 8003", "exit_after_s": 0.2}])
    proc = vm.boot(
        startup.render_startup_script(
            settings(world, ACCELERATOR_TYPE="v5litepod-4", TPU_DEVOPS_BUCKET="off")
        ).script
    )
    assert proc.returncode != 0
    syslog = vm.syslog()
    assert "STAGE failed vLLM engine 2 exited before serving" in syslog and "container vllm-2" in syslog


# ---- staged weights, guest attribute sizes and failed writes ---------------------------------------


def test_staged_weights_are_not_copied_again_when_unchanged(world) -> None:
    s = settings(world)
    anyio.run(bucket.ensure_bucket, s)
    first = world.vm("stage")
    plant_snapshot(first)
    booted(first, s)
    vm = world.vm("warm")
    booted(vm, s)

    def weight_reads() -> int:
        return sum(
            1 for r in world.gcp.storage.requests
            if r["method"] == "GET" and "/o/weights/" in r["path"] and "manifest.json" not in r["path"]
            and r.get("query", "").find("alt=media") >= 0
        )  # fmt: skip

    copied = weight_reads()
    assert copied == len(SNAPSHOT_FILES)
    reconfigure_to(vm, startup.apply_overrides(s, max_model_len=8192), "rc-w")
    assert wait_for_stage(vm, "rc-w", reconfigure.TERMINAL)[-1] == "serving"
    assert weight_reads() == copied  # the copy on the VM matches the bucket's manifest: not fetched again
    assert "weights-local" in [x["stage"] for x in stages_of(vm.metadata, "rc-w")]
    # a changed snapshot in the bucket is fetched again
    name = "weights/google/gemma-4-E2B-it/manifest.json"
    manifest = json.loads(world.gcp.storage.objects[s.bucket][name][0])
    manifest["revision"] = "4567cdef"
    world.gcp.storage.put(s.bucket, name, json.dumps(manifest).encode())
    reconfigure_to(vm, startup.apply_overrides(s, max_model_len=4096), "rc-w2")
    assert wait_for_stage(vm, "rc-w2", reconfigure.TERMINAL)[-1] == "serving"
    assert weight_reads() == copied + len(SNAPSHOT_FILES)


def test_guest_attributes_stay_bounded_and_a_failed_write_is_reported(world) -> None:
    vm = world.vm(
        "bounded",
        engines=[{"match": "--max-num-batched-tokens 8192", "exit_after_s": 0.2, "log": str(OOM_LOG)}],
    )
    s = settings(world, TPU_DEVOPS_BUCKET="off")
    booted(vm, s)
    for n in range(3):  # long flags, a failing boot and a rollback: the most a status and a log can hold
        risky = startup.apply_overrides(s, max_num_batched_tokens=8192, model_name="google/gemma-4-E2B-it")
        spec = reconfigure.serving_spec(risky, f"rc-big{n}")
        spec["args"] += ["--override-generation-config", json.dumps({"x" * 60: "y" * 3000})]
        vm.metadata.attributes[reconfigure.SPEC_ATTRIBUTE] = json.dumps(spec)
        wait_for_stage(vm, f"rc-big{n}", ("rolled-back", "rollback-failed", "refused"))
    sizes = {
        key: max(size for _, k, size, _ in vm.metadata.writes if k == key)
        for _, key, _, _ in vm.metadata.writes
    }
    assert sizes and max(sizes.values()) <= GUEST_VALUE_MAX, sizes
    root, _ = reconfigure._diagnose(vm.metadata.guest["tpu-devops/reconfigure-log"])
    assert root and "jit_structured_decode_fn" in root["title"]  # the bounded tail still holds the cause

    vm.metadata.refuse_writes["tpu-devops/reconfigure"] = 503
    reconfigure_to(vm, startup.apply_overrides(s, max_model_len=8192), "rc-lost")
    vm.wait_for(lambda: "rc-lost serving" in vm.syslog(), "the reconfigure serving")
    reported = [x for x in vm.syslog().splitlines() if "tpu-devops/reconfigure" in x and "503" in x]
    assert reported and "write" in reported[0].lower()


def test_the_serial_console_and_syslog_agree_and_no_value_leaks(world) -> None:
    vm = world.vm("serial")
    booted(vm, settings(world, TPU_DEVOPS_BUCKET="off"))
    serial = vm.serial()
    assert "tpu-devops: STAGE begin" in serial and "STAGE ready" in serial
    assert HF_TOKEN not in serial and API_KEY not in serial


# ---- names and images the VM refuses by itself -----------------------------------------------------


def test_the_watcher_refuses_a_spec_whose_image_or_model_is_not_allowed(world) -> None:
    """A spec written to the node's metadata behind the server's back: a foreign or lookalike image never
    gets the secrets (nothing pulled, nothing run), a model name never becomes a path outside the root."""
    vm = world.vm("foreign")
    s = settings(
        world, TPU_DEVOPS_BUCKET="off", VLLM_IMAGE_REPOSITORIES="us-docker.pkg.dev/p/mirror/vllm-tpu"
    )
    booted(vm, s)
    md = vm.metadata
    runs, pulls = len(vm.runs()), len([c for c in vm.calls("docker") if c[1] == "pull"])
    base = reconfigure.serving_spec(startup.apply_overrides(s, max_model_len=8192), "rc-x")
    for n, (field, value) in enumerate(
        [
            ("image", "evil.example.com/x/vllm-tpu:v0.30.0"),
            ("image", "vllm/vllm-tpu-evil:v0.30.0"),
            ("image", "evil/vllm-tpu:v0.30.0"),
            ("image", "docker.io:443/vllm/vllm-tpu:v0.30.0"),
            ("image", "VLLM/VLLM-TPU:v0.30.0"),
            ("image", "us-docker.pkg.dev/p/mirror/vllm-tpu-2:v1"),
            ("image", f"evil/x@sha256:{'a' * 64}"),
            ("model", "../../../../etc/x"),
            ("model", "/models/../../etc"),
        ]
    ):
        spec = {**base, "generation": f"rc-bad{n}", field: value}
        md.attributes[reconfigure.SPEC_ATTRIBUTE] = json.dumps(spec)
        wait_for_stage(vm, f"rc-bad{n}", ("refused",))
        detail = stages_of(md, f"rc-bad{n}")[-1]["detail"]
        assert "allowed" in detail if field == "image" else "Hugging Face repo id" in detail, detail
    assert len(vm.runs()) == runs and len([c for c in vm.calls("docker") if c[1] == "pull"]) == pulls
    # the operator's mirror is allowed on the VM too: its pull is attempted
    mirror = {**base, "generation": "rc-mirror", "image": "us-docker.pkg.dev/p/mirror/vllm-tpu:v0.30.0"}
    md.attributes[reconfigure.SPEC_ATTRIBUTE] = json.dumps(mirror)
    assert wait_for_stage(vm, "rc-mirror", reconfigure.TERMINAL)[0] == "received"
    assert vm.request(8000, "/health")[0] == 200
    assert "Traceback" not in vm.journal("tpu-devops-watcher.service")


def test_a_planted_manifest_or_compile_cache_in_the_bucket_writes_nothing_outside_the_root(world) -> None:
    """The product bucket is writable by the project's default compute service account: a manifest or a
    cache archive planted there must not make the VM write outside its directories."""
    import io
    import tarfile

    gcp = world.gcp
    s = settings(world)
    anyio.run(bucket.ensure_bucket, s)
    first = world.vm("first")
    booted(first, s)  # a cold boot saves the compile cache
    objects = gcp.storage.objects[s.bucket]
    [cache] = [n for n in objects if n.endswith("/cache.tar.gz")]
    escape = world.tmp / "escaped"
    planted = io.BytesIO()
    with tarfile.open(fileobj=planted, mode="w:gz") as archive:
        members = (
            ("../../../../../../escaped", tarfile.REGTYPE),
            ("link", tarfile.SYMTYPE),
            ("link/escaped", tarfile.REGTYPE),
        )
        for name, kind in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, str(world.tmp), 1 if kind == tarfile.REGTYPE else 0
            archive.addfile(info, io.BytesIO(b"x") if kind == tarfile.REGTYPE else None)
    gcp.storage.put(s.bucket, cache, planted.getvalue())
    bad_names = ["../../../../../../escaped", "/etc/cron.d/escaped", "a/../../../../escaped", "ok\u202etxt"]
    manifest = {"model": s.model_name, "revision": "x", "files": [{"name": n, "size": 1} for n in bad_names]}
    prefix = "weights/google/gemma-4-E2B-it/"
    gcp.storage.put(s.bucket, prefix + "manifest.json", json.dumps(manifest).encode())
    for n in bad_names:
        gcp.storage.put(s.bucket, prefix + n, b"planted")
    vm = world.vm("second")
    booted(vm, s)
    syslog = vm.syslog()
    assert "STAGE cache-refused" in syslog and "STAGE weights-from-hub weights manifest refused" in syslog
    assert not escape.exists() and not (vm.fs / "etc/cron.d/escaped").exists()
    models = vm.fs / "var/lib/tpu-devops/models"
    assert not models.exists() or not any(models.rglob("*escaped*"))
    assert not list(world.tmp.rglob("escaped"))
    assert vm.request(8000, "/health")[0] == 200  # it booted cold and from the hub instead


def test_a_script_whose_model_name_leads_outside_the_root_refuses_to_serve(world) -> None:
    """The renderer refuses such a name; a script edited in the node's metadata is refused by the VM."""
    s = settings(world, TPU_DEVOPS_BUCKET="off")
    script = startup.render_startup_script(s).script
    edited = script.replace("MODEL_NAME=google/gemma-4-E2B-it\n", "MODEL_NAME=../../../../escaped-model\n")
    assert edited != script
    vm = world.vm("edited")
    proc = vm.boot(edited)
    assert proc.returncode != 0
    assert "refused to serve: model '../../../../escaped-model' is not a Hugging Face repo id" in vm.syslog()
    assert vm.runs() == [] and not list(world.tmp.rglob("escaped-model"))
