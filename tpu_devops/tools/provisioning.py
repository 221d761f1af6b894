"""Provision: TPU capacity on Google Cloud. Quota per zone, the plan of a queued resource, create, the zone
sweep, describe and list, teardown of what this rig owns, the Hugging Face token, and a new vLLM
configuration on the running TPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver.resolve import Resolve
from pydantic import BeforeValidator, Field

import tpu_devops
from tpu_devops.config import get_settings
from tpu_devops.host.toolsets import DESTROY, READ, WRITE, WRITE_ONCE, Toolset
from tpu_devops.tools.args import (
    SANE,
    AcceleratorType,
    Confirmation,
    DryRun,
    PollInterval,
    ProvisioningModel,
    QueuedResourceId,
    QueuedResourceRef,
    ServingOverrides,
    TpuRequest,
    ZoneOrAll,
    Zones,
)

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.host.confirmation
    import tpu_devops.provisioning.plan
    import tpu_devops.provisioning.queued
    import tpu_devops.provisioning.quota
    import tpu_devops.provisioning.reconfigure
    import tpu_devops.provisioning.requests
    import tpu_devops.provisioning.rig
    import tpu_devops.provisioning.sweep
    import tpu_devops.provisioning.teardown
    import tpu_devops.setup_check

toolset = Toolset(
    "provision", "quota, plan, create, find, describe and tear down this rig's TPU", default=True
)
tool = toolset.tool
toolset.renamed("get_reservation_status", "describe_queued_resource (same arguments)")
toolset.renamed(
    "manage_queued_resource",
    "destroy_queued_resource with only_failed=true (was action='cleanup'), or without it (was action='delete_all')",
)


@tool(title="Zones with TPU quota", kind=READ, open_world=True)
async def get_zones_with_available_quota(
    provisioning_model: ProvisioningModel = None, accelerator_type: AcceleratorType = None
) -> tpu_devops.provisioning.quota.QuotaScan:
    """TPU quota per zone, with flex-start support.

    Per-zone and per-region TPU quota limits for the quota family the provisioning model really uses
    (on-demand: TPUV5sLitepod...; spot and flex-start: the Preemptible family), next to Google's documented
    flex-start zones and this project's own attempt history. Quota is a limit, not free capacity, and not a
    promise that the zone accepts the provisioning model."""
    return await tpu_devops.provisioning.quota.zones_with_quota(
        get_settings(), provisioning_model, accelerator_type
    )


@tool(title="Plan a queued resource (dry run)", kind=READ, open_world=True)
async def plan_queued_resource(
    ref: QueuedResourceRef, request: TpuRequest
) -> tpu_devops.provisioning.plan.QueuedResourcePlan:
    """Dry run of create: request, price, billing stop.

    Show exactly what create_tpu_queued_resource would send (REST JSON, startup script summarised), the
    equivalent gcloud command, the hourly price, when billing stops (or a loud warning that spot and
    on-demand never stop by themselves), the firewall rule that will admit vLLM's port (your public IPv4,
    detected now: check it) and warnings. Creates nothing: the dry run gcloud does not have."""
    return await tpu_devops.provisioning.plan.plan_queued_resource(
        get_settings(), **ref.values(), **request.values()
    )


@tool(title="Create a TPU queued resource", kind=WRITE_ONCE, open_world=True)
async def create_tpu_queued_resource(
    ref: QueuedResourceRef,
    request: TpuRequest,
    allow_second: Annotated[bool, Field(description="allow a second live TPU")] = False,
    wait_timeout_s: Annotated[
        float | None, Field(ge=1, le=86400, description="a job waits this long for ACTIVE"), SANE
    ] = None,
    poll_interval_s: PollInterval = 15,
) -> tpu_devops.provisioning.queued.CreateResult:
    """Create our TPU queued resource (and its access).

    Create one queued resource (flex-start by default, or spot / on-demand) labelled managed-by=tpu-devops
    and rig=<RESOURCE_ID> whatever its id, with the rendered startup script. Touches only its own id: if it
    exists, reports it (and whose it is) instead. First puts the endpoint's access in place: the vLLM API key
    in Secret Manager (generated when missing) and the rig's firewall rule admitting vLLM's port from your
    public IPv4 only (or allowed_source_ranges). Refuses when the Hugging Face token secret is missing, when
    the rig already has a live queued resource under any id in any zone (unless allow_second=true), when any
    zone cannot be listed to check that, and when VLLM_IMAGE is too old for the model (unless
    allow_unsupported_image=true). If a concurrent create of the rig (another server) got there first, this
    one deletes its request at once and says so. Returns at once; waiting is a job (wait_timeout_s given:
    poll get_job with the returned job_id)."""
    return await tpu_devops.provisioning.rig.create_with_optional_wait(
        get_settings(),
        **ref.values(),
        **request.values(),
        wait=wait_timeout_s is not None,
        wait_timeout_s=3600 if wait_timeout_s is None else wait_timeout_s,
        poll_interval_s=poll_interval_s,
        allow_second=allow_second,
    )


@tool(title="Describe a queued resource", kind=READ, open_world=True)
async def describe_queued_resource(
    ref: QueuedResourceRef,
) -> tpu_devops.provisioning.rig.ReservationStatus:
    """Our TPU now: state, endpoint, expiry, cost.

    One queued resource (this rig's own when no id is named, followed to whatever zone it is in): state and
    time in state, provisioning model, labels and whose it is (ours only with this rig's labels
    managed-by=tpu-devops and rig=<RESOURCE_ID>), node, external IP and endpoint URL, flex-start expiry
    countdown, cost so far, a failure with its reach, and the next step. Lists every live queued resource of
    the rig in any zone and warns when there are several (each one bills)."""
    return await tpu_devops.provisioning.rig.reservation_status(get_settings(), **ref.values())


@tool(title="List queued resources", kind=READ, open_world=True)
async def list_queued_resources(
    zone: ZoneOrAll = None,
    only_ours: Annotated[bool, Field(description="only this rig's")] = False,
) -> tpu_devops.provisioning.queued.QueuedResourceList:
    """Queued resources in a zone or all, with owners.

    Queued resources in one zone or all zones (concurrent, bounded), each with its owner (ours = this rig's
    labels managed-by=tpu-devops and rig=<RESOURCE_ID>; another rig's; not tpu-devops'; created by someone
    else), FAILED/SUSPENDED requests that still hold quota, and zones whose listing failed."""
    return await tpu_devops.provisioning.queued.list_queued_resources(
        get_settings(), zone, only_ours=only_ours
    )


@tool(title="Find a TPU (zone sweep job)", kind=WRITE, open_world=True)
async def find_tpu(
    request: TpuRequest,
    zones: Zones = None,
    zone_budget_s: Annotated[float, Field(ge=0.1, le=86400, description="seconds per zone"), SANE] = 900,
    poll_interval_s: PollInterval = 15,
    max_zones: Annotated[int, Field(ge=1, le=100, description="max zones tried"), SANE] = 10,
) -> tpu_devops.provisioning.sweep.SweepStarted:
    """Job: sweep zones for a TPU, one create at a time.

    Start a job that sweeps zones for a TPU, one create at a time (never two TPUs held): known support and
    past outcomes first, a bounded wait per zone, each failure classified by reach (zone / region /
    model-in-zone / configuration) and recorded in tpu_zones_status.md. A configuration error (network not
    found, permission denied, bad accelerator) stops the sweep at once. Arguments are checked before the job
    starts; only one sweep per rig runs at a time (a second call names the running job), and the sweep stops
    instead of creating when the rig already has a live queued resource in any zone (or a zone cannot be
    listed). Before the first create it puts the endpoint's access in place (API key secret, firewall rule for
    your public IPv4 or allowed_source_ranges). Each request carries validUntilDuration = its zone budget, so
    one abandoned by a server that died expires by itself; the next sweep adopts a waiting find_tpu request of
    these credentials (waits on it, then deletes it) instead of leaving it. Poll get_job."""
    settings = get_settings()
    options = request.values()
    options["provisioning_model"] = tpu_devops.provisioning.requests.check_provisioning_model(
        options["provisioning_model"], settings
    )
    sweep = tpu_devops.provisioning.sweep
    return await sweep.start_sweep(
        settings,
        sweep.SweepOptions(
            **options,
            zones=zones,
            zone_budget_s=zone_budget_s,
            poll_interval_s=poll_interval_s,
            max_zones=max_zones,
        ),
    )


@tool(title="Tear down this rig's queued resources", kind=DESTROY, open_world=True)
async def destroy_queued_resource(
    confirmation: Annotated[
        ElicitationResult[tpu_devops.host.confirmation.Confirmation],
        Resolve(tpu_devops.provisioning.teardown.resolve_destroy_confirmation),
    ],
    decision: Confirmation,
    zone: ZoneOrAll = None,
    queued_resource_id: Annotated[QueuedResourceId, Field(description="only this id (of this rig)")] = None,
    only_failed: Annotated[bool, Field(description="only FAILED/SUSPENDED ones")] = False,
) -> tpu_devops.provisioning.teardown.TeardownResult:
    """Tear down this rig's TPUs (dry run first).

    Every queued resource labelled managed-by=tpu-devops and rig=<RESOURCE_ID> (any id) in every zone, or the
    zone / id named, or with only_failed=true just the FAILED and SUSPENDED ones; node first, then the
    request, then the rig's firewall rule with its last TPU. Never touches another rig's or anyone else's
    resources (listed as left alone). Without confirm it is a dry run that lists the steps and how to delete
    them. Deleting needs confirm=true and a person: your answer when the host asks you (elicitation: you
    type the rig's name). A model alone cannot delete unless the operator set TPU_DEVOPS_UNATTENDED_DELETE to
    this rig beforehand; then a dry run returns a confirmation token (single use, 10 min, bound to that plan)
    that the deleting call echoes. Otherwise the answer gives the gcloud commands that delete the plan."""
    return await tpu_devops.provisioning.teardown.destroy_confirmed(
        get_settings(),
        confirmation,
        zone=zone,
        queued_resource_id=queued_resource_id,
        only_failed=only_failed,
        **decision.values(),
    )


@tool(title="Save the Hugging Face token", kind=WRITE, open_world=True)
async def save_hf_token(
    token: Annotated[
        str,
        BeforeValidator(tpu_devops.setup_check.withhold_non_string),
        Field(description="Hugging Face token hf_..."),
    ],
) -> tpu_devops.setup_check.SecretSaved:
    """Store the Hugging Face token (Secret Manager).

    Store the Hugging Face token in Secret Manager (HF_SECRET_ID): creates the secret if missing and adds
    a version. Checks its shape; never echoes, logs or returns it. The TPU VM reads it at boot."""
    return await tpu_devops.setup_check.save_hf_token(get_settings(), token)


@tool(title="Reconfigure vLLM on the running TPU", kind=WRITE, open_world=True)
async def reconfigure_vllm(
    overrides: ServingOverrides, dry_run: DryRun = False
) -> tpu_devops.provisioning.reconfigure.ReconfigureResult:
    """Job: new vLLM flags on the running TPU.

    Takes the same overrides as render_startup_script, linted first (blocking findings refuse); dry_run
    shows the old and new vllm serve lines side by side and changes nothing. Writes the new flags to the
    node's metadata (nodes.patch, updateMask=metadata, the whole map kept); the VM's watcher replaces the
    container (serving stops for one engine start, ~8 min on v5e-1) and reports each stage in guest
    attributes. The job ends when /health answers and /v1/models shows the new max_model_len, or when the
    new flags failed to boot: then the failed container's log is diagnosed and the last flags that served
    serve again; a failed image pull leaves the old flags serving (outcome unchanged). Only this rig's node (labels) is changed; a second call while one runs is refused with the
    running job's id."""
    return await tpu_devops.provisioning.reconfigure.reconfigure_vllm(
        get_settings(), **overrides.values(), dry_run=dry_run
    )
