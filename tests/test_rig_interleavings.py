"""Property: no interleaving of create / find_tpu / reconfigure / teardown leaves a rig TPU running after a
confirmed teardown, a TPU without its firewall rule, or a job working on a TPU that is gone.

Hypothesis draws sequences of operations (derandomized: the same sequences every run) and runs each
against the fake Google Cloud with the real clients, in one event loop the way one server runs them:
sweeps and reconfigures are jobs that keep running between the operations. The fake's scripted zones
make the outcomes deterministic (``wait`` parks a sweep in its zone, ``stockout`` fails at once, ``ok``
is ACTIVE at once); where the operations meet inside a job is the interleaving explored. Waits are on
conditions with generous deadlines, never fixed sleeps.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server.elicitation import AcceptedElicitation

from tests.conftest import gcp_environ
from tests.fakes.gcp import FakeGcp
from tests.fakes.gcp.tpu import FakeTpu
from tpu_devops.config import load_settings
from tpu_devops.errors import TpuDevopsError
from tpu_devops.host.confirmation import ConfirmationError, NotAsked
from tpu_devops.host.jobs import JOBS
from tpu_devops.provisioning import access, rigjobs, teardown
from tpu_devops.provisioning.queued import create_queued_resource
from tpu_devops.provisioning.reconfigure import reconfigure_vllm
from tpu_devops.provisioning.sweep import SweepOptions, start_sweep

RIG = "gemma4-e2b"
ZONES = ("us-west4-a", "us-west4-b", "us-central1-a", "us-east1-b")
SCRIPT = {"us-west4-a": "wait", "us-west4-b": "stockout", "us-central1-a": "ok", "us-east1-b": "wait"}
LIVE = ("ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE", "CREATING")
NO_ELICITATION = AcceptedElicitation(data=NotAsked(reason="no elicitation"))

OPS = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(ZONES)),
    st.tuples(st.just("sweep"), st.permutations(ZONES).map(lambda z: tuple(z[:3]))),
    st.tuples(st.just("reconfigure")),
    st.tuples(st.just("teardown")),
    st.tuples(st.just("settle")),
)


@pytest.fixture(scope="module")
def cloud():
    with FakeGcp(tpu=FakeTpu(zones=ZONES)) as fake:
        yield fake


def _reset(fake: Any) -> None:
    fake.tpu.queued.clear()
    fake.tpu.nodes.clear()
    fake.tpu.guest_attributes.clear()
    fake.compute.firewalls.clear()
    for zone, outcome in SCRIPT.items():
        fake.tpu.script(zone, outcome)
    fake.secrets.put("hf-token", "hf_PlantedTokenValue9876543210zyxwvu")


def live_of_rig(fake: Any) -> list[tuple[str, str]]:
    out = []
    for (zone, qr_id), rec in list(fake.tpu.queued.items()):
        labels = rec.body["tpu"]["nodeSpec"][0]["node"].get("labels", {})
        if labels.get("rig") == RIG and fake.tpu.state_of(zone, qr_id) in LIVE:
            out.append((zone, qr_id))
    return sorted(out)


def running_jobs(settings: Any) -> list[Any]:
    return rigjobs.running_here(settings)


async def settle(settings: Any, timeout_s: float = 30) -> None:
    """Until every running job of the rig waits on something that does not move by itself: a sweep parked
    in a ``wait`` zone, a reconfigure following a node that exists (or until none runs)."""

    def parked(record: Any) -> bool:
        if record.kind == "find-tpu":
            return "WAITING_FOR_RESOURCES" in str(record.progress.get("current", ""))
        return record.kind in ("reconfigure", "wait-active")

    with anyio.fail_after(timeout_s):
        while not all(parked(r) for r in running_jobs(settings)):
            await anyio.sleep(0.02)


async def confirmed_teardown(settings: Any) -> Any:
    """Dry run, then the deletion with its token (again when the plan changed in between)."""
    args = {"zone": None, "queued_resource_id": None, "only_failed": False}
    for _ in range(6):
        plan = await teardown.destroy_confirmed(settings, NO_ELICITATION, dry_run=None, confirm=False,
                                                confirm_token=None, **args)  # fmt: skip
        if not plan.confirm_token:
            return plan
        try:
            return await teardown.destroy_confirmed(
                settings, NO_ELICITATION, dry_run=None, confirm=True, confirm_token=plan.confirm_token, **args
            )
        except ConfirmationError as exc:
            assert "changed since that dry run" in exc.message, exc.message
    raise AssertionError("the plan kept changing")


def check_invariants(fake: Any, settings: Any, *, torn_down: bool) -> None:
    live = live_of_rig(fake)
    if torn_down:  # a confirmed teardown and no create or sweep asked for since
        assert live == [], live
        assert running_jobs(settings) == [], [r.snapshot() for r in running_jobs(settings)]
    if live:
        assert access.rule_name(RIG) in fake.compute.firewalls, (live, "a TPU without its firewall rule")
    for record in running_jobs(settings):  # no job works on a TPU that is gone
        target = record.binding.target
        if target.startswith(("node:", "qr:")):
            zone, _, qr_id = target.split(":", 1)[1].partition("/")
            assert (zone, qr_id) in live, (record.snapshot(), live)


async def scenario(fake: Any, ops: list[tuple[Any, ...]]) -> None:
    state_dir = Path(tempfile.mkdtemp(prefix="rig-interleave-"))
    # the operator's standing permission: these interleavings are about what a teardown leaves, not who approves it
    settings = load_settings(environ=gcp_environ(fake, state_dir, TPU_DEVOPS_UNATTENDED_DELETE=RIG))
    torn_down = False
    try:
        for op in ops:
            kind = op[0]
            try:
                if kind == "create":
                    torn_down = False
                    await create_queued_resource(settings, zone=op[1], provisioning_model="spot")
                elif kind == "sweep":
                    torn_down = False
                    opts = SweepOptions("spot", list(op[1]), 600, 0.02, 3, None, None)
                    await start_sweep(settings, opts)
                elif kind == "reconfigure":
                    await reconfigure_vllm(settings, max_model_len=8192)
                elif kind == "teardown":
                    done = await confirmed_teardown(settings)
                    torn_down = torn_down or done.executed or not done.steps
                    if done.follow_up_job_id:
                        with anyio.fail_after(30):
                            while JOBS.get(done.follow_up_job_id).state == "running":
                                await anyio.sleep(0.02)
                    check_invariants(fake, settings, torn_down=torn_down)
                else:
                    await settle(settings)
            except TpuDevopsError:
                pass  # refused (a second TPU, a sweep running, nothing to reconfigure): the system said no
            check_invariants(fake, settings, torn_down=False)
        await settle(settings)
        check_invariants(fake, settings, torn_down=torn_down)
    finally:
        for record in running_jobs(settings):
            await JOBS.end(record, "end of the example")
        await confirmed_teardown(settings)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(OPS, min_size=2, max_size=7))
def test_no_interleaving_leaves_a_tpu_after_a_teardown(cloud, ops) -> None:
    _reset(cloud)
    anyio.run(scenario, cloud, ops)
    assert live_of_rig(cloud) == [] and cloud.compute.firewalls == {}
