"""Audit sections run in this process against the real code paths (no MCP session needed): secrets split
across the fields of one Cloud Logging entry in every key order and cut, and credential failures against a
loopback fake token endpoint (revoked key, silent endpoint, closed port, 503s). Each returns its failures."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from tests.fakes.http_runner import ServerThread
from tests.fakes.token_endpoint import TokenEndpoint, blackhole, service_account_file

SPLIT_TOKENS = (
    "hf_" + "AuditSplitToken0123456789abcdefXYZ",
    "sk-proj-" + "AuditSplitOpenAiKey0123456789",
    "ghp_" + "AuditSplitGithubToken0123456789ab",
    "AIza" + "SyAuditSplitGoogleKey012345678",
)
KEY_ORDERS = (
    ("message", "token_rest"),
    ("message", "a_rest"),
    ("zz_head", "aa_rest"),
    ("aa_head", "zz_rest"),
)
CUTS = (6, 10, 15, 22)
BUDGET_S = 25.0  # the tool call's budget (`tpu_devops.host.deadline.TOOL_BUDGET_S`)


def split_secrets() -> tuple[int, list[str]]:
    """(outputs checked, those that still show 8+ characters of a part of the token)."""
    from tpu_devops.host.redact import Redactor
    from tpu_devops.logs.sources import record_from_entry

    leaked: list[str] = []
    n = 0
    for token in SPLIT_TOKENS:
        for head_key, rest_key in KEY_ORDERS:
            for cut in CUTS:
                for reverse in (False, True):
                    fields = [(head_key, f"auth with {token[:cut]}"), (rest_key, token[cut:])]
                    payload = dict(reversed(fields) if reverse else fields)
                    entry = {"insertId": f"a{n}", "severity": "INFO", "jsonPayload": payload}
                    record = record_from_entry(entry, Redactor())
                    shown = record.message + json.dumps(record.labels)
                    n += 1
                    if any(len(p) >= 8 and p[:8] in shown for p in (token[4:cut], token[cut:])):
                        leaked.append(
                            f"{token[:6]}... cut {cut}, keys {head_key}/{rest_key}, reversed={reverse}"
                        )
    return n, leaked


def credential_failures() -> tuple[int, list[str]]:
    """(cases, failures): each case must end within the budget with a typed error on field
    ``credentials`` naming its cause, no Python tuple, and a fix that is not "narrow the request"."""
    from tpu_devops.config import load_settings
    from tpu_devops.errors import TpuDevopsError
    from tpu_devops.gcp import common
    from tpu_devops.host import deadline

    failures: list[str] = []
    cases = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        settings = load_settings(
            environ={"GOOGLE_CLOUD_PROJECT": "audit-project", "TPU_DEVOPS_STATE_DIR": tmp,
                     "TPU_DEVOPS_ENV_FILE": str(d / "none.env")}
        )  # fmt: skip
        saved = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")

        def one(name: str, token_uri: str, cause: str) -> None:
            nonlocal cases
            cases += 1
            os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(service_account_file(d, token_uri))
            common._adc.cache_clear()
            started = time.monotonic()
            try:
                with deadline.budget(BUDGET_S):
                    common.verify_credentials(settings)
                failures.append(f"{name}: no error")
                return
            except TpuDevopsError as exc:
                text, fix = str(exc), exc.fix or ""
            took = time.monotonic() - started
            if took > BUDGET_S + 3:
                failures.append(f"{name}: {took:.0f} s")
            if cause not in text or "('" in text or "{'error'" in text or "narrow the request" in fix:
                failures.append(f"{name}: {text[:200]}")

        try:
            for mode, cause in (
                ("revoked", "refused the credentials"),
                ("unavailable", "token endpoint failed"),
            ):
                fake = TokenEndpoint(mode)
                with ServerThread(fake.app) as srv:
                    one(mode, f"{srv.url}/token", cause)
            with blackhole() as url:
                one("silent endpoint", url, "did not answer")
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            one("closed port", f"http://127.0.0.1:{port}/token", "could not be reached")
        finally:
            if saved is None:
                os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
            else:
                os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = saved
            common._adc.cache_clear()
    return cases, failures


def _rss_mb() -> float:
    """This process's resident set now (Linux ``/proc/self/statm``), in MiB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


async def endless_bodies() -> tuple[int, list[str], float]:
    """Every endless-body mode of `tests.fakes.endless` against the metrics and models reads: (calls, the
    ones that did not end with a named read limit, the largest RSS growth in MiB over a call; goal <= 100)."""
    from tests.fakes.endless import MODES, EndlessServer
    from tpu_devops.host import deadline
    from tpu_devops.serving import metrics, models
    from tpu_devops.serving.errors import ServingError

    failures: list[str] = []
    calls, worst = 0, 0.0
    with EndlessServer() as srv:
        for mode in MODES:
            srv.mode = mode
            for name, read in (("metrics", metrics.fetch_samples), ("models", models.served_models)):
                calls += 1
                before = _rss_mb()
                try:
                    with deadline.budget(3.0):
                        await read(srv.url)
                    failures.append(f"{name} {mode}: answered")
                except ServingError as exc:
                    if exc.failure != "read_limit":
                        failures.append(f"{name} {mode}: {exc.failure}: {exc.message[:120]}")
                except Exception as exc:  # anything else is a bare failure
                    failures.append(f"{name} {mode}: {type(exc).__name__}: {str(exc)[:120]}")
                worst = max(worst, _rss_mb() - before)
    if worst > 100:
        failures.append(f"RSS grew {worst:.0f} MiB in one call")
    return calls, failures, worst
