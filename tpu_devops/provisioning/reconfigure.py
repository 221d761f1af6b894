"""`reconfigure_vllm`: new serving flags on the running node, no SSH, the node and its clock kept.

Flow: the overrides are applied as `render_startup_script` applies them (`startup.apply_overrides`),
linted (blocking findings refuse), and compared with what the VM records it serves (guest attribute
``tpu-devops/serving-flags``). A dry run stops there and shows both ``vllm serve`` lines. Otherwise the
new spec (`serving_spec`: image, model, the startup script's ``VLLM_ARGS``, the cache shape key, the
serving-flags record, a new ``generation``) is written to the node's metadata under
`SPEC_ATTRIBUTE` with ``nodes.patch`` and ``updateMask=metadata``. Node.metadata is a map and a mask
path replaces the field whole (TPU v2 discovery document rev. 20261001: "Supported fields:
[description, tags, labels, metadata, ...]"; gcloud's ``tpu-vm`` helper edits the map it read and
patches it back), so the whole map is sent: every key read from the node, ``startup-script``
included, plus ours.

The watcher that the startup script installs (systemd unit ``tpu-devops-watcher``) sees the change on
the metadata server, replaces the container and reports each stage in the guest attribute
``tpu-devops/reconfigure``; when the new flags fail to boot it puts the failed container's log tail in
``tpu-devops/reconfigure-log`` and serves the last flags that served again. The job follows the stages
with ``nodes.getGuestAttributes`` and ends when /health answers and ``/v1/models`` reports the new
``max_model_len`` (and the recorded flags are the new ones), or when the boot failed (with the boot
diagnosis of that log, `tpu_devops.logs.boot`). The node, its IP, the API key and the flex-start clock
stay: nothing is recreated.

Ownership: only the node of this server's rig (labels ``managed-by=tpu-devops``, ``rig=RESOURCE_ID``)
is ever patched; no argument names a node. One reconfigure at a time: a second one while a job of this
server follows one, or while the VM reports an unfinished one, is refused with its id.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import BaseModel, Field

from tpu_devops import names
from tpu_devops.config import Settings
from tpu_devops.errors import ConfigError, NotFoundError, OwnershipError, TpuDevopsError
from tpu_devops.host.results import ToolResult

SPEC_ATTRIBUTE = "tpu-devops-serving"  # node metadata key = instance attribute the watcher waits on
GUEST_QUERY = "tpu-devops/"
STAGES_KEY = "tpu-devops/reconfigure"
LOG_KEY = "tpu-devops/reconfigure-log"
FLAGS_KEY = "tpu-devops/serving-flags"
FEATURES_KEY = "tpu-devops/features"  # written by the startup script at boot: what it can do
JOB_KIND = "reconfigure"
# The watcher's last stage of a reconfigure. pull-failed / not-applied: it stopped before touching the
# serving container (the image could not be pulled, a secret could not be read), which still serves.
TERMINAL = (
    "serving", "rolled-back", "rollback-failed", "rollback-impossible", "refused", "pull-failed", "not-applied",
)  # fmt: skip
_OUTCOMES = {
    "serving": "serving", "rolled-back": "rolled_back", "pull-failed": "unchanged", "not-applied": "unchanged",
    "refused": "unchanged", "rollback-failed": "failed", "rollback-impossible": "failed",
}  # fmt: skip


def outcome_of_stage(stage: str) -> str:
    """The job's outcome for the watcher's terminal ``stage`` (`ReconfigureOutcome.outcome`): ``serving``,
    ``rolled_back``, ``unchanged`` (the old container was never touched and still serves) or ``failed``."""
    return _OUTCOMES.get(stage, "failed")


STALE_AFTER_S = 3 * 3600  # an unfinished reconfigure older than this is taken as abandoned (VM restarted)
# The job reads the VM's stages soon after each change and backs off to POLL_MAX_S while nothing moves:
# a stage often follows another within seconds (pull, cache, start), the engine start takes minutes.
POLL_MIN_S, POLL_MAX_S, POLL_GROWTH = 0.25, 10.0, 1.5
FOLLOW_TIMEOUT_S = 7200.0  # the watcher's own health wait is 3600 s per boot, and a rollback boots again


def serving_spec(settings: Settings, generation: str) -> dict[str, Any]:
    """What the watcher serves: ``{generation, model, image, args, shape_key, record, requested_at}``.

    ``args`` is the startup script's ``VLLM_ARGS`` for these settings (`startup.script_args`), so a
    reconfigure runs exactly what a fresh boot with these settings would.
    """
    from tpu_devops.planning.shapes import shape_key
    from tpu_devops.planning.startup import script_args, serving_flags_record, vllm_serve_flags

    return {
        "generation": generation,
        "model": settings.model_name,
        "image": settings.vllm_image,
        "args": script_args(settings),
        "shape_key": shape_key(vllm_serve_flags(settings)),
        "record": serving_flags_record(settings),
        "requested_at": round(time.time(), 3),
    }


@dataclass(frozen=True)
class RigNode:
    """This rig's ACTIVE node: zone, ids, the node JSON and its endpoint URL (None without an IP)."""

    zone: str
    queued_resource_id: str
    node_id: str
    node: dict[str, Any]
    url: str | None
    creator_warning: str | None = None


