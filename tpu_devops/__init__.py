"""tpu-devops: an MCP server for SREs who serve Gemma 4 with vLLM on Google Cloud TPU."""

__version__ = "0.1.0"
