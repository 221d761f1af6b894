"""Capacity: the zone-attempt store, known support, the quota scan and the sweep (in process)."""

from __future__ import annotations

import threading

import anyio
import pytest

from tests.conftest import gcp_environ
from tpu_devops import capacity
from tpu_devops.config import load_settings
from tpu_devops.jobs import JobRecord

pytestmark = pytest.mark.anyio
ACC = "v5litepod-1"
TOKEN = "hf_PlantedTokenValue9876543210zyxwvu"


def test_store_expiry_and_model_failures_never_expire(tmp_path) -> None:
    store = capacity.ZoneStore(tmp_path)
    t0 = 1_000_000.0
    store.record(
        zone="us-west4-b",
        accelerator_type=ACC,
        provisioning_model="flex-start",
        outcome="failed",
        reach="zone",
        reason="stockout",
        message="no more capacity",
        now=t0,
    )
    store.record(
        zone="europe-west4-a",
        accelerator_type=ACC,
        provisioning_model="flex-start",
        outcome="refused",
        reach="model",
        reason="unsupported_model",
        message="not supported",
        now=t0,
    )
    store.record(
        zone="us-east5-a",
        accelerator_type=ACC,
        provisioning_model="flex-start",
        outcome="failed",
        reach="region",
        reason="quota",
        message="Quota exhausted",
        now=t0,
    )
    assert store.blocker("us-west4-b", ACC, "flex-start", now=t0 + 60).reason == "stockout"
    assert (
        store.blocker("us-west4-b", ACC, "flex-start", now=t0 + 3 * 3600) is None
    )  # capacity failures expire
    assert store.blocker("us-west4-b", ACC, "spot", now=t0 + 60) is None  # per provisioning model
    assert store.blocker("europe-west4-a", ACC, "flex-start", now=t0 + 365 * 86400).reach == "model"
    assert store.blocker("us-east5-b", ACC, "flex-start", now=t0 + 60).reach == "region"  # the whole region
    status = store.status_path.read_text()
    assert (
        "| v5litepod-1 | flex-start | europe-west4-a | refused | model |" in status
        and "never expires" in status
    )


def test_success_clears_a_capacity_block(tmp_path) -> None:
    store = capacity.ZoneStore(tmp_path)
    store.record(
        zone="us-west4-b",
        accelerator_type=ACC,
        provisioning_model="spot",
        outcome="failed",
        reach="zone",
        reason="stockout",
    )
    store.record(zone="us-west4-b", accelerator_type=ACC, provisioning_model="spot", outcome="active")
    assert store.blocker("us-west4-b", ACC, "spot") is None


