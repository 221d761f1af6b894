"""Every node the fake TPU API brings up gets a simulated VM that boots its own startup-script metadata.

`VmFleet` is what ``python -m tests.fakes.gcp`` (``make fake-gcp``) and the MCP end-to-end tests run:
when a fake queued resource turns ACTIVE, its node gets a `SimulatedVm` whose metadata server serves
the node's metadata (the ``startup-script`` the server rendered, later the reconfigure spec) and whose
guest attributes go to the fake TPU's ``getGuestAttributes``; the guest agent runs the startup script,
which starts the reconfigure watcher. The node's external IP is its own loopback address
(127.0.0.N, N >= 10) whose ``vllm_port`` is carried into the VM, so endpoint discovery, health checks
and reconfigure's verification reach the VM's engine. The VM's logging agent writes its syslog, the
startup script's output and the engine's container log into the fake Cloud Logging, as Cloud Logging
holds them. A deleted (or suspended) node's VM is powered off.
"""

from __future__ import annotations

import itertools
import queue
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.fakes.vm.metadata import ACCESS_TOKEN, FakeMetadata


class VmFleet:
    """Simulated VMs for the nodes of ``gcp`` (a started `FakeGcp`). ``close()`` powers all off."""

    def __init__(
        self, gcp: Any, *, vllm_port: int, root: Path | None = None, time_scale: float = 0.01,
        boot_s: float = 2.0, project: str = "demo-project",
    ) -> None:  # fmt: skip
        self.gcp, self.vllm_port, self.time_scale, self.boot_s, self.project = (
            gcp,
            vllm_port,
            time_scale,
            boot_s,
            project,
        )
        self._own_root = root is None
        self.root = root or Path(tempfile.mkdtemp(prefix="tpu-devops-fleet-"))
        self.vms: dict[tuple[str, str], Any] = {}
        self.errors: list[str] = []
        self._ips = itertools.count(10)
        self._work: queue.Queue[tuple[str, str, str, str] | None] = queue.Queue()
        self._lock = threading.Lock()
        gcp.storage.tokens[ACCESS_TOKEN] = gcp.storage.vm_account()  # the VMs' service account
        gcp.tpu.node_hooks.append(self._node_up)
        gcp.tpu.node_gone_hooks.append(self._node_gone)
        self._worker = threading.Thread(target=self._run, daemon=True)
        self._worker.start()

    def _node_up(self, zone: str, node_id: str, node: dict[str, Any]) -> str:
        ip = f"127.0.0.{next(self._ips)}"
        self._work.put(("up", zone, node_id, ip))
        return ip

    def _node_gone(self, zone: str, node_id: str) -> None:
        self._work.put(("gone", zone, node_id, ""))

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            what, zone, node_id, ip = item
            try:
                if what == "up":
                    self._boot(zone, node_id, ip)
                else:
                    self._power_off(zone, node_id)
            except Exception as exc:  # said, not raised in a thread nobody joins
                self.errors.append(f"{what} {zone}/{node_id}: {type(exc).__name__}: {exc}")

    def _boot(self, zone: str, node_id: str, ip: str) -> None:
        from tests.fakes.vm.machine import SimulatedVm

        tpu = self.gcp.tpu
        metadata = FakeMetadata(
            project=self.project,
            attributes_source=lambda: tpu.node_metadata(zone, node_id),
            guest_sink=lambda key, value: tpu.put_guest_attribute(zone, node_id, key, value),
        )
        vm = SimulatedVm(
            self.root / f"{zone}-{node_id}", gcp=self.gcp, metadata=metadata, time_scale=self.time_scale,
            log_sink=self.gcp.logging.add, node_name=node_id, zone=zone, project=self.project,
            docker_script={"boot_s": self.boot_s},
        ).start()  # fmt: skip
        with self._lock:
            self.vms[(zone, node_id)] = vm
        vm.external(self.vllm_port, host=ip, host_port=self.vllm_port)
        script = tpu.node_metadata(zone, node_id).get("startup-script", "")
        if not script:
            return
        proc = vm.start_boot(script)

        def guest_agent() -> None:
            out, _ = proc.communicate()
            vm._script_output(out)

        threading.Thread(target=guest_agent, daemon=True).start()

    def _power_off(self, zone: str, node_id: str) -> None:
        with self._lock:
            vm = self.vms.pop((zone, node_id), None)
        if vm is not None:
            vm.stop()

    def vm(self, zone: str, node_id: str) -> Any:
        """The VM of a node (None before its hook ran)."""
        with self._lock:
            return self.vms.get((zone, node_id))

    def close(self) -> None:
        self._work.put(None)
        self._worker.join(timeout=60)
        with self._lock:
            vms, self.vms = list(self.vms.values()), {}
        for vm in vms:
            vm.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
