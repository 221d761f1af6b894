"""Entry point of the ``tpu-devops-mcp`` console script: the stdio MCP server.

stdout carries JSON-RPC only; every log line goes to stderr. An invalid setting stops the server
before it answers ``initialize``, with the variable, the value and the fix on stderr (exit code 2).
"""

from __future__ import annotations

import logging
import os
import sys


def configure_logging() -> None:
    """Log to stderr (``TPU_DEVOPS_LOG_LEVEL``, default INFO)."""
    level = os.environ.get("TPU_DEVOPS_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One INFO line per HTTP request would bury the server's own messages during a benchmark sweep.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))


def main() -> None:
    """Load and validate settings, then serve MCP over stdio until stdin closes."""
    configure_logging()
    from tpu_devops.config import get_settings
    from tpu_devops.errors import ConfigError

    try:
        settings = get_settings()
    except ConfigError as exc:
        print(f"tpu-devops: invalid configuration: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    for notice in settings.notices:
        logging.getLogger("tpu_devops").warning("%s", notice)

    import server

    server.mcp.run("stdio")


if __name__ == "__main__":
    main()
