"""`check_setup` (its setup and status views): is this project ready, and what is running now.

Each check is independent: one failing never hides the others, and each failure carries its fix.
Checks: the model against the slice (its weights plus one request's KV cache under the HBM cap, and an
instruction-tuned checkpoint for chat and tool calls), Application Default Credentials, project set, TPU
API reachable, Cloud Quotas API reachable,
Hugging Face secret present (metadata only: the token is never read), quota for the configured
accelerator and provisioning model in the configured zone, our current TPUs with cost so far, and
whether the rig's endpoint is reachable from here with its API key (`serving.reachability`).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.config import Settings
from tpu_devops.errors import ConfigError, TpuDevopsError
from tpu_devops.host.results import ToolResult, ViewResult
from tpu_devops.provisioning.cloud import api, call
from tpu_devops.provisioning.plan import hourly_price
from tpu_devops.provisioning.queued import NOT_LIVE_STATES, describe_others, list_queued_resources


class Check(BaseModel):
    """One check: ``ok`` True / False, ``detail`` what was found, ``fix`` when not ok."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


class SetupReport(ToolResult):
    """All checks plus our TPUs. ``ready`` when every check passed."""

    ready: bool
    checks: list[Check]
    our_tpus: list[dict[str, Any]] = Field(default_factory=list)

    def headline(self) -> str:
        bad = [c.name for c in self.checks if not c.ok]
        if bad and bad[0] == "configuration":
            first = self.checks[0]
            return f"CONFIGURATION ERROR: {first.detail}. Fix: {first.fix}; {len(bad)} problem(s): {', '.join(bad)}"
        return "setup OK" if not bad else f"{len(bad)} problem(s): {', '.join(bad)}"


def _adc_check(settings: Settings) -> Check:
    """Credentials found AND accepted: one access token is fetched (`common.verify_credentials`), so a
    revoked or expired key, or a token endpoint this machine cannot reach, fails here with its cause."""
    if settings.gcp_endpoint:
        return Check(
            name="credentials",
            ok=True,
            detail=f"local endpoint {settings.gcp_endpoint}: anonymous credentials",
        )
    from tpu_devops.gcp import common

    try:
        what = common.verify_credentials(settings)
        project = common.adc_project()
    except Exception as exc:  # reported, never raised (typed errors carry their cause and fix)
        if not isinstance(exc, TpuDevopsError):
            exc = TpuDevopsError(f"the credentials could not be used ({type(exc).__name__})")
        return Check(
            name="credentials",
            ok=False,
            detail=exc.message,
            fix=exc.fix or "gcloud auth application-default login",
        )
    return Check(
        name="credentials",
        ok=True,
        detail=f"Application Default Credentials ({what}) got an access token (ADC project: {project or 'none'})",
    )


def _failed(name: str, exc: TpuDevopsError, fix: str | None = None) -> Check:
    """A failed check from the error it raised (its own fix first, else ``fix``)."""
    return Check(name=name, ok=False, detail=exc.message, fix=exc.fix or fix)


async def check_setup(settings: Settings) -> SetupReport:
    """Run every check (see the module docstring), invalid settings first. Never raises for a failed
    check: a check that needs an invalid setting fails with that setting's error."""
    config = [
        Check(name="configuration", ok=False, detail=str(e).split(". Fix: ")[0], fix=e.fix)
        for e in settings.config_errors
    ]
    try:
        report = await _run_checks(settings)
    except ConfigError as exc:  # a later check read an invalid setting
        report = SetupReport(ready=False, checks=[_failed("settings", exc)])
    if not config:
        return report
    return SetupReport(ready=False, checks=config + report.checks, our_tpus=report.our_tpus)


def _model_check(settings: Settings) -> Check:
    """MODEL_NAME on ACCELERATOR_TYPE: does it fit (`tpu_devops.planning.fit`), and is it instruction-tuned
    (`tpu_devops.planning.checkpoint`: the rig serves chat completions and tool calls)?"""
    from tpu_devops.planning.checkpoint import chat_checkpoint
    from tpu_devops.planning.fit import settings_fit

    verdict = settings_fit(settings)
    base = chat_checkpoint(settings.model_name)
    problems, fixes = [], []
    if verdict.fits is False:
        problems.append(verdict.message())
        fixes.append(verdict.fix())
    if base.verdict == "base":
        problems.append(base.warning() or "")
        fixes.append(
            f"set MODEL_NAME={base.suggested}" if base.suggested else "use the instruction-tuned checkpoint"
        )
    if problems:
        return Check(name="model", ok=False, detail="; ".join(problems), fix="; ".join(fixes))
    return Check(name="model", ok=True, detail=verdict.message())