async def find_rig_node(settings: Settings) -> RigNode:
    """The one ACTIVE node of this server's rig, found by labels in every zone.

    Raises:
        NotFoundError: no ACTIVE queued resource of the rig. OwnershipError: several, or the node's own
            labels are not this rig's. CloudError: the listing or the node read failed.
    """
    from tpu_devops.provisioning.cloud import node_external_ip
    from tpu_devops.provisioning.queued import list_queued_resources

    listing = await list_queued_resources(settings, "all", only_ours=True)
    active = [q for q in listing.queued_resources if q.rig == settings.resource_id and q.state == "ACTIVE"]
    if not active:
        failed = ", ".join(sorted(listing.errors))
        raise NotFoundError(
            f"rig '{settings.resource_id}' has no ACTIVE TPU to reconfigure"
            + (f" in the zones that could be listed (listing failed in {failed})" if failed else ""),
            field="RESOURCE_ID",
            value=settings.resource_id,
            fix="try again if a zone's listing failed; else create one (find_tpu / create_tpu_queued_resource); "
            "describe_queued_resource shows its state",
        )
    if len(active) > 1:
        raise OwnershipError(
            f"rig '{settings.resource_id}' has {len(active)} ACTIVE TPUs "
            f"({', '.join(f'{q.id} in {q.zone}' for q in active)}): which one to change is ambiguous",
            field="RESOURCE_ID",
            value=settings.resource_id,
            fix="delete the extra one with destroy_queued_resource, then reconfigure",
        )
    q = active[0]
    ip, node = await node_external_ip(settings, q.zone, q.node_id or q.id)
    if node is None:
        raise NotFoundError(
            f"the node of queued resource {q.id} in {q.zone} is gone",
            field="RESOURCE_ID",
            value=settings.resource_id,
            fix="describe_queued_resource shows what happened (a flex-start TPU stops at its run duration)",
        )
    labels = node.get("labels") or {}
    if labels.get("managed-by") != "tpu-devops" or labels.get("rig") != settings.resource_id:
        raise OwnershipError(
            f"node {q.node_id or q.id} does not carry this rig's labels (managed-by=tpu-devops, "
            f"rig={settings.resource_id}): not changing it",
            field="RESOURCE_ID",
            value=settings.resource_id,
            fix="reconfigure only works on nodes this server created",
        )
    return RigNode(
        zone=q.zone,
        queued_resource_id=q.id,
        node_id=q.node_id or q.id,
        node=node,
        url=f"http://{ip}:{settings.vllm_port}" if ip else None,
        # Two installations with one RESOURCE_ID are one rig: replacing the container of a node someone
        # else created interrupts their serving, so say so before acting.
        creator_warning=(
            f"WARNING: {q.where()} was created by someone else (created-by={q.created_by}; another "
            "installation with the same RESOURCE_ID shares this rig): reconfiguring replaces the container "
            "they may be serving from"
            if q.created_by_you is False
            else None
        ),
    )