def test_store_is_shared_by_concurrent_writers_and_survives_reopen(tmp_path) -> None:
    def write(n: int) -> None:
        store = capacity.ZoneStore(tmp_path)
        for i in range(20):
            store.record(
                zone=f"us-west{n}-a",
                accelerator_type=ACC,
                provisioning_model="spot",
                outcome="failed",
                reach="zone",
                message=str(i),
            )

    threads = [threading.Thread(target=write, args=(n,)) for n in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(capacity.ZoneStore(tmp_path).history()) == 60


def test_known_support_combines_docs_seed_and_history(tmp_path) -> None:
    assert capacity.known_support(ACC, "flex-start", "us-central1-a").documented
    assert capacity.known_support(ACC, "flex-start", "us-west4-a").accepted
    assert capacity.known_support(ACC, "flex-start", "europe-west4-b").refused
    store = capacity.ZoneStore(tmp_path)
    store.record(
        zone="asia-east1-a",
        accelerator_type=ACC,
        provisioning_model="flex-start",
        outcome="refused",
        reach="model",
    )
    assert capacity.known_support(ACC, "flex-start", "asia-east1-a", store).refused
    assert not capacity.known_support(ACC, "spot", "europe-west4-b").refused


async def test_quota_scan_reads_the_family_of_the_provisioning_model(fake_gcp, gcp_settings) -> None:
    fake_gcp.quotas.set_limit("TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI", "us-west4-a", 0)
    spot = await capacity.zones_with_quota(gcp_settings, "spot")
    assert spot.zone_quota_id == "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"
    row = next(z for z in spot.zones if z.zone == "us-west4-a")
    assert row.zone_limit == 0 and not row.enough_for_request
    od = await capacity.zones_with_quota(gcp_settings, "on-demand")
    assert od.zone_quota_id == "TPUV5sLitepodPerProjectPerZoneForTPUAPI"
    assert next(z for z in od.zones if z.zone == "us-west4-a").enough_for_request
    flex = await capacity.zones_with_quota(gcp_settings, "flex-start")
    accept = {z.zone: z.known_acceptance for z in flex.zones}
    assert accept["us-central1-a"].startswith("documented") and accept["europe-west4-a"].startswith("refused")
    assert len(flex.zones) == 44


def _opts(
    model: str = "flex-start", zones: list[str] | None = None, budget: float = 5.0
) -> capacity.SweepOptions:
    return capacity.SweepOptions(model, zones, budget, 0.02, 10, None, None)


async def test_sweep_unsupported_twice_stockout_then_success(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    zones = ["europe-west4-a", "europe-west4-b", "us-west4-b", "us-central1-a"]
    fake_gcp.tpu.script("europe-west4-a", "unsupported")
    fake_gcp.tpu.script("europe-west4-b", "unsupported")
    fake_gcp.tpu.script("us-west4-b", "stockout")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await capacity.run_sweep(gcp_settings, record, _opts(zones=zones))
    assert result.found and result.zone == "us-central1-a"
    assert [(a.zone, a.reach) for a in result.attempts] == [
        ("europe-west4-a", "model"), ("europe-west4-b", "model"), ("us-west4-b", "zone"), ("us-central1-a", None),
    ]  # fmt: skip
    assert fake_gcp.tpu.state_of("us-west4-b", "gemma4-e2b") is None  # its own FAILED request was deleted
    assert {c["zone"] for c in fake_gcp.tpu.creates()} == set(zones)
    store = capacity.ZoneStore(gcp_settings.state_dir)
    assert store.blocker("europe-west4-a", ACC, "flex-start").reach == "model"


async def test_sweep_stops_on_network_not_found(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path, TPU_NETWORK="does-not-exist"))
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await capacity.run_sweep(
        settings, record, _opts(zones=["us-west4-a", "us-west4-b", "us-east5-a"])
    )
    assert not result.found and len(result.attempts) == 1
    assert result.attempts[0].reach == "config" and "TPU_NETWORK" in result.next_step
    assert len(fake_gcp.tpu.creates()) == 1


async def test_sweep_region_quota_skips_the_rest_of_the_region(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-east5-a", "quota")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await capacity.run_sweep(
        gcp_settings, record, _opts("spot", ["us-east5-a", "us-east5-b", "us-west4-a"])
    )
    assert [(a.zone, a.outcome) for a in result.attempts] == [
        ("us-east5-a", "failed"),
        ("us-east5-b", "skipped"),
        ("us-west4-a", "active"),
    ]


async def test_sweep_budget_deletes_the_waiting_request_and_moves_on(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await capacity.run_sweep(
        gcp_settings, record, _opts("spot", ["us-west4-a", "us-west4-b"], budget=0.2)
    )
    assert [a.outcome for a in result.attempts] == ["timeout", "active"]
    # The waiting zone was given up at its budget, not at the default per-zone wait of minutes.
    assert result.attempts[0].seconds < 900  # find_tpu's default zone_budget_s
    assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None


async def test_sweep_never_holds_two_tpus(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.add_foreign(
        "us-west4-b", "gemma4-e2b", labels={"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    )
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await capacity.run_sweep(gcp_settings, record, _opts("spot", ["us-west4-a", "us-west4-b"]))
    assert result.zone == "us-west4-b" and "never holds two" in result.stopped_because
    assert fake_gcp.tpu.creates() == []


def test_sweep_lease_is_exclusive_and_freed_by_release_expiry_or_a_dead_process(tmp_path) -> None:
    import os
    import sqlite3
    import subprocess
    import sys

    store = capacity.ZoneStore(tmp_path)
    mine = store.acquire_lease("sweep:p:rig", "a", 60, job_id="find-tpu-1")
    assert mine is not None and mine.held
    other = capacity.ZoneStore(tmp_path).acquire_lease("sweep:p:rig", "b", 60)
    assert other is not None and not other.held and other.job_id == "find-tpu-1" and other.pid == os.getpid()
    store.release_lease("sweep:p:rig", "a")
    assert store.acquire_lease("sweep:p:rig", "b", 0.0).held  # expires at once
    assert store.acquire_lease("sweep:p:rig", "c", 60).held  # expired: taken over
    # Held by a process that no longer exists (a server killed mid-sweep): free at once.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE leases SET pid = ? WHERE name = 'sweep:p:rig'", (int(dead.stdout),))
    assert store.acquire_lease("sweep:p:rig", "d", 60).held


async def test_sweep_checks_every_zone_before_each_create(fake_gcp, gcp_settings) -> None:
    """A rig request that appears in another zone mid-sweep (another server, a manual create) stops the
    sweep before its next create: it used to be checked only when the sweep started."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    labels = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    record = JobRecord(id="t", kind="find-tpu", description="")
    result: list[capacity.SweepResult] = []

    async def sweep() -> None:
        result.append(
            await capacity.run_sweep(
                gcp_settings, record, _opts("spot", ["us-west4-a", "us-west4-b"], budget=1.0)
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(sweep)
        with anyio.fail_after(30):
            while fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None:
                await anyio.sleep(0.02)
        fake_gcp.tpu.add_foreign("asia-east1-a", "gemma4-e2b", labels=labels)
    assert [c["zone"] for c in fake_gcp.tpu.creates()] == ["us-west4-a"]
    assert result[0].zone == "asia-east1-a" and "never holds two" in result[0].stopped_because


async def test_zone_budget_is_not_overshot_by_the_poll_interval(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    record = JobRecord(id="t", kind="find-tpu", description="")
    opts = capacity.SweepOptions("spot", ["us-west4-a", "us-west4-b"], 0.2, 30.0, 10, None, None)
    result = await capacity.run_sweep(gcp_settings, record, opts)
    assert [a.outcome for a in result.attempts] == ["timeout", "active"]
    # The last sleep stops at the budget: a whole 30 s poll interval is never added to a 0.2 s budget.
    assert result.attempts[0].seconds < opts.poll_interval_s


def test_sweep_options_are_checked_before_the_job(gcp_settings) -> None:
    from tpu_devops.errors import ConfigError

    for zones, field in ((["uswest4a"], "zones"), ([], "zones")):
        with pytest.raises(ConfigError) as err:
            capacity.check_sweep_options(gcp_settings, _opts(zones=zones))
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        capacity.check_sweep_options(gcp_settings, capacity.SweepOptions("spot", None, 5, 1, 10, 3600, None))
    assert err.value.field == "max_run_duration_s"
    with pytest.raises(ConfigError) as err:
        capacity.check_sweep_options(
            gcp_settings, capacity.SweepOptions("flex-start", None, 5, 1, 10, None, -1)
        )
    assert err.value.field == "valid_until_duration_s"
