"""reconfigure_vllm end to end: the real MCP client drives server.py; the server's Google clients talk to
the strict fakes; the node's VM is the rendered startup script and its watcher running for real against
a metadata server that serves the fake TPU node's metadata and writes guest attributes back to it. Stages
in order, a failing boot diagnosed and rolled back, a second reconfigure refused with the running job's
id, the node and its flex-start clock kept, and nothing the discovery documents refuse."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.fakes.vm import ACCESS_TOKEN, FakeEngine, FakeMetadata, VmShims
from tests.test_provisioning_mcp import call, server

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_PlantedSecretTokenDoNotLeak4242abcd"
KEY = "vk-PlantedApiKeyDoNotLeak-0123456789"
KV_LOG = ROOT / "tests" / "data" / "field-reports" / "B01-kv-too-small-tpu-v5e8.log"
ZONE, RIG = "us-west4-a", "gemma4-e2b"


async def wait_job(client, job_id: str, timeout_s: float = 90) -> dict:
    seen: list[list[str]] = []
    with anyio.fail_after(timeout_s):
        while True:
            job = await call(client, "get_job", {"job_id": job_id})
            seen.append(list(job["progress"].get("stages", [])))
            if job["state"] != "running":
                job["seen"] = seen
                return job
            await anyio.sleep(0.1)


async def test_reconfigure_applies_refuses_a_second_and_rolls_back_a_failing_boot(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.secrets.put("vllm-api-key", KEY)
    fake_gcp.storage.tokens[ACCESS_TOKEN] = fake_gcp.storage.vm_account()
    md = FakeMetadata(
        attributes_source=lambda: fake_gcp.tpu.node_metadata(ZONE, RIG),
        guest_sink=lambda key, value: fake_gcp.tpu.put_guest_attribute(ZONE, RIG, key, value),
    ).start()
    vm = VmShims(tmp_path / "vm", metadata_url=md.url, gcp_url=fake_gcp.url)
    engine = FakeEngine(vm.containers).start()
    try:
        (tmp_path / "state").mkdir()
        async with server(fake_gcp, tmp_path / "state", VLLM_PORT=str(engine.port)) as client:
            created = await call(client, "create_tpu_queued_resource", {})
            assert created["created"], created
            node_before = dict(fake_gcp.tpu.nodes[(ZONE, RIG)])
            boot = await anyio.to_thread.run_sync(lambda: vm.boot(node_before["metadata"]["startup-script"]))
            assert boot.returncode == 0, boot.stderr
            vm.start_watcher(FAKE_FAIL_FLAGS=json.dumps(["--max-model-len 4096"]), FAKE_FAIL_LOG=str(KV_LOG))

            dry = await call(client, "reconfigure_vllm", {"max_model_len": 8192, "dry_run": True})
            assert dry["dry_run"] and dry.get("job_id") is None
            assert "--max-model-len 16384" in dry["old_serve_command"]
            assert "--max-model-len 8192" in dry["new_serve_command"]
            assert dry["changes"] == ["--max-model-len: 16384 -> 8192"]
            assert "recorded by the VM" in dry["old_source"]
            assert "tpu-devops-serving" not in fake_gcp.tpu.node_metadata(ZONE, RIG)

            lint = await client.call_tool("reconfigure_vllm", {"gpu_memory_utilization": 0.95})
            assert lint.is_error and "0.92" in lint.content[0].text
            bad = await client.call_tool("reconfigure_vllm", {"model_name": "evil; rm -rf /"})
            assert (
                bad.is_error
                and "model_name" in bad.content[0].text
                and "Traceback" not in bad.content[0].text
            )
            too_long = await client.call_tool("reconfigure_vllm", {"max_model_len": 10**9})
            assert too_long.is_error and "max_model_len" in too_long.content[0].text

            started = await call(client, "reconfigure_vllm", {"max_model_len": 8192})
            job_id = started["job_id"]
            second = await client.call_tool("reconfigure_vllm", {"max_model_len": 2048})
            assert second.is_error and job_id in second.content[0].text
            metadata = fake_gcp.tpu.node_metadata(ZONE, RIG)
            assert metadata["startup-script"] == node_before["metadata"]["startup-script"]  # whole map kept
            assert json.loads(metadata["tpu-devops-serving"])["generation"] == started["generation"]

            job = await wait_job(client, job_id)
            assert job["state"] == "succeeded", job
            result = job["result"]
            names = [s["stage"] for s in result["stages"]]
            assert names[0] == "received" and names[-1] == "serving", names
            assert names.index("container-started") < names.index("healthy") < names.index("serving")
            assert [n for n in job["seen"][-1]] == names  # progress followed the same stages
            assert result["verified"]["ok"] and result["verified"]["max_model_len"] == 8192
            assert result["verified"]["recorded_flags_match"]
            assert "--max-model-len 8192" in result["serving_command"]

            failing = await call(client, "reconfigure_vllm", {"max_model_len": 4096})
            job = await wait_job(client, failing["job_id"])
            assert job["state"] == "failed", job
            result = job["result"]
            assert result["outcome"] == "rolled_back" and result["old_flags_serve_again"]
            names = [s["stage"] for s in result["stages"]]
            assert names[-1] == "rolled-back", names
            assert names.index("boot-failed") < names.index("rolling-back") < names.index("rolled-back")
            assert (
                result["root_cause"] and "KV" in result["root_cause"]["title"] + result["root_cause"]["cause"]
            )
            assert result["verified"]["max_model_len"] == 8192  # the last flags that served answer again
            assert "rolled back: the old flags serve again" in job["message"]
            text = (await client.call_tool("get_job", {"job_id": failing["job_id"]})).content[0].text
            assert "FAILED" in text and "rolled back" in text and "root cause" in text

            node_after = fake_gcp.tpu.nodes[(ZONE, RIG)]
            assert node_after["createTime"] == node_before["createTime"]  # same node, same flex-start clock
            assert node_after["networkEndpoints"] == node_before["networkEndpoints"]
            assert len(fake_gcp.tpu.creates()) == 1
    finally:
        out = vm.stop_watcher()
        engine.stop()
        md.stop()
    assert "Traceback" not in out
    for argv in vm.argv_lines():
        line = " ".join(argv)
        assert TOKEN not in line and KEY not in line and ACCESS_TOKEN not in line
    assert fake_gcp.rejections == []
    accepted = set(fake_gcp.validator.accepted)
    assert {
        "tpu.projects.locations.nodes.patch",
        "tpu.projects.locations.nodes.getGuestAttributes",
    } <= accepted
