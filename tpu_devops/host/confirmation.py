"""Who may approve a deletion: a person, or the operator's standing configuration. Never the model alone.

A host model can pass any argument (``confirm=true``), echo anything a result showed it (a token, an
exact call) and, on an auto-approving host (Qwen Code ``--yolo``, ``claude -p --allowedTools``, Gemini
CLI with ``trust``), call tools with nobody looking. So nothing a tool result hands the model can be
enough to delete. The rule every destructive tool applies (`decide`):

1. A call deletes only when it says so (``confirm=true`` or ``dry_run=false``).
2. **A person**: where the host can ask (MCP form elicitation), the server asks, and only an accepted
   answer that carries the rig's name, typed by the person, confirms (`Confirmation`). A host that
   answers by itself (an auto-accepting hook, defaults, ``confirm: true``) cannot type it, so its
   "accept" is not taken as a person: it falls to rule 3. The operator can stop trusting a host's
   answers at all with ``TPU_DEVOPS_ELICITATION=off`` (a host that lets its model fill in forms).
3. **The operator's standing permission**: ``TPU_DEVOPS_UNATTENDED_DELETE=<RESOURCE_ID>`` in tpu.env or
   the server's environment (set beforehand, by the operator, for this rig only) lets a model complete a
   deletion alone; it still needs the token of a dry run of exactly that plan (proof of *which* plan,
   never of a person). Anchors: awslabs' MCP servers refuse writes without ``--allow-write``; gke-mcp
   registers its delete tools only when enabled.
4. Otherwise nothing is deleted, and the refusal says exactly how the person deletes: when asked, by
   typing the rig's name; with the gcloud / kubectl commands of that plan (`Deletion.commands`); or by
   setting the standing permission. Dry runs hand out tokens only under the standing permission, and
   a refusal never hands out one.

Tokens: 80 random bits (`secrets.token_bytes`), shown as 16 lowercase base32 characters; valid
`TOKEN_TTL_S` (10 minutes); single use (redeemed in the transaction that checks it); bound to the plan
(`plan_digest`: the tool, the action, the project, the rig and every step with its target and zone, so a
changed plan refuses it). They live in ``<state_dir>/confirmations.sqlite3`` (only their SHA-256), so a
dry run in one server process and the deletion in the next (``gemini -p`` starts one per prompt) agree.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tpu_devops.errors import TpuDevopsError

TOKEN_TTL_S = 600
DB_NAME = "confirmations.sqlite3"


class ConfirmationError(TpuDevopsError):
    """A destructive call was not confirmed (no token, a stale or foreign token, or a declined question);
    nothing was deleted."""

    kind = "confirmation"


def plan_digest(tool: str, action: str, project: str, rig: str, steps: list[tuple[str, str, str]]) -> str:
    """SHA-256 (hex) of a deletion plan: ``steps`` are (action, target, zone), order-independent."""
    doc = {"tool": tool, "action": action, "project": project, "rig": rig, "steps": sorted(steps)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _hash(token: str) -> str:
    return hashlib.sha256(token.strip().lower().encode()).hexdigest()


@dataclass(frozen=True)
class Issued:
    """A token as shown to the user: the token text and how long it stays valid (seconds)."""

    token: str
    expires_in_s: int


class TokenStore:
    """Issued tokens under ``state_dir``. Safe across processes (SQLite WAL, atomic redeem)."""

    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS tokens (token_hash TEXT PRIMARY KEY, digest TEXT NOT NULL,"
                " summary TEXT NOT NULL, issued_at REAL NOT NULL, expires_at REAL NOT NULL, used_at REAL)"
            )

    def _connect(self) -> Any:
        from tpu_devops.host.sqlite import connect

        return connect(self.path)

    def issue(self, digest: str, summary: str, ttl_s: float = TOKEN_TTL_S) -> Issued:
        """A new token for the plan ``digest`` (``summary``: the plan in words, quoted if it is misused)."""
        token = base64.b32encode(secrets.token_bytes(10)).decode().lower()
        now = time.time()
        with self._connect() as db:
            db.execute("DELETE FROM tokens WHERE expires_at < ?", (now - 86400,))
            db.execute(
                "INSERT INTO tokens (token_hash, digest, summary, issued_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                (_hash(token), digest, summary[:2000], now, now + ttl_s),
            )
        return Issued(token, int(ttl_s))

    def redeem(self, token: str, digest: str) -> None:
        """Use ``token`` for the plan ``digest`` (once). Returns when valid; the token is then spent.

        Raises:
            ConfirmationError: unknown (mistyped or never issued), expired, already used, or issued for
                a different plan (its message quotes that plan). ``fix`` is left to the caller, which
                knows the call to repeat.
        """
        now = time.time()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT digest, summary, expires_at, used_at FROM tokens WHERE token_hash = ?",
                    (_hash(token),),
                ).fetchone()
                problem = _problem(row, digest, now)
                if problem is None:
                    db.execute("UPDATE tokens SET used_at = ? WHERE token_hash = ?", (now, _hash(token)))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        if problem is not None:
            raise ConfirmationError(problem, field="confirm_token", value=token[:32])


def _problem(row: tuple[str, str, float, float | None] | None, digest: str, now: float) -> str | None:
    if row is None:
        return "no dry run issued this confirmation token (mistyped, or made up)"
    issued_digest, summary, expires_at, used_at = row
    if used_at is not None:
        return "this confirmation token was already used (each token confirms one deletion once)"
    if expires_at <= now:
        return f"this confirmation token expired {now - expires_at:.0f} s ago (tokens last {TOKEN_TTL_S // 60} min)"
    if issued_digest != digest:
        return f"this confirmation token was issued for a different deletion ({summary}); what would be deleted has changed since that dry run"
    return None


# ---- the confirmation rule, shared by every destructive tool -------------------------------------------

UNATTENDED_VARIABLE = "TPU_DEVOPS_UNATTENDED_DELETE"
ELICITATION_VARIABLE = "TPU_DEVOPS_ELICITATION"


@dataclass(frozen=True)
class Policy:
    """The operator's standing configuration for deletions (`tpu_devops.config.Settings.deletion_policy`).

    ``unattended``: ``TPU_DEVOPS_UNATTENDED_DELETE`` names this rig, so a dry run's token completes a
    deletion without a person. ``ask``: a host's answer to the server's question counts as a person's
    (``TPU_DEVOPS_ELICITATION``, on by default)."""

    unattended: bool = False
    ask: bool = True


class Confirmation(BaseModel):
    """The person's answer to "delete these resources now?" (an MCP elicitation form). The rig's name must
    be typed: a host that answers for the user (defaults, an auto-accepting hook) cannot."""

    rig: str = Field(
        default="",
        max_length=200,
        title="Rig name",
        description="Type the rig's name to delete; anything else deletes nothing",
    )


class NotAsked(BaseModel):
    """A confirmation resolver did not ask the user (a dry run, nothing to delete, or no elicitation);
    ``can_ask``: whether this host could have been asked (it supports elicitation and the operator takes
    its answers)."""

    reason: str = "not asked"
    can_ask: bool = False


def wants_deletion(dry_run: bool | None, confirm: bool, confirm_token: str | None) -> bool:
    """Whether a call asks to delete: ``dry_run=false``, or (``dry_run`` omitted) ``confirm=true`` or a
    token. An explicit ``dry_run=true`` always means a dry run."""
    if dry_run is not None:
        return not dry_run
    return bool(confirm or confirm_token)


def quoted(value: str) -> str:
    """An argument value as the exact call shows it: ``"us-west4-a"``."""
    return f'"{value}"'


@dataclass
class Deletion:
    """What a destructive call would do, as the confirmation rule sees it: the ``tool`` and its
    ``action``, the ``project`` and ``rig``, every step as (action, target, where), the call's own
    arguments (``args``, values quoted) so that the exact call can be repeated, warnings to show, and
    ``commands``: how a person deletes exactly this without this server (gcloud / kubectl lines)."""

    tool: str
    action: str
    project: str
    rig: str
    steps: list[tuple[str, str, str]]
    args: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    @property
    def digest(self) -> str:
        return plan_digest(self.tool, self.action, self.project, self.rig, self.steps)

    def summary(self) -> str:
        """``delete_node gemma4-e2b (us-west4-a); delete_queued_resource ...`` (or ``nothing``)."""
        return "; ".join(f"{a} {t} ({w})" for a, t, w in self.steps) or "nothing"

    def call(self, **extra: str) -> str:
        """The exact call that repeats this deletion with ``extra`` arguments (e.g. the token)."""
        args = {**self.args, **extra}
        return f"{self.tool}({', '.join(f'{k}={v}' for k, v in args.items())})"

    def question(self) -> str:
        """The elicitation question: the exact steps, every warning, and what to type."""
        lines = [f"{a} {t} ({w})" for a, t, w in self.steps] or ["nothing"]
        return (
            f"Delete these resources of rig '{self.rig}' (this server's only)?\n"
            + "\n".join(lines + [f"WARNING: {w}" for w in self.warnings])
            + f"\nTo delete them, type the rig's name, {self.rig}, and accept. Decline to keep them."
        )

    def yourself(self) -> str:
        """``run yourself: gcloud ...; gcloud ...`` (empty when there are no commands)."""
        return "run yourself: " + "; ".join(self.commands) if self.commands else ""


def token_store(state_dir: str | Path) -> TokenStore:
    """The `TokenStore` under ``state_dir``.

    Raises:
        ConfigError: the directory is not writable (field ``TPU_DEVOPS_STATE_DIR``).
    """
    from tpu_devops.errors import ConfigError

    try:
        return TokenStore(state_dir)
    except OSError as exc:
        raise ConfigError(
            f"cannot keep confirmation tokens in the state directory: {exc.strerror}",
            field="TPU_DEVOPS_STATE_DIR",
            value=str(state_dir),
            fix="point TPU_DEVOPS_STATE_DIR at a writable directory",
        ) from None


def can_ask(outcome: Any) -> bool:
    """Whether the resolver's ``outcome`` says this host could ask the person (`NotAsked.can_ask`, or an
    elicitation that was sent)."""
    from mcp.server.elicitation import AcceptedElicitation

    data = getattr(outcome, "data", None)
    if isinstance(data, NotAsked):
        return data.can_ask
    return isinstance(outcome, AcceptedElicitation) and isinstance(data, Confirmation)


def _opt_in(deletion: Deletion) -> str:
    return (
        f"set {UNATTENDED_VARIABLE}={deletion.rig} in tpu.env or the server's environment and restart it "
        "(a standing permission: a model may then delete this rig's resources with a dry run's token)"
    )


def dry_run_fields(state_dir: str | Path, deletion: Deletion, policy: Policy, outcome: Any) -> dict[str, Any]:
    """What a dry run with something to delete answers, for the result models of every destructive tool:
    ``message`` (how to delete exactly this), ``how_to_delete`` (the person's commands), ``next_call`` and,
    only under the standing permission, ``confirm_token`` / ``confirm_token_expires_in_s``."""
    fields: dict[str, Any] = {"how_to_delete": list(deletion.commands)}
    if policy.unattended:
        issued = token_store(state_dir).issue(deletion.digest, deletion.summary())
        fields |= {
            "confirm_token": issued.token,
            "confirm_token_expires_in_s": issued.expires_in_s,
            "next_call": deletion.call(confirm="true", confirm_token=quoted(issued.token)),
        }
        fields["message"] = (
            f"To delete exactly this, call {fields['next_call']} within {issued.expires_in_s // 60} min "
            f"(single use; {UNATTENDED_VARIABLE} allows it without asking)"
        )
        return fields
    if policy.ask and can_ask(outcome):
        fields["next_call"] = deletion.call(confirm="true")
        fields["message"] = (
            f"To delete it, call {fields['next_call']}: your MCP host asks you, and you type the rig's name "
            f"({deletion.rig}) to confirm"
        )
        return fields
    fields["next_call"] = None
    fields["message"] = (
        "This host cannot ask you, and this server takes no deletion from a model alone. To delete it, "
        + "; or ".join(x for x in (deletion.yourself(), _opt_in(deletion)) if x)
    )
    return fields


def needs_person(deletion: Deletion, why: str, *, asked: bool) -> ConfirmationError:
    """Nothing was deleted, for a deletion without a person or a standing permission: the reason, the plan,
    and exactly how the person deletes (no token: nothing in it lets the model try again by itself)."""
    ways = [
        f"call {deletion.call(confirm='true')} again and type {deletion.rig} when your host asks"
        if asked
        else "use a host that asks you (MCP elicitation: Claude Code in a terminal session)",
        deletion.yourself(),
        _opt_in(deletion),
    ]
    return ConfirmationError(
        f"nothing was deleted: {why}; a deletion needs you or the operator's standing permission, never the "
        f"model alone ({UNATTENDED_VARIABLE} is not set for rig '{deletion.rig}'). It would delete: "
        f"{deletion.summary()}",
        field="confirm",
        fix="; or ".join(w for w in ways if w),
    )


def declined() -> ConfirmationError:
    """The user said no when asked."""
    return ConfirmationError(
        "nothing was deleted: you declined the confirmation",
        fix="none needed; call it again when you want the deletion",
    )


def _typed(answer: Confirmation, rig: str) -> bool:
    return answer.rig.strip().lower() == rig.lower()


def decide(
    state_dir: str | Path, deletion: Deletion, outcome: Any, confirm_token: str | None, policy: Policy
) -> str:
    """Whether a call that wants ``deletion`` may proceed (the module docstring's rule); returns how it
    was confirmed.

    ``outcome`` is the resolver's: an accepted `Confirmation` (the host asked), `NotAsked` (it could not
    be asked), or a declined / cancelled elicitation. Only an accepted answer carrying the rig's name is
    a person's; otherwise only ``policy.unattended`` with a valid token of a dry run of exactly this
    deletion proceeds, once.

    Raises:
        ConfirmationError: declined (a token given with it is spent); no person and no standing
            permission (the fix says how the person deletes); or, under the standing permission, no
            valid token (the fix names the dry run that gives one).
    """
    from mcp.server.elicitation import AcceptedElicitation, DeclinedElicitation

    data = getattr(outcome, "data", None)
    answer = data if isinstance(outcome, AcceptedElicitation) and isinstance(data, Confirmation) else None
    asked = answer is not None
    if answer is not None and _typed(answer, deletion.rig):
        return "confirmed by you when asked, with the rig's name typed"
    if isinstance(outcome, DeclinedElicitation):
        if confirm_token:
            with contextlib.suppress(ConfirmationError):  # spent, so the declined deletion cannot be replayed
                token_store(state_dir).redeem(confirm_token, deletion.digest)
        raise declined()
    if answer is not None:
        typed = answer.rig.strip()
        why = (
            "your host accepted the question without the rig's name (a host or hook that answers by itself "
            "is not you)"
            if not typed
            else f"the answer carried {typed[:40]!r}, not the rig's name '{deletion.rig}'"
        )
    elif isinstance(answer, NotAsked):
        why = (
            f"answers through the MCP host are not taken ({ELICITATION_VARIABLE}=off)"
            if not policy.ask
            else "this host cannot ask you (no MCP elicitation)"
        )
    else:
        why = (
            "this host could not ask you (its confirmation request was cancelled; headless runs such as "
            "`gemini -p` or `claude -p` cannot ask)"
        )
    if not policy.unattended:
        raise needs_person(deletion, why, asked=asked)
    if not confirm_token:
        raise ConfirmationError(
            f"nothing was deleted: {why}, and the standing permission ({UNATTENDED_VARIABLE}) takes only the "
            f"token of a dry run of exactly this deletion. It would delete: {deletion.summary()}",
            field="confirm_token",
            fix=f"call {deletion.call(dry_run='true')}, check the plan, then make the exact call it names",
        )
    try:
        token_store(state_dir).redeem(confirm_token, deletion.digest)
    except ConfirmationError as exc:
        raise ConfirmationError(
            f"nothing was deleted: {exc.message}. It would delete: {deletion.summary()}",
            field="confirm_token",
            value=exc.value,
            fix=f"call {deletion.call(dry_run='true')} for the current plan and a fresh token",
        ) from None
    return f"confirmed by the standing permission {UNATTENDED_VARIABLE} and the dry run's token"


# ---- resolvers: ask the user where the host can -----------------------------------------------------

# The plan a resolver built (and asked the user about) for this call, keyed by the call's arguments; the
# tool body executes exactly it and takes it out, so no later call can pick it up.
_HELD: contextvars.ContextVar[tuple[tuple[Any, ...], Any] | None] = contextvars.ContextVar(
    "tpu_devops_confirmation_plan", default=None
)


def take_plan(key: tuple[Any, ...]) -> Any:
    """The plan the resolver of this call built for ``key`` (None when there is none), taken out."""
    held = _HELD.get()
    _HELD.set(None)
    return held[1] if held is not None and held[0] == key else None


def can_elicit(ctx: Any) -> bool:
    """The client declared form elicitation (a bare ``elicitation: {}`` counts, as the SDK treats it)."""
    caps = getattr(ctx, "client_capabilities", None)
    elicitation = getattr(caps, "elicitation", None) if caps is not None else None
    return elicitation is not None and (
        getattr(elicitation, "form", None) is not None or getattr(elicitation, "url", None) is None
    )


async def resolve(
    ctx: Any, key: tuple[Any, ...], wants: bool, make_plan: Any, deletion_of: Any, policy: Policy
) -> Any:
    """The body of a destructive tool's confirmation resolver (mcp ``Resolve``): build the plan once for
    this call (``make_plan()``, kept for the tool body under ``key``), and ask the user (``Elicit`` with
    `Deletion.question`) when the call wants a deletion, there is something to delete, the host can be
    asked and ``policy.ask``; otherwise `NotAsked` (saying whether the host could be asked). On protocol
    revisions >= 2026-07-28 the SDK carries the question inside an ``InputRequiredResult``; older ones send
    ``elicitation/create``."""
    from tpu_devops.errors import TpuDevopsError

    try:
        plan = await make_plan()
    except TpuDevopsError:
        return NotAsked(reason="the plan failed")  # the tool body raises the real error
    _HELD.set((key, plan))
    deletion = deletion_of(plan)
    askable = policy.ask and can_elicit(ctx)
    if not wants or not deletion.steps:
        return NotAsked(reason="dry run" if not wants else "nothing to delete", can_ask=askable)
    if not askable:
        return NotAsked(reason="this host cannot be asked")
    from mcp.server.mcpserver.resolve import Elicit

    return Elicit(deletion.question(), Confirmation)