async def _run_checks(settings: Settings) -> SetupReport:
    checks: list[Check] = [await call(_model_check, settings), await call(_adc_check, settings)]
    if not settings.project:
        checks.append(
            Check(
                name="project",
                ok=False,
                detail=f"no project: {settings.project_source}",
                fix="set GOOGLE_CLOUD_PROJECT in tpu.env or in the MCP server's env (hosts such as Gemini CLI do "
                "not pass your shell's), or run: gcloud config set project PROJECT_ID",
            )
        )
        return SetupReport(ready=False, checks=checks)
    checks.append(
        Check(name="project", ok=True, detail=f"{settings.project} (from {settings.project_source})")
    )
    credentials = checks[1]
    if not credentials.ok:
        # every check below calls Google with the same credentials: each would wait for the same token
        # endpoint, or fail with the same refusal, one after the other past the call's budget
        checks.append(
            Check(
                name="google_apis",
                ok=False,
                detail="not checked (TPU API, quota, HF secret, bucket, our TPUs, endpoint): the credentials "
                "failed first",
                fix=credentials.fix,
            )
        )
        return SetupReport(ready=False, checks=checks)
    try:
        zones = await call(api(settings).list_zones)
        ok = settings.zone in zones
        checks.append(
            Check(
                name="tpu_api", ok=ok,
                detail=f"reachable; {len(zones)} TPU locations" + ("" if ok else f"; {settings.zone} is not one of them"),
                fix=None if ok else "pick a zone that offers Cloud TPU (GOOGLE_CLOUD_ZONE)",
            )
        )  # fmt: skip
    except TpuDevopsError as exc:
        checks.append(_failed("tpu_api", exc, "gcloud services enable tpu.googleapis.com"))
    try:
        from tpu_devops.provisioning.quota import zones_with_quota

        scan = await zones_with_quota(settings)
        row = next((z for z in scan.zones if z.zone == settings.zone), None)
        ok = bool(row and row.enough_for_request)
        detail = (
            f"{scan.zone_quota_id} in {settings.zone}: {row.zone_limit if row else 'none'} chip(s); "
            f"{scan.accelerator_type} needs {scan.chips_needed}"
        )
        checks.append(
            Check(
                name="quota",
                ok=ok,
                detail=detail,
                fix=None if ok else "request quota, or use get_zones_with_available_quota to pick a zone",
            )
        )
    except TpuDevopsError as exc:
        checks.append(_failed("quota", exc, "gcloud services enable cloudquotas.googleapis.com"))
    try:
        from tpu_devops.gcp import secrets

        status = await call(secrets.secret_status, settings, settings.hf_secret_id)
        ok = status.exists and status.state == "ENABLED"
        detail = f"secret {settings.hf_secret_id}: " + (
            "missing" if not status.exists else f"latest version {status.state or 'none'}"
        )
        checks.append(Check(name="hf_secret", ok=ok, detail=detail, fix=None if ok else "run save_hf_token"))
    except TpuDevopsError as exc:
        checks.append(_failed("hf_secret", exc, "gcloud services enable secretmanager.googleapis.com"))
    checks.append(await _bucket_check(settings))
    ours: list[dict[str, Any]] = []
    try:
        listing = await list_queued_resources(settings, "all", only_ours=True)
        for q in listing.queued_resources:
            per_hour, source = await hourly_price(settings, q.provisioning_model, q.zone)
            cost = None
            if q.state == "ACTIVE" and per_hour is not None and q.age_s is not None:
                cost = round(per_hour * q.age_s / 3600, 2)
            ours.append(
                {"id": q.id, "zone": q.zone, "state": q.state, "model": q.provisioning_model, "usd_per_hour": per_hour,
                 "price_source": source, "cost_so_far_usd_upper_bound": cost, "holds_quota": q.holds_quota}
            )  # fmt: skip
        live = [
            q for q in listing.queued_resources
            if q.rig == settings.resource_id and q.state not in NOT_LIVE_STATES
        ]  # fmt: skip
        if len(live) > 1:
            checks.append(
                Check(
                    name="our_tpus", ok=False,
                    detail=f"{len(live)} live queued resources of rig '{settings.resource_id}' "
                    f"({describe_others(live)}): each one bills",
                    fix="keep one and delete the others with destroy_queued_resource zone=<zone>",
                )
            )  # fmt: skip
        else:
            checks.append(Check(name="our_tpus", ok=True, detail=f"{len(ours)} queued resource(s) of ours"))
    except TpuDevopsError as exc:
        checks.append(_failed("our_tpus", exc))
    checks.append(await _endpoint_check(settings))
    return SetupReport(ready=all(c.ok for c in checks), checks=checks, our_tpus=ours)


