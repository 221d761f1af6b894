"""Confirmation tokens for destructive calls on hosts that cannot ask the user.

A prompt-injected host model can pass ``confirm=true`` by itself; it cannot pass a token it was never
shown. A dry run issues a token bound to its exact plan (`plan_digest`: the tool, the action, the
project, the rig and every step with its target and zone); the deleting call must echo it. A token is

- unguessable: 80 random bits (`secrets.token_bytes`), shown as 16 lowercase base32 characters;
- short-lived: `TOKEN_TTL_S` (10 minutes, time enough for a person to read the plan);
- single use: redeeming marks it used in the same transaction that checks it;
- bound to the plan: if the resources changed since the dry run, the digest differs and it is refused.

Tokens live in ``<state_dir>/confirmations.sqlite3`` (only their SHA-256 is stored), so a dry run in
one server process and the deletion in the next (``gemini -p`` starts a server per prompt) agree.

The rule every destructive tool applies (`decide`): a call deletes only when it says so (``confirm=true``
or ``dry_run=false``) and the deletion is confirmed by the user's answer to an MCP elicitation where the
host can ask (`resolve`), else by a token of a dry run of exactly that plan. Every refusal says that
nothing was deleted, why, and the exact call to make (`refusal`).
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


class Confirmation(BaseModel):
    """The user's answer to "delete these resources now?" (an MCP elicitation form)."""

    confirm: bool = Field(description="Delete the listed resources now?")


class NotAsked(BaseModel):
    """A confirmation resolver did not ask the user (a dry run, nothing to delete, or no elicitation)."""

    reason: str = "not asked"


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
    arguments (``args``, values quoted) so that the exact call can be repeated, and warnings to show."""

    tool: str
    action: str
    project: str
    rig: str
    steps: list[tuple[str, str, str]]
    args: dict[str, str]
    warnings: list[str] = field(default_factory=list)

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
        """The elicitation question: the exact steps and every warning."""
        lines = [f"{a} {t} ({w})" for a, t, w in self.steps] or ["nothing"]
        return f"Delete these resources of rig '{self.rig}' (this server's only)?\n" + "\n".join(
            lines + [f"WARNING: {w}" for w in self.warnings]
        )


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


def offer(state_dir: str | Path, deletion: Deletion) -> dict[str, Any]:
    """A token for ``deletion`` and the exact call that uses it: ``confirm_token``,
    ``confirm_token_expires_in_s``, ``next_call`` (the result fields every destructive tool carries)."""
    issued = token_store(state_dir).issue(deletion.digest, deletion.summary())
    return {
        "confirm_token": issued.token,
        "confirm_token_expires_in_s": issued.expires_in_s,
        "next_call": deletion.call(confirm="true", confirm_token=quoted(issued.token)),
    }


def dry_run_message(offered: dict[str, Any]) -> str:
    """``To delete exactly this, call ... within 10 min (single use)`` (the headline says nothing was deleted)."""
    return (
        f"To delete exactly this, call {offered['next_call']} within "
        f"{offered['confirm_token_expires_in_s'] // 60} min (single use)"
    )


def refusal(state_dir: str | Path, deletion: Deletion, why: str) -> ConfirmationError:
    """ "Nothing was deleted" with the reason, the plan, and a fresh token in the exact call to make."""
    offered = offer(state_dir, deletion)
    return ConfirmationError(
        f"nothing was deleted: {why}. It would delete: {deletion.summary()}",
        field="confirm_token",
        fix=f"to delete exactly that, call {offered['next_call']} within {offered['confirm_token_expires_in_s'] // 60} "
        f"min (single use; a host that can ask you will ask instead); {deletion.call(dry_run='true')} shows the "
        "plan again with a fresh token",
    )


def declined() -> ConfirmationError:
    """The user said no when asked."""
    return ConfirmationError(
        "nothing was deleted: you declined the confirmation",
        fix="none needed; call it again when you want the deletion",
    )


def decide(state_dir: str | Path, deletion: Deletion, confirmation: Any, confirm_token: str | None) -> str:
    """Whether a call that wants ``deletion`` may proceed; returns how it was confirmed.

    ``confirmation`` is the resolver's outcome: an accepted `Confirmation` (the user answered), `NotAsked`
    (the host cannot ask), or a declined / cancelled elicitation. The user's answer decides where there
    was one; otherwise (no elicitation, or cancelled because a headless host cannot ask) a valid token of a
    dry run of exactly this deletion does, once.

    Raises:
        ConfirmationError: declined (a token given with it is spent), or no valid token; the message
            says nothing was deleted and why, the fix is the exact call with a fresh token.
    """
    from mcp.server.elicitation import AcceptedElicitation, DeclinedElicitation

    answer = getattr(confirmation, "data", None)
    if isinstance(confirmation, AcceptedElicitation) and isinstance(answer, Confirmation):
        if not answer.confirm:
            raise declined()
        return "confirmed by you when asked"
    if isinstance(confirmation, DeclinedElicitation):
        if confirm_token:
            with contextlib.suppress(ConfirmationError):  # spent, so the declined deletion cannot be replayed
                token_store(state_dir).redeem(confirm_token, deletion.digest)
        raise declined()
    cancelled = not isinstance(confirmation, AcceptedElicitation)
    if not confirm_token:
        raise refusal(
            state_dir,
            deletion,
            "this host could not ask you to confirm (its confirmation request was cancelled; headless runs "
            "such as `gemini -p` or `claude -p` cannot ask)"
            if cancelled
            else "this host cannot ask you to confirm (no MCP elicitation), and the call carried no "
            "confirmation token from a dry run of exactly this deletion; confirm=true alone is not enough",
        )
    try:
        token_store(state_dir).redeem(confirm_token, deletion.digest)
    except ConfirmationError as exc:
        raise refusal(state_dir, deletion, exc.message) from None
    return "confirmed by the dry run's token"


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


async def resolve(ctx: Any, key: tuple[Any, ...], wants: bool, make_plan: Any, deletion_of: Any) -> Any:
    """The body of a destructive tool's confirmation resolver (mcp ``Resolve``): build the plan once for
    this call (``make_plan()``, kept for the tool body under ``key``), and ask the user (``Elicit`` with
    `Deletion.question`) when the call wants a deletion, there is something to delete and the host can be
    asked; otherwise `NotAsked`. On protocol revisions >= 2026-07-28 the SDK carries the question inside
    an ``InputRequiredResult``; older ones send ``elicitation/create``."""
    from tpu_devops.errors import TpuDevopsError

    try:
        plan = await make_plan()
    except TpuDevopsError:
        return NotAsked(reason="the plan failed")  # the tool body raises the real error
    _HELD.set((key, plan))
    deletion = deletion_of(plan)
    if not wants or not deletion.steps:
        return NotAsked(reason="dry run" if not wants else "nothing to delete")
    if not can_elicit(ctx):
        return NotAsked(reason="this host cannot ask (no elicitation)")
    from mcp.server.mcpserver.resolve import Elicit

    return Elicit(deletion.question(), Confirmation)
