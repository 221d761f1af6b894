"""The zone-attempt store and the sweep lease (`tpu_devops.provisioning.store`)."""

from __future__ import annotations

import threading

from tpu_devops.provisioning.store import ZoneStore

ACC = "v5litepod-1"


def test_store_expiry_and_model_failures_never_expire(tmp_path) -> None:
    store = ZoneStore(tmp_path)
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
    store = ZoneStore(tmp_path)
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
        store = ZoneStore(tmp_path)
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
    assert len(ZoneStore(tmp_path).history()) == 60


def test_sweep_lease_is_exclusive_and_freed_by_release_expiry_or_a_dead_process(tmp_path) -> None:
    import os
    import sqlite3
    import subprocess
    import sys

    store = ZoneStore(tmp_path)
    mine = store.acquire_lease("sweep:p:rig", "a", 60, job_id="find-tpu-1")
    assert mine is not None and mine.held
    other = ZoneStore(tmp_path).acquire_lease("sweep:p:rig", "b", 60)
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


def test_a_teardown_fence_refuses_the_creates_that_began_before_it(tmp_path) -> None:
    """A create enters only at the epoch it began with; a raised fence refuses it, across processes (two
    stores on one directory), and names the create in flight at the moment of the teardown."""
    import os

    store, other = ZoneStore(tmp_path), ZoneStore(tmp_path)
    name = "rig:demo-project:gemma4-e2b"
    assert store.fence(name).epoch == 0
    assert store.begin_create(name, "create:a", 0) is None
    fence = other.raise_fence(name, "destroy_queued_resource in server pid 1")
    assert fence.epoch == 1 and fence.creating_owner == "create:a" and fence.creating_pid == os.getpid()
    assert fence.create_in_flight() and "destroy_queued_resource" in fence.when()
    store.end_create(name, "create:a")
    assert not other.fence(name).create_in_flight()
    refused = store.begin_create(name, "create:b", 0)  # began before the teardown: refused
    assert refused is not None and refused.epoch == 1 and not store.fence(name).create_in_flight()
    assert store.begin_create(name, "create:c", 1) is None  # a new create, after it, goes ahead
    store.end_create(name, "create:other")  # not the one in flight: no effect
    assert store.fence(name).creating_owner == "create:c"


def test_a_create_in_flight_of_a_dead_process_or_too_old_is_not_waited_for(tmp_path) -> None:
    import time

    from tpu_devops.provisioning.store import CREATE_SECTION_MAX_S, Fence

    assert not Fence(
        "r", 1, creating_owner="x", creating_host="h", creating_pid=1, creating_since=0
    ).create_in_flight()
    import socket

    dead = Fence("r", 1, creating_owner="x", creating_host=socket.gethostname(), creating_pid=2**22 + 12345,
                 creating_since=time.time())  # fmt: skip
    assert not dead.create_in_flight()
    alive = Fence(
        "r", 1, creating_owner="x", creating_host="elsewhere", creating_pid=1, creating_since=time.time()
    )
    assert alive.create_in_flight()
    assert not alive.create_in_flight(now=time.time() + CREATE_SECTION_MAX_S + 1)


def test_the_lease_holder_is_read_without_taking_the_lease(tmp_path) -> None:
    store = ZoneStore(tmp_path)
    name = "rig:demo-project:gemma4-e2b"
    assert store.lease_holder(name) is None
    assert store.acquire_lease(name, "sweep:1", 60, job_id="find-tpu-1").held
    holder = store.lease_holder(name)
    assert holder is not None and holder.job_id == "find-tpu-1" and holder.held
    store.release_lease(name, "sweep:1")
    assert store.lease_holder(name) is None
