"""The deployment as commands (`tpu_devops.planning.deployment`): the plan's create line to the byte, every line
valid shell that reaches the configured project (run through bash with a gcloud stand-in), a copyable text."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import anyio
import pytest

from tests.bash_shims import run_bash
from tests.startup_vm import settings
from tpu_devops.config import load_settings
from tpu_devops.planning.deployment import deployment_config


def test_deployment_config_lists_equivalent_commands():
    cfg = anyio.run(deployment_config, settings(GOOGLE_CLOUD_PROJECT="my-tpu-project"))
    assert cfg.serve_command.startswith("vllm serve google/gemma-4-E2B-it ")
    create = bash_words(cfg.gcloud_commands["create"])
    assert "--provisioning-model=flex-start" in create and "--max-run-duration=14400s" in create
    assert "--log-driver=gcplogs" in cfg.docker_command
    assert "/root/.cache/vllm" in cfg.docker_command
    assert "/v1/chat/completions" in cfg.health_check


def test_deployment_config_text_is_copyable_commands() -> None:
    text = anyio.run(deployment_config, settings()).render_text()
    assert "# docker run on the TPU VM" in text and "# create" in text and "# health check" in text
    assert "gcloud_commands:" not in text


# ---- the deployment view's commands: the plan's create line, valid shell, the right project --------

GCLOUD_SHIM = r"""#!/bin/bash
# gcloud's configured project, a project number, a key: what the lines' substitutions ask for
if [[ "$1 $2 $3" == "config get-value project" ]]; then echo shim-project; exit 0; fi
[[ "$1 $2" == "projects describe" ]] && echo 123456789012
[[ "$1 $2 $3" == "secrets versions access" ]] && printf 'shim-key'
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >>"$FAKE_DIR/gcloud.jsonl"
"""
CURL_SHIM = '#!/bin/bash\nprintf \'%s\\n\' "$@" >>"$FAKE_DIR/curl.argv"\n'


def bash_words(line: str) -> list[str]:
    """``line`` split as bash splits it, before expansion (``\\`` + newline continues a line)."""
    return shlex.split(line.replace("\\\n", ""))


DEPLOYMENTS = [
    pytest.param({}, id="flex-start"),
    pytest.param(
        {"PROVISIONING_MODEL": "spot", "TPU_NETWORK": "my-vpc", "TPU_SUBNETWORK": "my-subnet"},
        id="spot-network",
    ),
    pytest.param(
        {"PROVISIONING_MODEL": "on-demand", "VALID_UNTIL_DURATION": "3600", "TPU_EXTERNAL_IP": "false"},
        id="on-demand-internal",
    ),
    pytest.param({"GOOGLE_CLOUD_PROJECT": ""}, id="no-project"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("extra", DEPLOYMENTS)
async def test_deployment_create_line_is_the_plans(fake_gcp, tmp_path, extra) -> None:
    from tests.conftest import gcp_environ
    from tpu_devops.provisioning.plan import plan_queued_resource

    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path, **extra))
    plan = await plan_queued_resource(s, allowed_source_ranges=["203.0.113.7/32"])
    create = (await deployment_config(s)).gcloud_commands["create"]
    assert create == plan.gcloud_command
    assert ("--project=$(gcloud config get-value project)" in bash_words(create)) is (not s.project)
    words = bash_words(create)
    node = plan.request["tpu"]["nodeSpec"][0]["node"]
    assert f"--tags={node['tags'][0]}" in words  # the rig's network tag its firewall rule targets
    assert ("--internal-ips" in words) is (node["networkConfig"]["enableExternalIps"] is False)
    assert ("--provisioning-model=flex-start" in words) is (s.provisioning_model == "flex-start")
    assert ("--spot" in words) is (s.provisioning_model == "spot")


@pytest.mark.parametrize(
    ("project", "expected"),
    [("my-tpu-project", "my-tpu-project"), ("", "shim-project")],
    ids=["set", "unset"],
)
def test_every_command_in_the_deployment_view_runs_against_the_right_project(
    tmp_path, project, expected
) -> None:
    cfg = anyio.run(deployment_config, settings(GOOGLE_CLOUD_PROJECT=project))
    lines = {**cfg.gcloud_commands, "health_check": cfg.health_check}
    for name, line in lines.items():
        bash_words(line)  # valid shell quoting, or this raises
        run = run_bash_with_shims(tmp_path / name, line)
        assert run.proc.returncode == 0, (name, run.proc.stderr)
        calls = [json.loads(c) for c in (run.fake / "gcloud.jsonl").read_text().splitlines()]
        assert calls, name
        for argv in calls:
            projects = [a.split("=", 1)[1] for a in argv if a.startswith("--project=")]
            projects += [v for flag, v in zip(argv, argv[1:], strict=False) if flag == "--project"]
            assert projects == [expected] or argv[:2] == ["projects", "describe"], (name, argv)
            if argv[:2] == ["projects", "describe"]:
                assert argv[2] == expected
        if name == "create":  # the argv gcloud receives is the line's words, with the project expanded
            assert calls == [
                [w.replace("$(gcloud config get-value project)", expected) for w in bash_words(line)[1:]]
            ]
        if name == "grant_vm_access":
            members = [a for argv in calls for a in argv if a.startswith("--member=")]
            assert (
                members == ["--member=serviceAccount:123456789012-compute@developer.gserviceaccount.com"] * 2
            )
    assert "Bearer shim-key" not in " ".join(bash_words(cfg.health_check))  # the key only at run time


def run_bash_with_shims(workdir: Path, line: str):
    return run_bash(["-c", line], workdir, {"gcloud": GCLOUD_SHIM, "curl": CURL_SHIM})


@pytest.mark.anyio
@pytest.mark.parametrize("extra", DEPLOYMENTS)
async def test_the_firewall_line_opens_what_create_would_and_only_when_reachable(
    fake_gcp, tmp_path, extra
) -> None:
    """open_port is the rule create_tpu_queued_resource makes (name, network, port, tag, ranges); an
    internal-only node without ALLOWED_SOURCE_RANGES gets no rule, and its health check names INTERNAL_IP."""
    from tests.conftest import gcp_environ
    from tpu_devops.provisioning.access import firewall_body

    s = load_settings(environ=gcp_environ(fake_gcp, tmp_path, **extra))
    cfg = await deployment_config(s)
    if not s.external_ip:
        assert (
            "open_port" not in cfg.gcloud_commands and "firewall-rules" not in cfg.gcloud_commands["delete"]
        )
        assert "http://INTERNAL_IP:" in cfg.health_check and any("IAP tunnel" in n for n in cfg.notes)
        return
    body = firewall_body(s, ["YOUR_PUBLIC_IPV4/32"])
    words = bash_words(cfg.gcloud_commands["open_port"])
    assert words[:4] == ["gcloud", "compute", "firewall-rules", "create"] and words[4] == body["name"]
    assert f"--allow=tcp:{body['allowed'][0]['ports'][0]}" in words
    assert (
        f"--target-tags={body['targetTags'][0]}" in words and f"--description={body['description']}" in words
    )
    assert f"--network={body['network'].rsplit('/', 1)[-1]}" in words
    assert "--source-ranges=YOUR_PUBLIC_IPV4/32" in words and "--direction=INGRESS" in words
    assert f"firewall-rules delete {body['name']}" in cfg.gcloud_commands["delete"]
    assert "http://EXTERNAL_IP:" in cfg.health_check
