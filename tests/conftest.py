"""Shared pytest fixtures."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

# google-auth probes the GCE metadata server (169.254.169.254) when no credentials are found: tests
# and the processes they start must never send traffic off this machine.
os.environ.setdefault("NO_GCE_CHECK", "true")
# In-process tests read and write files under pytest's temporary directories: let tools' path checks
# (`tpu_devops.host.files`, process settings) allow them. Servers started over stdio get their own environment.
os.environ.setdefault("TPU_DEVOPS_FILE_ROOTS", tempfile.gettempdir())

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "data"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Say the order's seed last, beside the failures (``-q`` hides pytest-randomly's header line)."""
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int) and config.pluginmanager.has_plugin("randomly"):
        terminalreporter.write_line(
            f"random order: seed {seed} (repeat it with `make test SEED={seed}` or `pytest -p randomly "
            f"--randomly-seed={seed}`; `-p no:randomly` runs in file order)"
        )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _loopback(host: object) -> bool:
    import ipaddress

    if host is None or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed if any code under test tries to resolve or dial anything but loopback (a public-IP
    lookup, a metadata server, a real Google host): tests send traffic only to 127.0.0.1."""
    import socket

    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

    def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not _loopback(host):
            raise socket.gaierror(socket.EAI_NONAME, f"tests resolve only loopback names, not {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock, address):  # type: ignore[no-untyped-def]
        if isinstance(address, tuple) and not _loopback(address[0]):
            raise ConnectionRefusedError(f"tests dial only loopback, not {address[0]}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)


def _forget(module: str, *names: str) -> None:
    mod = sys.modules.get(module)  # never imported by this test run: nothing cached, nothing to import
    for name in names if mod is not None else ():
        getattr(mod, name).clear()


@pytest.fixture(autouse=True)
def _no_cache_outlives_its_test() -> Iterator[None]:
    """Forget the process-wide caches a test filled. They are keyed by endpoint URL, and the OS may give
    a later test's fake the loopback port an earlier one had: that test then read the earlier fake's
    SKUs or failed lookup (pricing), Secret Manager key (api_key), counters (metrics "since the last
    call") or pooled clients (serving), depending on which tests ran before it."""
    yield
    _forget("tpu_devops.planning.pricing", "_cache")
    _forget("tpu_devops.provisioning.api_key", "_cache")
    _forget("tpu_devops.serving.metrics", "_previous")
    _forget("tpu_devops.serving.client", "_http", "_openai")


@pytest.fixture(autouse=True)
def _no_owned_endpoints_across_tests() -> Iterator[None]:
    """Each test starts with no serving endpoint marked as this rig's (`tpu_devops.serving.egress`): a
    loopback port reused by a later test's fake must not inherit an earlier one's standing."""
    from tpu_devops.serving import egress

    egress.forget_owned()
    yield
    egress.forget_owned()


# ---- Google Cloud fakes (capacity and provisioning area) -------------------------------------

PROJECT = "demo-project"


@pytest.fixture
def fake_gcp():
    """A started `FakeGcp` (TPU, Cloud Quotas, Secret Manager, ... on one loopback URL)."""
    from tests.fakes.gcp import FakeGcp

    with FakeGcp() as fake:
        yield fake


def gcp_environ(fake_gcp, state_dir, **extra: str) -> dict[str, str]:
    """Environment for a server / `load_settings` pointed at ``fake_gcp`` (no tpu.env)."""
    env = {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "TPU_DEVOPS_GCP_ENDPOINT": fake_gcp.url,
        "TPU_DEVOPS_STATE_DIR": str(state_dir),
        "TPU_DEVOPS_ENV_FILE": str(Path(state_dir) / "no-tpu.env"),
    }
    env.update(extra)
    return env


@pytest.fixture
def gcp_settings(fake_gcp, tmp_path):
    """`Settings` pointed at ``fake_gcp`` with a private state directory."""
    from tpu_devops.config import load_settings

    return load_settings(environ=gcp_environ(fake_gcp, tmp_path))
