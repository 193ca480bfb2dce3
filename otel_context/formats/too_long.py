"""The one classifier of "the request is longer than the context window", and what such an error says.

Every part of the package that must tell a too-long rejection from another error asks here: the engine
(reactive compaction of the app's call), the instrumentation (the summarizer's own request) and the explicit
``Compactor`` API. The wording each provider uses is the format adapter's (``is_too_long_error``); what is
common to all of them (a mid-stream ``model_context_window_exceeded``, the numbers in the message) is here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from otel_context.formats.base import WireFormatAdapter

#: The statuses a provider rejects an over-long request with (400 invalid request, 413 request too large).
_REJECTION_STATUSES = (400, 413)

_TOO_LONG_NUMBERS = re.compile(r"(\d[\d,]*)\s*tokens?\s*>\s*(\d[\d,]*)")
_OPENAI_TOO_LONG = re.compile(
    r"maximum context length is\s*(\d[\d,]*)\s*tokens.*?(?:resulted in|requested)\s*(\d[\d,]*)\s*tokens",
    re.DOTALL | re.IGNORECASE,
)


def error_message(error: BaseException) -> str:
    """The provider's message of an SDK error (its body's message when present), else ``str(error)``."""
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error")
        source = inner if isinstance(inner, Mapping) else body
        message = source.get("message")
        if isinstance(message, str) and message:
            return message
    return str(getattr(error, "message", "") or error)


def error_parts(error: BaseException) -> tuple[int | None, Mapping[str, Any] | None, str]:
    """``(HTTP status, error body, message)`` of an SDK exception (or one raised inside a stream), as the
    formats' classifiers take them."""
    status = getattr(error, "status_code", None)
    body = getattr(error, "body", None)
    message = str(getattr(error, "message", "") or error)
    return (status if isinstance(status, int) else None), (body if isinstance(body, Mapping) else None), message


def is_too_long(adapter: WireFormatAdapter, error: BaseException) -> bool:
    """Whether ``error`` (an SDK exception, or one raised inside a stream) says the request exceeded the
    context window, per the format's rules."""
    status, body, message = error_parts(error)
    if status is not None and status not in _REJECTION_STATUSES:
        return False  # an overloaded or failing provider may word its error alike; only a rejection counts
    if status is None and "model_context_window_exceeded" in message:
        return True
    return bool(adapter.is_too_long_error(status, body, message))


def parse_too_long(message: str) -> tuple[int, int] | None:
    """(actual, limit) from a too-long error: Anthropic ``prompt is too long: 212230 tokens > 200000
    maximum`` or OpenAI ``maximum context length is 128000 tokens. However, your messages resulted in
    130512 tokens``; None when the message carries no numbers."""
    match = _TOO_LONG_NUMBERS.search(message)
    if match is not None:
        actual, limit = (int(g.replace(",", "")) for g in match.groups())
        return actual, limit
    match = _OPENAI_TOO_LONG.search(message)
    if match is not None:
        limit, actual = (int(g.replace(",", "")) for g in match.groups())
        return actual, limit
    return None


def overflow_gap(message: str) -> int | None:
    """Tokens over the limit, from a too-long error message; None when it does not say."""
    numbers = parse_too_long(message)
    return None if numbers is None else max(0, numbers[0] - numbers[1])
