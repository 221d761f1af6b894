"""Typed errors. Each carries the field, the value, the cause and the fix so that `server.py` can turn
it into an MCP tool error (`isError`) that a person can act on without reading a traceback."""

from __future__ import annotations

from typing import Any

VALUE_SHOWN_CHARS = 120  # of a rejected value echoed in an error (a 1 MB argument is not repeated back)
MESSAGE_CHARS = 2000  # of an error message (one may quote a remote reply)


def shown_value(value: Any, limit: int = VALUE_SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how long it was: what an error (or a log
    line) may show of a value."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text):,} characters)"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 1]}… (cut at {limit:,} characters)"


class TpuDevopsError(Exception):
    """Base of every error this package raises on purpose.

    Args:
        message: what went wrong, in the field's terms.
        field: the input, setting or API field at fault (e.g. ``GOOGLE_CLOUD_ZONE``, ``max_model_len``).
        value: the offending value (never a secret); shown cut to `VALUE_SHOWN_CHARS`.
        fix: what the user should do next.
    """

    kind = "error"

    def __init__(self, message: str, *, field: str | None = None, value: Any = None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = value
        self.fix = fix

    def __str__(self) -> str:
        parts = []
        if self.field is not None:
            shown = "" if self.value is None else f" = {shown_value(self.value)}"
            parts.append(f"{self.field}{shown}: {_cut(self.message, MESSAGE_CHARS)}")
        else:
            parts.append(_cut(self.message, MESSAGE_CHARS))
        if self.fix:
            parts[-1] = parts[-1].rstrip()
            if not parts[-1].endswith((".", "!", "?", ":")):
                parts[-1] += "."
            parts.append(f"Fix: {self.fix}")
        return " ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """Machine-readable form: ``{"kind", "message", "field", "value", "fix"}``."""
        return {
            "kind": self.kind,
            "message": self.message,
            "field": self.field,
            "value": None if self.value is None else _cut(str(self.value), VALUE_SHOWN_CHARS),
            "fix": self.fix,
        }


class ConfigError(TpuDevopsError):
    """A setting in `tpu.env` / the environment, or a tool argument, is invalid."""

    kind = "config"


class InputError(ConfigError):
    """A tool argument is invalid (bad path, malformed file, absurd number)."""

    kind = "input"


class CloudError(TpuDevopsError):
    """A Google Cloud API call failed in a way that is not one of the classified cases below."""

    kind = "cloud"


class PermissionError_(CloudError):
    """IAM denied the call (HTTP 403 PERMISSION_DENIED)."""

    kind = "permission"


class NotFoundError(CloudError):
    """The named resource does not exist (HTTP 404)."""

    kind = "not_found"


class QuotaError(CloudError):
    """Quota exhausted in a zone or region."""

    kind = "quota"


class CapacityError(CloudError):
    """No capacity (stockout) or the provisioning model is not offered in a zone."""

    kind = "capacity"


class OwnershipError(TpuDevopsError):
    """A destructive action was asked for on a resource this server did not create."""

    kind = "ownership"


class EndpointError(TpuDevopsError):
    """No reachable vLLM endpoint, or it answered in a way that is not usable."""

    kind = "endpoint"


class JobError(TpuDevopsError):
    """Unknown job id or a job that cannot be cancelled."""

    kind = "job"


class DeadlineError(TpuDevopsError):
    """A tool call ran out of its time budget (`tpu_devops.host.deadline`): stopped, never left hanging."""

    kind = "deadline"
