"""The commands a simulated VM's PATH puts first: stand-ins for what a TPU VM has and this machine does not
(``docker``, ``systemctl``, ``logger``), ``sleep`` on the VM's scaled clock, and a ``curl`` that records
its command line (never its stdin) before running the real curl unchanged. Each is a small file written
into the VM's ``bin`` directory by `install`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# docker / systemctl: one JSON request to the VM's init (tests.fakes.vm.init) over its unix socket.
_CLIENT = r"""#!{python} -S
import json, os, socket, sys
with open(os.environ["FAKE_DIR"] + "/calls.jsonl", "a") as log:
    log.write(json.dumps(["{name}", *sys.argv[1:]]) + "\n")
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["{socket_env}"].removeprefix("unix://"))
s.sendall(json.dumps({{"argv": sys.argv[1:]}}).encode() + b"\n")
data = b""
while chunk := s.recv(1 << 16):
    data += chunk
reply = json.loads(data)
sys.stdout.write(reply["stdout"])
sys.stderr.write(reply["stderr"])
sys.exit(reply["code"])
"""

# logger -t TAG -- MESSAGE: a syslog line in the VM's /var/log/syslog (what the logging agent ships).
_LOGGER = r"""#!/bin/bash
tag=logger
while (($#)); do
  case "$1" in
    -t) tag="$2"; shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
mkdir -p "$TPU_DEVOPS_FS_ROOT/var/log"
printf '%s %s %s: %s\n' "$(date '+%b %e %H:%M:%S')" "${FAKE_HOSTNAME:-tpu-vm}" "$tag" "$*" >>"$TPU_DEVOPS_FS_ROOT/var/log/syslog"
"""

# sleep N: N x FAKE_TIME_SCALE seconds (the script's 30 s polls take 0.3 s at 0.01).
_SLEEP = r"""#!/bin/bash
exec /bin/sleep "$(awk -v s="${1:-0}" -v k="${FAKE_TIME_SCALE:-1}" 'BEGIN { printf "%.3f", s * k }')"
"""

# curl: record argv (NUL-separated, one record per line), then the real curl with everything unchanged.
_CURL = r"""#!/bin/bash
printf '%s\0' curl "$@" >>"$FAKE_DIR/argv.bin"
printf '\n' >>"$FAKE_DIR/argv.bin"
exec {curl} "$@"
"""


def install(bin_dir: Path) -> None:
    """Write the stand-ins into ``bin_dir`` (created), executable."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = Path(sys.executable).resolve()
    real_curl = shutil.which("curl", path="/usr/local/bin:/usr/bin:/bin")
    if real_curl is None:
        raise RuntimeError("curl is needed to run the startup script")
    files = {
        "docker": _CLIENT.format(python=python, name="docker", socket_env="DOCKER_HOST"),
        "systemctl": _CLIENT.format(python=python, name="systemctl", socket_env="FAKE_SYSTEMD_SOCK"),
        "logger": _LOGGER,
        "sleep": _SLEEP,
        "curl": _CURL.format(curl=real_curl),
    }
    for name, text in files.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    # python3 as the VM image has it: a plain interpreter (a version manager's shim costs ~0.2 s a call)
    link = bin_dir / "python3"
    if not link.exists():
        link.symlink_to(python)
