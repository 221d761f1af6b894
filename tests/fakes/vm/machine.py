"""One simulated TPU VM: the rendered startup script run unmodified by bash, as the guest agent runs it.

What the VM has, and what stands in for it (nothing leaves its network namespace, `tests.fakes.vm.netns`):

- **network**: its own namespace, loopback only; ``metadata.google.internal`` and the Google API host
  names resolve to its loopback (``/etc/netns/<ns>/hosts``).
- **metadata server**: `FakeMetadata` on 127.0.0.1:80 inside the namespace (node metadata, guest
  attributes).
- **Google APIs**: the strict fakes (`tests.fakes.gcp.FakeGcp`, every request checked against Google's
  discovery documents) served over TLS on 127.0.0.1:443 inside the namespace with a throwaway CA
  (``CURL_CA_BUNDLE``): Secret Manager and Cloud Storage as the script calls them, with the real curl.
- **init**: `tests.fakes.vm.init`, the docker daemon (containers are the fake engine or the real
  HAProxy, with restart policies) and the systemd manager (the reconfigure watcher's unit).
- **PATH**: `tests.fakes.vm.clis` (docker, systemctl, logger, scaled sleep, a curl that records argv).
- **file root**: ``TPU_DEVOPS_FS_ROOT`` = ``<root>/fs`` (the script keeps every file under it).
- **serial console**: ``/dev/ttyS0`` inside the VM's mount namespace is a pseudo-terminal whose other
  end this process copies to ``<root>/serial.log`` (writes append, as on a serial port).
- **logging agent** (optional ``log_sink``): syslog lines, the startup script's output and gcplogs
  containers' output become Cloud Logging entries in the shapes Google writes them (logs ``syslog``,
  ``google_metadata_script_runner``, ``gcplogs-docker-driver``; resource ``gce_instance``).

Time: the script's ``sleep`` runs ``time_scale`` times faster (its 30 s polls take 0.3 s at 0.01);
restart delays of docker and systemd are scaled the same way. Nothing here is a speed assertion.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.fakes.http_runner import ServerThread
from tests.fakes.vm import clis
from tests.fakes.vm.metadata import FakeMetadata
from tests.fakes.vm.netns import Forwarder, NetNs
from tests.fakes.vm.tls import make_certificates

REPO = Path(__file__).resolve().parents[3]
LogSink = Callable[[list[dict[str, Any]]], None]


class SimulatedVm:
    """``vm = SimulatedVm(root, gcp=fake_gcp).start(); vm.boot(script)``; ``vm.stop()`` at the end."""

    def __init__(
        self,
        root: Path,
        *,
        gcp: Any,
        metadata: FakeMetadata | None = None,
        time_scale: float = 0.01,
        log_sink: LogSink | None = None,
        node_name: str = "gemma4-e2b",
        zone: str = "us-west4-a",
        project: str = "demo-project",
        docker_script: dict[str, Any] | None = None,
    ) -> None:
        self.root = root
        self.gcp = gcp
        self.metadata = metadata or FakeMetadata(project=project)
        self.time_scale = time_scale
        self.log_sink = log_sink
        self.node_name, self.zone, self.project = node_name, zone, project
        self.instance_id = str(int(hashlib.sha256(f"{zone}/{node_name}".encode()).hexdigest()[:12], 16))
        self.ns = NetNs()
        self.bin, self.fake, self.fs = root / "bin", root / "fake", root / "fs"
        self.docker_dir = root / "docker"
        self._servers: list[ServerThread] = []
        self._forwarders: list[Forwarder] = []
        self._init: subprocess.Popen[bytes] | None = None
        self._watch: threading.Thread | None = None
        self._stop_logs = threading.Event()
        self._offsets: dict[str, int] = {}
        self._inserts = 0
        self.script(docker_script or {})

    # ---- life cycle -----------------------------------------------------------------------------

    def start(self) -> SimulatedVm:
        for d in (self.bin, self.fake, self.fs, self.docker_dir, self.root / "home"):
            d.mkdir(parents=True, exist_ok=True)
        clis.install(self.bin)
        self._open_serial()
        self.ns.create()
        try:
            self.ca, cert, key = make_certificates(self.root / "tls")
            self.metadata.start(sock=self.ns.listen(80))
            self._servers.append(
                ServerThread(
                    self.gcp.app, sock=self.ns.listen(443), ssl_certfile=str(cert), ssl_keyfile=str(key)
                ).start()
            )
            self.start_init()
        except BaseException:
            self.stop()
            raise
        if self.log_sink:
            self._watch = threading.Thread(target=self._ship_logs, daemon=True)
            self._watch.start()
        return self

    @property
    def env(self) -> dict[str, str]:
        """The environment of every process of the VM."""
        return {
            "PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.root / "home"),
            "LANG": "C.UTF-8",
            "TPU_DEVOPS_FS_ROOT": str(self.fs),
            "CURL_CA_BUNDLE": str(self.ca),
            "SSL_CERT_FILE": str(self.ca),
            "DOCKER_HOST": f"unix://{self.docker_dir / 'docker.sock'}",
            "FAKE_SYSTEMD_SOCK": str(self.root / "systemd.sock"),
            "FAKE_DIR": str(self.fake),
            "FAKE_TIME_SCALE": str(self.time_scale),
            "FAKE_HOSTNAME": self.node_name,
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` as a VM process: in the namespace, with its serial console on /dev/ttyS0."""
        bind = 'if [ -e /dev/ttyS0 ]; then mount --bind "$0" /dev/ttyS0 2>/dev/null || true; fi; exec "$@"'
        return self.ns.exec_argv(["/bin/sh", "-c", bind, self._serial_tty, *argv])

    def _open_serial(self) -> None:
        import pty

        master, slave = pty.openpty()
        self._serial_tty = os.ttyname(slave)
        self._serial_fds = (master, slave)
        log = open(self.root / "serial.log", "ab", buffering=0)  # noqa: SIM115 - closed by the copier

        def copy() -> None:
            try:
                while data := os.read(master, 4096):
                    log.write(data.replace(b"\r\n", b"\n"))
            except OSError:
                pass
            finally:
                log.close()

        threading.Thread(target=copy, daemon=True).start()

    def start_init(self) -> None:
        (self.root / "init.ready").unlink(missing_ok=True)
        log = open(self.root / "init.log", "ab")  # noqa: SIM115 - the child keeps it
        self._init = subprocess.Popen(
            self.argv([sys.executable, "-m", "tests.fakes.vm.init", "--root", str(self.root), "--fs", str(self.fs)]),
            env={**self.env, "PYTHONPATH": str(REPO)}, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 30  # a bound for a broken init, not a speed assertion
        while not (self.root / "init.ready").exists():
            if self._init.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the VM's init did not start: {(self.root / 'init.log').read_text()[-2000:]}"
                )
            time.sleep(0.02)

    def stop_init(self) -> None:
        """Power off the VM's processes: the watcher unit and every container (nothing restarts)."""
        if self._init is None:
            return
        if self._init.poll() is None:
            os.killpg(self._init.pid, signal.SIGTERM)
            try:
                self._init.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._init.pid, signal.SIGKILL)
                self._init.wait()
        self._init = None

    def stop(self) -> None:
        """Stop everything this VM started and remove its namespace."""
        self._stop_logs.set()
        for f in self._forwarders:
            f.stop()
        try:
            self.stop_init()
        finally:
            for server in self._servers:
                server.stop()
            self.metadata.stop()
            self.ns.delete()
            for fd in getattr(self, "_serial_fds", ()):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self._watch:
                self._watch.join(timeout=5)
                self._ship_once()

    # ---- what the guest agent and the operator do -----------------------------------------------

    def boot(self, script: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess[str]:
        """Run the startup script to its end, as the guest agent runs it at boot (root, bash)."""
        proc = self.start_boot(script, **env)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise AssertionError(
                f"the startup script did not end within {timeout} s:\n{out[-4000:]}"
            ) from None
        self._script_output(out)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def start_boot(self, script: str, **env: str) -> subprocess.Popen[str]:
        """Start the startup script in the background (stdout and stderr together)."""
        path = self.root / "startup.sh"
        path.write_text(script)
        return subprocess.Popen(
            self.argv(["bash", str(path)]), env={**self.env, **env}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip

    def reboot(self, script: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Power cycle: every process stops, /run is emptied (a tmpfs), the disk stays; dockerd comes back
        (restarting what its policies say), then the guest agent runs the startup script again."""
        self.stop_init()
        shutil.rmtree(self.fs / "run", ignore_errors=True)
        self.start_init()
        return self.boot(script, **env)

    def script(self, outcomes: dict[str, Any]) -> None:
        """Replace the docker stand-in's scripted outcomes (`tests.fakes.vm.init`)."""
        self.docker_dir.mkdir(parents=True, exist_ok=True)
        (self.docker_dir / "script.json").write_text(json.dumps(outcomes))

    def docker(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run the VM's ``docker`` (the stand-in CLI) as an operator on the VM would."""
        return subprocess.run(
            [str(self.bin / "docker"), *argv], env=self.env, capture_output=True, text=True, timeout=60
        )

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """A control request to the docker daemon stand-in (``crash``, ``restart-daemon``)."""
        import socket

        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(60)
            s.connect(str(self.docker_dir / "docker.sock"))
            s.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data)

    def crash(self, container: str) -> None:
        """The container's main process dies (SIGKILL, exit 137), as an engine crash."""
        reply = self.control({"control": "crash", "name": container})
        assert reply["code"] == 0, reply

    def restart_dockerd(self) -> None:
        """dockerd stops (its containers with it) and starts again."""
        reply = self.control({"control": "restart-daemon"})
        assert reply["code"] == 0, reply

    def external(self, port: int, host: str = "127.0.0.1", host_port: int = 0) -> Forwarder:
        """The node's external address for ``port``: a host loopback port carried into the VM."""
        forwarder = Forwarder(self.ns, port, host=host, port=host_port).start()
        self._forwarders.append(forwarder)
        return forwarder

    def request(self, port: int, path: str, **headers: str) -> tuple[int, str]:
        """``GET http://127.0.0.1:port/path`` from inside the VM: (status, body); (0, error) if refused."""
        return self.ns.request(port, path, headers=headers)

    # ---- what the test reads --------------------------------------------------------------------

    @property
    def state(self) -> Path:
        return self.fs / "var" / "lib" / "tpu-devops"

    def containers(self) -> dict[str, dict[str, Any]]:
        """The docker daemon's containers by name (status, exit_code, restart_count, restart, env, ...)."""
        path = self.docker_dir / "state.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        return {c["name"]: c for c in data.get("containers", [])}

    def runs(self) -> list[dict[str, Any]]:
        """Every ``docker run`` (name, image, model, args, env_keys, mounts, restart, log_driver)."""
        path = self.docker_dir / "runs.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def calls(self, command: str | None = None) -> list[list[str]]:
        """Every docker / systemctl command line the VM ran (``command`` filters by the program)."""
        path = self.fake / "calls.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [r for r in rows if command is None or r[0] == command]

    def argv_lines(self) -> list[list[str]]:
        """Every command line of curl, docker and systemctl the VM ran, as argv lists."""
        out = [list(r) for r in self.calls()]
        path = self.fake / "argv.bin"
        if path.exists():
            for record in path.read_bytes().split(b"\0\n"):
                if record.strip(b"\n"):
                    out.append([a.decode() for a in record.strip(b"\n").split(b"\0") if a])
        return out

    def syslog(self) -> str:
        path = self.fs / "var" / "log" / "syslog"
        return path.read_text() if path.exists() else ""

    def serial(self) -> str:
        return (self.root / "serial.log").read_text()

    def journal(self, unit: str) -> str:
        path = self.fs / "var" / "log" / "journal" / f"{unit}.log"
        return path.read_text() if path.exists() else ""

    def wait_for(self, predicate: Callable[[], Any], what: str, bound_s: float = 90) -> Any:
        """Poll ``predicate`` until truthy; a bound for a stuck VM, not a speed assertion."""
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"{what}: not within {bound_s} s")

    # ---- the logging agent ------------------------------------------------------------------------

    def _entry(self, log: str, *, severity: str = "INFO", **payload: Any) -> dict[str, Any]:
        self._inserts += 1
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        entry = {
            "insertId": f"{self.instance_id[-6:]}{self._inserts:08x}",
            "logName": f"projects/{self.project}/logs/{log}",
            "resource": {"type": "gce_instance",
                         "labels": {"instance_id": self.instance_id, "zone": self.zone, "project_id": self.project}},
            "timestamp": now, "receiveTimestamp": now, "severity": severity, **payload,
        }  # fmt: skip
        return entry

    def _script_output(self, text: str) -> None:
        if not self.log_sink or not text:
            return
        self.log_sink([
            self._entry("google_metadata_script_runner", jsonPayload={"message": f"startup-script: {line}"},
                        labels={"instance_name": self.node_name})
            for line in text.splitlines() if line.strip()
        ])  # fmt: skip

    def _new_lines(self, path: Path) -> list[str]:
        key = str(path)
        try:
            with open(path, "rb") as f:
                f.seek(self._offsets.get(key, 0))
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self._offsets[key] = self._offsets.get(key, 0) + end
        return data[:end].decode("utf-8", "replace").splitlines()

    def _ship_once(self) -> None:
        if not self.log_sink:
            return
        entries = [
            self._entry("syslog", severity="ERROR" if " STAGE failed " in line else "INFO", textPayload=line,
                        labels={"compute.googleapis.com/resource_name": self.node_name})
            for line in self._new_lines(self.fs / "var/log/syslog")
        ]  # fmt: skip
        for c in self.containers().values():
            if c.get("log_driver") != "gcplogs":
                continue
            for line in self._new_lines(Path(c["log"])):
                bad = any(w in line for w in (" ERROR ", "Error:", "Traceback", "Failure"))
                entries.append(self._entry(
                    "gcplogs-docker-driver", severity="ERROR" if bad else "INFO",
                    jsonPayload={"message": line, "container": {"name": f"/{c['name']}", "imageName": c["image"],
                                                                "id": c["id"]},
                                 "instance": {"name": self.node_name, "zone": self.zone, "id": self.instance_id}},
                ))  # fmt: skip
        if entries:
            self.log_sink(entries)

    def _ship_logs(self) -> None:
        while not self._stop_logs.wait(0.1):
            try:
                self._ship_once()
            except Exception:  # a half-written state file: read it again next round
                continue
