"""Run a Python program with every dial beyond loopback refused and recorded (a socket audit hook).

``python -m tests.loopback_only PROGRAM.py [ARGS...]`` (or ``-m MODULE``) runs the program with an audit
hook (PEP 578) that refuses, before any packet leaves, a ``connect`` / ``sendto`` to an address outside
127.0.0.0/8 and ::1 and a name lookup (``getaddrinfo``) of anything but a loopback literal or
``localhost``, and a ``subprocess`` start of ``gcloud`` (google-auth asks it for a project). Each refusal is
appended as one JSON line to the file named by ``LOOPBACK_ONLY_LOG`` (and to stderr), so a test asserts the
log is empty. The refusal raises the error a dead network would (``ConnectionRefusedError``,
``socket.gaierror``), so the program under test behaves as it would where those packets were dropped.
"""

from __future__ import annotations

import ipaddress
import json
import os
import runpy
import socket
import sys
import time

LOG = os.environ.get("LOOPBACK_ONLY_LOG", "")


def _loopback(host: object) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    if host in ("localhost", "localhost.", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _refuse(event: str, target: object) -> None:
    line = json.dumps({"event": event, "target": repr(target), "t": time.time()})
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    print(f"loopback_only: refused {event} {target!r}", file=sys.stderr, flush=True)


def _hook(event: str, args: tuple) -> None:
    if event in ("socket.connect", "socket.sendto"):
        sock, address = args[0], args[1]
        if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            _refuse(event, address)
            raise ConnectionRefusedError(111, f"loopback_only: {address[0]} is not a loopback address")
    elif event == "socket.getaddrinfo":
        if not _loopback(args[0]):
            _refuse(event, args[0])
            raise socket.gaierror(socket.EAI_NONAME, f"loopback_only: no lookup of {args[0]!r}")
    elif event == "socket.gethostbyname":
        if not _loopback(args[0]):
            _refuse(event, args[0])
            raise socket.gaierror(socket.EAI_NONAME, f"loopback_only: no lookup of {args[0]!r}")
    elif event == "subprocess.Popen":
        executable = os.path.basename(str(args[0] or (args[1][0] if args[1] else "")))
        if executable.startswith("gcloud"):
            _refuse(event, executable)
            raise FileNotFoundError(2, "loopback_only: gcloud is not run here", executable)


def main() -> None:
    sys.addaudithook(_hook)
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m tests.loopback_only PROGRAM.py|-m MODULE [ARGS...]")
    if sys.argv[1] == "-m":
        module = sys.argv[2]
        sys.argv = [module, *sys.argv[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        path = sys.argv[1]
        sys.argv = sys.argv[1:]
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()
