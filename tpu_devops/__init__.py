"""tpu-devops: an MCP server for SREs who serve Gemma 4 with vLLM on Google Cloud TPU.

Submodules load on first attribute access (PEP 562): ``tpu_devops.planning.sizing.PlanResult`` imports
``tpu_devops.planning.sizing`` when it is first evaluated. `server.py` names its tools' logic and result types
that way, so listing the tools imports none of it (see `tpu_devops.host.tool_cache`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

__version__ = "0.1.0"


def lazy_submodules(package: str) -> Callable[[str], ModuleType]:
    """A module ``__getattr__`` for ``package`` that imports ``package.<name>`` on first access.

    Raises (from the returned function):
        AttributeError: ``package`` has no submodule ``name``.
    """

    def __getattr__(name: str) -> ModuleType:
        if not name.startswith("_"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise  # the submodule exists but one of its own imports is missing
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = lazy_submodules(__name__)
