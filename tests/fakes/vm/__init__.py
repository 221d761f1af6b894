"""A simulated TPU VM that runs the rendered startup script unmodified (see `tests.fakes.vm.machine`).

`SimulatedVm` is one VM in its own network namespace; `FakeMetadata` its metadata server; `unusable`
says why this machine cannot create the namespaces (a test's skip reason); `haproxy_missing` why the
four-engine case cannot run its real HAProxy.
"""

from __future__ import annotations

import shutil

from tests.fakes.vm.metadata import ACCESS_TOKEN, FakeMetadata
from tests.fakes.vm.netns import unusable


def haproxy_missing() -> str | None:
    """Why the balancer cannot run here (None when ``haproxy`` is on PATH)."""
    if shutil.which("haproxy"):
        return None
    return "haproxy is not installed (apt-get install haproxy; .ci/run installs it)"


def __getattr__(name: str):  # the machine imports the fakes' servers: load it on first use
    if name == "SimulatedVm":
        from tests.fakes.vm.machine import SimulatedVm

        return SimulatedVm
    raise AttributeError(name)


__all__ = ["ACCESS_TOKEN", "FakeMetadata", "SimulatedVm", "haproxy_missing", "unusable"]
