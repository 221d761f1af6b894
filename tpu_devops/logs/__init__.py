"""Log sources, template mining, redaction, boot-log diagnosis and the Gemma analyst loop."""

from tpu_devops import lazy_submodules

__getattr__ = lazy_submodules(__name__)
