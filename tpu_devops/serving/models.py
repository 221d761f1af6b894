"""Which model a serving call uses: the ``/v1/models`` cards, and the caller's model, else
``MODEL_NAME`` when the server serves it, else the first served one (with a notice).

The cards also say what the server is and the context one request may use
(`tpu_devops.serving.server_kind.identify`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tpu_devops.config import Settings
from tpu_devops.serving.client import http_client, probe_timeout
from tpu_devops.serving.errors import ServingError, classify, quoted_text
from tpu_devops.serving.server_kind import UNKNOWN, ServerInfo, identify


async def served_models(url: str, *, api_key: str = "") -> list[dict[str, Any]]:
    """The model cards of ``GET /v1/models`` (vLLM adds ``max_model_len`` to each).

    ``api_key``: `Endpoint.api_key` (vLLM guards ``/v1/*`` when started with a key).

    Raises:
        ServingError: classified transport or HTTP failure.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = await http_client(url).get("/v1/models", headers=headers, timeout=probe_timeout())
        response.raise_for_status()
    except Exception as exc:
        raise classify(exc, url) from exc
    return model_cards(response, url)


def model_cards(response: Any, url: str) -> list[dict[str, Any]]:
    """The ``data`` list of an OpenAI ``/v1/models`` answer (``{"object": "list", "data": [{"id"...}]}``).

    Raises:
        ServingError(failure="not_openai_api"): the answer is not that shape (another service on the port).
    """
    try:
        body = response.json()
    except ValueError:
        body = None
    cards = body.get("data") if isinstance(body, dict) else None
    if not isinstance(cards, list) or not all(isinstance(c, dict) and "id" in c for c in cards):
        raise ServingError(
            f"GET {url}/v1/models did not return an OpenAI model list (got {quoted_text(response.text, 80)!r})",
            failure="not_openai_api",
            field="VLLM_URL",
            value=url,
            fix="point at the model server's own port (vLLM: vllm serve --port, default 8000; llama-server: --port, "
            "default 8080), not another service or a proxy page",
        )
    return cards


@dataclass
class ModelChoice:
    """The model a request will use and why (``notices`` explain substitutions). ``max_model_len``
    is the context one request may use (tokens), whatever the server calls it (`server`)."""

    model: str
    served: list[str]
    max_model_len: int | None
    notices: list[str] = field(default_factory=list)
    server: ServerInfo = field(default_factory=lambda: ServerInfo(UNKNOWN, None, "unknown"))


def looks_instruction_tuned(model: str) -> bool:
    """True for ``-it`` / instruct / chat checkpoints (chat template present)."""
    name = model.lower()
    return bool(re.search(r"(-it\b|-it-|instruct|chat)", name))


async def choose_model(
    settings: Settings, url: str, model: str | None = None, *, api_key: str = ""
) -> ModelChoice:
    """Pick the model: ``model`` argument, else ``MODEL_NAME`` if served, else the first served one.

    ``api_key``: `Endpoint.api_key` of ``url`` ("" for an endpoint that is not the rig's).

    Raises:
        ServingError: ``/v1/models`` failed, or an explicitly requested model is not served
            (failure ``model_mismatch``).
    """
    cards = await served_models(url, api_key=api_key)
    served = [str(c.get("id")) for c in cards]
    notices: list[str] = []
    if model:
        if served and model not in served:
            raise ServingError(
                f"the server does not serve model {model!r} (it serves {', '.join(served)})",
                failure="model_mismatch",
                field="model",
                value=model,
                fix=f"use one of: {', '.join(served)}",
            )
        chosen = model
    elif settings.model_name in served or not served:
        chosen = settings.model_name
    else:
        chosen = served[0]
        notices.append(
            f"MODEL_NAME {settings.model_name!r} is not served here; using {chosen!r} from /v1/models"
        )
    if not looks_instruction_tuned(chosen):
        notices.append(
            f"{chosen!r} does not look instruction-tuned (-it): chat completions need a chat template; "
            "base models answer poorly or are rejected"
        )
    server = identify(cards, chosen, settings.max_model_len)
    return ModelChoice(chosen, served, server.context_tokens, notices, server)
