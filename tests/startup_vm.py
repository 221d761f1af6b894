"""The rendered startup script run as on a TPU VM, with stand-ins for what the VM has (curl to the
metadata server and Secret Manager, docker, logger, sleep), through `tests.bash_shims`.

Shared by the single-engine (`tests/test_startup.py`) and multi-engine (`tests/test_multiengine.py`)
script tests. The stand-ins serve a planted Hugging Face token and API key, so a test can check where
they went.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

from tests.bash_shims import ShimRun, run_bash
from tpu_devops.config import Settings, load_settings
from tpu_devops.planning import startup

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
PLANTED = "hf_PLANTEDtokenValue0123456789"
PLANTED_KEY = "PLANTEDvllmApiKey-0123456789_abcdefghijklm"


def settings(**env: str) -> Settings:
    """Settings with no tpu.env: multimodal limits and a 4096 batch budget, plus ``env``."""
    base = {"LIMIT_MM_PER_PROMPT": '{"image":4,"audio":1}', "MAX_NUM_BATCHED_TOKENS": "4096"}
    base.update(env)
    return load_settings(Path("/nonexistent/tpu.env"), base)


def render(tmp_path: Path, **env: str) -> Path:
    """The script rendered for `settings` (``**env``), written to ``tmp_path/startup.sh``."""
    result = startup.render_startup_script(settings(**env))
    path = tmp_path / "startup.sh"
    path.write_text(result.script)
    return path


FAKE_CURL = r"""#!/bin/bash
printf 'curl %s\n' "$*" >>"$FAKE_DIR/argv.log"
config=""
for a in "$@"; do if [[ "$a" == "-" ]]; then config=$(cat); fi; done
url=""
for a in "$@"; do [[ "$a" == http* ]] && url="$a"; done
if [[ -n "$config" ]]; then url=$(sed -n 's/^url = "\(.*\)"$/\1/p' <<<"$config"); fi
case "$url" in
  *service-accounts/default/token) echo '{"access_token":"ya29.fake-access","expires_in":3599}' ;;
  *project/project-id) echo "metadata-project" ;;
  *secretmanager.googleapis.com*)
    n=$(cat "$FAKE_DIR/secret_calls" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" >"$FAKE_DIR/secret_calls"
    echo "$url" >>"$FAKE_DIR/secret_urls"
    grep -q 'Authorization: Bearer ya29.fake-access' <<<"$config" || exit 22
    if (( n <= ${FAKE_SECRET_FAILURES:-0} )); then exit 22; fi
    case "$url" in
      */secrets/vllm-api-key/*) printf '{"name":"x","payload":{"data":"%s"}}\n' "$FAKE_KEY_B64" ;;
      *) printf '{"name":"x","payload":{"data":"%s"}}\n' "$FAKE_TOKEN_B64" ;;
    esac ;;
  *guest-attributes*) cat "${@: -2:1}" >/dev/null 2>&1; echo "$url" >>"$FAKE_DIR/guest_attributes" ;;
  *"/health") exit 0 ;;
  *) exit 22 ;;
esac
"""

FAKE_DOCKER = r"""#!/bin/bash
printf 'docker %s\n' "$*" >>"$FAKE_DIR/argv.log"
if [[ "$1" == run && -n "${FAKE_GCPLOGS_FAIL:-}" && "$*" == *gcplogs* ]]; then
  echo "docker: Error response from daemon: failed to initialize logging driver: gcplogs" >&2
  exit 125
fi
if [[ "$1" == run ]]; then
  prev=""
  for a in "$@"; do
    if [[ "$prev" == --env-file ]]; then stat -c '%a' "$a" >"$FAKE_DIR/env_mode"; cp "$a" "$FAKE_DIR/env_copy"; fi
    prev="$a"
  done
fi
[[ "$1" == inspect ]] && echo true
exit 0
"""

FAKE_LOGGER = """#!/bin/bash
printf '%s\\n' "$*" >>"$FAKE_DIR/syslog"
"""


def run_startup_script(
    script: Path,
    workdir: Path,
    *,
    curl: str = FAKE_CURL,
    docker: str = FAKE_DOCKER,
    secret_failures: int = 0,
    gcplogs_fail: bool = False,
) -> tuple[ShimRun, Path]:
    """Run ``script`` with the VM stand-ins (``curl`` / ``docker`` replace the default ones), the
    first ``secret_failures`` Secret Manager reads refused and, with ``gcplogs_fail``, docker refusing
    the gcplogs driver. The VM's root filesystem is ``workdir/fs`` (TPU_DEVOPS_FS_ROOT).

    Returns (the run, the fs root).
    """
    fs = workdir / "fs"
    fs.mkdir(parents=True)
    run = run_bash(
        [str(script)],
        workdir,
        # systemctl: the reconfigure watcher's unit (tests/test_startup_vm.py runs the watcher itself)
        {
            "curl": curl,
            "docker": docker,
            "logger": FAKE_LOGGER,
            "sleep": "#!/bin/bash\n",
            "systemctl": "#!/bin/bash\n",
        },
        {
            "FAKE_TOKEN_B64": base64.b64encode(PLANTED.encode()).decode(),
            "FAKE_KEY_B64": base64.b64encode(PLANTED_KEY.encode()).decode(),
            "FAKE_SECRET_FAILURES": str(secret_failures),
            "FAKE_GCPLOGS_FAIL": "1" if gcplogs_fail else "",
            "TPU_DEVOPS_FS_ROOT": str(fs),
        },
    )
    return run, fs
