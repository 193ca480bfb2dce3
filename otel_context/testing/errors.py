"""Provider-shaped errors: the exact JSON bodies and statuses the real APIs return.

Handlers raise :class:`SimError`; the server renders it in the wire format of the endpoint that was called,
so a client sees the same error shape as from the real API (never a traceback).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Flavor", "SimError", "anthropic_error_body", "openai_error_body"]

Flavor = Literal["anthropic", "openai"]

ANTHROPIC_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

ANTHROPIC_MESSAGES: dict[str, str] = {
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit.",
    "api_error": "Internal server error",
    "overloaded_error": "Overloaded",
    "timeout_error": "Request timeout",
    "not_found_error": "Not found",
    "authentication_error": "invalid x-api-key",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "request_too_large": "Request exceeds the maximum allowed number of bytes.",
    "invalid_request_error": "Invalid request",
    "billing_error": "Your credit balance is too low to access the Anthropic API.",
}

OPENAI_DEFAULTS: dict[int, tuple[str, str | None, str]] = {
    # status -> (type, code, message)
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: (
        "invalid_request_error",
        "unsupported_country_region_territory",
        "Country, region, or territory not supported",
    ),
    404: ("invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again in 1s."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


class _Default(enum.Enum):
    DEFAULT = "default"


DEFAULT_CODE = _Default.DEFAULT
"""``SimError.code`` value meaning "the provider's usual code for this status" (None means JSON null)."""


@dataclass
class SimError(Exception):
    """An error response. ``error_type``/``code``/``param`` default to the provider's usual values."""

    status: int
    message: str | None = None
    error_type: str | None = None
    code: str | _Default | None = DEFAULT_CODE
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message or f"HTTP {self.status}")


def anthropic_error_body(err: SimError, request_id: str) -> tuple[int, dict[str, Any]]:
    """(status, body) of ``err`` as the Anthropic API sends it."""
    etype = err.error_type or ANTHROPIC_TYPES.get(
        err.status, "api_error" if err.status >= 500 else "invalid_request_error"
    )
    message = err.message or ANTHROPIC_MESSAGES.get(etype, "Error")
    return err.status, {"type": "error", "error": {"type": etype, "message": message}, "request_id": request_id}


def openai_error_body(err: SimError) -> tuple[int, dict[str, Any]]:
    """(status, body) of ``err`` as the OpenAI API sends it (529 becomes a 503 overloaded server_error)."""
    status = 503 if err.status == 529 else err.status
    dtype, dcode, dmessage = OPENAI_DEFAULTS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, "Error.")
    )
    etype = err.error_type or dtype
    code = dcode if err.code is DEFAULT_CODE else err.code
    # An Anthropic-only type name given for an OpenAI endpoint keeps the OpenAI default.
    if err.error_type in ("overloaded_error", "api_error", "rate_limit_error"):
        etype = dtype
    message = err.message or dmessage
    return status, {"error": {"message": message, "type": etype, "param": err.param, "code": code}}
