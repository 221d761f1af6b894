"""Entry point of the ``tpu-devops-mcp`` console script: the stdio MCP server.

stdout carries JSON-RPC only; every log line goes to stderr. An invalid setting is printed to stderr
with the variable, the value and the fix, and the server starts anyway: an MCP host then
shows the error through `get_help`, `check_setup` and every tool that needs the bad setting, instead of
a bare "Disconnected" (`tpu_devops.config.load_settings_or_errors`). ``--check-config`` validates the
settings the same way, prints them and exits, with exit code 2 when a setting, a tpu.env key or a toolset
name is wrong (``make check-config``). ``--env-file PATH`` names the tpu.env to read.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any


def configure_logging(level: str) -> None:
    """Log to stderr at ``level`` (one of `tpu_devops.config.LOG_LEVELS`)."""
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One INFO line per HTTP request would bury the server's own messages during a benchmark sweep.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    # google-auth warns on stderr whenever credentials are missing; the cloud tools already answer that
    # with the fix (gcloud auth application-default login), so the line is noise in a session.
    logging.getLogger("google.auth").setLevel(max(logging.ERROR, logging.getLogger().level))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line of ``tpu-devops-mcp`` (and of ``python server.py`` / ``mcp-run.sh``)."""
    parser = argparse.ArgumentParser(
        prog="tpu-devops-mcp",
        description="MCP server (stdio) for SREs who serve Gemma 4 with vLLM on Google Cloud TPU.",
        epilog="tpu.env is read from --env-file / TPU_DEVOPS_ENV_FILE, else ./tpu.env, else the checkout's "
        "tpu.env (a source checkout), else ~/.config/tpu-devops/tpu.env; the environment always wins.",
    )
    parser.add_argument(
        "--env-file",
        metavar="PATH",
        help="the tpu.env to read (sets TPU_DEVOPS_ENV_FILE; 'none' reads no file)",
    )
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="validate tpu.env and the environment as the server would, print the result and exit "
        "(exit 2 when a setting, a tpu.env key or a toolset name is wrong)",
    )
    parser.add_argument("--version", action="version", version=f"tpu-devops {_version()}")
    return parser.parse_args(argv)


def _version() -> str:
    from tpu_devops import __version__

    return __version__


def main(argv: list[str] | None = None) -> None:
    """Load settings (reporting invalid ones on stderr), then serve MCP over stdio until stdin closes."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.env_file:
        # A relative path is the caller's: the server's working directory may be anything later on.
        value = args.env_file if args.env_file.lower() in ("none", "off") else os.path.abspath(args.env_file)
        os.environ["TPU_DEVOPS_ENV_FILE"] = value
    from tpu_devops.config import get_settings

    settings = get_settings()
    configure_logging(settings.log_level)
    for error in settings.config_errors:
        print(f"tpu-devops: invalid configuration: {error}", file=sys.stderr)
    if args.check_config:
        check_config(settings)
        return
    if settings.config_errors:
        logging.getLogger("tpu_devops").warning(
            "starting anyway: get_help and check_setup show the error, and tools that need the invalid "
            "setting refuse with it"
        )
    for notice in settings.notices:
        logging.getLogger("tpu_devops").warning("%s", notice)
    if not settings.gcp_endpoint:
        from tpu_devops.gcp.metadata import start_probe

        start_probe()  # on a Google Cloud VM, its answer is in before the first tool needs credentials

    from tpu_devops import server  # the checkout's server.py (a link), also inside the wheel

    serve(lambda: server.mcp.run("stdio"))


def check_config(settings: Any) -> None:
    """``--check-config``: the settings as the server reads them, or exit 2 naming each fault: an invalid
    setting, an unknown tpu.env key, an unknown toolset name (``make check-config``)."""
    from tpu_devops import server
    from tpu_devops.host.results import render_mapping

    for error in server.selection.errors:
        print(f"tpu-devops: invalid configuration: {error}", file=sys.stderr)
    for notice in settings.notices:
        print(f"tpu-devops: notice: {notice}", file=sys.stderr)
    if settings.config_errors or server.selection.errors:
        raise SystemExit(2)
    print(render_mapping(settings.public_summary(wait=True), "tpu-devops: configuration is valid"))


TTY_HINT = (
    "tpu-devops: an MCP server on stdio, waiting for an MCP client (it does not take typed commands). "
    "To try it: `make demo`, or `node_modules/.bin/inspector --cli ./mcp-run.sh --method tools/list`. "
    "Ctrl-C or Ctrl-D quits."
)


def serve(run: Callable[[], None]) -> None:
    """``run()`` the stdio server until stdin closes (exit 0), or until SIGINT or SIGTERM: then say so on
    stderr and exit at once (130 / 143), with stdin still open. When stdin is a terminal (a person, not an
    MCP host), first say what this is on stderr.

    The signals need their own handler: the stdio reader blocks in a worker thread that a signal cannot
    interrupt, and interpreter shutdown would wait for it (SIGINT left the server running with its host's
    pipe open), while SIGTERM's default ends the process without a word. Exiting without unwinding loses
    nothing a clean stop would keep: job and zone-attempt stores are SQLite (each write a transaction),
    and a job still running would end with the process either way.
    """
    interactive = sys.stdin.isatty()

    def stop_now(signum: int, frame: object) -> None:
        name = "Ctrl-C" if interactive and signum == signal.SIGINT else signal.Signals(signum).name
        print(f"\ntpu-devops: stopped ({name}).", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    # Before the hint: a person may press Ctrl-C as soon as they read it.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop_now)
    if interactive:
        print(TTY_HINT, file=sys.stderr, flush=True)
    try:
        run()
    except KeyboardInterrupt:  # a SIGINT that arrived before the handler was installed
        stop_now(signal.SIGINT, None)
    except BaseExceptionGroup as group:  # anyio wraps an interrupt that lands inside the task group
        if not group.subgroup(KeyboardInterrupt):
            raise
        stop_now(signal.SIGINT, None)


if __name__ == "__main__":
    main()
