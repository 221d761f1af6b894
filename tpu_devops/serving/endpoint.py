"""Endpoint discovery (DESIGN §3): ``VLLM_URL`` if set, else our ACTIVE queued resource's node IP.

Discovery lists queued resources in every zone (or only the zone asked for: find_tpu may have landed
anywhere, and a second TPU of the rig may have any id), keeps those labelled ``managed-by=tpu-devops``
and ``rig=<RESOURCE_ID>``, and for the single ACTIVE one reads its node's
``networkEndpoints[0].accessConfig.externalIp``: ``http://IP:VLLM_PORT``. The IP changes with every
recreate, so it is never cached or hard-coded. Clear answers for none / still provisioning / several.

Whether this machine reaches that endpoint is `tpu_devops.serving.reachability` (check_setup).
"""

from __future__ import annotations

from typing import Any

from tpu_devops.config import Settings
from tpu_devops.host.results import ToolResult


class EndpointResult(ToolResult):
    """``status``: configured (VLLM_URL), discovered, none, not_ready (ours exists but is not ACTIVE),
    several (more than one ACTIVE of ours), no_ip (ACTIVE but no external IP). ``url`` is set for the
    first two only."""

    status: str
    url: str | None = None
    source: str
    zone: str | None = None
    queued_resource_id: str | None = None
    state: str | None = None
    candidates: list[str] = []
    next_step: str

    def headline(self) -> str:
        if self.url:
            return f"vLLM endpoint: {self.url} ({self.source})"
        return f"no endpoint ({self.status}): {self.next_step}"


async def get_vllm_endpoint(settings: Settings, zone: str | None = None) -> EndpointResult:
    """The vLLM base URL (no ``/v1``), or a clear reason there is none.

    ``zone``: None (the configured zone, then every zone), a zone (only that one), or ``"all"``
    (every zone at once, as `list_queued_resources` accepts). An explicitly empty zone is an error.

    Raises:
        ConfigError: discovery needed but no project configured; a bad or empty zone.
        CloudError: listing queued resources failed.
    """
    if settings.vllm_url:
        return EndpointResult(
            status="configured",
            url=settings.vllm_url,
            source="VLLM_URL",
            next_step="verify_model_health checks it answers",
        )
    from tpu_devops.provisioning.cloud import node_external_ip
    from tpu_devops.provisioning.queued import list_queued_resources, next_step_for
    from tpu_devops.provisioning.requests import or_default
    from tpu_devops.types import check_zone

    explicit = zone is not None
    zone = or_default(zone, settings.zone, "zone")
    everywhere = zone.strip().lower() == "all"
    if everywhere or not explicit:
        # find_tpu may have landed in another zone, and a second TPU of the rig may be anywhere under any
        # id: look in every zone (concurrently), whatever the configured zone holds.
        listing = await list_queued_resources(settings, "all", only_ours=True)
        ours = listing.queued_resources
        zone = ours[0].zone if ours else ("all" if everywhere else check_zone(zone))
    else:
        zone = check_zone(zone)
        listing = await list_queued_resources(settings, zone)
        ours = [q for q in listing.queued_resources if q.ours]
    active = [q for q in ours if q.state == "ACTIVE"]
    if not ours:
        return EndpointResult(
            status="none", source="discovery", zone=zone,
            next_step=f"no TPU of rig '{settings.resource_id}' in {zone} or any other zone: create one (find_tpu / create_tpu_queued_resource) or set VLLM_URL",
        )  # fmt: skip
    if not active:
        q = ours[0]
        return EndpointResult(
            status="not_ready", source="discovery", zone=zone, queued_resource_id=q.id, state=q.state,
            next_step=next_step_for(q.state),
        )  # fmt: skip
    if len(active) > 1:
        return EndpointResult(
            status="several", source="discovery", zone=zone, candidates=[f"{q.id} ({q.zone})" for q in active],
            next_step="several ACTIVE TPUs of this rig: set VLLM_URL to the one you mean, or destroy the extras",
        )  # fmt: skip
    q = active[0]
    zone = q.zone
    ip, node = await node_external_ip(settings, zone, q.node_id or q.id)
    if not ip:
        return EndpointResult(
            status="no_ip", source="discovery", zone=zone, queued_resource_id=q.id, state=q.state,
            next_step=_internal_only_step(settings, q.id, zone, node),
        )  # fmt: skip
    return EndpointResult(
        status="discovered", url=f"http://{ip}:{settings.vllm_port}", source="discovery", zone=zone,
        queued_resource_id=q.id, state=q.state, next_step="verify_model_health checks it answers (boot takes ~10-15 min)",
    )  # fmt: skip


def _internal_only_step(settings: Settings, qr_id: str, zone: str, node: dict[str, Any] | None) -> str:
    """What to do about a node without an external IP: reach its internal address from inside the VPC, or
    tunnel through IAP (README "No external IP"); why it has none (TPU_EXTERNAL_IP=0 or the network)."""
    internal = next(
        (ep.get("ipAddress") for ep in (node or {}).get("networkEndpoints", []) or [] if ep.get("ipAddress")),
        None,
    )
    why = (
        "TPU_EXTERNAL_IP=0: the node has an internal address only"
        if not settings.external_ip
        else "the node has no external IP (an internal-only network, or an organisation policy)"
    )
    inside = (
        f"VLLM_URL=http://{internal}:{settings.vllm_port}" if internal else "VLLM_URL=http://INTERNAL_IP:PORT"
    )
    return (
        f"{why}; from a machine in the VPC set {inside}, or keep an IAP tunnel open (gcloud compute tpus "
        f"queued-resources ssh {qr_id} --zone={zone} --tunnel-through-iap -- -N -L "
        f"{settings.vllm_port}:localhost:{settings.vllm_port}) and set VLLM_URL=http://127.0.0.1:{settings.vllm_port}"
    )