async def _endpoint_check(settings: Settings) -> Check:
    """Is the rig's endpoint reachable from here, and is the API key accepted (`access`)?"""
    from tpu_devops.serving.reachability import endpoint_reachability

    seen = await endpoint_reachability(settings)
    return Check(name="endpoint", ok=seen.ok, detail=seen.detail, fix=seen.fix)


async def _bucket_check(settings: Settings) -> Check:
    """The product bucket (compile cache, staged weights) and the VM's object access on it."""
    from tpu_devops.provisioning.bucket import inspect_bucket

    status = await inspect_bucket(settings)
    if not status.configured:
        return Check(name="bucket", ok=True, detail=status.line())
    missing = not status.exists and status.fix is None  # created before the first TPU: not a problem
    ok = missing or (status.usable and bool(status.vm_access))
    detail = status.line() if status.fix is None else f"bucket gs://{status.name}: {status.detail}"
    return Check(
        name="bucket", ok=ok, detail="; ".join([detail, *status.notes]), fix=None if ok else status.fix
    )


class SystemStatus(ToolResult):
    """One dashboard: configuration, the rig (`tpu_devops.provisioning.rig.RigState`: its queued resources
    in every zone, firewall rule, API key and the jobs working for it, here or in another server), our
    reservation, endpoint, running jobs, recent zone attempts."""

    configuration: dict[str, Any]
    rig: list[str] = Field(default_factory=list, description="the rig in a few lines")
    reservation: dict[str, Any] | None = None
    endpoint: dict[str, Any] | None = None
    warm_boot: list[str] = Field(
        default_factory=list,
        description="the bucket, whether a warm compile cache and staged weights exist, the expected boot "
        "time (seed measurement) and the VM's last reconfigure",
    )
    jobs_running: list[dict[str, Any]] = Field(default_factory=list)
    recent_attempts: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    collected_in_s: float

    def headline(self) -> str:
        res = (self.reservation or {}).get("state") or "no reservation"
        url = (self.endpoint or {}).get("url") or "no endpoint"
        problems = f"; {len(self.problems)} problem(s): {self.problems[0]}" if self.problems else ""
        return (
            f"{self.configuration.get('resource_id')}: {res}; {url}; {len(self.jobs_running)} job(s) running"
            + problems
        )


async def system_status(settings: Settings) -> SystemStatus:
    """Collect the dashboard; a failing part is reported in ``problems``, never raised."""
    from datetime import UTC, datetime

    from tpu_devops.host.jobs import JOBS
    from tpu_devops.provisioning.store import open_store
    from tpu_devops.serving.endpoint import get_vllm_endpoint

    started = time.perf_counter()
    summary = settings.public_summary()
    config = {
        k: summary[k]
        for k in (
            "project",
            "zone",
            "accelerator_type",
            "provisioning_model",
            "resource_id",
            "model_name",
            "vllm_url",
        )
    }
    problems: list[str] = []
    reservation = endpoint = state = None
    rig_lines: list[str] = []
    if settings.project:
        try:
            from tpu_devops.provisioning.rig import reservation_status, rig_state

            state = await rig_state(settings, access=True)
            rig_lines = state.lines()
            status = await reservation_status(settings, state=state)
            reservation = status.model_dump(mode="json")
            if status.several:
                problems.extend(f"reservation: {w}" for w in status.warnings)
            rule = state.firewall
            if settings.external_ip and state.live and rule and rule.error is None and not rule.exists:
                problems.append(
                    f"the rig has a live TPU but no firewall rule ({rule.name}): vLLM's port is closed "
                    "from outside the VPC; destroy_queued_resource and create again put it back"
                )
        except TpuDevopsError as exc:
            problems.append(f"reservation: {exc}")
    else:
        problems.append("GOOGLE_CLOUD_PROJECT is not set: cloud parts skipped")
    try:
        if settings.vllm_url or settings.project:
            endpoint = (await get_vllm_endpoint(settings, state=state)).model_dump(mode="json")
    except TpuDevopsError as exc:
        problems.append(f"endpoint: {exc}")
    warm: list[str] = []
    if settings.project:
        warm = await _warm_lines(settings, reservation)
    jobs = [r.snapshot() for r in JOBS.list() if r.state == "running"]
    elsewhere = [j for j in (state.jobs if state else []) if not j.here]
    recent: list[str] = []
    try:
        store = open_store(settings)
        for a in store.history()[-8:]:
            when = datetime.fromtimestamp(a.at, UTC).strftime("%m-%d %H:%M")
            recent.append(
                f"{when}Z {a.zone} {a.provisioning_model} {a.outcome}"
                + (f" ({a.reason})" if a.reason else "")
            )
    except TpuDevopsError as exc:
        problems.append(f"zone store: {exc}")
    return SystemStatus(
        configuration=config,
        reservation=reservation,
        endpoint=endpoint,
        warm_boot=warm,
        jobs_running=[{"job_id": j["job_id"], "kind": j["kind"], "message": j["message"]} for j in jobs]
        + [{"job_id": j.job_id, "kind": j.label, "message": f"{j.message} ({j.where})"} for j in elsewhere],
        rig=rig_lines,
        recent_attempts=recent,
        problems=problems,
        collected_in_s=round(time.perf_counter() - started, 3),
    )


