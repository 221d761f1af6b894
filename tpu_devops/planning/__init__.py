"""Planning before paying: sizing (HBM, KV cache), lint of vLLM flags, images, the startup script, the
deployment view, scale-out, multi-engine hosts, the warm boot model and prices. Pure computation on local
inputs (prices read the Billing Catalog). Submodules load on first use.
"""

from tpu_devops import lazy_submodules

__getattr__ = lazy_submodules(__name__)
