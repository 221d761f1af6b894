"""GKE as the engine past one host: manifests, the Kubernetes API, deploy and teardown.

Submodules load on first use, like the package root (`tpu_devops.lazy_submodules`).
"""

from __future__ import annotations

from tpu_devops import lazy_submodules

__getattr__ = lazy_submodules(__name__)
