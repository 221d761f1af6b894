"""Rendering the startup script for the static checks (bash -n, shellcheck, quoting) shared by
`tests/test_startup.py` and `tests/test_multiengine.py`; the planted token and API key let a test check
that neither appears in what is rendered. The script's runs on a simulated VM: tests/test_startup_vm.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

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