async def guest_attributes(settings: Settings, rig: RigNode) -> dict[str, str]:
    """The VM's ``tpu-devops/`` guest attributes (``{"tpu-devops/key": value}``)."""
    from tpu_devops.provisioning.cloud import api, call

    return await call(api(settings).get_guest_attributes, rig.zone, rig.node_id, GUEST_QUERY)


def flag_changes(old_argv: list[str], new_argv: list[str]) -> list[str]:
    """``["--max-model-len: 16384 -> 8192", "--x: (unset) -> on", ...]`` between two ``vllm serve`` argv
    lists, read by the linter's parser (`lint.parse_serve_command`: ``--a=b`` and ``--a b`` alike)."""
    from tpu_devops.planning.lint import parse_serve_command

    a = {k: v for k, v in parse_serve_command(shlex.join(old_argv)).flags.items() if not k.startswith("_")}
    b = {k: v for k, v in parse_serve_command(shlex.join(new_argv)).flags.items() if not k.startswith("_")}

    def shown(flags: dict[str, Any], name: str) -> str:
        value = flags.get(name)
        return "(unset)" if name not in flags else ("on" if value is True else str(value))

    return [
        f"--{name}: {shown(a, name)} -> {shown(b, name)}"
        for name in [*a, *(n for n in b if n not in a)]
        if a.get(name) != b.get(name)
    ]


def _running_here(settings: Settings) -> str | None:
    from tpu_devops.provisioning.rigjobs import running_here

    return next((r.id for r in running_here(settings) if r.kind == JOB_KIND), None)


def _unfinished_on_vm(attrs: dict[str, str]) -> str | None:
    """The generation of a reconfigure the VM reports as started and not finished (recent), else None."""
    try:
        data = json.loads(attrs.get(STAGES_KEY) or "{}")
    except ValueError:
        return None
    stages = data.get("stages") or []
    if not stages or stages[-1].get("stage") in TERMINAL:
        return None
    if time.time() - float(stages[-1].get("at") or 0) > STALE_AFTER_S:
        return None
    return str(data.get("generation") or "unknown")


class ReconfigureResult(ToolResult):
    """`reconfigure_vllm`: the change, side by side, and the job that follows it (none for a dry run).

    Times in seconds; ``expected_s`` is a seed measurement where one exists (see ``expected``).
    """

    dry_run: bool
    rig: str
    queued_resource_id: str
    zone: str
    node_id: str
    old_serve_command: str
    old_source: str
    new_serve_command: str
    changes: list[str]
    lint: str
    generation: str | None = None
    job_id: str | None = None
    expected_s: float | None = None
    expected: str
    notes: list[str] = Field(default_factory=list)
    next_step: str

    def headline(self) -> str:
        what = "; ".join(self.changes) or "no change"
        loud = "".join(f" {n}" for n in self.notes if n.startswith("WARNING:"))
        if self.dry_run:
            return f"dry run: reconfigure {self.node_id} in {self.zone}: {what}. {self.next_step}{loud}"
        return f"reconfigure {self.generation} of {self.node_id} in {self.zone} started ({what}): job {self.job_id}. {self.next_step}{loud}"

    def render_text(self) -> str:
        """Headline, then the old and new ``vllm serve`` lines one under the other, then the rest."""
        lines = [
            self.headline(),
            "",
            f"old ({self.old_source}):",
            f"  {self.old_serve_command}",
            "new:",
            f"  {self.new_serve_command}",
            "",
            "changes: " + ("; ".join(self.changes) or "none"),
            f"lint: {self.lint}",
            f"expected: {self.expected}",
        ]
        lines += [f"- {n}" for n in self.notes]
        if self.job_id:
            lines.append(f"job: {self.job_id} (generation {self.generation})")
        return "\n".join(lines)


