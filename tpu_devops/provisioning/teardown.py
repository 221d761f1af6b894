"""Destructive operations on queued resources, inside the narrow blast radius (DESIGN §2).

- Only queued resources of this server's rig (labels ``managed-by=tpu-devops`` and
  ``rig=<RESOURCE_ID>``, `tpu_devops.provisioning.ownership`) are touched, whatever their id; a named
  resource of another rig or of no tpu-devops install is refused (`OwnershipError`) and left alone.
- Teardown follows the TPU (issue 11 §5): without a zone every zone is searched, so a TPU that
  ``find_tpu`` placed in another zone than the configured one is found.
- One obvious contract: a call deletes only when it says so (``confirm=true`` or ``dry_run=false``) *and*
  a person confirmed it (their answer to an MCP elicitation, with the rig's name typed) or the operator
  gave this rig a standing permission beforehand (``TPU_DEVOPS_UNATTENDED_DELETE``, then with the token
  of a dry run of exactly this plan): never the model alone (`tpu_devops.host.confirmation`). Every
  answer that deletes nothing says so loudly, with why and how the person deletes (the gcloud commands
  of the plan among them).
- Order: the node first, then the request (DESIGN §3: delete nodes, then the request). A request in
  PROVISIONING cannot be deleted (the API refuses), so it is reported with "try again when ACTIVE".
- FAILED and SUSPENDED requests still hold quota until deleted; ``destroy_queued_resource(only_failed=true)`` cleans up
  ours.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import (
    CloudError,
    InputError,
    NotFoundError,
    OwnershipError,
    TpuDevopsError,
)
from tpu_devops.host import confirmation
from tpu_devops.host.results import ToolResult
from tpu_devops.provisioning.cloud import api, call, node_external_ip
from tpu_devops.provisioning.ownership import Rig, this_rig
from tpu_devops.provisioning.queued import (
    NOT_LIVE_STATES,
    TERMINAL_STATES,
    QueuedResourceView,
    list_in_zones,
    resolve_zones,
)
from tpu_devops.provisioning.requests import node_specs, or_default
from tpu_devops.types import check_resource_id, check_zone

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
    """What was (or would be) deleted and what was left alone. ``executed`` False: nothing changed.

    ``confirm_token`` (dry runs with something to delete, only under the standing permission
    ``TPU_DEVOPS_UNATTENDED_DELETE``): echo it in the deleting call, within ``confirm_token_expires_in_s``
    seconds, once; ``next_call`` is that exact call (or, on a host that asks you, the call that asks).
    ``how_to_delete``: the gcloud commands that delete exactly the plan, for a person. ``unlisted_zones``:
    zones whose listing failed (this rig's resources there were not seen and are not in the plan).
    """

    dry_run: bool
    executed: bool
    rig: str
    steps: list[DeletionStep]
    left_alone: list[str] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)
    still_running: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    unlisted_zones: dict[str, str] = Field(default_factory=dict)
    confirm_token: str | None = None
    confirm_token_expires_in_s: int | None = None
    next_call: str | None = None
    how_to_delete: list[str] = Field(default_factory=list)
    message: str

    def headline(self) -> str:
        n = sum(1 for s in self.steps if s.action == "delete_queued_resource")
        what = "; ".join(
            s.target + " in " + s.zone for s in self.steps if s.action == "delete_queued_resource"
        ) + "".join(
            f" (and firewall rule {s.target})" for s in self.steps if s.action == "delete_firewall_rule"
        )
        if self.executed:
            head = f"DELETED {n} queued resource(s) of rig '{self.rig}'{': ' + what if what else ''}."
        elif n:
            head = (
                f"NOTHING DELETED (dry run): would delete {n} queued resource(s) of rig '{self.rig}': {what}."
            )
        else:
            head = f"NOTHING DELETED: nothing of rig '{self.rig}' to delete."
        if self.left_alone:
            head += f" Left {len(self.left_alone)} not ours alone."
        if self.still_running:
            head += f" {len(self.still_running)} of ours STILL RUNNING AND BILLING."
        if self.unlisted_zones:
            head += f" {len(self.unlisted_zones)} zone(s) COULD NOT BE LISTED: resources there were not seen."
        head += "".join(f" WARNING: {w}." for w in self.warnings)
        return f"{head} {self.message}"


@dataclass
class Plan:
    """A deletion plan: the steps, what is left alone or refused, and the notes that go with it."""

    tool: str
    action: str
    args: dict[str, str]
    rig: Rig
    project: str
    steps: list[DeletionStep] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    still_running: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unlisted: dict[str, str] = field(default_factory=dict)

    @property
    def deletion(self) -> confirmation.Deletion:
        """This plan as the confirmation rule sees it (what a token is bound to; the elicitation question)."""
        warnings = list(self.warnings)
        if self.unlisted:
            warnings.append(
                f"{len(self.unlisted)} zone(s) could not be listed; resources there are not included"
            )
        return confirmation.Deletion(
            tool=self.tool, action=self.action, project=self.project, rig=self.rig.rig,
            steps=[(s.action, s.target, s.zone) for s in self.steps], args=self.args, warnings=warnings,
            commands=gcloud_commands(self.project, self.steps),
        )  # fmt: skip

    def add(self, view: QueuedResourceView, qr: dict[str, Any]) -> None:
        """Steps to delete one queued resource of ours (its nodes first while they exist)."""
        if view.state == "PROVISIONING":
            self.refused.append(f"{view.id} in {view.zone}: PROVISIONING (cannot be deleted now)")
            return
        if view.state in ("ACTIVE", "SUSPENDING"):
            for spec in node_specs(qr):
                self.steps.append(
                    DeletionStep(action="delete_node", target=spec.get("nodeId", view.id), zone=view.zone)
                )
        self.steps.append(DeletionStep(action="delete_queued_resource", target=view.id, zone=view.zone))
        if view.created_by_you is False:
            self.warnings.append(
                f"{view.id} in {view.zone} was created by someone else (created-by={view.created_by}; this rig is "
                "shared by another installation with the same RESOURCE_ID)"
            )

    def result(self, *, dry_run: bool, executed: bool, message: str, **extra: Any) -> TeardownResult:
        return TeardownResult(
            dry_run=dry_run, executed=executed, rig=self.rig.rig, steps=self.steps, left_alone=self.left_alone,
            refused=self.refused, still_running=self.still_running, warnings=self.warnings,
            unlisted_zones=self.unlisted, message=message, **extra,
        )  # fmt: skip


def gcloud_commands(project: str, steps: list[DeletionStep]) -> list[str]:
    """The gcloud lines a person runs to delete exactly ``steps`` without this server: each queued
    resource with ``--force`` (the TPU API then deletes its nodes first: queuedResources.delete ``force``),
    then the firewall rule. gcloud asks before it deletes."""
    import shlex

    p = shlex.quote(project)
    out = [
        f"gcloud compute tpus queued-resources delete {shlex.quote(s.target)} --zone={shlex.quote(s.zone)} "
        f"--project={p} --force"
        for s in steps
        if s.action == "delete_queued_resource"
    ]
    out += [
        f"gcloud compute firewall-rules delete {shlex.quote(s.target)} --project={p}"
        for s in steps
        if s.action == "delete_firewall_rule"
    ]
    return out


async def plan_destroy(settings: Settings, *, zone: str | None, queued_resource_id: str | None) -> Plan:
    """The plan of `destroy_queued_resource`: this rig's queued resources (any id, or the one named) in
    ``zone``, or in every zone when ``zone`` is None.

    Raises:
        ConfigError: a bad zone / id, no project. NotFoundError: the named id exists nowhere that could be
        listed. OwnershipError: the named id exists but only as someone else's resource.
        CloudError: the zone asked for (or the zone list) could not be listed.
    """
    require_project(settings)
    args: dict[str, str] = {}
    if zone is not None:
        zone = check_zone(or_default(zone, settings.zone, "zone"))
        args["zone"] = confirmation.quoted(zone)
    qr_id = None
    if queued_resource_id is not None:
        qr_id = check_resource_id(or_default(queued_resource_id, settings.resource_id, "queued_resource_id"))
        args["queued_resource_id"] = confirmation.quoted(qr_id)
    rig = await this_rig(settings)
    zones = [zone] if zone else await resolve_zones(settings, "all")
    found, failures = await list_in_zones(settings, zones)
    errors = {z: exc.message for z, exc in failures.items()}
    if zone and errors:
        raise CloudError(
            f"could not list queued resources in {zone}: {errors[zone]}", field="zone", value=zone,
            fix="try again shortly, or omit zone to search every zone",
        )  # fmt: skip
    plan = Plan("destroy_queued_resource", "destroy", args, rig, settings.project, unlisted=errors)
    foreign: list[QueuedResourceView] = []
    rig_live: list[QueuedResourceView] = []
    for z in zones:
        for qr in found.get(z, []):
            view = QueuedResourceView.of(qr, z, rig)
            if view.ours and view.live:
                rig_live.append(view)
            if qr_id is not None and view.id != qr_id:
                continue
            if not view.ours:
                foreign.append(view)
                if qr_id is None:
                    plan.left_alone.append(f"{view.id} in {z} ({view.state}, {view.owner})")
            elif view.state != "DELETING":
                plan.add(view, qr)
    if qr_id is not None and not plan.steps and not plan.refused:
        where = zone or f"any of {len(zones) - len(errors)} zone(s) listed"
        if foreign:
            f = foreign[0]
            raise OwnershipError(
                f"'{qr_id}' in {f.zone} is {f.owner}; this server deletes only its own rig's resources and left it alone",
                field="queued_resource_id",
                value=f"{qr_id} in {f.zone}",
                fix="delete it with the tool (or the tpu-devops server of that rig) that created it",
            )
        raise NotFoundError(
            f"no queued resource '{qr_id}' of rig '{rig.rig}' in {where}",
            field="queued_resource_id",
            value=qr_id,
            fix="list_queued_resources(zone='all', only_ours=true) shows this rig's; omit queued_resource_id "
            "to tear down whatever the rig holds",
        )
    every_zone_seen = zone is None and not errors
    plan.steps += await firewall_steps(settings, plan.steps, rig_live if every_zone_seen else None)
    return plan


async def plan_teardown(
    settings: Settings, *, zone: str | None, queued_resource_id: str | None, only_failed: bool = False
) -> Plan:
    """The plan of `destroy_queued_resource`: with ``only_failed``, this rig's FAILED / SUSPENDED requests
    (they hold quota) in ``zone`` or every zone (`plan_cleanup`); else this rig's queued resources (any id,
    or the one named) in ``zone`` or every zone (`plan_destroy`). ``zone="all"`` is every zone.

    Raises:
        InputError: ``only_failed`` with a ``queued_resource_id`` (the cleanup is by state, not by id).
        As `plan_destroy` and `plan_cleanup`.
    """
    if zone is not None and zone.strip().lower() == "all":
        zone = None
    if only_failed:
        if queued_resource_id is not None:
            raise InputError(
                "only_failed deletes this rig's FAILED and SUSPENDED requests by state, not one by id",
                field="queued_resource_id",
                value=queued_resource_id,
                fix="leave queued_resource_id out with only_failed=true, or leave only_failed out to delete that id",
            )
        return await plan_cleanup(settings, zone=zone)
    return await plan_destroy(settings, zone=zone, queued_resource_id=queued_resource_id)


async def plan_cleanup(settings: Settings, *, zone: str | None) -> Plan:
    """The cleanup plan: this rig's FAILED / SUSPENDED requests (which hold quota) in one zone or every
    zone (None); live ones are listed in ``still_running``, resources of other rigs or installs in
    ``left_alone``.

    Raises:
        ConfigError: bad zone, no project. CloudError: the one zone asked for (or the zone list) could
        not be listed.
    """
    action = "cleanup"
    require_project(settings)
    zones = await resolve_zones(settings, "all" if zone is None else zone)
    args = {"only_failed": "true"} | ({"zone": confirmation.quoted(zone)} if zone is not None else {})
    rig = await this_rig(settings)
    found, failures = await list_in_zones(settings, zones)
    errors = {z: exc.message for z, exc in failures.items()}
    if len(zones) == 1 and errors:
        raise CloudError(
            f"could not list queued resources in {zones[0]}: {errors[zones[0]]}", field="zone", value=zones[0],
            fix="try again shortly",
        )  # fmt: skip
    plan = Plan("destroy_queued_resource", action, args, rig, settings.project, unlisted=errors)
    rig_live: list[QueuedResourceView] = []
    for z in zones:
        for qr in found.get(z, []):
            view = QueuedResourceView.of(qr, z, rig)
            if view.ours and view.live:
                rig_live.append(view)
            if not view.ours:
                plan.left_alone.append(f"{view.id} in {z} ({view.state}, {view.owner})")
                continue
            if view.state == "DELETING":
                continue
            if view.state not in TERMINAL_STATES:
                if view.state not in NOT_LIVE_STATES:
                    plan.still_running.append(f"{view.id} in {z} ({view.state})")
                continue
            plan.add(view, qr)
    every_zone_seen = zone is None and not errors
    plan.steps += await firewall_steps(settings, plan.steps, rig_live if every_zone_seen else None)
    return plan


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
                try:
                    await call(tpu.delete_queued_resource, step.zone, step.target, force=True)
                except NotFoundError:
                    pass  # gone already (a previous, interrupted teardown): the goal is met
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


# ---- endpoint access (added by helper endpoint-access; issue 11 §4) ------------------------------------


async def firewall_steps(
    settings: Settings, steps: list[DeletionStep], rig_live: list[QueuedResourceView] | None = None
) -> list[DeletionStep]:
    """The step that deletes the rig's firewall rule (`tpu_devops.provisioning.access`) when ``steps``
    delete the rig's last live queued resource, so the rule goes with the TPU; [] otherwise (another
    live TPU of the rig still needs it, or there is no rule of ours). ``rig_live``: the rig's live queued
    resources when the caller listed every zone already (else they are listed here). Fails closed: when
    the rig's queued resources cannot be listed, the rule is kept.
    """
    from tpu_devops.provisioning import access
    from tpu_devops.provisioning.queued import list_queued_resources

    deleting = {(s.zone, s.target) for s in steps if s.action == "delete_queued_resource"}
    if not deleting:
        return []
    if rig_live is None:
        try:
            listing = await list_queued_resources(settings, "all", only_ours=True)
        except TpuDevopsError:
            return []
        if listing.errors:  # a zone we could not see may hold a live TPU that still needs the rule
            return []
        rig_live = [q for q in listing.queued_resources if q.live]
    live = rig_live
    if any((q.zone, q.id) not in deleting for q in live):
        return []
    state = await access.firewall_state(settings)
    if not (state.exists and state.ours):
        return []
    return [DeletionStep(action="delete_firewall_rule", target=state.name, zone="global")]


async def _delete_firewall_rule(settings: Settings) -> None:
    from tpu_devops.provisioning import access

    await access.delete_rig_rule(settings)


# ---- confirmation (the shared rule: `tpu_devops.host.confirmation`) ---------------------------------------


def _deletion(plan: Plan) -> confirmation.Deletion:
    return plan.deletion


async def resolve_destroy_confirmation(
    ctx: Context,
    zone: str | None = None,
    queued_resource_id: str | None = None,
    only_failed: bool = False,
    dry_run: bool | None = None,
    confirm: bool = False,
    confirm_token: str | None = None,
) -> Any:
    """Resolver (mcp ``Resolve``) for `destroy_queued_resource`: asks the user when the host supports
    elicitation and the call wants a deletion (`tpu_devops.host.confirmation.resolve`)."""
    from tpu_devops.config import get_settings

    async def make() -> Plan:
        return await plan_teardown(
            get_settings(), zone=zone, queued_resource_id=queued_resource_id, only_failed=only_failed
        )

    wants = confirmation.wants_deletion(dry_run, confirm, confirm_token)
    key = ("destroy", zone, queued_resource_id, only_failed)
    return await confirmation.resolve(ctx, key, wants, make, _deletion, get_settings().deletion_policy())


async def teardown(
    settings: Settings,
    outcome: Any,
    *,
    plan: Plan,
    dry_run: bool | None,
    confirm: bool,
    confirm_token: str | None,
) -> TeardownResult:
    """Run ``plan`` under the confirmation rule (module docstring; `tpu_devops.host.confirmation.decide`).

    ``outcome``: the resolver's outcome (an accepted `Confirmation` or `NotAsked`, a declined or a
    cancelled elicitation).

    Raises:
        ConfirmationError: a deletion was asked for but not confirmed: declined, no person and no standing
            permission, or (under the standing permission) no valid token. The message says nothing was
            deleted and why; the fix says how the person deletes.
    """
    wants = confirmation.wants_deletion(dry_run, confirm, confirm_token)
    if not wants or not plan.steps:
        if not plan.steps:
            why = "nothing of this rig to delete" + (
                " in the cleanup sense (FAILED / SUSPENDED only)" if plan.action == "cleanup" else ""
            )
            return plan.result(dry_run=not wants, executed=False, message=why + _running_note(plan))
        said = "dry_run=true wins over confirm. " if dry_run and (confirm or confirm_token) else ""
        offered = confirmation.dry_run_fields(
            settings.state_dir, plan.deletion, settings.deletion_policy(), outcome
        )
        offered["message"] = f"{said}{offered['message']}{_running_note(plan)}"
        return plan.result(dry_run=True, executed=False, **offered)
    via = confirmation.decide(
        settings.state_dir, plan.deletion, outcome, confirm_token, settings.deletion_policy()
    )
    await _execute(settings, plan.steps)
    failed = [s for s in plan.steps if s.error]
    message = (
        f"done ({via})"
        if not failed
        else f"stopped at {failed[0].action} {failed[0].target}: {failed[0].error}; the steps after it were not run"
    )
    return plan.result(dry_run=False, executed=True, message=message + _running_note(plan))


def _running_note(plan: Plan) -> str:
    """The warning that ``cleanup`` left live TPUs of ours alone (they keep billing)."""
    if not plan.still_running:
        return ""
    return (
        f". NOTE: {len(plan.still_running)} of ours still running and billing, not touched by cleanup "
        f"(it deletes only FAILED/SUSPENDED requests): {'; '.join(plan.still_running)}. Delete them with "
        "destroy_queued_resource()"
    )


async def destroy_confirmed(
    settings: Settings,
    outcome: Any,
    *,
    zone: str | None,
    queued_resource_id: str | None,
    only_failed: bool = False,
    dry_run: bool | None,
    confirm: bool,
    confirm_token: str | None,
) -> TeardownResult:
    """`destroy_queued_resource` behind the confirmation rule (the plan the resolver built, else a new one)."""
    plan = confirmation.take_plan(("destroy", zone, queued_resource_id, only_failed)) or await plan_teardown(
        settings, zone=zone, queued_resource_id=queued_resource_id, only_failed=only_failed
    )
    return await teardown(
        settings, outcome, plan=plan, dry_run=dry_run, confirm=confirm, confirm_token=confirm_token
    )
