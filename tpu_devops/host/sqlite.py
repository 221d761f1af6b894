"""SQLite files shared by several server processes (the zone-attempt store, the rig lease, confirmation
tokens): one way to open them, safe when two servers open the same file at once."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

WAL_SWITCH_ATTEMPTS = 12  # bounded retry (about 4 s in all) when another process holds the lock


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` with a 30 s busy timeout, the database in WAL mode.

    Switching to WAL needs an exclusive lock, and SQLite does not always run the busy handler for
    it, so a second writer opening at the same moment saw "database is locked". WAL is persistent
    in the file: the mode is read first and switched only when needed, with a bounded retry.
    """
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA busy_timeout=30000")
    delay = 0.02
    for attempt in range(WAL_SWITCH_ATTEMPTS):
        try:
            mode = db.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                db.close()
                raise
            if attempt == WAL_SWITCH_ATTEMPTS - 1:
                db.close()
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    return db