async def reconfigure_vllm(
    settings: Settings,
    *,
    model_name: str | None = None,
    max_model_len: int | None = None,
    gpu_memory_utilization: float | None = None,
    vllm_image: str | None = None,
    max_num_batched_tokens: int | None = None,
    dry_run: bool = False,
    timeout_s: float = FOLLOW_TIMEOUT_S,
) -> ReconfigureResult:
    """Serve new flags on the rig's running node (see the module docstring).

    Raises:
        ConfigError: an override out of range, a blocking lint finding, an image too old for the model,
            nothing to change, or a reconfigure already running (``value`` is its job id / generation).
        NotFoundError / OwnershipError: no single ACTIVE node of this rig.
        CloudError: the TPU API refused the metadata update.
    """
    from tpu_devops.planning.fit import fit_gate
    from tpu_devops.planning.images import image_gate
    from tpu_devops.planning.lint import lint_vllm_flags
    from tpu_devops.planning.multiengine import engines_in_slice
    from tpu_devops.planning.startup import apply_overrides, vllm_serve_argv

    new = apply_overrides(
        settings, model_name=model_name, max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization, vllm_image=vllm_image,
        max_num_batched_tokens=max_num_batched_tokens,
    )  # fmt: skip
    new_argv = vllm_serve_argv(new)
    lint = lint_vllm_flags(
        command=shlex.join(new_argv), accelerator_type=new.accelerator_type, image=new.vllm_image,
        engines=engines_in_slice(new),
    )  # fmt: skip
    blocking = [f for f in lint.findings if f.severity == "error"]
    if blocking:
        first = blocking[0]
        raise ConfigError(
            "the new flags have blocking lint findings: "
            + "; ".join(
                f"{f.flag or f.id} {f.value or ''}: {f.what_happens}".replace("  ", " ") for f in blocking
            ),
            field=_argument_of(first.flag, first.id),
            value=first.value,
            fix=first.fix,
        )
    image_notes = image_gate(new.vllm_image, new.model_name) + fit_gate(new)  # refuses what cannot fit
    running = _running_here(settings)
    if running:
        raise ConfigError(
            f"a reconfigure of rig '{settings.resource_id}' is already running: job {running}",
            field="job_id",
            value=running,
            fix=f"poll get_job {running} until it ends, then reconfigure again",
        )
    rig = await find_rig_node(settings)
    attrs = await guest_attributes(settings, rig)
    watcher_note = _check_watcher(attrs, rig)
    unfinished = _unfinished_on_vm(attrs)
    if unfinished:
        raise ConfigError(
            f"node {rig.node_id} is still applying reconfigure {unfinished} (its guest attribute {STAGES_KEY})",
            field="job_id",
            value=unfinished,
            fix="wait until its stages end (check_setup(view='status') shows them), then reconfigure again",
        )
    old_argv, old_source = _current_argv(settings, attrs)
    changes = flag_changes(old_argv, new_argv)
    if old_argv[2] != new.model_name:
        changes.insert(0, f"model: {old_argv[2]} -> {new.model_name}")
    old_image = _recorded(attrs).get("image") or settings.vllm_image
    source_change = None
    if old_image != new.vllm_image:
        changes.insert(0, f"image: {old_image} -> {new.vllm_image}")
        source_change = names.source_change(old_image, new.vllm_image)
    expected_s, expected = _expected(settings, new, old_argv)
    notes = [
        *image_notes,
        *(
            f"LINT WARNING {f.flag or f.id}: {f.what_happens}"
            for f in lint.findings
            if f.severity == "warning"
        ),
    ]
    notes.append(
        "the node, its IP, its API key and its flex-start clock stay; if the new flags fail to boot, the VM "
        "serves the last flags that served again"
    )
    if watcher_note:
        notes.append(watcher_note)
    if source_change:
        notes.insert(0, source_change)
    if rig.creator_warning:
        notes.insert(0, rig.creator_warning)
    result = ReconfigureResult(
        dry_run=dry_run, rig=settings.resource_id, queued_resource_id=rig.queued_resource_id, zone=rig.zone,
        node_id=rig.node_id, old_serve_command=shlex.join(old_argv), old_source=old_source,
        new_serve_command=shlex.join(new_argv), changes=changes, lint=lint.headline(), expected_s=expected_s,
        expected=expected, notes=notes, next_step="",
    )  # fmt: skip
    if not changes:
        result.next_step = "nothing to change: the node already serves these flags"
        return result
    if dry_run:
        result.next_step = "run again with dry_run=false to apply"
        return result
    generation = f"rc-{uuid.uuid4().hex[:12]}"
    await _write_spec(settings, rig, serving_spec(new, generation))
    job = _start_follow(settings, new, rig, generation, timeout_s=timeout_s, expected_s=expected_s)
    result.generation, result.job_id = generation, job
    result.next_step = f"poll get_job {job} (job_id='{job}') until it ends"
    return result


