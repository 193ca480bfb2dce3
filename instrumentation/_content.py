"""Content capture (prompts, completions) in the GenAI semconv message-parts format, size-capped.

Off by default (``NO_CONTENT``). Each wire format turns its bodies into message parts
(``capture_input`` / ``capture_output`` of its module in ``otel_context.formats``); this module caps them and
writes them on the span. Only request and response BODIES are read: headers, and so API keys
and auth tokens, never reach this module. Each captured attribute is a JSON string of at most
``capture_max_chars`` UTF-8 bytes (CJK text takes 3 bytes a character): long texts are cut first, then the
oldest messages are dropped (see :func:`fit_json`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Span

from otel_context import formats, semconv, telemetry
from otel_context.formats.base import EndpointFormat

__all__ = ["Capture", "fit_json"]

_TRUNCATED = "...[truncated]"


# --- size cap ---------------------------------------------------------------------------------------------


#: Nesting kept in captured values (tool arguments); deeper parts become the truncation marker, so neither
#: our walk nor ``json.dumps`` can hit the interpreter's recursion limit on an app's deeply nested JSON.
MAX_DEPTH = 32


def _cut_text(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (never inside a character), marked when cut."""
    if len(text) <= max_bytes // 4:  # at most 4 bytes per character: fits whatever the script
        return text
    head = text[:max_bytes]  # a character is at least one byte: the cut lies within these
    encoded = head.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes and len(head) == len(text):
        return text
    return encoded[:max_bytes].decode("utf-8", "ignore") + _TRUNCATED


def _cut_texts(value: Any, max_bytes: int | None, depth: int = 0) -> Any:
    """``value`` with every string cut to ``max_bytes`` (None: uncut) and nesting cut at :data:`MAX_DEPTH`."""
    if isinstance(value, str):
        return value if max_bytes is None else _cut_text(value, max_bytes)
    if depth >= MAX_DEPTH and isinstance(value, (list, dict)):
        return _TRUNCATED
    if isinstance(value, list):
        return [_cut_texts(v, max_bytes, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _cut_texts(v, max_bytes, depth + 1) for k, v in value.items()}
    return value


def _newest_that_fit(value: list[Any], max_bytes: int, text_bytes: int | None) -> tuple[list[str], bool]:
    """The JSON of the newest items of ``value`` whose list fits ``max_bytes`` UTF-8 bytes, oldest first, and
    whether every item fit. Walks from the newest item and stops at the first that does not fit, so the cost
    is bounded by the cap, not by the length of the history."""
    kept: list[str] = []
    used = 2  # "[]"
    for item in reversed(value):
        text = json.dumps(_cut_texts(item, text_bytes), ensure_ascii=False, default=str)
        size = len(text.encode("utf-8", "surrogatepass")) + (2 if kept else 0)  # ", " between items
        if used + size > max_bytes:
            kept.reverse()
            return kept, False
        kept.append(text)
        used += size
    kept.reverse()
    return kept, True


def fit_json(value: list[Any], max_bytes: int) -> str:
    """``value`` as a JSON list of at most ``max_bytes`` UTF-8 bytes (and so as many characters).

    Everything when it fits; else the same with long strings cut (to a quarter, then a sixteenth of the cap,
    then 16 bytes), the first of those that keeps every item; else the newest items that fit with strings cut
    to a quarter of the cap (the oldest are dropped). Linear: a 6,000-message history costs one pass over the
    items that can fit, never a re-encoding of the whole list per dropped item (that was quadratic: 22 s).
    """
    fallback: list[str] | None = None
    for text_bytes in (None, max_bytes // 4, max_bytes // 16, 16):
        if text_bytes is not None and text_bytes < 16:
            continue
        kept, complete = _newest_that_fit(value, max_bytes, text_bytes)
        if complete:
            return "[" + ", ".join(kept) + "]"
        if not fallback and text_bytes is not None:
            fallback = kept
    return "[" + ", ".join(fallback or ()) + "]"


class Capture:
    """The captured content of one call; attributes and/or the details event are written when it ends."""

    __slots__ = ("format", "input", "instructions", "max_chars", "mode", "output", "wire_format")

    def __init__(self, mode: str, max_chars: int, wire_format: str | None, body: Any) -> None:
        self.mode = mode
        self.max_chars = max_chars
        self.wire_format = wire_format
        #: The chat format whose parts are captured (None: an endpoint whose content is not captured).
        self.format: EndpointFormat | None = formats.for_format(wire_format) if wire_format is not None else None
        self.output: list[Any] | None = None
        captured = self.format.capture_input(body) if self.format is not None and isinstance(body, Mapping) else None
        self.input, self.instructions = captured if captured is not None else ([], [])

    def set_response(self, response: Any) -> None:
        if self.format is not None:
            try:
                self.output = self.format.capture_output(response)
            except Exception:
                telemetry.log_once("capture_output", "otel_context: could not capture a response", exc_info=True)

    def set_stream(self, acc: Any, final: Any) -> None:
        if final is not None:
            self.set_response(final)
            return
        texts = getattr(acc, "texts", None)
        if texts is not None:
            message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "content": "".join(texts)}]}
            reasons = acc.info.finish_reasons
            if reasons:
                message["finish_reason"] = reasons[0]
            self.output = [message]

    def finish(self, span: Span) -> None:
        attrs: dict[str, str] = {}
        if self.input:
            attrs[semconv.GEN_AI_INPUT_MESSAGES] = fit_json(self.input, self.max_chars)
        if self.instructions:
            attrs[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = fit_json(self.instructions, self.max_chars)
        if self.output is not None:
            attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = fit_json(self.output, self.max_chars)
        if not attrs:
            return
        if self.mode in ("SPAN_ONLY", "SPAN_AND_EVENT"):
            span.set_attributes(attrs)
        if self.mode in ("EVENT_ONLY", "SPAN_AND_EVENT"):
            telemetry.emit_event(span, semconv.EVENT_GEN_AI_CLIENT_INFERENCE_DETAILS, attrs)
