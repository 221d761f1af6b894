"""Thin adapters over Google Cloud APIs. Only this package imports ``google.*``, always lazily."""

from tpu_devops import lazy_submodules

__getattr__ = lazy_submodules(__name__)  # tpu_devops.gcp.common etc. load on first use (PEP 562)
