"""reconfigure_vllm end to end against what `make fake-gcp` runs (tests/fakes/gcp/__main__.py `build`): the
real MCP client drives server.py; its Google clients talk to the strict fakes; the node the create makes
boots a simulated TPU VM (tests/fakes/vm/fleet.py) that runs the startup script the server rendered, with
its watcher, its metadata server serving the fake TPU node's metadata and its guest attributes read back
through getGuestAttributes. Stages in order, a failing boot diagnosed and rolled back, a pull that fails
leaving the old container serving, a second reconfigure refused with the running job's id, the node and
its flex-start clock kept, the node's logs in Cloud Logging, and nothing the discovery documents refuse."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import anyio
import pytest

from tests.fakes.gcp.__main__ import build, exports
from tests.fakes.vm import ACCESS_TOKEN, unusable
from tests.mcp_session import mcp_client
from tests.test_provisioning_mcp import call

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        unusable() is not None, reason=f"the simulated TPU VM runs in its own network namespace: {unusable()}"
    ),
]
ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_PlantedSecretTokenDoNotLeak4242abcd"
KEY = "vk-PlantedApiKeyDoNotLeak-0123456789"
KV_LOG = ROOT / "tests" / "data" / "field-reports" / "B01-kv-too-small-tpu-v5e8.log"
ZONE, RIG = "us-west4-a", "gemma4-e2b"
BAD_IMAGE = "vllm/vllm-tpu:v0.99.0"


async def wait_job(client, job_id: str, timeout_s: float = 120) -> dict:
    seen: list[list[str]] = []
    with anyio.fail_after(timeout_s):  # a bound for a stuck job, not a speed assertion
        while True:
            job = await call(client, "get_job", {"job_id": job_id})
            seen.append(list(job["progress"].get("stages", [])))
            if job["state"] != "running":
                job["seen"] = seen
                return job
            await anyio.sleep(0.1)


async def wait_booted(gcp) -> object:
    with anyio.fail_after(120):
        while True:
            vm = gcp.fleet.vm(ZONE, RIG)
            if (
                vm
                and gcp.tpu.guest_attributes.get((ZONE, RIG), {}).get("tpu-devops/stage") == "watcher-started"
            ):
                return vm
            assert not gcp.fleet.errors, gcp.fleet.errors
            await anyio.sleep(0.1)


async def test_reconfigure_against_make_fake_gcp_applies_rolls_back_and_keeps_serving_on_a_bad_pull(
    tmp_path,
) -> None:
    args = argparse.Namespace(
        port=0, project="demo-project", script=[], timings="0,0,0", latency=0.0, secret=False,
        no_vllm=False, no_vm=False, boot_s=0.5,
    )  # fmt: skip
    gcp, vllm = build(args)
    assert gcp.fleet is not None and vllm is None
    gcp.secrets.put("hf-token", TOKEN)
    gcp.secrets.put("vllm-api-key", KEY)
    env = {**exports(gcp, vllm, "demo-project"), "TPU_DEVOPS_ENV_FILE": str(tmp_path / "none.env"),
           "TPU_DEVOPS_STATE_DIR": str(tmp_path / "state"),
           "VLLM_IMAGE_REPOSITORIES": "us-docker.pkg.dev/demo-project/mirror/vllm-tpu"}  # fmt: skip
    try:
        async with mcp_client(**env) as client:
            created = await call(client, "create_tpu_queued_resource", {})
            assert created["created"], created
            node_before = dict(gcp.tpu.nodes[(ZONE, RIG)])
            vm = await wait_booted(gcp)
            vm.script({"boot_s": 0.3, "pull_fail": {BAD_IMAGE: f"Error response from daemon: manifest for {BAD_IMAGE} not found: manifest unknown: manifest unknown"},
                       "engines": [{"match": "--max-model-len 4096", "exit_after_s": 0.2, "log": str(KV_LOG)}]})  # fmt: skip
            endpoint = await call(client, "get_vllm_endpoint", {})
            assert node_before["networkEndpoints"][0]["accessConfig"]["externalIp"] in json.dumps(endpoint)
            health = await call(client, "verify_model_health", {})
            assert health["healthy"] is True, health

            dry = await call(client, "reconfigure_vllm", {"max_model_len": 8192, "dry_run": True})
            assert dry["dry_run"] and dry.get("job_id") is None
            assert (
                "--max-model-len 16384" in dry["old_serve_command"]
                and "recorded by the VM" in dry["old_source"]
            )
            assert dry["changes"] == ["--max-model-len: 16384 -> 8192"]
            lint = await client.call_tool("reconfigure_vllm", {"gpu_memory_utilization": 0.95})
            assert lint.is_error and "0.92" in lint.content[0].text
            # secrets go only to images the operator trusts: another registry or a lookalike is refused,
            # before anything is written to the node
            metadata_before = json.dumps(gcp.tpu.nodes[(ZONE, RIG)].get("metadata"), sort_keys=True)
            for image in ("evil.example.com/x/vllm-tpu:v0.30.0", "vllm/vllm-tpu-evil:v0.30.0", "evil/vllm-tpu:v0.30.0",
                          "index.docker.io/evil/vllm-tpu:v0.30.0", "VLLM/VLLM-TPU:v0.30.0"):  # fmt: skip
                for dry_run in (True, False):
                    refused = await client.call_tool(
                        "reconfigure_vllm", {"vllm_image": image, "dry_run": dry_run}
                    )
                    text = refused.content[0].text
                    assert refused.is_error and "vllm_image" in text and "Fix:" in text, text
            assert json.dumps(gcp.tpu.nodes[(ZONE, RIG)].get("metadata"), sort_keys=True) == metadata_before
            mirror = "us-docker.pkg.dev/demo-project/mirror/vllm-tpu:v0.30.0"
            moved = await call(client, "reconfigure_vllm", {"vllm_image": mirror, "dry_run": True})
            assert moved["notes"][0].startswith(
                "IMAGE SOURCE CHANGES: docker.io/vllm/vllm-tpu -> us-docker.pkg.dev/demo-project/mirror/vllm-tpu"
            )

            started = await call(client, "reconfigure_vllm", {"max_model_len": 8192})
            second = await client.call_tool("reconfigure_vllm", {"max_model_len": 2048})
            assert second.is_error and started["job_id"] in second.content[0].text
            metadata = gcp.tpu.node_metadata(ZONE, RIG)
            assert metadata["startup-script"] == node_before["metadata"]["startup-script"]  # whole map kept
            job = await wait_job(client, started["job_id"])
            assert job["state"] == "succeeded", job
            result = job["result"]
            names = [s["stage"] for s in result["stages"]]
            assert names[0] == "received" and names[-1] == "serving", names
            assert names.index("container-started") < names.index("healthy") < names.index("serving")
            assert result["verified"]["ok"] and result["verified"]["max_model_len"] == 8192
            assert result["verified"]["recorded_flags_match"]

            failing = await call(client, "reconfigure_vllm", {"max_model_len": 4096})
            job = await wait_job(client, failing["job_id"])
            assert job["state"] == "failed", job
            result = job["result"]
            assert result["outcome"] == "rolled_back" and result["old_flags_serve_again"]
            assert (
                result["root_cause"] and "KV" in result["root_cause"]["title"] + result["root_cause"]["cause"]
            )
            assert "engine 0 exited before serving" in result["failure"]
            assert result["verified"]["max_model_len"] == 8192  # the last flags that served answer again

            pull = await call(client, "reconfigure_vllm", {"vllm_image": BAD_IMAGE})
            job = await wait_job(client, pull["job_id"])
            assert job["state"] == "failed", job
            result = job["result"]
            assert result["outcome"] == "unchanged" and result["old_flags_serve_again"], result
            assert "manifest unknown" in result["failure"] and BAD_IMAGE in result["failure"]
            assert "NOT APPLIED" in job["message"] and "still serve" in job["message"]
            assert "rolling-back" not in [s["stage"] for s in result["stages"]]
            assert result["verified"]["max_model_len"] == 8192  # never touched

            # the node's logs, as Cloud Logging holds them: the startup script's lines and vLLM's
            # (filtered by text: a page of everything is longer than a host takes whole, and is cut)
            for log, words in (
                ("system", "STAGE ready"),
                ("system", "watcher-started"),
                ("container", "Application startup complete"),
            ):
                found = await call(
                    client, "get_cloud_logging_logs", {"log": log, "since": "1h", "text": words, "limit": 20}
                )
                assert found["returned"] > 0 and words in json.dumps(found), (log, words, found)

            node_after = gcp.tpu.nodes[(ZONE, RIG)]
            assert node_after["createTime"] == node_before["createTime"]  # same node, same flex-start clock
            assert len(gcp.tpu.creates()) == 1
    finally:
        gcp.fleet.close()
        gcp.stop()
    for argv in vm.argv_lines():
        line = " ".join(argv)
        assert TOKEN not in line and KEY not in line and ACCESS_TOKEN not in line
    assert gcp.rejections == [] and gcp.fleet.errors == []
    assert {"tpu.projects.locations.nodes.patch", "tpu.projects.locations.nodes.getGuestAttributes"} <= set(
        gcp.validator.accepted
    )