def _argument_of(flag: str | None, finding_id: str) -> str:
    """The reconfigure argument a blocking lint finding is about, for the error's field: a flag of the
    serve line names its own argument (``--max-model-len`` -> ``max_model_len``); the image rules, which
    have no flag, are about ``vllm_image``."""
    if flag is None and finding_id.startswith("image-"):
        return "vllm_image"
    if flag == "--model":
        return "model_name"
    return (flag or finding_id).lstrip("-").replace("-", "_")


def _check_watcher(attrs: dict[str, str], rig: RigNode) -> str | None:
    """A note when the VM has reported nothing yet (its watcher starts at the end of the boot).

    Raises:
        ConfigError: the VM runs a startup script without the watcher (made by an older tpu-devops):
            nothing on the node would apply the new flags.
    """
    if "reconfigure-watcher" in attrs.get(FEATURES_KEY, "").split():
        return None
    if not attrs:
        return (
            "the VM has reported nothing yet (still booting?): its watcher applies the flags once it starts"
        )
    raise ConfigError(
        f"node {rig.node_id} runs a startup script without the reconfigure watcher (created by an older "
        "tpu-devops): nothing on the VM would apply new flags",
        field="RESOURCE_ID",
        value=rig.node_id,
        fix="recreate the TPU so it boots the current startup script (destroy_queued_resource, then "
        "create_tpu_queued_resource or find_tpu); later changes then need no new TPU",
    )


