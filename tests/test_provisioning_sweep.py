"""The zone sweep, `find_tpu` (`tpu_devops.provisioning.sweep`), in process against the fake."""

from __future__ import annotations

import anyio
import pytest

from tests.conftest import gcp_environ
from tests.fakes.gcp.tpu import FakeClock
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError
from tpu_devops.host.jobs import JobRecord
from tpu_devops.provisioning.store import ZoneStore
from tpu_devops.provisioning.sweep import SweepOptions, SweepResult, check_sweep_options, run_sweep

pytestmark = pytest.mark.anyio
TOKEN = "hf_PlantedTokenValue9876543210zyxwvu"
ACC = "v5litepod-1"


def _opts(model: str = "flex-start", zones: list[str] | None = None, budget: float = 5.0) -> SweepOptions:
    return SweepOptions(model, zones, budget, 0.02, 10, None, None)


async def test_sweep_unsupported_twice_stockout_then_success(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    zones = ["europe-west4-a", "europe-west4-b", "us-west4-b", "us-central1-a"]
    fake_gcp.tpu.script("europe-west4-a", "unsupported")
    fake_gcp.tpu.script("europe-west4-b", "unsupported")
    fake_gcp.tpu.script("us-west4-b", "stockout")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(gcp_settings, record, _opts(zones=zones))
    assert result.found and result.zone == "us-central1-a"
    assert [(a.zone, a.reach) for a in result.attempts] == [
        ("europe-west4-a", "model"), ("europe-west4-b", "model"), ("us-west4-b", "zone"), ("us-central1-a", None),
    ]  # fmt: skip
    assert fake_gcp.tpu.state_of("us-west4-b", "gemma4-e2b") is None  # its own FAILED request was deleted
    assert {c["zone"] for c in fake_gcp.tpu.creates()} == set(zones)
    store = ZoneStore(gcp_settings.state_dir)
    assert store.blocker("europe-west4-a", ACC, "flex-start").reach == "model"


async def test_a_zone_that_does_not_offer_the_type_is_skipped_not_the_sweep(fake_gcp, gcp_settings) -> None:
    """Cloud TPU's glossary wording names the zone and the provisioning flags: it is about that zone, so
    the sweep goes on to the zone that serves (it once stopped here as a configuration error)."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    zones = ["us-central1-a", "us-central1-b", "us-west4-a"]
    fake_gcp.tpu.script("us-central1-a", "not_offered")
    fake_gcp.tpu.script("us-central1-b", "not_offered")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(gcp_settings, record, _opts("spot", zones))
    assert result.found and result.zone == "us-west4-a", result.headline()
    assert [(a.zone, a.reach, a.reason) for a in result.attempts] == [
        ("us-central1-a", "model", "not_offered_in_zone"),
        ("us-central1-b", "model", "not_offered_in_zone"),
        ("us-west4-a", None, None),
    ]
    assert (
        "preemptible (true)" in result.attempts[0].message
    )  # the spot request's flags, as Google words them
    store = ZoneStore(gcp_settings.state_dir)
    assert store.blocker("us-central1-a", ACC, "spot").reach == "model"  # never retried for spot here
    assert (
        store.blocker("us-central1-a", ACC, "on-demand") is None
    )  # another provisioning model may be offered


async def test_sweep_stops_on_network_not_found(fake_gcp, tmp_path) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path, TPU_NETWORK="does-not-exist"))
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(settings, record, _opts(zones=["us-west4-a", "us-west4-b", "us-east5-a"]))
    assert not result.found and len(result.attempts) == 1
    assert result.attempts[0].reach == "config" and "TPU_NETWORK" in result.next_step
    assert len(fake_gcp.tpu.creates()) == 1


async def test_sweep_region_quota_skips_the_rest_of_the_region(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-east5-a", "quota")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(gcp_settings, record, _opts("spot", ["us-east5-a", "us-east5-b", "us-west4-a"]))
    assert [(a.zone, a.outcome) for a in result.attempts] == [
        ("us-east5-a", "failed"),
        ("us-east5-b", "skipped"),
        ("us-west4-a", "active"),
    ]


async def test_sweep_budget_deletes_the_waiting_request_and_moves_on(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-a", "us-west4-b"], budget=0.2))
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
    result = await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-a", "us-west4-b"]))
    assert result.zone == "us-west4-b" and "never holds two" in result.stopped_because
    assert fake_gcp.tpu.creates() == []


async def test_sweep_checks_every_zone_before_each_create(fake_gcp, gcp_settings) -> None:
    """A rig request that appears in another zone mid-sweep (another server, a manual create) stops the
    sweep before its next create: it used to be checked only when the sweep started."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    labels = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    record = JobRecord(id="t", kind="find-tpu", description="")
    result: list[SweepResult] = []

    async def sweep() -> None:
        result.append(
            await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-a", "us-west4-b"], budget=1.0))
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
    opts = SweepOptions("spot", ["us-west4-a", "us-west4-b"], 0.2, 30.0, 10, None, None)
    result = await run_sweep(gcp_settings, record, opts)
    assert [a.outcome for a in result.attempts] == ["timeout", "active"]
    # The last sleep stops at the budget: a whole 30 s poll interval is never added to a 0.2 s budget.
    assert result.attempts[0].seconds < opts.poll_interval_s


def test_sweep_options_are_checked_before_the_job(gcp_settings) -> None:

    for zones, field in ((["uswest4a"], "zones"), ([], "zones")):
        with pytest.raises(ConfigError) as err:
            check_sweep_options(gcp_settings, _opts(zones=zones))
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        check_sweep_options(gcp_settings, SweepOptions("spot", None, 5, 1, 10, 3600, None))
    assert err.value.field == "max_run_duration_s"
    with pytest.raises(ConfigError) as err:
        check_sweep_options(gcp_settings, SweepOptions("flex-start", None, 5, 1, 10, None, -1))
    assert err.value.field == "valid_until_duration_s"


# ---- nothing orphaned, nothing blind: no request left billing, no zone unread ------------------

RIG = {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}


async def _me(settings) -> dict[str, str]:
    from tpu_devops.provisioning.ownership import this_rig

    return (await this_rig(settings)).labels("find_tpu")


async def test_every_sweep_request_expires_by_itself_after_its_budget(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    record = JobRecord(id="t", kind="find-tpu", description="")
    for budget, sent in ((0.2, "60s"), (90.5, "91s")):
        fake_gcp.tpu.requests.clear()
        opts = SweepOptions("spot", ["us-west4-a", "us-west4-b"], budget, 0.02, 10, None, None)
        if budget > 1:  # do not really wait 90 s: the request fails at once in the second run
            fake_gcp.tpu.script("us-west4-a", "stockout")
        await run_sweep(gcp_settings, record, opts)
        bodies = [c["body"] for c in fake_gcp.tpu.creates()]
        assert bodies and all(b["queueingPolicy"] == {"validUntilDuration": sent} for b in bodies)
        assert all(b["tpu"]["nodeSpec"][0]["node"]["labels"]["tool"] == "find_tpu" for b in bodies)
        fake_gcp.tpu.queued.clear()
    # valid_until_duration_s shorter than the budget wins (the sweep waits no longer than its request lives)
    fake_gcp.tpu.requests.clear()
    opts = SweepOptions("spot", ["us-west4-b"], 900, 0.02, 10, None, 120)
    await run_sweep(gcp_settings, record, opts)
    assert fake_gcp.tpu.creates()[0]["body"]["queueingPolicy"] == {"validUntilDuration": "120s"}


async def test_a_request_left_by_a_dead_sweep_is_adopted_then_cleaned(fake_gcp, gcp_settings) -> None:
    """SIGKILL mid-sweep left our find_tpu request WAITING: the next sweep waits on it (not forever: its
    own budget or what is left of the request's validUntilDuration), deletes it, and goes on."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    labels = await _me(gcp_settings)
    fake_gcp.tpu.add_foreign(
        "us-east5-a", "gemma4-e2b", labels=labels, state="WAITING_FOR_RESOURCES", valid_until_s=900
    )
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(gcp_settings, record, _opts("spot", ["us-east5-a", "us-west4-b"], budget=0.3))
    assert result.found and result.zone == "us-west4-b", result
    assert [(a.zone, a.outcome) for a in result.attempts] == [
        ("us-east5-a", "timeout"),
        ("us-west4-b", "active"),
    ]
    assert fake_gcp.tpu.state_of("us-east5-a", "gemma4-e2b") is None  # cleaned, not abandoned
    assert [c["zone"] for c in fake_gcp.tpu.creates()] == ["us-west4-b"]


async def test_an_adopted_request_that_comes_up_is_the_tpu(fake_gcp, gcp_settings) -> None:
    """The request is still waiting when the sweep adopts it and comes up while the sweep waits on it. The
    fake's clock moves only once the sweep has adopted it: on the wall clock, a slow first call (cold
    imports when the test ran alone) let the sweep find it ACTIVE already, which is 'exists', not adopted."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    clock = fake_gcp.tpu.clock = FakeClock()
    fake_gcp.tpu.timings["WAITING_FOR_RESOURCES"] = 60.0
    labels = await _me(gcp_settings)
    fake_gcp.tpu.add_foreign("us-east5-a", "gemma4-e2b", labels=labels, state="ACCEPTED", valid_until_s=900)
    fake_gcp.tpu.queued[("us-east5-a", "gemma4-e2b")].outcome = "ok"
    record = JobRecord(id="t", kind="find-tpu", description="")
    result: list[SweepResult] = []

    async def sweep() -> None:
        result.append(await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-b"], budget=120)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sweep)
        with anyio.fail_after(60):
            while not str(record.progress.get("last", "")).startswith("adopted"):
                await anyio.sleep(0.02)
        assert fake_gcp.tpu.state_of("us-east5-a", "gemma4-e2b") == "WAITING_FOR_RESOURCES"
        clock.advance(60.0)
    assert result[0].found and result[0].zone == "us-east5-a", result[0]
    assert [(a.zone, a.outcome) for a in result[0].attempts] == [("us-east5-a", "active")]
    assert fake_gcp.tpu.creates() == []


async def test_requests_the_sweep_must_not_adopt_stop_it(fake_gcp, gcp_settings) -> None:
    """A waiting request the user made with create_tpu_queued_resource, or one another installation's
    sweep made (created-by someone else), is theirs: the sweep stops and names it, and touches nothing."""
    fake_gcp.secrets.put("hf-token", TOKEN)
    mine = await _me(gcp_settings)
    record = JobRecord(id="t", kind="find-tpu", description="")
    for labels in (mine | {"tool": "create_tpu_queued_resource"}, mine | {"created-by": "0123456789ab"}, RIG):
        fake_gcp.tpu.queued.clear()
        fake_gcp.tpu.add_foreign("us-east5-a", "gemma4-e2b", labels=labels, state="WAITING_FOR_RESOURCES")
        result = await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-b"], budget=0.3))
        assert not result.found and "us-east5-a" in result.stopped_because, labels
        assert fake_gcp.tpu.state_of("us-east5-a", "gemma4-e2b") == "WAITING_FOR_RESOURCES"
    assert fake_gcp.tpu.creates() == []


async def test_a_failed_request_of_ours_in_the_zone_is_cleaned_and_the_zone_tried(
    fake_gcp, gcp_settings
) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.add_foreign("us-west4-b", "gemma4-e2b", labels=await _me(gcp_settings), state="FAILED")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-b"]))
    assert result.found and result.zone == "us-west4-b" and len(fake_gcp.tpu.creates()) == 1


async def test_a_sweep_create_whose_answer_is_lost_is_waited_on_not_abandoned(
    fake_gcp, gcp_settings, monkeypatch
) -> None:
    from tpu_devops.gcp import common

    monkeypatch.setattr(common, "RETRY_DEADLINE_S", 1.0)
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    fake_gcp.tpu.lose_next_responses(10_000, only="create_queued")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-a"], budget=0.3))
    fake_gcp.tpu._lose = 0
    assert [a.outcome for a in result.attempts] == ["timeout"], result  # waited on, its budget spent
    assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None  # and deleted: nothing left waiting
    assert any("answer to the create was lost" in w for w in result.warnings)


async def test_a_zone_that_cannot_be_listed_stops_the_sweep_before_any_create(
    fake_gcp, gcp_settings, monkeypatch
) -> None:
    from tpu_devops.gcp import common
    from tpu_devops.provisioning.queued import ListingError

    monkeypatch.setattr(common, "RETRY_DEADLINE_S", 1.0)
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.fail_zone("me-west1-a", 503)
    record = JobRecord(id="t", kind="find-tpu", description="")
    with pytest.raises(ListingError) as err:
        await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-a", "us-west4-b"]))
    assert "me-west1-a" in err.value.message and fake_gcp.tpu.creates() == []
    store = ZoneStore(gcp_settings.state_dir)
    assert store.history() == []  # no zone blamed for a listing failure elsewhere


async def test_a_cancelled_sweep_deletes_the_request_it_was_waiting_on(fake_gcp, gcp_settings) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.script("us-west4-a", "wait")
    record = JobRecord(id="t", kind="find-tpu", description="")
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_sweep, gcp_settings, record, _opts("spot", ["us-west4-a"], budget=600))
        with anyio.fail_after(30):
            while fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None:
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert fake_gcp.tpu.state_of("us-west4-a", "gemma4-e2b") is None


# ---- a per-minute request quota on create: waited out in the same zone, where the capacity is -----


def _posts(fake_gcp, zone: str) -> int:
    return sum(
        1
        for r in fake_gcp.tpu.requests
        if r["method"] == "POST" and f"/locations/{zone}/queuedResources" in r["path"]
    )


def _pauses(monkeypatch) -> list[float]:
    """Every anyio.sleep the sweep asks for, in order (slept for real: the intervals are hundredths)."""
    asked: list[float] = []
    real = anyio.sleep

    async def sleep(delay: float, *args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(delay)
        await real(delay, *args, **kwargs)

    monkeypatch.setattr(anyio, "sleep", sleep)
    return asked


async def test_a_rate_limited_create_is_retried_in_the_same_zone_after_1_2_4_poll_intervals(
    fake_gcp, gcp_settings, monkeypatch
) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.fail_next(
        429, times=3, only="create_queued"
    )  # B13: 'Create requests per minute per project'
    pauses = _pauses(monkeypatch)
    record = JobRecord(id="t", kind="find-tpu", description="")
    opts = _opts("spot", ["us-west4-a", "us-west4-b"])
    result = await run_sweep(gcp_settings, record, opts)
    assert result.found and result.zone == "us-west4-a"
    assert _posts(fake_gcp, "us-west4-a") == 4 and _posts(fake_gcp, "us-west4-b") == 0
    backoffs = [opts.poll_interval_s * k for k in (1, 2, 4)]
    assert any(pauses[i : i + 3] == backoffs for i in range(len(pauses))), pauses
    assert [(a.zone, a.outcome) for a in result.attempts] == [("us-west4-a", "active")]  # the zone not blamed
    assert ZoneStore(gcp_settings.state_dir).blocker("us-west4-a", ACC, "spot") is None


async def test_a_create_still_rate_limited_after_the_backoffs_moves_on_without_skipping_the_region(
    fake_gcp, gcp_settings
) -> None:
    fake_gcp.secrets.put("hf-token", TOKEN)
    fake_gcp.tpu.fail_next(429, times=4, only="create_queued")
    record = JobRecord(id="t", kind="find-tpu", description="")
    result = await run_sweep(gcp_settings, record, _opts("spot", ["us-west4-a", "us-west4-b"]))
    assert _posts(fake_gcp, "us-west4-a") == 4  # one create and three retries, each answered at once
    first = result.attempts[0]
    assert (first.zone, first.reach, first.reason) == ("us-west4-a", "transient", "rate_limit")
    assert "per minute" in first.message
    assert result.found and result.zone == "us-west4-b"  # same region: a request rate says nothing of chips


@pytest.mark.parametrize(
    "stopped",
    [
        'configuration error in us-east5-a: Accelerator type "v5litepod-1" is not available in zone "us-east5-a".',
        "configuration error in us-east5-a: Permission 'tpu.queuedResources.create' denied",
        "no zone left.",
    ],
)
def test_headline_never_doubles_the_period_of_googles_message(stopped: str) -> None:
    out = SweepResult(
        found=False, outcome="config_error", queued_resource_id="gemma4-e2b", provisioning_model="flex-start",
        attempts=[],
        stopped_because=stopped, next_step="check ACCELERATOR_TYPE", status_file="/tmp/s.md", warnings=[],
    )  # fmt: skip
    assert ".." not in out.headline() and "check ACCELERATOR_TYPE" in out.headline()
