"""Entry point of the ``tpu-devops-mcp`` console script: the stdio MCP server.

stdout carries JSON-RPC only; every log line goes to stderr. An invalid setting stops the server
before it answers ``initialize``, with the variable, the value and the fix on stderr (exit code 2).
``--check-config`` validates the settings the same way, prints them and exits (``make check-config``).
"""

from __future__ import annotations

import logging
import os
import sys

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def configure_logging() -> None:
    """Log to stderr at ``TPU_DEVOPS_LOG_LEVEL`` (default INFO).

    Raises:
        ConfigError: the level is not one of `LOG_LEVELS`.
    """
    from tpu_devops.errors import ConfigError

    level = os.environ.get("TPU_DEVOPS_LOG_LEVEL", "INFO").strip().upper() or "INFO"
    if level not in LOG_LEVELS:
        raise ConfigError(
            "not a log level",
            field="TPU_DEVOPS_LOG_LEVEL",
            value=os.environ.get("TPU_DEVOPS_LOG_LEVEL"),
            fix=f"use one of {', '.join(LOG_LEVELS)}",
        )
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One INFO line per HTTP request would bury the server's own messages during a benchmark sweep.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))


def main(argv: list[str] | None = None) -> None:
    """Load and validate settings, then serve MCP over stdio until stdin closes."""
    from tpu_devops.config import get_settings
    from tpu_devops.errors import ConfigError

    args = sys.argv[1:] if argv is None else argv
    try:
        configure_logging()
        settings = get_settings()
    except ConfigError as exc:
        print(f"tpu-devops: invalid configuration: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if "--check-config" in args:
        from tpu_devops.results import render_mapping

        print(render_mapping(settings.public_summary(), "tpu-devops: configuration is valid"))
        return
    for notice in settings.notices:
        logging.getLogger("tpu_devops").warning("%s", notice)

    import server

    server.mcp.run("stdio")


if __name__ == "__main__":
    main()
