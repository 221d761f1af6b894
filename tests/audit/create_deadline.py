"""Audit section: a create that Google commits but answers late or never, run in this process against the
real TPU client and the fake TPU API. Each case must end with the truth: a create still on its way when the
budget ends says it may have been committed (it bills), with its requestId, the budget it ran on and where
to look, never "try again"; an answer lost after the commit is recognised as ours; and the same create
repeated, once or twice, leaves one queued resource."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.fakes.gcp import FakeGcp

TOKEN = "hf_" + "AuditCreateDeadline0123456789abcdefg"
BUDGETS_S = (10.0, 14.0)  # long enough for the steps before the POST on a loaded machine


def _request_ids(fake: Any) -> list[str]:
    sent = [r for r in fake.tpu.requests if r["method"] == "POST" and "queuedResourceId" in r["query"]]
    return [r["query"].split("requestId=")[1].split("&")[0] for r in sent if "requestId=" in r["query"]]


async def late_commits() -> tuple[int, list[str]]:
    """(cases, failures); see the module docstring."""
    from tpu_devops.config import load_settings
    from tpu_devops.errors import DeadlineError, TpuDevopsError
    from tpu_devops.host import deadline
    from tpu_devops.provisioning.queued import _unanswered_creates, create_queued_resource

    failures: list[str] = []
    cases = 0

    def settings_for(fake: Any, tmp: str, **extra: str) -> Any:
        return load_settings(
            environ={"GOOGLE_CLOUD_PROJECT": "demo-project", "TPU_DEVOPS_GCP_ENDPOINT": fake.url,
                     "TPU_DEVOPS_STATE_DIR": tmp, "TPU_DEVOPS_ENV_FILE": str(Path(tmp) / "none.env"), **extra}
        )  # fmt: skip

    async def held(name: str, seconds: float, repeats: int, **extra: str) -> None:
        nonlocal cases
        cases += 1
        _unanswered_creates.clear()
        with FakeGcp() as fake, tempfile.TemporaryDirectory() as tmp:
            fake.secrets.put("hf-token", TOKEN)
            settings = settings_for(fake, tmp, **extra)
            release = threading.Event()
            fake.tpu.on_create(lambda rec: release.wait(120))  # committed; its answer held back
            err: Exception | None = None
            try:
                async with deadline.tool_call("create_tpu_queued_resource", seconds=seconds):
                    await create_queued_resource(settings)
            except Exception as exc:
                err = exc
            finally:
                release.set()
            fake.tpu._create_hooks.clear()
            ids = _request_ids(fake)
            if not ids:
                failures.append(
                    f"{name}: the budget ended before the create was sent (the case measured nothing)"
                )
                return
            text = f"{getattr(err, 'message', err)} {getattr(err, 'fix', '')}"
            if not isinstance(err, DeadlineError):
                failures.append(f"{name}: ended with {type(err).__name__}: {str(err)[:160]}")
            elif f"requestId {ids[0]}" not in text or "may have committed" not in text:
                failures.append(f"{name}: the late create is not told with its requestId: {text[:200]}")
            elif "try again; if it keeps" in text or f"{seconds:.0f} s budget" not in text:
                failures.append(f"{name}: wrong budget or a 'try again' fix: {text[:200]}")
            for n in range(repeats):
                try:
                    async with deadline.tool_call("create_tpu_queued_resource", seconds=seconds):
                        again = await create_queued_resource(settings)
                    if not again.ours:
                        failures.append(f"{name}: repeat {n + 1} does not report the TPU as ours")
                except TpuDevopsError as exc:
                    failures.append(f"{name}: repeat {n + 1} failed: {exc.message[:160]}")
            if len(fake.tpu.queued) != 1 or len(set(_request_ids(fake))) != 1:
                failures.append(
                    f"{name}: {len(fake.tpu.queued)} queued resources, requestIds {sorted(set(_request_ids(fake)))}"
                )

    async def lost(name: str, times: int) -> None:
        """Committed, then its answer lost ``times`` times (503): the retry or the check must find it ours."""
        nonlocal cases
        cases += 1
        _unanswered_creates.clear()
        with FakeGcp() as fake, tempfile.TemporaryDirectory() as tmp:
            fake.secrets.put("hf-token", TOKEN)
            settings = settings_for(fake, tmp)
            fake.tpu.lose_next_responses(times, only="create_queued")  # carried out, answered 503
            try:
                async with deadline.tool_call("create_tpu_queued_resource", seconds=BUDGETS_S[0]):
                    result = await create_queued_resource(settings)
                if not result.ours:
                    failures.append(f"{name}: the committed create is not reported as ours")
            except TpuDevopsError as exc:
                if not fake.tpu.queued:
                    return  # nothing committed: a plain failure is the truth
                failures.append(f"{name}: committed but told as a failure: {exc.message[:160]}")
            if len(fake.tpu.queued) != 1:
                failures.append(f"{name}: {len(fake.tpu.queued)} queued resources")

    await held("answer held past a 10 s budget, repeated once", BUDGETS_S[0], 1)
    await held("answer held past a 14 s budget, repeated twice", BUDGETS_S[1], 2)
    await held("spot create held past the budget, repeated", BUDGETS_S[0], 1, PROVISIONING_MODEL="spot")
    await lost("answer lost once after the commit", 1)
    await lost("answer lost three times (every retry) after the commit", 3)
    _unanswered_creates.clear()
    return cases, failures
