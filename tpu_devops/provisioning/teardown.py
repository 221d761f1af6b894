"""Destructive operations on queued resources, inside the narrow blast radius (DESIGN §2).

- Only queued resources of this server's rig (labels ``managed-by=tpu-devops`` and
  ``rig=<RESOURCE_ID>``, `tpu_devops.provisioning.ownership`) are touched, whatever their id; a named
  resource of another rig or of no tpu-devops install is refused (`OwnershipError`) and left alone.
- Teardown follows the TPU, wherever it bills: without a zone every zone is searched, so a TPU that
  ``find_tpu`` placed in another zone than the configured one is found.
- One obvious contract: a call deletes only when it says so (``confirm=true`` or ``dry_run=false``) *and*
  a person confirmed it (their answer to an MCP elicitation, with the rig's name typed) or the operator
  gave this rig a standing permission beforehand (``TPU_DEVOPS_UNATTENDED_DELETE``, then with the token
  of a dry run of exactly this plan): never the model alone (`tpu_devops.host.confirmation`). Every
  answer that deletes nothing says so loudly, with why and how the person deletes (the gcloud commands
  of the plan among them).
- Order: the node first, then the request (DESIGN §3: delete nodes, then the request). A request in
  PROVISIONING cannot be deleted (the API refuses): a job (`finish_provisioning`) waits until it leaves
  PROVISIONING and deletes it then, so it never comes up and bills.
- A teardown ends what would undo it (`tpu_devops.provisioning.rig`, `rigjobs`): the jobs working for
  what it deletes (a ``find_tpu`` sweep, a create's wait, a reconfigure of its node; in another server
  sharing the state directory, the sweep or create holding the rig lease) are steps of its plan
  (``end_job``), shown in the dry run. Confirmed, it first raises the rig's fence (`store`: no create
  that began before it is sent after it, in any server sharing the state directory), ends this server's
  jobs (a sweep deletes the request it waits on), waits out a create already on its way, deletes, then
  lists the rig again and deletes what an ended job made meanwhile. The rig's firewall rule goes last,
  and only when no TPU of the rig is left in any zone (a TPU never runs without it).
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
from tpu_devops.provisioning.ownership import SWEEP_TOOL, Rig, this_rig
from tpu_devops.provisioning.queued import (
    NOT_LIVE_STATES,
    TERMINAL_STATES,
    QueuedResourceView,
    list_in_zones,
    resolve_zones,
)
from tpu_devops.provisioning.requests import node_specs, or_default
from tpu_devops.provisioning.rig import RigState, rig_state
from tpu_devops.provisioning.rigjobs import TPU, RigJob, end_jobs
from tpu_devops.types import check_resource_id, check_zone

NODE_GONE_TIMEOUT_S = 60.0
CLOCK_SLACK_S = 60.0  # createTime is Google's clock: a request made this long before the plan counts as new
CREATE_WAIT_NOTE = "the wait for it"
FOLLOW_UP_LABEL = "teardown"
PROVISIONING_WAIT_S = 1800.0  # how long the follow-up waits for a request to leave PROVISIONING
PROVISIONING_POLL_S = 5.0


class DeletionStep(BaseModel):
    """One step: ``action`` end_job (a job working for what is deleted: ``target`` its id and kind,
    ``zone`` the server it runs in) / delete_node / delete_queued_resource / delete_firewall_rule (the
    rig's rule, once its last TPU goes); ``done`` after execution."""

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
    left_running: list[str] = Field(
        default_factory=list, description="jobs of the rig this teardown does not end (and why)"
    )
    followed_by: str | None = Field(None, description="what a job finishes later (a PROVISIONING request)")
    follow_up_job_id: str | None = Field(None, description="that job: poll get_job")
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
        ends = [s.target for s in self.steps if s.action == "end_job"]
        jobs = f"end job(s) {', '.join(ends)} and " if ends else ""
        if self.executed:
            head = f"DELETED {n} queued resource(s) of rig '{self.rig}'{': ' + what if what else ''}."
            if ends:
                head += f" Ended job(s) first: {', '.join(ends)}."
        elif self.steps:
            head = (
                f"NOTHING DELETED (dry run): would {jobs}delete {n} queued resource(s) of rig '{self.rig}'"
                f"{': ' + what if what else ''}."
            )
        else:
            head = f"NOTHING DELETED: nothing of rig '{self.rig}' to delete."
        if self.left_alone:
            head += f" Left {len(self.left_alone)} not ours alone."
        if self.still_running:
            head += f" {len(self.still_running)} of ours STILL RUNNING AND BILLING."
        if self.followed_by:
            head += f" {self.followed_by}."
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
    left_running: list[str] = field(default_factory=list)
    jobs: list[RigJob] = field(default_factory=list)  # the jobs the end_job steps end
    whole: bool = False  # the whole rig (no zone, no id): what ended jobs made meanwhile goes too
    made_at: float = field(default_factory=time.time)

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
        """Steps to delete one queued resource of ours (its nodes first while they exist, or will: a
        PROVISIONING request is about to have one, and is deleted once it leaves PROVISIONING)."""
        if view.state in ("ACTIVE", "SUSPENDING", "PROVISIONING"):
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

    def end_jobs_of(self, state: RigState, deleted: list[QueuedResourceView]) -> None:
        """An ``end_job`` step for each job that works for what the plan deletes: every job of the rig
        for a whole-rig teardown, else those on a deleted queued resource or its node (a sweep whose
        request is deleted, a wait, a reconfigure). A GKE job, or a teardown's own follow-up, is left
        running and named."""
        for job in state.jobs:
            if job.target.startswith("gke:"):
                self.left_running.append(
                    f"{job.line()}: not a queued resource (teardown_gke_deployment ends it)"
                )
                continue
            if job.label == FOLLOW_UP_LABEL:
                self.left_running.append(f"{job.line()}: a teardown itself")
                continue
            on = any(job.on(v.zone, v.id) for v in deleted if job.target != TPU or v.tool == SWEEP_TOOL)
            if self.whole or on:
                self.jobs.append(job)
                self.steps.insert(
                    len(self.jobs) - 1,
                    DeletionStep(action="end_job", target=f"{job.job_id} ({job.label})", zone=job.where),
                )
            else:
                self.left_running.append(f"{job.line()}: works on nothing this teardown deletes")

    def result(self, *, dry_run: bool, executed: bool, message: str, **extra: Any) -> TeardownResult:
        return TeardownResult(
            dry_run=dry_run, executed=executed, rig=self.rig.rig, steps=self.steps, left_alone=self.left_alone,
            refused=self.refused, still_running=self.still_running, warnings=self.warnings,
            unlisted_zones=self.unlisted, message=message, left_running=self.left_running, **extra,
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
    state = await rig_state(settings, zone=zone, rig=rig)
    errors = state.unlisted
    if zone and errors:
        raise CloudError(
            f"could not list queued resources in {zone}: {errors[zone]}", field="zone", value=zone,
            fix="try again shortly, or omit zone to search every zone",
        )  # fmt: skip
    plan = Plan("destroy_queued_resource", "destroy", args, rig, settings.project, unlisted=errors)
    plan.whole = zone is None and qr_id is None
    foreign = [v for v in state.others if qr_id is None or v.id == qr_id]
    if qr_id is None:
        plan.left_alone += [f"{v.id} in {v.zone} ({v.state}, {v.owner})" for v in foreign]
    rig_live = state.live
    deleted: list[QueuedResourceView] = []
    for view in state.queued_resources:
        if (qr_id is None or view.id == qr_id) and view.state != "DELETING":
            plan.add(view, state.json_of(view))
            deleted.append(view)
    plan.end_jobs_of(state, deleted)
    if state.landing:
        plan.warnings.append(
            f"a create of this rig ({state.landing}) was on its way when its server stopped: it may still land; "
            "the teardown waits for it and deletes it too"
        )
    if qr_id is not None and not plan.steps and not plan.refused:
        where = zone or f"any of {state.zones_listed - len(errors)} zone(s) listed"
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
    plan.steps += await firewall_steps(
        settings, plan.steps, rig_live if every_zone_seen else None, orphan=plan.whole and every_zone_seen
    )
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


async def _execute(settings: Settings, steps: list[DeletionStep]) -> list[DeletionStep]:
    """Run the node and request steps in order (a node first, then its request); stop at the first
    failure. Returns the request steps refused because the request is PROVISIONING (deleted later)."""
    tpu = api(settings)
    deferred: list[DeletionStep] = []
    for step in steps:
        if step.action in ("end_job", "delete_firewall_rule"):
            continue  # run before and after these steps (`teardown`)
        try:
            if step.action == "delete_node":
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
            if step.action == "delete_queued_resource" and "PROVISIONING" in exc.message:
                deferred.append(step)  # the API refuses now; `finish_provisioning` deletes it later
                continue
            step.error = exc.message
            break
    return deferred


async def _wait_node_gone(settings: Settings, zone: str, node_id: str) -> None:
    deadline = time.monotonic() + NODE_GONE_TIMEOUT_S
    while time.monotonic() < deadline:
        _, node = await node_external_ip(settings, zone, node_id)
        if node is None:
            return
        await anyio.sleep(2.0)


# ---- endpoint access: the firewall rule and API key made with the TPU go with it ---------------------


async def firewall_steps(
    settings: Settings,
    steps: list[DeletionStep],
    rig_live: list[QueuedResourceView] | None = None,
    *,
    orphan: bool = False,
) -> list[DeletionStep]:
    """The step that deletes the rig's firewall rule (`tpu_devops.provisioning.access`) when ``steps``
    delete the rig's last live queued resource, so the rule goes with the TPU; [] otherwise (another
    live TPU of the rig still needs it, or there is no rule of ours). ``rig_live``: the rig's live queued
    resources when the caller listed every zone already (else they are listed here). ``orphan``: also
    when the rig has no TPU at all (a rule left by a create that never happened). Fails closed: when
    the rig's queued resources cannot be listed, the rule is kept.
    """
    from tpu_devops.provisioning import access
    from tpu_devops.provisioning.queued import list_queued_resources

    deleting = {(s.zone, s.target) for s in steps if s.action == "delete_queued_resource"}
    if not deleting and not (orphan and rig_live == []):
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
    if plan.action == "cleanup":  # FAILED / SUSPENDED requests: nothing works on them, nothing is fenced
        await _execute(settings, plan.steps)
        await _remove_rule(settings, plan)
        return plan.result(dry_run=False, executed=True, message=_outcome(plan, via) + _running_note(plan))
    reason = f"rig '{plan.rig.rig}' is being torn down by destroy_queued_resource ({via})"
    await _end_work(settings, plan, reason)
    deferred = await _execute(settings, plan.steps)
    deferred += await _delete_leftovers(settings, plan)
    followed: tuple[str | None, str | None] = (None, None)
    if deferred:
        followed = finish_provisioning(settings, plan, deferred)
    elif not any(s.error for s in plan.steps):
        await _remove_rule(settings, plan)
    return plan.result(
        dry_run=False, executed=True, message=_outcome(plan, via) + _running_note(plan),
        follow_up_job_id=followed[0], followed_by=followed[1],
    )  # fmt: skip


def _outcome(plan: Plan, via: str) -> str:
    failed = [s for s in plan.steps if s.error]
    if not failed:
        return f"done ({via})"
    return f"stopped at {failed[0].action} {failed[0].target}: {failed[0].error}; the steps after it were not run"


async def _end_work(settings: Settings, plan: Plan, reason: str) -> None:
    """Before deleting: raise the rig's fence (a whole-rig teardown, or one that ends a job that creates),
    end this server's jobs of the plan (each cleans up first), and wait out a create already on its way
    (in any server sharing the state directory). Marks the ``end_job`` steps done, or why not."""
    import os
    import socket

    from tpu_devops.host.jobs import JOBS
    from tpu_devops.provisioning.store import open_store, rig_lease_name, wait_out_create

    store = open_store(settings)
    name = rig_lease_name(settings)
    if plan.whole or any(j.creates for j in plan.jobs):
        by = f"destroy_queued_resource in server pid {os.getpid()} on {socket.gethostname()}"
        await anyio.to_thread.run_sync(store.raise_fence, name, by)
    here = [JOBS.get(j.job_id) for j in plan.jobs if j.here and _known(JOBS, j.job_id)]
    still = await end_jobs(here, reason)
    fence = await wait_out_create(store, name)
    if fence.may_still_land():  # its server died with the create on its way: let it land, to delete it
        await _wait_for_landing(settings, fence)
    for step, job in zip([s for s in plan.steps if s.action == "end_job"], plan.jobs, strict=False):
        if not job.here:
            step.done = True  # fenced: it creates nothing more, and what it made is deleted below
        elif any(r.id == job.job_id for r in still):
            step.error = "still running after the wait (it creates nothing more: the rig is fenced)"
        else:
            step.done = True
    if fence.create_in_flight():
        plan.warnings.append(
            f"a create of this rig in server pid {fence.creating_pid} was still on its way after "
            f"{CREATE_WAIT_NOTE}: run destroy_queued_resource again in a minute to delete what it made"
        )


async def _wait_for_landing(settings: Settings, fence: Any) -> None:
    """Poll the request a dead server's create was making (``fence.creating_target``) until it appears or
    `store.CREATE_LANDING_S` has passed since that create began (then it was never sent)."""
    from tpu_devops.provisioning.cloud import get_queued
    from tpu_devops.provisioning.store import CREATE_LANDING_S

    zone, _, qr_id = str(fence.creating_target).partition("/")
    while time.time() - float(fence.creating_since or 0) < CREATE_LANDING_S:
        try:
            if await get_queued(settings, zone, qr_id) is not None:
                return
        except TpuDevopsError:
            pass
        await anyio.sleep(0.5)


def _known(jobs: Any, job_id: str) -> bool:
    try:
        jobs.get(job_id)
    except TpuDevopsError:
        return False
    return True


async def _delete_leftovers(settings: Settings, plan: Plan) -> list[DeletionStep]:
    """A whole-rig teardown: list the rig again and delete what is live and was not in the plan, when the
    jobs it ended made it (this server's credentials, created since the plan or by a sweep); anything
    else is named, not deleted. Returns the request steps deferred because they are PROVISIONING."""
    if not plan.whole:
        return []
    try:
        state = await rig_state(settings, rig=plan.rig)
    except TpuDevopsError as exc:
        plan.warnings.append(f"could not list the rig again after deleting ({exc.message})")
        return []
    planned = {(s.zone, s.target) for s in plan.steps if s.action == "delete_queued_resource"}
    extra: list[DeletionStep] = []
    for view in state.live:
        if (view.zone, view.id) in planned:
            continue
        created = view.order_key()[0]
        ours = view.created_by_you is not False and (
            view.tool == SWEEP_TOOL or created >= plan.made_at - CLOCK_SLACK_S
        )
        if not ours:
            plan.warnings.append(
                f"{view.where()} appeared since the dry run and was not made by a job this teardown ended: "
                "left alone (destroy_queued_resource again deletes it)"
            )
            continue
        steps = Plan(plan.tool, plan.action, {}, plan.rig, plan.project)
        steps.add(view, state.json_of(view))
        extra += steps.steps
    if not extra:
        return []
    rule = [s for s in plan.steps if s.action == "delete_firewall_rule"]
    plan.steps[:] = [s for s in plan.steps if s.action != "delete_firewall_rule"] + extra + rule
    return await _execute(settings, extra)


class FollowUp(ToolResult):
    """What the teardown's follow-up did: the requests it deleted once they left PROVISIONING, and the
    firewall rule (``rule``: deleted / kept and why / None: none planned)."""

    deleted: list[str]
    not_deleted: list[str] = Field(default_factory=list)
    rule: str | None = None

    @property
    def job_failed(self) -> bool:
        return bool(self.not_deleted)

    def headline(self) -> str:
        done = "; ".join(self.deleted) or "nothing"
        left = f"; NOT DELETED: {'; '.join(self.not_deleted)}" if self.not_deleted else ""
        return f"teardown finished: deleted {done}{left}" + (
            f"; firewall rule {self.rule}" if self.rule else ""
        )


def finish_provisioning(settings: Settings, plan: Plan, deferred: list[DeletionStep]) -> tuple[str, str]:
    """Start the job that deletes the ``deferred`` requests (refused while PROVISIONING) as soon as they
    leave PROVISIONING (node first when it came up), polling every `PROVISIONING_POLL_S` for at most
    `PROVISIONING_WAIT_S`, then the rig's firewall rule when the plan deletes it. Returns (the job's id,
    the sentence naming it)."""
    from tpu_devops.host.jobs import JOBS, Binding
    from tpu_devops.provisioning.rigjobs import queued_target, scope

    async def body(record: Any) -> FollowUp:
        out = FollowUp(deleted=[])
        for step in deferred:
            record.message = f"waiting for {step.target} in {step.zone} to leave PROVISIONING"
            error = await _delete_when_possible(settings, plan.rig, step)
            if error is None:
                step.done = True
                out.deleted.append(f"{step.target} in {step.zone}")
            else:
                out.not_deleted.append(f"{step.target} in {step.zone} ({error})")
        rule = next((s for s in plan.steps if s.action == "delete_firewall_rule"), None)
        if rule is not None:
            await _remove_rule(settings, plan)
            out.rule = "deleted" if rule.done else (rule.error or "kept")
        return out

    first = deferred[0]
    record = JOBS.start(
        "teardown", f"delete {', '.join(f'{s.target} in {s.zone}' for s in deferred)} once out of PROVISIONING", body,
        binding=Binding(scope(settings), queued_target(first.zone, first.target), FOLLOW_UP_LABEL),
    )  # fmt: skip
    return record.id, (
        f"{', '.join(f'{s.target} in {s.zone}' for s in deferred)} is PROVISIONING (the API refuses to delete it now): "
        f"job {record.id} deletes it as soon as it can; poll get_job('{record.id}')"
    )


async def _delete_when_possible(settings: Settings, rig: Rig, step: DeletionStep) -> str | None:
    """Wait until the request leaves PROVISIONING, then delete its node (if it came up) and itself. Returns
    None when deleted (or gone), else why not."""
    from tpu_devops.provisioning.cloud import get_queued
    from tpu_devops.provisioning.queued import state_of

    deadline = time.monotonic() + PROVISIONING_WAIT_S
    while True:
        qr = await get_queued(settings, step.zone, step.target)
        if qr is None:
            return None
        if not rig.is_ours(qr):
            return "it no longer carries this rig's labels; left alone"
        if state_of(qr) != "PROVISIONING":
            break
        if time.monotonic() >= deadline:
            return f"still PROVISIONING after {PROVISIONING_WAIT_S:.0f} s: run destroy_queued_resource again"
        await anyio.sleep(PROVISIONING_POLL_S)
    again = Plan("", "", {}, rig, "")
    again.add(QueuedResourceView.of(qr, step.zone, rig), qr)
    deferred = await _execute(settings, again.steps)
    failed = next((s.error for s in again.steps if s.error), None)
    return failed or ("still PROVISIONING" if deferred else None)


async def _remove_rule(settings: Settings, plan: Plan) -> None:
    """The plan's firewall step, run last and only when no live TPU of the rig is left in any zone
    (listed again now: a TPU never runs without its rule). Fails closed: an unlisted zone keeps it."""
    step = next((s for s in plan.steps if s.action == "delete_firewall_rule"), None)
    if step is None:
        return
    try:
        state = await rig_state(settings, rig=plan.rig)
    except TpuDevopsError as exc:
        step.error = f"kept: the rig could not be listed again ({exc.message})"
        return
    if state.unlisted or state.live:
        left = (
            ", ".join(q.where() for q in state.live) or f"{len(state.unlisted)} zone(s) could not be listed"
        )
        step.error = f"kept: a TPU of the rig may still need it ({left})"
        return
    try:
        await _delete_firewall_rule(settings)
        step.done = True
    except TpuDevopsError as exc:
        step.error = exc.message


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
