"""The deployment as commands a person could run: ``vllm serve``, ``docker run``, gcloud, a health check.

Read-only: nothing here runs a command or calls an API (bar reading who this server is, for the
created-by label). The serve and docker lines come from `tpu_devops.planning.startup` (the flags the startup
script runs); the queued-resource create line is `tpu_devops.provisioning.requests.gcloud_command` of the
very body a create sends, so it is the line ``plan_queued_resource`` shows.
"""

from __future__ import annotations

import json
import shlex

import anyio
from pydantic import Field

from tpu_devops.config import Settings
from tpu_devops.host.results import ToolResult, ViewResult
from tpu_devops.planning.lint import lint_notes
from tpu_devops.planning.startup import (
    CONTAINER_LOG_NAME,
    RenderedScript,
    docker_run_command,
    engines_note,
    render_startup_script,
    vllm_serve_argv,
    vllm_serve_flags,
)
from tpu_devops.provisioning.access import description, network_tag, rule_name
from tpu_devops.provisioning.ownership import CREATE_TOOL, this_rig
from tpu_devops.provisioning.requests import (
    build_request,
    gcloud_command,
    project_word,
    with_placeholder_project,
)


class DeploymentConfig(ToolResult):
    """`render_startup_script(form='commands')` result: the equivalent human-readable commands."""

    model: str
    accelerator_type: str
    zone: str
    provisioning_model: str
    image: str
    serve_command: str
    docker_command: str
    gcloud_commands: dict[str, str] = Field(
        description="what the tools do, as gcloud commands for a human (the server uses client libraries)"
    )
    health_check: str
    flags: list[str]
    notes: list[str]

    def headline(self) -> str:
        """What is deployed where, with which image."""
        return f"{self.model} on {self.accelerator_type} in {self.zone} ({self.provisioning_model}), image {self.image}"

    def render_text(self) -> str:
        """The commands as a person would copy them, each under a short label; notes last."""
        lines = [
            self.headline(),
            "",
            "# vllm serve (inside the container)",
            self.serve_command,
            "",
            "# docker run on the TPU VM",
            self.docker_command,
        ]
        for name, command in self.gcloud_commands.items():
            lines += ["", f"# {name.replace('_', ' ')}", command]
        lines += ["", "# health check", self.health_check, ""]
        lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)


