"""Is the model an instruction-tuned checkpoint? Chat completions and tool calling need one.

A base (pretrained) checkpoint has no chat training: through ``/v1/chat/completions`` it continues the
prompt instead of answering it, and it never emits the tool-call syntax that ``--tool-call-parser``
reads (Gemma 4's own, for ``gemma4``), so tool calls never parse. The rig serves chat and tool calling
(the startup script's ``--enable-auto-tool-choice``), so a base model id is flagged wherever they are
configured: lint, plan, create, check_setup.

How a model id says which it is (the publishers' naming, on their Hugging Face model pages): Gemma marks
the instruction-tuned checkpoint with ``-it`` (google/gemma-4-E2B-it; the base is google/gemma-4-E2B, and
``-pt`` says pretrained), Llama and Mistral with ``-Instruct`` (meta-llama/Llama-3.1-8B-Instruct vs
Llama-3.1-8B), Qwen 2 / 2.5 with ``-Instruct``; Qwen3's plain ids are post-trained chat models and only
``-Base`` marks the base one. An id of another family without a marker is not judged (``unknown``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Verdict = Literal["instruct", "base", "unknown"]

INSTRUCT_MARKERS = ("it", "instruct", "chat", "sft", "dpo", "rlhf", "assistant")
BASE_MARKERS = ("base", "pt", "pretrained")
# Families whose instruction-tuned checkpoints always carry a marker (module docstring).
MARKED_FAMILIES = (
    ("gemma", "-it"),
    ("llama", "-Instruct"),
    ("mistral", "-Instruct"),
    ("mixtral", "-Instruct"),
    ("qwen2", "-Instruct"),
)


@dataclass(frozen=True)
class ChatCheckpoint:
    """``verdict`` for ``model``, ``why`` in one sentence, and the id to use instead (``suggested``)."""

    model: str
    verdict: Verdict
    why: str
    suggested: str | None = None

    def warning(self, configured: str = "chat completions and tool calling") -> str | None:
        """The warning for a base checkpoint where ``configured`` is served; None otherwise."""
        if self.verdict != "base":
            return None
        instead = f" (e.g. {self.suggested})" if self.suggested else ""
        return (
            f"NOT AN INSTRUCTION-TUNED MODEL: {self.model} is a base checkpoint ({self.why}), but {configured} "
            f"need the instruction-tuned one{instead}: a base model continues the prompt instead of answering, "
            "and never emits the tool-call syntax the parser reads"
        )


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[-_./\s]+", name.lower()) if t]


def chat_checkpoint(model: str | None) -> ChatCheckpoint:
    """Judge ``model`` (a repo id, or a local path whose directory or file name is the model's) by its
    name (module docstring). Never raises; an empty id is ``unknown``."""
    text = (model or "").strip()
    if not text:
        return ChatCheckpoint(text, "unknown", "no model given")
    name = (
        text.rsplit("/", 1)[-1] if "/" in text and not text.startswith((".", "/", "~")) else Path(text).name
    )
    if name.lower() == "config.json":
        name = Path(text).parent.name
    tokens = _tokens(name)
    if any(t in INSTRUCT_MARKERS for t in tokens):
        return ChatCheckpoint(text, "instruct", f"'{name}' carries an instruction-tuned marker")
    if any(t in BASE_MARKERS for t in tokens):
        return ChatCheckpoint(text, "base", f"'{name}' is marked as the base / pretrained checkpoint")
    low = name.lower()
    for family, marker in MARKED_FAMILIES:
        if low.startswith(family):
            return ChatCheckpoint(
                text, "base",
                f"its family marks instruction-tuned checkpoints with '{marker}', and '{name}' has none",
                suggested=f"{text}{marker}",
            )  # fmt: skip
    return ChatCheckpoint(text, "unknown", f"no naming rule known for '{name}'")
