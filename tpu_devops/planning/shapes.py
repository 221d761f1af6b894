"""Which serving flags change a compiled XLA program: the shape key that names a compile cache.

Two deployments whose flags differ only in addresses, names, keys or parsers compile the same programs, so
they share one compile cache; any other flag (a new one included) splits it. Used by the startup script
(the key it records), the warm-boot model and the reconfigure job.
"""

from __future__ import annotations

import hashlib
import json

# Flags that cannot change a compiled XLA program (value-taking ones listed in SHAPE_NEUTRAL_VALUED).
SHAPE_NEUTRAL_VALUED = frozenset(
    {"--host", "--port", "--served-model-name", "--api-key", "--tool-call-parser", "--reasoning-parser",
     "--chat-template", "--uvicorn-log-level"}
)  # fmt: skip
SHAPE_NEUTRAL = SHAPE_NEUTRAL_VALUED | {
    "--enable-auto-tool-choice",
    "--disable-log-requests",
    "--disable-log-stats",
}


def shape_flags(flags: list[str]) -> list[str]:
    """``flags`` without `SHAPE_NEUTRAL` flags (and their values): what the cache key hashes."""
    out: list[str] = []
    skip = False
    for token in flags:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in SHAPE_NEUTRAL:
            skip = name in SHAPE_NEUTRAL_VALUED and "=" not in token
            continue
        out.append(token)
    return out


def shape_key(flags: list[str]) -> str:
    """16 hex digits of SHA-256 over the shape-changing flags (compact JSON), order kept."""
    text = json.dumps(shape_flags(flags), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
