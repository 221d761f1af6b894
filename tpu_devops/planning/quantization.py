"""Which ``--quantization`` methods the TPU platform accepts, as data with its source.

vLLM checks the method against the platform at config time (``Platform.verify_quantization``: "gptq
quantization is currently not supported in tpu."), minutes into a billed boot on a TPU VM. The TPU
platform is tpu-inference's ``TpuPlatform``; its ``supported_quantization`` list, read from
vllm-project/tpu-inference ``tpu_inference/platforms/tpu_platform.py`` (snapshot b8692ff, 2026-08-22,
with the history of that line):

- 2025-05-15 (commit 93396e8df): ``tpu_int8``, ``compressed-tensors``; 2025-09-03 (#618): + ``awq``;
  2025-09-11 (#680): + ``fp8``; 2025-10-27 (#861): + ``mxfp4``; 2026-04-17 (#2307): ``mxfp4`` renamed
  ``gpt_oss_mxfp4``; 2026-05-12 (#2503): + ``modelopt_fp4``; 2026-05-15 (#2637): ``tpu_int8`` removed;
  2026-06-03 (#2792): + ``deepseek_v4_fp8``; 2026-06-18 (#2933): ``awq`` renamed ``auto_awq``.

GPTQ, bitsandbytes, GGUF and the Marlin kernels were never on the list: they are GPU kernels.
Weight quantization that TPU does run goes through a pre-quantized checkpoint (compressed-tensors,
AWQ, fp8) or qwix (``--additional-config '{"quantization": {"qwix": ...}}'``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TPU_SUPPORTED_QUANTIZATION: tuple[str, ...] = (
    "compressed-tensors",
    "auto_awq",
    "fp8",
    "gpt_oss_mxfp4",
    "modelopt_fp4",
    "deepseek_v4_fp8",
)
# Names earlier tpu-inference releases accepted, and the change that dropped or renamed them.
TPU_EARLIER_QUANTIZATION: dict[str, str] = {
    "tpu_int8": "removed 2026-05-15 (tpu-inference #2637)",
    "awq": "renamed auto_awq 2026-06-18 (tpu-inference #2933)",
    "mxfp4": "renamed gpt_oss_mxfp4 2026-04-17 (tpu-inference #2307)",
}
QUANTIZATION_SOURCE = (
    "vllm-project/tpu-inference tpu_inference/platforms/tpu_platform.py TpuPlatform.supported_quantization "
    "(snapshot b8692ff, 2026-08-22); vLLM Platform.verify_quantization ('X quantization is currently not "
    "supported in tpu.')"
)


@dataclass(frozen=True)
class QuantizationCheck:
    """A ``--quantization`` method against the TPU platform's list."""

    method: str
    status: Literal["supported", "earlier_only", "unsupported"]
    note: str


def check_tpu_quantization(method: str) -> QuantizationCheck:
    """``method`` (``--quantization`` value, case as vLLM reads it: lower case) against the TPU list.

    ``earlier_only``: accepted by an older tpu-inference under this name (an older image may boot);
    ``unsupported``: never accepted on TPU.
    """
    name = method.strip().lower()
    if name in TPU_SUPPORTED_QUANTIZATION:
        return QuantizationCheck(name, "supported", "on the TPU platform's list")
    if name in TPU_EARLIER_QUANTIZATION:
        return QuantizationCheck(name, "earlier_only", TPU_EARLIER_QUANTIZATION[name])
    return QuantizationCheck(name, "unsupported", "never on the TPU platform's list")


def supported_text() -> str:
    """The supported methods as one comma-separated string (for fixes)."""
    return ", ".join(TPU_SUPPORTED_QUANTIZATION)
