"""The record of every request and response, for assertions in tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Exchange"]


@dataclass
class Exchange:
    """One HTTP exchange as the simulated provider saw it.

    ``headers`` are lower-cased; ``body`` is the parsed JSON request (None when it was not JSON);
    ``response`` is the parsed JSON for a non-streamed answer or the list of ``(event, data)`` SSE events
    (``event`` is None for OpenAI chat chunks, ``data`` is parsed JSON or the raw string such as
    ``"[DONE]"``); ``usage`` is the usage the provider reported (None for errors). ``dropped`` is True
    when a fault closed the connection early; ``fault`` is the injected fault that applied, if any.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int
    response: Any
    usage: dict[str, Any] | None = None
    stream: bool = False
    request_id: str = ""
    dropped: bool = False
    fault: Any = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
