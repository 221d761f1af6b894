"""The simulated VM's init: a docker daemon and a systemd manager stand-in in one process.

Run inside the VM's network namespace: ``python -m tests.fakes.vm.init --root VM_DIR``. It serves two
unix sockets that the VM's ``docker`` and ``systemctl`` stand-ins (`tests.fakes.vm.clis`) talk to, one
JSON request and one JSON answer per connection: ``{"argv": [...]}`` -> ``{"code", "stdout", "stderr"}``.

**docker** (``VM_DIR/docker/docker.sock``). Commands the startup script uses, with the Docker CLI's own
wordings for their errors: ``pull``, ``image inspect --format``, ``run -d`` (``--name --privileged
--net --shm-size --env-file -e -v --label --restart --log-driver --log-opt``; an unknown flag is refused
as the CLI refuses it), ``rm -f``, ``inspect -f``, ``logs --tail``, ``update --restart``, ``stop``,
``start``, ``ps``. A container is a process in the VM: a ``vllm/vllm-tpu`` image runs the fake engine
(`tests.fakes.vm.engine`) with the container's command line and environment, a ``haproxy`` image runs
the real ``haproxy`` binary on the mounted configuration; output goes to the container's log file.
Restart policies as Docker documents them (docs.docker.com "Start containers automatically"): ``no``;
``on-failure[:N]`` restarts on a non-zero exit, not when the daemon restarts; ``always``;
``unless-stopped``, not after a ``docker stop``; restarts back off from 100 ms, doubling while a run
lasted under 10 s (times scaled by ``FAKE_TIME_SCALE``).

Scripted outcomes, read from ``VM_DIR/docker/script.json`` at every command (a test may change it
between steps): ``pull_fail`` ``{image: message}`` (every pull fails with the registry's message),
``pull_fail_times`` ``{image: n}`` (the next n pulls fail, then succeed), ``gcplogs_fail`` (a message:
the gcplogs log driver cannot start), ``run_fail`` ``{container name: message}``, ``boot_s`` (how long an
engine takes to answer /health), ``engines``: ``[{"match": "<text in the serve command line>",
"exit_after_s", "exit_code", "log" (a file whose text the engine prints before exiting), "healthy":
false (runs, never healthy), "boot_s"}]`` (first match wins).

Control (same socket): ``{"control": "crash", "name": N, "code": 137}`` kills a container's process;
``{"control": "restart-daemon"}`` stops every container as a dockerd shutdown does and starts again the
ones their restart policy brings back.

**systemd** (``VM_DIR/systemd.sock``): ``daemon-reload`` (reads ``etc/systemd/system/*.service`` under the
VM's file root), ``start`` / ``restart`` / ``stop`` / ``is-active`` / ``enable``. ``ExecStart`` runs with
absolute paths that exist under the file root mapped into it; ``Restart=always`` with ``RestartSec``
restarts it; its output goes to ``var/log/journal/<unit>.log``.

State for the test: ``VM_DIR/docker/state.json`` (containers) and ``VM_DIR/docker/runs.jsonl`` (every
``docker run``: name, image, model, args, env keys, mounts, labels, restart policy, log driver).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import secrets
import shlex
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
SCALE = float(os.environ.get("FAKE_TIME_SCALE", "1"))
VALUE_FLAGS = {
    "--name", "--net", "--network", "--shm-size", "--env-file", "-e", "--env", "-v", "--volume",
    "--label", "-l", "--restart", "--log-driver", "--log-opt",
}  # fmt: skip
BOOL_FLAGS = {"-d", "--detach", "--privileged", "--rm"}


def _out(code: int = 0, stdout: str = "", stderr: str = "") -> dict[str, Any]:
    return {"code": code, "stdout": stdout, "stderr": stderr}


def _digest(ref: str) -> str:
    return hashlib.sha256(ref.encode()).hexdigest()


def _repo(ref: str) -> str:
    if "@" in ref:
        return ref.split("@", 1)[0]
    name, _, tag = ref.rpartition(":")
    return name if name and "/" not in tag else ref


@dataclass
class Container:
    id: str
    name: str
    image: str
    cmd: list[str]
    env: dict[str, str]
    mounts: list[str]
    labels: dict[str, str]
    restart: str
    log_driver: str
    log: str
    status: str = "created"  # created / running / exited / restarting
    exit_code: int = 0
    restart_count: int = 0
    manually_stopped: bool = False
    pid: int | None = None
    started_at: float = 0.0
    backoff_s: float = 0.1

    def policy(self) -> tuple[str, int]:
        name, _, n = self.restart.partition(":")
        return name or "no", int(n or 0)


class Docker:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        (root / "containers").mkdir(exist_ok=True)
        self.images: dict[str, str] = {}
        self.containers: dict[str, Container] = {}
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.watchers: dict[str, asyncio.Task[None]] = {}
        self.pull_failures: dict[str, int] = {}
        self.stopping = False  # a daemon shutdown: exits then are not the containers' own
        self.load()

    # ---- state -------------------------------------------------------------------------------------

    def script(self) -> dict[str, Any]:
        path = self.root / "script.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def load(self) -> None:
        path = self.root / "state.json"
        if not path.exists():
            return
        data = json.loads(path.read_text())
        self.images = data.get("images", {})
        for c in data.get("containers", []):
            c.update(status="exited" if c["status"] in ("running", "restarting") else c["status"], pid=None)
            self.containers[c["name"]] = Container(**c)

    def save(self) -> None:
        data = {"images": self.images, "containers": [asdict(c) for c in self.containers.values()]}
        tmp = self.root / "state.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.root / "state.json")

    # ---- commands ----------------------------------------------------------------------------------

    async def command(self, argv: list[str]) -> dict[str, Any]:
        if not argv:
            return _out(1, stderr="Usage:  docker [OPTIONS] COMMAND\n")
        cmd, args = argv[0], argv[1:]
        if cmd == "image" and args[:1] == ["inspect"]:
            return self.image_inspect(args[1:])
        handler = getattr(self, f"cmd_{cmd}", None)
        if handler is None:
            return _out(1, stderr=f"docker: '{cmd}' is not a docker command.\nSee 'docker --help'\n")
        return await handler(args)

    def _pull(self, ref: str) -> str | None:
        script = self.script()
        if ref in script.get("pull_fail", {}):
            return str(script["pull_fail"][ref])
        left = int(script.get("pull_fail_times", {}).get(ref, 0)) - self.pull_failures.get(ref, 0)
        if left > 0:
            self.pull_failures[ref] = self.pull_failures.get(ref, 0) + 1
            return 'Error response from daemon: Get "https://registry-1.docker.io/v2/": net/http: request canceled while waiting for connection (Client.Timeout exceeded while awaiting headers)'  # noqa: E501
        self.images[ref] = _digest(ref)
        self.save()
        return None

    async def cmd_pull(self, args: list[str]) -> dict[str, Any]:
        if len(args) != 1:
            return _out(1, stderr='"docker pull" requires exactly 1 argument.\n')
        ref = args[0]
        error = self._pull(ref)
        if error:
            return _out(1, stderr=error + "\n")
        digest = self.images[ref]
        tag = ref.rsplit(":", 1)[-1] if ":" in ref.rsplit("/", 1)[-1] else "latest"
        return _out(0, stdout=f"{tag}: Pulling from {_repo(ref)}\nDigest: sha256:{digest}\n"
                    f"Status: Downloaded newer image for {ref}\ndocker.io/{ref}\n")  # fmt: skip

    def image_inspect(self, args: list[str]) -> dict[str, Any]:
        fmt, refs = _format_and_rest(args)
        if not refs:
            return _out(1, stderr='"docker image inspect" requires at least 1 argument.\n')
        ref = refs[-1]
        if ref not in self.images:
            return _out(1, stderr=f"Error response from daemon: No such image: {ref}\n")
        digest = self.images[ref]
        values = {
            "{{index .RepoDigests 0}}": f"{_repo(ref)}@sha256:{digest}",
            "{{.Id}}": f"sha256:{_digest(digest)}",
        }
        if fmt not in values:
            return _out(1, stderr=f"the docker stand-in has no template {fmt!r}\n")
        return _out(0, stdout=values[fmt] + "\n")

    async def cmd_run(self, args: list[str]) -> dict[str, Any]:
        opts: dict[str, list[str]] = {}
        flags: set[str] = set()
        i = 0
        while i < len(args) and args[i].startswith("-"):
            token = args[i]
            name, eq, inline = token.partition("=")
            if name in BOOL_FLAGS:
                flags.add(name)
                i += 1
                continue
            if name not in VALUE_FLAGS:
                return _out(125, stderr=f"unknown flag: {name}\nSee 'docker run --help'.\n")
            if eq:
                value = inline
                i += 1
            else:
                if i + 1 >= len(args):
                    return _out(125, stderr=f"flag needs an argument: {name}\nSee 'docker run --help'.\n")
                value = args[i + 1]
                i += 2
            opts.setdefault(
                {"--network": "--net", "--env": "-e", "--volume": "-v", "-l": "--label"}.get(name, name), []
            ).append(value)
        if i >= len(args):
            return _out(125, stderr='docker: "docker run" requires at least 1 argument.\n')
        image, cmd = args[i], args[i + 1 :]
        restart = (opts.get("--restart") or ["no"])[-1]
        pname, _, count = restart.partition(":")
        if (
            pname not in ("no", "always", "unless-stopped", "on-failure")
            or (count and not count.isdigit())
            or (count and pname != "on-failure")
        ):
            return _out(125, stderr=f"docker: invalid restart policy format: {restart}\n")
        name = (opts.get("--name") or [f"c{secrets.token_hex(4)}"])[-1]
        script = self.script()
        if name in self.containers:
            other = self.containers[name].id
            return _out(125, stderr=f'docker: Error response from daemon: Conflict. The container name "/{name}" is already '
                        f'in use by container "{other}". You have to remove (or rename) that container to be able to reuse that name.\n')  # fmt: skip
        driver = (opts.get("--log-driver") or ["json-file"])[-1]
        if driver not in ("json-file", "gcplogs", "local", "none", "journald"):
            return _out(125, stderr=f'docker: Error response from daemon: logger: no log driver named \'{driver}\' is registered.\n')  # fmt: skip
        if driver == "gcplogs" and script.get("gcplogs_fail"):
            return _out(125, stderr=f"docker: Error response from daemon: failed to initialize logging driver: {script['gcplogs_fail']}.\n")  # fmt: skip
        if image not in self.images:
            error = self._pull(image)
            if error:
                return _out(125, stderr=f"Unable to find image '{image}' locally\ndocker: {error}.\n")
        if name in script.get("run_fail", {}):
            return _out(125, stderr=f"docker: Error response from daemon: {script['run_fail'][name]}.\n")
        env: dict[str, str] = {}
        env_modes = []
        for path in opts.get("--env-file", []):
            try:
                env_modes.append(oct(Path(path).stat().st_mode & 0o777)[2:])
            except OSError:
                pass
            try:
                text = Path(path).read_text()
            except OSError as exc:
                return _out(
                    125, stderr=f"docker: open {path}: {exc.strerror.lower() if exc.strerror else exc}.\n"
                )
            for line in text.splitlines():
                if line.strip() and not line.startswith("#") and "=" in line:
                    k, v = line.split("=", 1)
                    env[k] = v
        for pair in opts.get("-e", []):
            k, _, v = pair.partition("=")
            env[k] = v
        mounts = opts.get("-v", [])
        for m in mounts:
            host = m.split(":", 1)[0]
            if not host.startswith("/"):
                return _out(125, stderr=f'docker: Error response from daemon: create {host}: "{host}" includes invalid characters for a local volume name.\n')  # fmt: skip
            if not Path(host).exists():
                Path(host).mkdir(parents=True, exist_ok=True)  # as the daemon does for a bind mount's source
        labels = dict(label.partition("=")[::2] for label in opts.get("--label", []))
        cid = secrets.token_hex(32)
        log = self.root / "containers" / f"{name}-{cid[:12]}.log"
        c = Container(cid, name, image, cmd, env, mounts, labels, restart, driver, str(log))
        self.containers[name] = c
        with open(self.root / "runs.jsonl", "a") as runs:
            serve = cmd.index("serve") if "serve" in cmd else -1
            runs.write(json.dumps({
                "name": name, "image": image, "cmd": cmd, "model": cmd[serve + 1] if serve >= 0 else None,
                "args": cmd[serve + 2 :] if serve >= 0 else [], "env_keys": sorted(env), "mounts": mounts,
                "labels": labels, "restart": restart, "log_driver": driver, "privileged": "--privileged" in flags,
                "env_file_modes": env_modes,
                "net": (opts.get("--net") or [""])[-1], "shm_size": (opts.get("--shm-size") or [""])[-1],
            }) + "\n")  # fmt: skip
        await self.start(c)
        return _out(0, stdout=cid + "\n")

    async def cmd_rm(self, args: list[str]) -> dict[str, Any]:
        force = any(a in ("-f", "--force") for a in args)
        names = [a for a in args if not a.startswith("-")]
        err, code = "", 0
        for name in names:
            c = self.containers.get(name)
            if c is None:
                err += f"Error response from daemon: No such container: {name}\n"
                code = 1
                continue
            if c.status == "running" and not force:
                err += (f"Error response from daemon: cannot remove container \"/{name}\": container is running: "
                        "stop the container before removing or force remove\n")  # fmt: skip
                code = 1
                continue
            await self.kill(c, manual=True)
            del self.containers[name]
        self.save()
        return _out(code, stdout="".join(f"{n}\n" for n in names if n not in self.containers), stderr=err)

    async def cmd_stop(self, args: list[str]) -> dict[str, Any]:
        names = [a for a in args if not a.startswith("-")]
        for name in names:
            c = self.containers.get(name)
            if c is None:
                return _out(1, stderr=f"Error response from daemon: No such container: {name}\n")
            await self.kill(c, manual=True, sig=signal.SIGTERM)
        self.save()
        return _out(0, stdout="".join(f"{n}\n" for n in names))

    async def cmd_start(self, args: list[str]) -> dict[str, Any]:
        for name in args:
            c = self.containers.get(name)
            if c is None:
                return _out(1, stderr=f"Error response from daemon: No such container: {name}\n")
            c.manually_stopped = False
            if c.status != "running":
                await self.start(c)
        return _out(0, stdout="".join(f"{n}\n" for n in args))

    async def cmd_update(self, args: list[str]) -> dict[str, Any]:
        restart, names, i = None, [], 0
        while i < len(args):
            name, eq, inline = args[i].partition("=")
            if name == "--restart":
                restart = inline if eq else args[i + 1]
                i += 1 if eq else 2
            elif args[i].startswith("-"):
                return _out(125, stderr=f"unknown flag: {name}\nSee 'docker update --help'.\n")
            else:
                names.append(args[i])
                i += 1
        pname = (restart or "").partition(":")[0]
        if restart is None or pname not in ("no", "always", "unless-stopped", "on-failure"):
            return _out(125, stderr=f"invalid restart policy format: {restart}\n")
        for name in names:
            c = self.containers.get(name)
            if c is None:
                return _out(1, stderr=f"Error response from daemon: No such container: {name}\n")
            c.restart = restart
        self.save()
        return _out(0, stdout="".join(f"{n}\n" for n in names))

    async def cmd_inspect(self, args: list[str]) -> dict[str, Any]:
        fmt, names = _format_and_rest(args)
        out, err, code = "", "", 0
        for name in names:
            c = self.containers.get(name)
            if c is None:
                err += f"Error: No such object: {name}\n"
                code = 1
                continue
            values = {
                "{{.State.Running}}": "true" if c.status == "running" else "false",
                "{{.State.Status}}": c.status,
                "{{.State.ExitCode}}": str(c.exit_code),
                "{{.RestartCount}}": str(c.restart_count),
                "{{.HostConfig.RestartPolicy.Name}}": c.policy()[0],
                "{{.Id}}": c.id,
            }
            if fmt not in values:
                return _out(1, stderr=f"the docker stand-in has no template {fmt!r}\n")
            out += values[fmt] + "\n"
        return _out(code, stdout=out, stderr=err)

    async def cmd_logs(self, args: list[str]) -> dict[str, Any]:
        tail, names, i = None, [], 0
        while i < len(args):
            if args[i] in ("--tail", "-n"):
                tail, i = args[i + 1], i + 2
            elif args[i].startswith("--tail="):
                tail, i = args[i].split("=", 1)[1], i + 1
            else:
                names.append(args[i])
                i += 1
        if len(names) != 1:
            return _out(1, stderr='"docker logs" requires exactly 1 argument.\n')
        c = self.containers.get(names[0])
        if c is None:
            return _out(1, stderr=f"Error response from daemon: No such container: {names[0]}\n")
        try:
            lines = Path(c.log).read_text(errors="replace").splitlines(keepends=True)
        except OSError:
            lines = []
        if tail not in (None, "all"):
            lines = lines[-int(tail) :] if int(tail) else []
        return _out(0, stdout="".join(lines))

    async def cmd_ps(self, args: list[str]) -> dict[str, Any]:
        every = "-a" in args or "--all" in args
        rows = [c.name for c in self.containers.values() if every or c.status == "running"]
        return _out(0, stdout="".join(f"{r}\n" for r in rows))

    # ---- processes ---------------------------------------------------------------------------------

    def argv_of(self, c: Container) -> tuple[list[str], dict[str, str]]:
        env = {**os.environ, **c.env}
        if c.image.split("@")[0].split(":")[0].endswith("haproxy"):
            cfg = next((m.split(":")[0] for m in c.mounts if ":/usr/local/etc/haproxy/haproxy.cfg" in m), "")
            return ["haproxy", "-db", "-f", cfg], env
        line = " ".join(c.cmd)
        behaviour = {"boot_s": self.script().get("boot_s", 0.2)}
        for b in self.script().get("engines", []):
            if b.get("match", "") in line:
                behaviour.update(b)
                break
        env.update({
            "FAKE_ENGINE_BOOT_S": str(behaviour.get("boot_s", 0.2)),
            "FAKE_ENGINE_EXIT_AFTER_S": str(behaviour.get("exit_after_s", "")),
            "FAKE_ENGINE_EXIT_CODE": str(behaviour.get("exit_code", 1)),
            "FAKE_ENGINE_LOG": str(behaviour.get("log", "")),
            "FAKE_ENGINE_HEALTHY": "0" if behaviour.get("healthy") is False else "1",
            "FAKE_CONTAINER_NAME": c.name,
            # where the container's /root/.cache/vllm is on the VM: the engine leaves a compiled program there
            "FAKE_ENGINE_COMPILE_CACHE": next((m.split(":")[0] for m in c.mounts if ":/root/.cache/vllm" in m), ""),
            "PYTHONPATH": str(REPO),
        })  # fmt: skip
        return [sys.executable, "-m", "tests.fakes.vm.engine", *c.cmd], env

    async def start(self, c: Container) -> None:
        argv, env = self.argv_of(c)
        log = open(c.log, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=str(REPO),
                start_new_session=True,
            )
        except OSError as exc:  # the image's program is not installed here (e.g. haproxy)
            log.write(f"exec {argv[0]}: {exc.strerror}\n".encode())
            log.close()
            c.status, c.exit_code = "exited", 127
            self.save()
            return
        log.close()
        c.status, c.pid, c.started_at = "running", proc.pid, time.monotonic()
        self.procs[c.name] = proc
        self.save()
        self.watchers[c.name] = asyncio.get_running_loop().create_task(self.watch(c, proc))

    async def watch(self, c: Container, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if self.containers.get(c.name) is not c or self.procs.get(c.name) is not proc:
            return
        ran = time.monotonic() - c.started_at
        c.status, c.exit_code, c.pid = "exited", code if code >= 0 else 128 - code, None
        self.save()
        if c.manually_stopped or self.stopping:
            return
        policy, limit = c.policy()
        again = policy in ("always", "unless-stopped") or (
            policy == "on-failure" and c.exit_code != 0 and (not limit or c.restart_count < limit)
        )
        if not again:
            return
        c.backoff_s = 0.1 if ran >= 10 * SCALE else min(c.backoff_s * 2, 60.0)
        c.status = "restarting"
        self.save()
        await asyncio.sleep(c.backoff_s)
        if self.containers.get(c.name) is c and c.status == "restarting":
            c.restart_count += 1
            await self.start(c)

    async def kill(self, c: Container, *, manual: bool, sig: int = signal.SIGKILL) -> None:
        c.manually_stopped = c.manually_stopped or manual
        proc = self.procs.pop(c.name, None)
        if proc and proc.returncode is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                await asyncio.wait_for(proc.wait(), timeout=10)
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            c.exit_code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        if c.status in ("running", "restarting"):
            c.status = "exited"
        c.pid = None

    async def control(self, request: dict[str, Any]) -> dict[str, Any]:
        what = request.get("control")
        if what == "crash":
            c = self.containers.get(request.get("name", ""))
            proc = self.procs.get(c.name) if c else None
            if c is None or proc is None or proc.returncode is not None:
                return _out(1, stderr="not running\n")
            os.killpg(proc.pid, int(request.get("signal", signal.SIGKILL)))
            return _out(0)
        if what == "restart-daemon":
            self.stopping = True
            for c in list(self.containers.values()):
                await self.kill(c, manual=False, sig=signal.SIGTERM)
            self.save()
            self.stopping = False
            await self.boot()
            return _out(0)
        return _out(1, stderr=f"unknown control {what!r}\n")

    async def boot(self) -> None:
        """Daemon start: containers whose policy says so come back (not on-failure, not a stopped one)."""
        for c in list(self.containers.values()):
            policy, _ = c.policy()
            if c.status != "running" and (
                policy == "always" or (policy == "unless-stopped" and not c.manually_stopped)
            ):
                c.restart_count += 1
                await self.start(c)

    async def shutdown(self) -> None:
        self.stopping = True
        for c in list(self.containers.values()):
            await self.kill(c, manual=False, sig=signal.SIGTERM)
        self.save()


def _format_and_rest(args: list[str]) -> tuple[str, list[str]]:
    fmt, rest, i = "", [], 0
    while i < len(args):
        if args[i] in ("-f", "--format"):
            fmt, i = args[i + 1], i + 2
        elif args[i].startswith("--format="):
            fmt, i = args[i].split("=", 1)[1], i + 1
        else:
            rest.append(args[i])
            i += 1
    return fmt, rest


@dataclass
class Unit:
    name: str
    exec_start: list[str]
    restart: str = "no"
    restart_sec: float = 0.1
    proc: asyncio.subprocess.Process | None = None
    active: bool = False
    starts: int = 0
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class Systemd:
    def __init__(self, fs: Path, log_dir: Path) -> None:
        self.fs, self.log_dir = fs, log_dir
        self.units: dict[str, Unit] = {}
        self.calls: list[list[str]] = []

    def reload(self) -> None:
        for path in sorted((self.fs / "etc/systemd/system").glob("*.service")):
            section, values = "", {}
            for raw in path.read_text().splitlines():
                line = raw.strip()
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1]
                elif "=" in line and section == "Service":
                    k, v = line.split("=", 1)
                    values[k.strip()] = v.strip()
            argv = [self._path(a) for a in shlex.split(values.get("ExecStart", ""))]
            unit = self.units.get(path.name) or Unit(path.name, argv)
            unit.exec_start = argv
            unit.restart = values.get("Restart", "no")
            unit.restart_sec = float(values.get("RestartSec", "0.1").rstrip("s")) * SCALE
            self.units[path.name] = unit

    def _path(self, arg: str) -> str:
        mapped = self.fs / arg.lstrip("/")
        return str(mapped) if arg.startswith("/") and arg.startswith(("/var/", "/etc/", "/opt/")) else arg

    async def command(self, argv: list[str]) -> dict[str, Any]:
        self.calls.append(argv)
        (self.log_dir / "systemctl.calls").open("a").write(" ".join(argv) + "\n")
        verb, names = (argv[0] if argv else ""), argv[1:]
        if verb == "daemon-reload":
            self.reload()
            return _out(0)
        units = []
        for name in names:
            key = name if name.endswith(".service") else f"{name}.service"
            if key not in self.units:
                return _out(5, stderr=f"Failed to {verb} {key}: Unit {key} not found.\n")
            units.append(self.units[key])
        for unit in units:
            if verb in ("start", "restart"):
                if verb == "restart" or not unit.active:
                    await self.stop(unit)
                    unit.active = True
                    unit.task = asyncio.get_running_loop().create_task(self.supervise(unit))
            elif verb == "stop":
                await self.stop(unit)
            elif verb == "is-active":
                return _out(0 if unit.active else 3, stdout=("active" if unit.active else "inactive") + "\n")
            elif verb != "enable":
                return _out(1, stderr=f"the systemctl stand-in has no verb {verb!r}\n")
        return _out(0)

    async def supervise(self, unit: Unit) -> None:
        while unit.active:
            log = open(self.log_dir / f"{unit.name}.log", "ab")  # noqa: SIM115
            unit.proc = await asyncio.create_subprocess_exec(
                *unit.exec_start, stdout=log, stderr=asyncio.subprocess.STDOUT, start_new_session=True
            )
            log.close()
            unit.starts += 1
            await unit.proc.wait()
            if (
                not unit.active
                or unit.restart not in ("always", "on-failure")
                or (unit.restart == "on-failure" and unit.proc.returncode == 0)
            ):
                unit.active = False
                return
            await asyncio.sleep(unit.restart_sec)

    async def stop(self, unit: Unit) -> None:
        unit.active = False
        proc = unit.proc
        if proc and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), timeout=10)
            except (ProcessLookupError, TimeoutError):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if unit.task:
            unit.task.cancel()
            unit.task = None


async def serve(root: Path, fs: Path) -> None:
    docker = Docker(root / "docker")
    log_dir = fs / "var/log/journal"
    log_dir.mkdir(parents=True, exist_ok=True)
    systemd = Systemd(fs, log_dir)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Any) -> None:
        try:
            request = json.loads(await reader.readline())
            if "control" in request:
                reply = await docker.control(request)
            else:
                reply = await handler(list(request.get("argv") or []))
        except Exception as exc:  # the stand-in says what went wrong instead of hanging the caller
            reply = _out(1, stderr=f"stand-in error: {type(exc).__name__}: {exc}\n")
        writer.write(json.dumps(reply).encode() + b"\n")
        await writer.drain()
        writer.close()

    for sock in (root / "docker" / "docker.sock", root / "systemd.sock"):
        sock.unlink(missing_ok=True)
    d = await asyncio.start_unix_server(
        lambda r, w: answer(r, w, docker.command), path=str(root / "docker" / "docker.sock")
    )
    s = await asyncio.start_unix_server(
        lambda r, w: answer(r, w, systemd.command), path=str(root / "systemd.sock")
    )
    await docker.boot()
    (root / "init.ready").write_text(str(os.getpid()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    d.close()
    s.close()
    for unit in systemd.units.values():
        await systemd.stop(unit)
    await docker.shutdown()
    (root / "init.ready").unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, type=Path, help="the VM's directory")
    parser.add_argument("--fs", required=True, type=Path, help="the VM's file root (TPU_DEVOPS_FS_ROOT)")
    args = parser.parse_args()
    asyncio.run(serve(args.root, args.fs))


if __name__ == "__main__":
    main()
