"""Destructive operations on queued resources, inside the narrow blast radius (DESIGN §2).

- Only resources whose node labels carry ``managed-by=tpu-devops`` and ``rig=<resource id>`` are
  touched; anything else is reported as "not ours" and left alone (`OwnershipError` when named).
- ``dry_run`` (default True) lists the exact steps and changes nothing.
- Executing needs confirmation: MCP elicitation when the client supports it (the SDK's ``Resolve`` /
  ``Elicit`` resolver mechanism, see `resolve_destroy_confirmation`), else ``confirm=true``.
- Order: the node first, then the request (DESIGN §3: delete nodes, then the request). A request in
  PROVISIONING cannot be deleted (the API refuses), so it is reported with "try again when ACTIVE".
- FAILED and SUSPENDED requests still hold quota until deleted; ``manage_queued_resource`` cleans up
  ours.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import ConfigError, NotFoundError, OwnershipError, TpuDevopsError
from tpu_devops.provisioning.cloud import api, call, get_queued, node_external_ip
from tpu_devops.provisioning.queued import NOT_LIVE_STATES, TERMINAL_STATES, is_ours, resolve_zones, state_of
from tpu_devops.provisioning.requests import check_resource_id, check_zone, labels_of, node_specs, or_default
from tpu_devops.results import ToolResult

NODE_GONE_TIMEOUT_S = 60.0


class DeletionStep(BaseModel):
    """One step: ``action`` delete_node / delete_queued_resource / delete_firewall_rule (the rig's rule,
    once its last TPU goes); ``done`` after execution."""

    action: str
    target: str
    zone: str
    done: bool = False
    error: str | None = None


class TeardownResult(ToolResult):
    """What was (or would be) deleted and what was left alone. ``dry_run`` True: nothing changed."""

    dry_run: bool
    executed: bool
    steps: list[DeletionStep]
    left_alone: list[str] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)
    still_running: list[str] = Field(default_factory=list)
    message: str

    def headline(self) -> str:
        verb = "would delete" if not self.executed else "deleted"
        n = sum(1 for s in self.steps if s.action == "delete_queued_resource")
        running = (
            f" {len(self.still_running)} of ours STILL RUNNING AND BILLING." if self.still_running else ""
        )
        return f"{verb} {n} queued resource(s) of ours; left {len(self.left_alone)} not ours alone.{running} {self.message}"


def _steps_for(qr: dict[str, Any], zone: str, *, with_node: bool) -> list[DeletionStep]:
    qr_id = str(qr.get("name", "")).rsplit("/", 1)[-1]
    steps: list[DeletionStep] = []
    if with_node:
        for spec in node_specs(qr):
            steps.append(DeletionStep(action="delete_node", target=spec.get("nodeId", qr_id), zone=zone))
    steps.append(DeletionStep(action="delete_queued_resource", target=qr_id, zone=zone))
    return steps


async def _dry_run_or_execute(
    settings: Settings,
    steps: list[DeletionStep],
    *,
    dry_run: bool,
    confirmed: bool,
    left_alone: list[str] | None = None,
    refused: list[str] | None = None,
    still_running: list[str] | None = None,
) -> TeardownResult:
    """The dry-run result, or (confirmed) the steps executed in order, stopping at the first error.

    Raises:
        ConfigError: execution asked for without confirmation (field ``confirm``).
    """
    lists = {
        "steps": steps, "left_alone": left_alone or [], "refused": refused or [], "still_running": still_running or [],
    }  # fmt: skip
    running = _still_running_note(still_running or [])
    if dry_run:
        return TeardownResult(
            dry_run=True, executed=False, **lists,
            message="dry run: nothing deleted; call again with dry_run=false and confirm=true" + running,
        )  # fmt: skip
    if not confirmed:
        raise ConfigError(
            "deleting needs confirmation", field="confirm", value=False,
            fix="review the dry run, then call again with dry_run=false and confirm=true",
        )  # fmt: skip
    await _execute(settings, steps)
    failed = [s for s in steps if s.error]
    return TeardownResult(
        dry_run=False, executed=True, **lists,
        message=("done" if not failed else f"stopped at {failed[0].action} {failed[0].target}: {failed[0].error}")
        + running,
    )  # fmt: skip


def _still_running_note(still_running: list[str]) -> str:
    """The warning that ``cleanup`` left live TPUs of ours alone (they keep billing)."""
    if not still_running:
        return ""
    return (
        f". NOTE: {len(still_running)} of ours still running and billing, not touched by cleanup "
        f"(it deletes only FAILED/SUSPENDED requests): {'; '.join(still_running)}. Delete them with "
        "manage_queued_resource(action='delete_all') or destroy_queued_resource(zone=<zone>)"
    )


async def _execute(settings: Settings, steps: list[DeletionStep]) -> None:
    tpu = api(settings)
    for step in steps:
        try:
            if step.action == "delete_firewall_rule":
                await _delete_firewall_rule(settings)
            elif step.action == "delete_node":
                try:
                    await call(tpu.delete_node, step.zone, step.target)
                except NotFoundError:
                    pass
                await _wait_node_gone(settings, step.zone, step.target)
            else:
                await call(tpu.delete_queued_resource, step.zone, step.target, force=True)
            step.done = True
        except TpuDevopsError as exc:
            step.error = exc.message
            break


async def _wait_node_gone(settings: Settings, zone: str, node_id: str) -> None:
    deadline = time.monotonic() + NODE_GONE_TIMEOUT_S
    while time.monotonic() < deadline:
        _, node = await node_external_ip(settings, zone, node_id)
        if node is None:
            return
        await anyio.sleep(2.0)


async def destroy_queued_resource(
    settings: Settings,
    *,
    zone: str | None = None,
    queued_resource_id: str | None = None,
    dry_run: bool = True,
    confirmed: bool = False,
) -> TeardownResult:
    """Delete one queued resource of ours (node first). See the module docstring for the rules.

    Raises:
        NotFoundError: no such queued resource.
        OwnershipError: it exists but lacks ``managed-by=tpu-devops`` / ``rig=<id>``.
        ConfigError: execution asked for without confirmation.
    """
    require_project(settings)
    zone = check_zone(or_default(zone, settings.zone, "zone"))
    qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
    qr = await get_queued(settings, zone, qr_id)
    if qr is None:
        raise NotFoundError(
            "no such queued resource", field="queued_resource_id", value=f"{qr_id} in {zone}",
            fix="list_queued_resources(zone='all', only_ours=true) shows ours",
        )  # fmt: skip
    if not is_ours(qr, qr_id):
        labels = labels_of(qr)
        raise OwnershipError(
            f"this queued resource was not created by tpu-devops for rig '{qr_id}' (labels: {labels or 'none'}); it is left alone",
            field="queued_resource_id",
            value=f"{qr_id} in {zone}",
            fix="delete it with the tool that created it; this server only deletes resources labelled managed-by=tpu-devops, rig=<id>",
        )
    state = state_of(qr)
    if state == "PROVISIONING":
        return TeardownResult(
            dry_run=dry_run, executed=False, steps=[], refused=[f"{qr_id} in {zone}: PROVISIONING"],
            message="a PROVISIONING request cannot be deleted; try again once it is ACTIVE or FAILED",
        )  # fmt: skip
    steps = _steps_for(qr, zone, with_node=state in ("ACTIVE", "SUSPENDING"))
    steps += await firewall_steps(settings, steps)
    return await _dry_run_or_execute(settings, steps, dry_run=dry_run, confirmed=confirmed)


MANAGE_ACTIONS = ("cleanup", "delete_all")


async def manage_queued_resources(
    settings: Settings,
    *,
    action: str = "cleanup",
    zone: str | None = "all",
    dry_run: bool = True,
    confirmed: bool = False,
) -> TeardownResult:
    """Bulk teardown of our rig's queued resources in one zone or ``"all"``.

    ``cleanup``: delete our FAILED / SUSPENDED requests (they still hold quota).
    ``delete_all``: delete every request of our rig (nodes first), except PROVISIONING ones.
    Resources without our labels are listed in ``left_alone`` and never touched.

    Raises:
        ConfigError: unknown action, or execution without confirmation.
    """
    if action not in MANAGE_ACTIONS:
        raise ConfigError(
            "unknown action", field="action", value=action, fix=f"use one of {', '.join(MANAGE_ACTIONS)}"
        )
    require_project(settings)
    zones = await resolve_zones(settings, "all" if zone is None else zone)
    found: dict[str, list[dict[str, Any]]] = {}

    async def one(z: str) -> None:
        found[z] = await call(api(settings).list_queued_resources, z)

    async with anyio.create_task_group() as tg:
        for z in zones:
            tg.start_soon(one, z)
    steps: list[DeletionStep] = []
    left: list[str] = []
    refused: list[str] = []
    running: list[str] = []
    rig = settings.resource_id
    for z in zones:
        for qr in found.get(z, []):
            qr_id = str(qr.get("name", "")).rsplit("/", 1)[-1]
            state = state_of(qr)
            if not is_ours(qr, rig):
                left.append(f"{qr_id} in {z} ({state}, not ours)")
                continue
            if action == "cleanup" and state not in TERMINAL_STATES:
                if state not in NOT_LIVE_STATES:
                    running.append(f"{qr_id} in {z} ({state})")
                continue
            if state == "PROVISIONING":
                refused.append(f"{qr_id} in {z}: PROVISIONING (cannot be deleted now)")
                continue
            steps.extend(_steps_for(qr, z, with_node=state in ("ACTIVE", "SUSPENDING")))
    steps += await firewall_steps(settings, steps)
    return await _dry_run_or_execute(
        settings, steps, dry_run=dry_run, confirmed=confirmed, left_alone=left, refused=refused,
        still_running=running,
    )  # fmt: skip


# ---- endpoint access (added by helper endpoint-access; issue 11 §4) ------------------------------------


async def firewall_steps(settings: Settings, steps: list[DeletionStep]) -> list[DeletionStep]:
    """The step that deletes the rig's firewall rule (`tpu_devops.provisioning.access`) when ``steps``
    delete the rig's last live queued resource, so the rule goes with the TPU; [] otherwise (another
    live TPU of the rig still needs it, or there is no rule of ours). Fails closed: when the rig's
    queued resources cannot be listed, the rule is kept.
    """
    from tpu_devops.provisioning import access
    from tpu_devops.provisioning.queued import list_queued_resources

    deleting = {(s.zone, s.target) for s in steps if s.action == "delete_queued_resource"}
    if not deleting:
        return []
    try:
        listing = await list_queued_resources(settings, "all", only_ours=True)
    except TpuDevopsError:
        return []
    if listing.errors:  # a zone we could not see may hold a live TPU that still needs the rule
        return []
    live = [
        q
        for q in listing.queued_resources
        if q.rig == settings.resource_id and q.state not in NOT_LIVE_STATES
    ]
    if any((q.zone, q.id) not in deleting for q in live):
        return []
    state = await access.firewall_state(settings)
    if not (state.exists and state.ours):
        return []
    return [DeletionStep(action="delete_firewall_rule", target=state.name, zone="global")]


async def _delete_firewall_rule(settings: Settings) -> None:
    from tpu_devops.provisioning import access

    await access.delete_rig_rule(settings)


class Confirmation(BaseModel):
    """The answer to "delete these TPU resources now?" (from ``confirm`` or an elicitation)."""

    confirm: bool = Field(description="Delete the listed TPU resources now?")


def _can_elicit(ctx: Context) -> bool:
    caps = getattr(ctx, "client_capabilities", None)
    elicitation = getattr(caps, "elicitation", None) if caps is not None else None
    return elicitation is not None and (
        getattr(elicitation, "form", None) is not None or getattr(elicitation, "url", None) is None
    )


def elicitation_summary(result: TeardownResult) -> str:
    """The question shown to the user: the exact steps of a dry run."""
    lines = [f"{s.action} {s.target} ({s.zone})" for s in result.steps] or ["nothing"]
    return "Delete these TPU resources (ours only)?\n" + "\n".join(lines)


async def _confirmation(ctx: Context, dry_run: bool, confirm: bool, plan: Any) -> Any:
    """``Confirmation`` directly, or an ``Elicit`` marker asking the user when the client can be asked."""
    if dry_run or confirm or not _can_elicit(ctx):
        return Confirmation(confirm=confirm)
    try:
        result = await plan()
    except TpuDevopsError:
        return Confirmation(confirm=False)  # the tool body raises the real error
    if not result.steps:
        return Confirmation(confirm=False)
    from mcp.server.mcpserver.resolve import Elicit

    return Elicit(elicitation_summary(result), Confirmation)


async def resolve_destroy_confirmation(
    ctx: Context,
    zone: str | None = None,
    queued_resource_id: str | None = None,
    dry_run: bool = True,
    confirm: bool = False,
) -> Any:
    """Resolver (mcp ``Resolve``) for `destroy_queued_resource`: elicits when needed and supported.

    On protocol revisions >= 2026-07-28 the SDK carries the question inside an ``InputRequiredResult``;
    older ones send ``elicitation/create``. Without the client capability, ``confirm`` decides.
    """
    from tpu_devops.config import get_settings

    async def plan() -> TeardownResult:
        return await destroy_queued_resource(get_settings(), zone=zone, queued_resource_id=queued_resource_id)

    return await _confirmation(ctx, dry_run, confirm, plan)


async def resolve_manage_confirmation(
    ctx: Context,
    action: str = "cleanup",
    zone: str | None = "all",
    dry_run: bool = True,
    confirm: bool = False,
) -> Any:
    """Resolver for `manage_queued_resource` (see `resolve_destroy_confirmation`)."""
    from tpu_devops.config import get_settings

    async def plan() -> TeardownResult:
        return await manage_queued_resources(get_settings(), action=action, zone=zone)

    return await _confirmation(ctx, dry_run, confirm, plan)


async def destroy_confirmed(
    settings: Settings, *, confirmed: bool, zone: str | None, queued_resource_id: str | None, dry_run: bool
) -> TeardownResult:
    """`destroy_queued_resource` behind the confirmation rule."""
    return await destroy_queued_resource(
        settings, zone=zone, queued_resource_id=queued_resource_id, dry_run=dry_run, confirmed=confirmed
    )


async def manage_confirmed(
    settings: Settings, *, confirmed: bool, action: str, zone: str | None, dry_run: bool
) -> TeardownResult:
    """`manage_queued_resources` behind the confirmation rule."""
    return await manage_queued_resources(
        settings, action=action, zone=zone, dry_run=dry_run, confirmed=confirmed
    )