async def _warm_lines(settings: Settings, reservation: dict[str, Any] | None) -> list[str]:
    """Bucket, warm cache, staged weights, expected boot; the running node's last reconfigure."""
    from tpu_devops.planning.warmboot import warm_state

    lines = (await warm_state(settings)).lines()
    if reservation and reservation.get("state") == "ACTIVE" and reservation.get("node_id"):
        from tpu_devops.provisioning.cloud import api, call
        from tpu_devops.provisioning.reconfigure import GUEST_QUERY, last_reconfigure

        try:
            attrs = await call(
                api(settings).get_guest_attributes, reservation["zone"], reservation["node_id"], GUEST_QUERY
            )
        except TpuDevopsError as exc:
            lines.append(f"the VM's progress could not be read: {exc.message}")
        else:
            if attrs.get("tpu-devops/stage"):
                lines.append(f"VM boot stage: {attrs['tpu-devops/stage']}")
            last = last_reconfigure(attrs)
            if last:
                lines.append(f"last reconfigure {last.generation}: {last.last_stage} ({last.detail})")
    return lines


class SecretSaved(ToolResult):
    """A new version of the Hugging Face token secret. The token itself is never included."""

    secret_id: str
    version: str
    token_length: int
    message: str

    def headline(self) -> str:
        return f"saved a new version of secret '{self.secret_id}' ({self.version}); the token is not shown"


_HF_TOKEN_PREFIX = "hf_"


class _Withheld:
    """Stands in for a secret argument of the wrong type (a list, an object), so that the MCP SDK's
    argument-validation error, which quotes the rejected input, shows only its type."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind} value, not shown>"


def withhold_non_string(value: Any) -> Any:
    """``BeforeValidator`` for a secret tool argument: a string passes on to the shape check (which never
    echoes it); anything else becomes a stand-in that validation rejects without quoting the value."""
    return value if isinstance(value, str) else _Withheld(type(value).__name__)


def check_hf_token_shape(token: str) -> str:
    """Validate a Hugging Face access token's shape (``hf_`` + at least 20 letters/digits) without echoing it.

    Raises:
        InputError: wrong shape; the message shows only the length and whether the prefix is right.
    """
    from tpu_devops.errors import InputError

    value = (token or "").strip()
    body = value[len(_HF_TOKEN_PREFIX) :]
    if not value.startswith(_HF_TOKEN_PREFIX) or len(body) < 20 or not body.isalnum() or not body.isascii():
        shown = f"<redacted: {len(value)} chars, {'starts' if value.startswith(_HF_TOKEN_PREFIX) else 'does not start'} with hf_>"
        raise InputError(
            "not a Hugging Face access token (expected hf_ followed by 20+ letters and digits)",
            field="token",
            value=shown,
            fix="copy a read token from https://huggingface.co/settings/tokens",
        )
    return value


async def save_hf_token(settings: Settings, token: str) -> SecretSaved:
    """Create the HF secret if missing and add ``token`` as a new version. Never echoes or logs it.

    Raises:
        InputError: malformed token. ConfigError: no project. PermissionError_ / CloudError: API refused.
    """
    from tpu_devops.config import require_project
    from tpu_devops.gcp import secrets

    value = check_hf_token_shape(token)
    require_project(settings)
    version = await call(secrets.add_secret_version, settings, settings.hf_secret_id, value)
    return SecretSaved(
        secret_id=settings.hf_secret_id,
        version=version,
        token_length=len(value),
        message="the TPU VM reads it at boot with its own service account (grant it roles/secretmanager.secretAccessor)",
    )


class SetupView(ViewResult):
    """`check_setup`'s answer: the readiness checks (``view="setup"``) or the dashboard (``"status"``)."""

    setup: SetupReport | None = None
    status: SystemStatus | None = None


async def check_setup_view(settings: Settings, view: str) -> SetupView:
    """`check_setup` (``view="setup"``) or `system_status` (``"status"``) as a `SetupView`."""
    if view == "status":
        return SetupView(view=view, status=await system_status(settings))
    return SetupView(view="setup", setup=await check_setup(settings))
