"""Confirmation tokens for destructive calls on hosts that cannot ask the user (issue 12 §7).

A prompt-injected host model can pass ``confirm=true`` by itself; it cannot pass a token it was never
shown. A dry run issues a token bound to its exact plan (`plan_digest`: the tool, the action, the
project, the rig and every step with its target and zone); the deleting call must echo it. A token is

- unguessable: 80 random bits (`secrets.token_bytes`), shown as 16 lowercase base32 characters;
- short-lived: `TOKEN_TTL_S` (10 minutes, time enough for a person to read the plan);
- single use: redeeming marks it used in the same transaction that checks it;
- bound to the plan: if the resources changed since the dry run, the digest differs and it is refused.

Tokens live in ``<state_dir>/confirmations.sqlite3`` (only their SHA-256 is stored), so a dry run in
one server process and the deletion in the next (``gemini -p`` starts a server per prompt) agree.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        from tpu_devops.provisioning.store import connect

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