async def deployment_config(settings: Settings) -> DeploymentConfig:
    """Human-readable equivalents of a deployment with these settings (no secrets, nothing executed).

    The create line is `requests.gcloud_command` of the very body `requests.build_request` makes for a
    create_tpu_queued_resource in the configured zone (`tpu_devops.provisioning.requests`), so it carries
    what the real request carries (the rig's labels with created-by and tool, network tag,
    ``--internal-ips``, flex-start or spot, valid-until) and is the line ``plan_queued_resource`` shows.
    Async because the created-by label names this server's ADC principal (`ownership.this_rig`, read
    in a worker thread). Every gcloud line names the project: the configured
    one, else ``"$(gcloud config get-value project)"`` (`requests.project_word`), which the shell
    expands. They are for a person: this server calls the APIs through client libraries.

    Raises:
        ConfigError: a setting cannot go into the startup script (`render_startup_script`).
    """
    q = shlex.quote
    zone, rid = settings.zone, settings.resource_id
    project = project_word(settings.project)
    body = build_request(
        with_placeholder_project(settings),
        zone=zone,
        qr_id=rid,
        provisioning_model=settings.provisioning_model,
        labels=(await this_rig(settings)).labels(CREATE_TOOL),
    )
    secret = q(settings.hf_secret_id)
    key_secret = q(settings.vllm_api_key_secret_id)
    # The TPU VM runs as the Compute Engine default service account (the request names no other).
    member = (
        f"\"serviceAccount:$(gcloud projects describe {project} --format='value(projectNumber)')"
        '-compute@developer.gserviceaccount.com"'
    )
    grant = (
        f"gcloud secrets add-iam-policy-binding {{}} --project={project} --member={member} "
        "--role=roles/secretmanager.secretAccessor"
    )
    where = f"--project={project} --zone={q(zone)}"
    # The rule create_tpu_queued_resource makes (`access.firewall_body`): the public IPv4 it would detect
    # is left for the reader to fill in, as this view works offline.
    ranges = list(settings.allowed_source_ranges) or (["YOUR_PUBLIC_IPV4/32"] if settings.external_ip else [])
    rule = q(rule_name(rid))
    open_port = (
        f"gcloud compute firewall-rules create {rule} --project={project} --network={q(settings.network or 'default')} "
        f"--direction=INGRESS --priority=1000 --allow=tcp:{settings.vllm_port} --source-ranges={q(','.join(ranges))} "
        f"--target-tags={q(network_tag(rid))} --description={q(description(rid))}"
    )
    delete_rule = f" && \\\n  gcloud compute firewall-rules delete {rule} --project={project} --quiet"
    gcloud = {
        "store_token": f'printf %s "$HF_TOKEN" | gcloud secrets create {secret} --data-file=- --project={project}',
        "store_api_key": (
            "python3 -c 'import secrets; print(secrets.token_urlsafe(32), end=\"\")' | "
            f"gcloud secrets create {key_secret} --data-file=- --project={project}"
        ),
        "grant_vm_access": grant.format(secret) + " && \\\n  " + grant.format(key_secret),
        **({"open_port": open_port} if ranges else {}),
        "create": gcloud_command(body, qr_id=rid),
        "describe": f"gcloud alpha compute tpus queued-resources describe {q(rid)} {where}",
        "boot_progress": f"gcloud compute tpus tpu-vm get-guest-attributes {q(rid)} {where} --query-path=tpu-devops/",
        "container_logs": (
            f"gcloud logging read {q(f'log_id({json.dumps(CONTAINER_LOG_NAME)})')} --project={project} --limit=200"
        ),
        "delete": f"gcloud alpha compute tpus queued-resources delete {q(rid)} {where} --force"
        + (delete_rule if ranges else ""),
    }
    host = "EXTERNAL_IP" if settings.external_ip else "INTERNAL_IP"
    # curl reads the header from a file (-H @file, curl >= 7.55) so the key stays off the command line.
    health = (
        f"curl -s http://{host}:{settings.vllm_port}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-H @<(printf 'Authorization: Bearer %s' \"$(gcloud secrets versions access latest --secret={key_secret} "
        f'--project={project})") '
        f'-d \'{{"model": {json.dumps(settings.model_name)}, "messages": [{{"role": "user", "content": "ping"}}], "max_tokens": 8}}\''
    )
    notes = [
        "render_startup_script writes the startup script to a file (its answer gives the path): copy it as "
        "startup_script.sh where you run the create line (--metadata-from-file reads it).",
        f"The create line tags the node {network_tag(rid)}: vLLM's port opens only through the rig's firewall "
        "rule on that tag, which create_tpu_queued_resource makes (plan_queued_resource shows it).",
        "Health checks use /v1/chat/completions: /v1/completions returns empty text on -it models.",
        f"{host} changes with every recreate: use the endpoint discovery tool instead of hard-coding it.",
    ]
    if not settings.external_ip:
        notes.append(
            "TPU_EXTERNAL_IP=0: the node has an internal address only: run the health check from inside the VPC, "
            "or through an IAP tunnel with 127.0.0.1 for INTERNAL_IP (README, 'No external IP')."
        )
    if settings.provisioning_model != "flex-start":
        notes.append(f"{settings.provisioning_model} bills until deleted: delete when done.")
    notes.extend(engines_note(settings))
    notes.extend(lint_notes(settings))
    return DeploymentConfig(
        model=settings.model_name,
        accelerator_type=settings.accelerator_type,
        zone=zone,
        provisioning_model=settings.provisioning_model,
        image=settings.vllm_image,
        serve_command=shlex.join(vllm_serve_argv(settings)),
        docker_command=docker_run_command(settings),
        gcloud_commands=gcloud,
        health_check=health,
        flags=vllm_serve_flags(settings),
        notes=notes,
    )


class DeploymentView(ViewResult):
    """`render_startup_script`'s answer: the startup script (``form="script"``) or the same deployment as
    commands a person could run (``"commands"``)."""

    script: RenderedScript | None = None
    commands: DeploymentConfig | None = None


async def deployment_view(settings: Settings, form: str) -> DeploymentView:
    """The startup script (`tpu_devops.planning.startup.render_startup_script`) or `deployment_config`."""
    if form == "commands":
        return DeploymentView(view=form, commands=await deployment_config(settings))
    script = render_startup_script(settings)
    script.notes.extend(lint_notes(settings))
    script = await anyio.to_thread.run_sync(script.with_file, settings.state_dir)
    return DeploymentView(view="script", script=script)
