"""Talking to the vLLM (or any OpenAI-compatible) endpoint: discovery, health, chat, metrics, benchmarks."""
