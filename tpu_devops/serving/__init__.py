"""Talking to the vLLM (or any OpenAI-compatible) endpoint: discovery, health, chat, metrics, benchmarks."""

from tpu_devops import lazy_submodules

__getattr__ = lazy_submodules(__name__)
