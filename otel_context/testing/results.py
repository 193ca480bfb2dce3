"""The request/response values passed between the HTTP server and the endpoint modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["JsonResult", "Request", "Result", "SseEvent", "StreamResult"]

SseEvent = tuple["str | None", Any]
"""(event name or None, data): data is a JSON value, or a string sent verbatim (``"[DONE]"``)."""


@dataclass
class Request:
    """A parsed HTTP request."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    request_id: str


@dataclass
class JsonResult:
    """A JSON answer."""

    body: Any
    status: int = 200
    usage: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamResult:
    """A complete SSE answer (generated up front so the record is ready before the last byte is sent)."""

    events: list[SseEvent]
    usage: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


Result = JsonResult | StreamResult
