"""The dry run of a create: the exact request, its gcloud equivalent, the price and the warnings.

Also the price and "when billing stops" wording that create and status share.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tpu_devops.config import Settings
from tpu_devops.errors import ConfigError, TpuDevopsError
from tpu_devops.host.results import ToolResult
from tpu_devops.planning.checkpoint import chat_checkpoint
from tpu_devops.planning.fit import fit_gate
from tpu_devops.planning.images import image_gate
from tpu_devops.provisioning.access import EndpointAccess, plan_access
from tpu_devops.provisioning.ownership import CREATE_TOOL, this_rig
from tpu_devops.provisioning.quota import known_support
from tpu_devops.provisioning.requests import (
    PLACEHOLDER_PROJECT,
    build_request,
    check_durations,
    check_provisioning_model,
    create_call,
    gcloud_command,
    or_default,
    redacted_request,
    with_placeholder_project,
)
from tpu_devops.provisioning.store import open_store
from tpu_devops.types import check_resource_id, check_zone


async def hourly_price(settings: Settings, provisioning_model: str, zone: str) -> tuple[float | None, str]:
    """(USD per hour for the whole slice in ``zone``'s region, source label).

    Uses `tpu_devops.planning.pricing.get_price` for the zone's region (live Cloud Billing Catalog, else its
    dated fallback table), the same answer ``estimate_deployment_cost`` gives. When it has no price
    for that region the result is ``(None, "price unknown for <region>: <why>")``: another region's
    figure is never shown in its place.
    """
    from tpu_devops.planning import pricing

    region = zone.rsplit("-", 1)[0]
    try:
        quote = await pricing.get_price(settings, region=region, provisioning_model=provisioning_model)
    except TpuDevopsError as exc:
        return None, f"price unknown for {region} ({provisioning_model}): {exc.message}"
    return round(float(quote.usd_per_hour), 4), f"{region}: {quote.label()}"


def stops_text(model: str, max_run_s: float | None) -> str:
    """When billing stops for ``model`` (``max_run_s``: the flex-start run duration in seconds)."""
    if model == "flex-start":
        return f"stops by itself after {int(max_run_s)}s" if max_run_s else "stops by itself (flex-start)"
    return f"WARNING: {model} bills until deleted"


class QueuedResourcePlan(ToolResult):
    """What `create_tpu_queued_resource` would send, without sending it. Prices in USD.

    ``request`` is the body a create sends with only the startup script summarised (its size and
    SHA-256); ``request_bytes`` / ``request_sha256`` are those of the exact UTF-8 JSON a create of this
    plan sends, script included (`requests.request_text`), so the two can be compared byte for byte.
    """

    queued_resource_id: str
    zone: str
    provisioning_model: str
    accelerator_type: str
    request_url: str
    request: dict[str, Any]
    request_bytes: int
    request_sha256: str
    gcloud_command: str
    usd_per_hour: float | None
    price_source: str
    stops_billing: str
    max_cost_usd: float | None
    warnings: list[str]
    warm_boot: list[str] = Field(
        default_factory=list,
        description="the product bucket and the VM's access to it, whether a warm compile cache and staged "
        "weights exist for this deployment, the expected boot time (seed measurement)",
    )
    endpoint_access: EndpointAccess

    def headline(self) -> str:
        price = f"${self.usd_per_hour:.2f}/h" if self.usd_per_hour is not None else "price unknown"
        return (
            f"plan: {self.provisioning_model} {self.accelerator_type} '{self.queued_resource_id}' in {self.zone}, "
            f"{price}; {self.stops_billing}; {len(self.warnings)} warning(s); {self.endpoint_access.summary()}"
        )


async def plan_queued_resource(
    settings: Settings,
    *,
    zone: str | None = None,
    provisioning_model: str | None = None,
    max_run_duration_s: int | None = None,
    valid_until_duration_s: int | None = None,
    queued_resource_id: str | None = None,
    store: Any = None,
    allowed_source_ranges: list[str] | None = None,
    open_to_internet: bool = False,
    allow_unsupported_image: bool = False,
) -> QueuedResourcePlan:
    """Build the exact create request, gcloud equivalent, price, warnings and endpoint access (the
    firewall rule create would make, with your public IPv4 detected for it), and the warm-boot picture
    (the product bucket, a warm compile cache, staged weights, the expected boot time). Changes nothing:
    its cloud calls are the price lookup, that detection and read-only Cloud Storage calls.

    Raises:
        ConfigError: bad zone / model / durations / source ranges, no startup-script renderer, or a
            public IP that could not be detected (pass allowed_source_ranges); the model cannot fit the
            slice (field ``MODEL_NAME``, `tpu_devops.planning.fit.fit_gate`: create would refuse it too).
    """

    zone = check_zone(or_default(zone, settings.zone, "zone"))
    model = check_provisioning_model(provisioning_model, settings)
    max_run, valid = check_durations(model, max_run_duration_s, valid_until_duration_s, settings)
    fit_notes = fit_gate(settings)  # a model the slice cannot hold is refused before anything is priced
    no_project = not settings.project
    settings = with_placeholder_project(settings)  # a dry run is useful before a project exists
    if store is None:
        try:
            store = open_store(settings)
        except ConfigError:
            store = None
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    rig = await this_rig(settings)
    # Rendered as create will render it: a bucket that exists but is not usable is left out of the script.
    warm, bucket_usable = await _warm_boot(settings, no_project)
    if not bucket_usable:
        settings = settings.model_copy(update={"bucket": ""})
    body = build_request(
        settings,
        zone=zone,
        qr_id=qr_id,
        provisioning_model=model,
        max_run_duration_s=max_run,
        valid_until_duration_s=valid,
        labels=rig.labels(CREATE_TOOL),
    )
    access = await plan_access(
        settings, allowed_source_ranges=allowed_source_ranges, open_to_internet=open_to_internet, preview=True
    )
    per_hour, source = await hourly_price(settings, model, zone)
    warnings: list[str] = list(access.warnings)
    if per_hour is None:
        warnings.append(source)
    if model == "flex-start":
        assert max_run is not None
        stops = f"stops by itself after max_run_duration = {max_run}s ({max_run / 3600:.1f} h): SUSPENDED, node deleted"
        max_cost = None if per_hour is None else round(per_hour * max_run / 3600, 2)
        support = known_support(settings.accelerator_type, model, zone, store=store)
        if support.refused:
            warnings.append(
                f"zone {zone} is known to refuse flex-start for {settings.accelerator_type}: {support.note}"
            )
        elif not support.documented and not support.accepted:
            warnings.append(
                f"zone {zone} is not in Google's documented flex-start list for {settings.accelerator.generation.name} "
                f"({', '.join(support.documented_zones) or 'none'}); expect 'not supported'"
            )
    else:
        stops = (
            f"WARNING: {model} never stops by itself: it bills "
            f"{'$' + format(per_hour, '.2f') + '/h' if per_hour is not None else 'by the hour'} until you delete it "
            "(destroy_queued_resource)"
        )
        max_cost = None
        warnings.append(
            f"{model} keeps billing until deleted; set a reminder or prefer flex-start with a max run duration"
        )
        if model == "spot":
            warnings.append("spot TPUs can be preempted at any time")
    if settings.network or settings.subnetwork:
        warnings.append(
            f"network set (network={settings.network or 'default'!r}, subnetwork={settings.subnetwork or '-'!r}): "
            "it must exist in this project and region, or every zone fails with 'not found'"
        )
    if settings.tensor_parallel_size != settings.accelerator.chips:
        warnings.append(
            f"TENSOR_PARALLEL_SIZE={settings.tensor_parallel_size} but {settings.accelerator_type} has "
            f"{settings.accelerator.chips} chip(s): vLLM uses only {settings.tensor_parallel_size}"
        )
    if valid is None:
        warnings.append("no valid_until_duration: the request can wait in WAITING_FOR_RESOURCES indefinitely")
    from tpu_devops import names

    if image_source := names.non_default_source(settings.vllm_image):
        warnings.append(image_source)
    warnings.extend(
        image_gate(
            settings.vllm_image,
            settings.model_name,
            allow_unsupported_image=allow_unsupported_image,
            dry_run=True,
        )
    )
    warnings.extend(fit_notes)
    warnings.extend(w for w in [chat_checkpoint(settings.model_name).warning()] if w)
    warnings.extend(settings.notices)
    if no_project:
        warnings.append(
            f"GOOGLE_CLOUD_PROJECT is not set: the request shows {PLACEHOLDER_PROJECT}; "
            "set it in tpu.env before create_tpu_queued_resource"
        )
    from tpu_devops.gcp.common import base_url

    sent = create_call(zone, qr_id, body)
    url = (
        f"{base_url(settings, 'tpu')}/{sent.version}/projects/{settings.project}/locations/{zone}/queuedResources"
        f"?queuedResourceId={qr_id}&requestId=<a new UUID per create, re-sent unchanged on retries>"
    )
    return QueuedResourcePlan(
        queued_resource_id=qr_id,
        zone=zone,
        provisioning_model=model,
        accelerator_type=settings.accelerator_type,
        request_url=url,
        request=redacted_request(body),
        request_bytes=len(sent.text.encode("utf-8")),
        request_sha256=sent.sha256,
        gcloud_command=gcloud_command(body, qr_id=qr_id),
        usd_per_hour=per_hour,
        price_source=source,
        stops_billing=stops,
        max_cost_usd=max_cost,
        warnings=warnings,
        endpoint_access=access,
        warm_boot=warm,
    )


async def _warm_boot(settings: Settings, no_project: bool) -> tuple[list[str], bool]:
    """(the plan's warm-boot lines, whether create would name the bucket in the startup script): read
    with `tpu_devops.planning.warmboot.warm_state` (read-only Cloud Storage calls). A bucket that does not exist
    yet counts as usable: create makes it first (`bucket.prepare_for_create`)."""
    from tpu_devops.planning.warmboot import expected_boot, warm_state

    if no_project:
        return [f"no project: the bucket is not checked; {expected_boot(settings, None).text}"], True
    state = await warm_state(settings)
    lines = state.lines()
    bucket = state.bucket
    if bucket.configured and not bucket.exists and bucket.fix is None:
        lines[0] = f"bucket gs://{bucket.name}: {bucket.detail}"
    return lines, (not bucket.exists and bucket.fix is None) or bucket.usable
