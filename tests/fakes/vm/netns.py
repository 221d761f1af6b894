"""A network namespace per simulated VM: loopback only, created and removed by the test (``ip netns``).

Inside it the VM resolves Google's host names to its own loopback (``/etc/netns/<name>/hosts``, which
``ip netns exec`` bind-mounts over ``/etc/hosts`` for the processes it starts), so the startup script's
``http://metadata.google.internal`` and ``https://storage.googleapis.com`` reach the fakes this test
serves inside the namespace, and nothing else: the namespace has no other interface.

The test process itself stays in the host namespace. It serves inside the VM's namespace, and dials
into it, from sockets made by a short-lived thread that joined the namespace (``setns(2)`` acts on the
calling thread only; a socket keeps the namespace it was made in), so the fakes' state is the test's
own objects. `Forwarder` is the VM's external address: a host loopback port whose connections are
carried to a port inside the namespace (what a firewall rule on the node's external IP admits).

Needs root (CAP_SYS_ADMIN) and iproute2; `unusable` says why not, for a test's skip reason.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
GOOGLE_HOSTS = (
    "metadata.google.internal",
    "storage.googleapis.com",
    "secretmanager.googleapis.com",
    "logging.googleapis.com",
)
_libc = ctypes.CDLL(None, use_errno=True)
_reason: str | None | bool = False  # False: not probed yet


def unusable() -> str | None:
    """Why this machine cannot create the VMs' network namespaces (None when it can). Probed once."""
    global _reason
    if _reason is not False:
        return _reason  # type: ignore[return-value]
    if shutil.which("ip") is None:
        _reason = "iproute2's `ip` is not installed (apt-get install iproute2)"
    elif os.geteuid() != 0:
        _reason = "creating network namespaces needs root (ip netns add); run the tests as root, as CI does"
    else:
        probe = f"tpuvm-probe-{secrets.token_hex(3)}"
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if made.returncode != 0:
            _reason = f"`ip netns add` failed here: {made.stderr.strip()[:200]}"
        else:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True)
            _reason = None
    return _reason  # type: ignore[return-value]


class NetNs:
    """One namespace: ``create()``, then ``exec_argv`` / ``listen`` / ``in_ns``; ``delete()`` at the end."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or f"tpuvm-{secrets.token_hex(4)}"
        self.etc = Path("/etc/netns") / self.name
        self.path = Path("/run/netns") / self.name

    def create(self) -> NetNs:
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True, capture_output=True)
        self.etc.mkdir(parents=True, exist_ok=True)
        hosts = "127.0.0.1 localhost " + " ".join(GOOGLE_HOSTS) + "\n::1 localhost\n"
        (self.etc / "hosts").write_text(hosts)
        return self

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        shutil.rmtree(self.etc, ignore_errors=True)

    def exec_argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (with its /etc/hosts)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def in_ns(self, fn: Callable[[], T]) -> T:
        """``fn()`` called on a fresh thread that joined this namespace; its result (or its exception)."""
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    if _libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns failed")
                finally:
                    os.close(fd)
                out["value"] = fn()
            except BaseException as exc:  # handed to the caller
                out["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join()
        if "error" in out:
            raise out["error"]
        return out["value"]

    def listen(self, port: int, host: str = "127.0.0.1") -> socket.socket:
        """A listening TCP socket bound inside the namespace (``port`` 0: a free one)."""

        def make() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            sock.setblocking(False)
            return sock

        return self.in_ns(make)

    def connect(self, port: int, timeout: float = 10) -> socket.socket:
        """A TCP connection to ``127.0.0.1:port`` inside the namespace."""

        def make() -> socket.socket:
            return socket.create_connection(("127.0.0.1", port), timeout=timeout)

        return self.in_ns(make)

    def request(self, port: int, path: str, *, headers: dict[str, str] | None = None, timeout: float = 10) -> tuple[int, str]:  # fmt: skip
        """``GET http://127.0.0.1:port/path`` from inside the namespace: (status, body); (0, error) when
        nothing answers."""
        import http.client

        def get() -> tuple[int, str]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            try:
                conn.request("GET", path, headers=headers or {})
                response = conn.getresponse()
                return response.status, response.read().decode("utf-8", "replace")
            except OSError as exc:
                return 0, str(exc)
            finally:
                conn.close()

        return self.in_ns(get)


class Forwarder:
    """``host:port`` on the host's loopback carried to ``127.0.0.1:target`` inside ``ns``: the node's
    external address as a client outside the VM sees it."""

    def __init__(self, ns: NetNs, target: int, host: str = "127.0.0.1", port: int = 0) -> None:
        self.ns, self.target = ns, target
        self.server = socket.create_server((host, port))
        self.host, self.port = host, self.server.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> Forwarder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        try:
            self.server.close()
        except OSError:
            pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(client,), daemon=True).start()

    def _carry(self, client: socket.socket) -> None:
        try:
            upstream = self.ns.connect(self.target, timeout=30)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        back.start()
        pump(client, upstream)
        back.join(timeout=60)
        client.close()
        upstream.close()