def _recorded(attrs: dict[str, str]) -> dict[str, Any]:
    try:
        data = json.loads(attrs.get(FLAGS_KEY) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _current_argv(settings: Settings, attrs: dict[str, str]) -> tuple[list[str], str]:
    from tpu_devops.planning.startup import vllm_serve_argv

    argv = _recorded(attrs).get("argv")
    if isinstance(argv, list) and len(argv) >= 3 and all(isinstance(a, str) for a in argv):
        return list(argv), f"recorded by the VM in guest attribute {FLAGS_KEY}"
    return vllm_serve_argv(settings), "as configured (the VM has not recorded its flags yet)"


def _expected(settings: Settings, new: Settings, old_argv: list[str]) -> tuple[float | None, str]:
    from tpu_devops.planning.startup import vllm_serve_flags
    from tpu_devops.planning.warmboot import (
        CONTAINER_REPLACE_S,
        ENGINE_START_S,
        SEED_ACCELERATOR,
        SEED_MODEL,
        shape_key,
    )

    same_shape = shape_key(old_argv[3:]) == shape_key(vllm_serve_flags(new)) and old_argv[2] == new.model_name
    measured = new.accelerator_type == SEED_ACCELERATOR and new.model_name == SEED_MODEL
    if not measured:
        return None, (
            f"one engine start on the same node (no seed measurement for {new.model_name} on "
            f"{new.accelerator_type}; on v5e-1 E2B: {CONTAINER_REPLACE_S} s)"
        )
    if same_shape:
        return CONTAINER_REPLACE_S, (
            f"about {CONTAINER_REPLACE_S} s: one engine start with the compile cache warm (seed measurement, "
            "v5e-1, vllm-tpu v0.30.0); no new capacity request, the flex-start clock keeps running"
        )
    return ENGINE_START_S, (
        f"{CONTAINER_REPLACE_S}-{ENGINE_START_S:.0f} s: the shape flags changed, so the engine start compiles "
        "unless the bucket holds a cache for them (seed measurements, v5e-1 E2B: warm restart 503.54 s, cold "
        "engine start 814 s of which XLA compile 738 s)"
    )


async def _write_spec(settings: Settings, rig: RigNode, spec: dict[str, Any]) -> None:
    from tpu_devops.provisioning.cloud import api, call

    metadata = {str(k): str(v) for k, v in (rig.node.get("metadata") or {}).items()}
    metadata[SPEC_ATTRIBUTE] = json.dumps(spec, separators=(",", ":"))
    await call(api(settings).set_node_metadata, rig.zone, rig.node_id, metadata)


# ---- the job ----------------------------------------------------------------------------------


class ReconfigureOutcome(ToolResult):
    """How a reconfigure ended. ``outcome``: ``serving`` (the new flags serve), ``rolled_back`` (they
    failed to boot; the last flags that served answer again), ``unchanged`` (refused, or stopped before
    the serving container was touched: the image could not be pulled, a secret could not be read; the old
    flags still serve), ``failed`` (the rollback failed too, or nothing served before), ``timeout``,
    ``gone`` (the node was deleted meanwhile). ``stages``: as the VM reported them, in order (``at`` in Unix seconds)."""

    outcome: str
    generation: str
    node_id: str
    zone: str
    serving_command: str | None = None
    stages: list[dict[str, Any]]
    verified: dict[str, Any] = Field(default_factory=dict)
    failure: str | None = None
    root_cause: dict[str, str] | None = None
    old_flags_serve_again: bool | None = None
    next_step: str

    @property
    def job_failed(self) -> bool:
        """The job reports failure for anything but the new flags serving."""
        return self.outcome != "serving"

    def headline(self) -> str:
        if self.outcome == "serving":
            check = "verified" if self.verified.get("ok") else "not verified from here"
            return f"reconfigure {self.generation}: the new flags serve on {self.node_id} ({check}). {self.next_step}"
        if self.outcome == "rolled_back":
            return (
                f"reconfigure {self.generation} FAILED: {self.failure}; rolled back: the old flags serve again"
                + ("" if self.old_flags_serve_again else " (not verified from here)")
                + f". {self.next_step}"
            )
        if self.outcome == "unchanged":
            return (
                f"reconfigure {self.generation} NOT APPLIED: {self.failure}; nothing was changed, the old flags "
                f"still serve. {self.next_step}"
            )
        return f"reconfigure {self.generation} {self.outcome.upper()}: {self.failure}. {self.next_step}"

    def render_text(self) -> str:
        """Headline, the stages in order, the checks, the root cause."""
        lines = [self.headline(), "stages:"]
        start = self.stages[0]["at"] if self.stages else 0
        lines += [f"  +{s['at'] - start:6.1f}s {s['stage']}: {s.get('detail', '')}" for s in self.stages]
        if self.verified:
            lines.append("checks: " + ", ".join(f"{k}={v}" for k, v in self.verified.items()))
        if self.root_cause:
            lines.append(f"root cause: {self.root_cause['title']}")
            lines.append(f"  cause: {self.root_cause['cause']}")
            lines.append(f"  fix: {self.root_cause['fix']}")
        if self.serving_command:
            lines.append(f"serving: {self.serving_command}")
        return "\n".join(lines)


def _start_follow(
    settings: Settings,
    new: Settings,
    rig: RigNode,
    generation: str,
    *,
    timeout_s: float,
    expected_s: float | None = None,
) -> str:
    from tpu_devops.host.jobs import JOBS
    from tpu_devops.provisioning.rigjobs import reconfigure_binding

    async def body(record: Any) -> ReconfigureOutcome:
        return await follow(settings, new, rig, generation, record, timeout_s=timeout_s)

    record = JOBS.start(
        JOB_KIND, f"reconfigure {rig.node_id} in {rig.zone} (generation {generation})", body,
        binding=reconfigure_binding(settings, rig.zone, rig.node_id, expected_s),
    )  # fmt: skip
    record.progress = {"rig": settings.resource_id, "generation": generation, "stages": []}
    return record.id


def _stages(attrs: dict[str, str], generation: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(attrs.get(STAGES_KEY) or "{}")
    except ValueError:
        return []
    if data.get("generation") != generation:
        return []
    return [s for s in data.get("stages") or [] if isinstance(s, dict) and "stage" in s]


async def follow(
    settings: Settings,
    new: Settings,
    rig: RigNode,
    generation: str,
    record: Any,
    *,
    timeout_s: float,
) -> ReconfigureOutcome:
    """Job body: poll the VM's stages until a terminal one, then check the endpoint (see the module doc).

    Polls `POLL_MIN_S` after each new stage, growing by `POLL_GROWTH` up to `POLL_MAX_S` while none comes.
    A node that is gone (a teardown, a flex-start TPU at its run duration) ends the job at once, saying
    so (outcome ``gone``), instead of retrying its reads until ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    interval = POLL_MIN_S
    stages: list[dict[str, Any]] = []
    attrs: dict[str, str] = {}
    while True:
        try:
            attrs = await guest_attributes(settings, rig)
        except TpuDevopsError as exc:
            if isinstance(exc, NotFoundError) and await _node_gone(settings, rig):
                return ReconfigureOutcome(
                    outcome="gone", generation=generation, node_id=rig.node_id, zone=rig.zone, stages=stages,
                    failure=f"node {rig.node_id} in {rig.zone} is gone (torn down, or its flex-start run ended): "
                    "nothing serves there any more",
                    next_step="describe_queued_resource shows what the rig holds; create a TPU again to serve",
                )  # fmt: skip
            record.message = f"reading the VM's stages failed ({exc.message}); retrying"
        else:
            fresh = _stages(attrs, generation)
            interval = POLL_MIN_S if len(fresh) > len(stages) else min(POLL_MAX_S, interval * POLL_GROWTH)
            stages = fresh or stages
            record.progress = {
                "rig": settings.resource_id, "generation": generation,
                "stages": [s["stage"] for s in stages],
            }  # fmt: skip
            if stages:
                last = stages[-1]
                record.message = f"{last['stage']}: {last.get('detail', '')}"[:300]
                if last["stage"] in TERMINAL:
                    break
            else:
                record.message = "waiting for the VM's watcher to pick up the new flags"
        if time.monotonic() >= deadline:
            return ReconfigureOutcome(
                outcome="timeout", generation=generation, node_id=rig.node_id, zone=rig.zone, stages=stages,
                failure=f"no final stage after {timeout_s:.0f} s",
                next_step="check_setup(view='status') shows the VM's stages; get_cloud_logging_logs(log='container') shows the container",
            )  # fmt: skip
        await anyio.sleep(interval)
    return await _conclude(settings, new, rig, generation, stages, attrs)


async def _node_gone(settings: Settings, rig: RigNode) -> bool:
    """The node no longer exists (read again: a 404 from the guest attributes alone could be a blip)."""
    from tpu_devops.provisioning.cloud import node_external_ip

    try:
        _, node = await node_external_ip(settings, rig.zone, rig.node_id)
    except TpuDevopsError:
        return False
    return node is None


async def _conclude(
    settings: Settings,
    new: Settings,
    rig: RigNode,
    generation: str,
    stages: list[dict[str, Any]],
    attrs: dict[str, str],
) -> ReconfigureOutcome:
    from tpu_devops.planning.startup import vllm_serve_flags

    last = stages[-1]["stage"]
    recorded = _recorded(attrs)
    out = ReconfigureOutcome(
        outcome="serving", generation=generation, node_id=rig.node_id, zone=rig.zone, stages=stages,
        serving_command=shlex.join(recorded["argv"]) if isinstance(recorded.get("argv"), list) else None,
        next_step="",
    )  # fmt: skip
    if last == "serving":
        out.verified = await verify_endpoint(settings, rig, new)
        out.verified["recorded_flags_match"] = recorded.get("flags") == vllm_serve_flags(new)
        out.next_step = (
            "done"
            if out.verified.get("ok")
            else "the VM reports serving; check the endpoint with verify_model_health"
        )
        return out
    detail = str(stages[-1].get("detail", ""))
    failed = next((s for s in reversed(stages) if s.get("stage") in ("boot-failed", "failed")), None)
    cause = f": {failed.get('detail')}" if failed and failed.get("detail") else ""
    out.failure = {
        "rolled-back": f"the new flags did not boot{cause}",
        "rollback-failed": f"the new flags did not boot{cause}, and the last flags that served did not boot again either",
        "rollback-impossible": f"the new flags did not boot{cause}, and no flags have served on this node before",
        "refused": f"the VM refused the spec ({detail})",
        "pull-failed": f"the image could not be pulled ({detail.split('; nothing was changed')[0]})",
        "not-applied": f"the change stopped before the container was replaced ({detail.split('; nothing was changed')[0]})",
    }[last]  # fmt: skip
    if last not in ("pull-failed", "not-applied", "refused"):
        out.root_cause, diagnosis = _diagnose(attrs.get(LOG_KEY) or "")
        if diagnosis:
            out.failure += f" ({diagnosis})"
    out.outcome = outcome_of_stage(last)
    if out.outcome == "unchanged":
        check = await verify_endpoint(settings, rig, None)
        out.verified = check
        out.old_flags_serve_again = bool(check.get("health"))
        out.next_step = (
            "fix the image tag (it must exist in the registry, e.g. vllm/vllm-tpu:v0.30.0) and reconfigure again"
            if last == "pull-failed"
            else "fix what the failure names and reconfigure again"
        )
        return out
    if last == "rolled-back":
        out.outcome = "rolled_back"
        old = recorded.get("argv")
        check = await verify_endpoint(settings, rig, None)
        out.verified = check
        out.old_flags_serve_again = bool(check.get("health")) and isinstance(old, list)
        out.next_step = (
            "fix the flags (see the root cause) and reconfigure again; the node keeps serving the old ones"
        )
    else:
        out.outcome = "failed"
        out.next_step = "the node serves nothing now: reconfigure with flags that boot (see the root cause)"
    return out


def _diagnose(log_text: str) -> tuple[dict[str, str] | None, str | None]:
    """(root cause {title, cause, fix}, the diagnosis headline) of the failed container's log tail."""
    if not log_text.strip():
        return None, None
    from tpu_devops.logs.boot import diagnose_boot_text

    diagnosis = diagnose_boot_text(
        log_text, source=f"guest attribute {LOG_KEY} (the failed container's log tail)"
    )
    rc = diagnosis.root_cause
    root = {"title": rc.title, "cause": rc.cause, "fix": rc.fix} if rc else None
    return root, diagnosis.headline()


async def verify_endpoint(settings: Settings, rig: RigNode, new: Settings | None) -> dict[str, Any]:
    """/health and ``/v1/models`` on the rig's node, with this server's key (`api_key.key_for_calls`):
    ``{"url", "health": bool, "served_model", "max_model_len", "ok": bool, "error"?}``. With ``new``,
    ``ok`` also needs its model and ``max_model_len`` (when set) in the model card."""
    from tpu_devops.provisioning.api_key import key_for_calls
    from tpu_devops.serving.client import http_client, probe_timeout
    from tpu_devops.serving.models import served_models

    if not rig.url:
        return {"ok": False, "error": "the node has no external IP"}
    out: dict[str, Any] = {"url": rig.url}
    try:
        health = await http_client(rig.url).get("/health", timeout=probe_timeout())
        out["health"] = health.status_code == 200
        cards = await served_models(rig.url, api_key=(await key_for_calls(settings)).value)
    except Exception as exc:  # a ServingError or a transport failure: reported, the VM's word stands
        out.update(ok=False, error=str(getattr(exc, "message", None) or exc)[:300])
        return out
    card = cards[0] if cards else {}
    out["served_model"] = card.get("id")
    out["max_model_len"] = card.get("max_model_len")
    want = new.max_model_len if new else None
    out["ok"] = bool(out["health"]) and (
        new is None
        or (card.get("id") == new.model_name and (want is None or card.get("max_model_len") == want))
    )
    return out


class ReconfigureStatus(BaseModel):
    """The VM's last reconfigure as the dashboard shows it."""

    generation: str | None = None
    last_stage: str | None = None
    detail: str | None = None


def last_reconfigure(attrs: dict[str, str]) -> ReconfigureStatus | None:
    """The last reconfigure the VM reported, or None."""
    try:
        data = json.loads(attrs.get(STAGES_KEY) or "{}")
    except ValueError:
        return None
    stages = data.get("stages") or []
    if not stages:
        return None
    return ReconfigureStatus(
        generation=data.get("generation"), last_stage=stages[-1].get("stage"), detail=stages[-1].get("detail")
    )
