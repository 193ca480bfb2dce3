"""Content capture (prompts, completions) in the GenAI semconv message-parts format, size-capped.

Off by default (``NO_CONTENT``). Only request and response BODIES are read: headers, and so API keys
and auth tokens, never reach this module. Each captured attribute is a JSON string of at most
``capture_max_chars`` UTF-8 bytes (CJK text takes 3 bytes a character): long texts are cut first, then the
oldest messages are dropped (see :func:`fit_json`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Span

from otel_context import semconv, telemetry

__all__ = ["Capture", "fit_json"]

_TRUNCATED = "...[truncated]"


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _seq(value: Any) -> list[Any] | tuple[Any, ...]:
    """``value`` if it is a list or tuple, else empty: an app's malformed content (``True``, ``42``, a dict
    where a list belongs) is captured as no parts rather than failing the whole capture (or iterating a
    dict's keys)."""
    return value if isinstance(value, (list, tuple)) else ()


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(t for b in content if isinstance(t := _get(b, "text"), str))
    return ""


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    if hasattr(raw, "model_dump"):
        return raw.model_dump(mode="json")
    return raw


# --- per wire format ---------------------------------------------------------------------------------------


def _anthropic_part(block: Any) -> dict[str, Any] | None:
    if isinstance(block, str):
        return {"type": "text", "content": block}
    kind = _get(block, "type")
    if kind == "text":
        return {"type": "text", "content": _get(block, "text") or ""}
    if kind in ("tool_use", "server_tool_use"):
        return {
            "type": "tool_call",
            "id": _get(block, "id"),
            "name": _get(block, "name"),
            "arguments": _arguments(_get(block, "input")),
        }
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": _get(block, "tool_use_id"),
            "response": _text_of(_get(block, "content")),
        }
    if kind == "thinking":
        return {"type": "reasoning", "content": _get(block, "thinking") or ""}
    if kind == "compaction":
        return {"type": "compaction", "content": _get(block, "content") or _text_of(_get(block, "content"))}
    if kind in ("image", "document"):
        return {"type": "blob", "modality": "image" if kind == "image" else "document"}
    return {"type": str(kind)} if kind else None


def _anthropic_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    return [p for b in _seq(content) if (p := _anthropic_part(b)) is not None]


def _anthropic_input(body: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    system = body.get("system")
    instructions = _anthropic_parts(system) if isinstance(system, (str, list, tuple)) else []
    messages = [
        {"role": _get(m, "role"), "parts": _anthropic_parts(_get(m, "content"))} for m in _seq(body.get("messages"))
    ]
    return messages, instructions


def _anthropic_output(response: Any) -> list[Any]:
    reason = _get(response, "stop_reason")
    message: dict[str, Any] = {"role": "assistant", "parts": _anthropic_parts(_get(response, "content"))}
    if reason:
        message["finish_reason"] = semconv.FINISH_REASON_MAP.get(str(reason), str(reason))
    return [message]


def _chat_parts(message: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    content = _get(message, "content")
    if isinstance(content, str):
        parts.append({"type": "text", "content": content})
    elif isinstance(content, (list, tuple)):
        for part in content:
            kind = _get(part, "type")
            if kind == "text":
                parts.append({"type": "text", "content": _get(part, "text") or ""})
            elif kind in ("image_url", "input_audio", "file"):
                parts.append({"type": "blob", "modality": "image" if kind == "image_url" else str(kind)})
    for call in _seq(_get(message, "tool_calls")):
        function = _get(call, "function")
        parts.append(
            {
                "type": "tool_call",
                "id": _get(call, "id"),
                "name": _get(function, "name"),
                "arguments": _arguments(_get(function, "arguments")),
            }
        )
    return parts


def _chat_input(body: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    messages: list[Any] = []
    instructions: list[Any] = []
    for m in _seq(body.get("messages")):
        role = _get(m, "role")
        if role in ("system", "developer"):
            instructions.extend(_chat_parts(m))
        elif role == "tool":
            messages.append(
                {
                    "role": "tool",
                    "parts": [
                        {
                            "type": "tool_call_response",
                            "id": _get(m, "tool_call_id"),
                            "response": _text_of(_get(m, "content")),
                        }
                    ],
                }
            )
        else:
            messages.append({"role": role, "parts": _chat_parts(m)})
    return messages, instructions


def _chat_output(response: Any) -> list[Any]:
    out = []
    for choice in _get(response, "choices") or ():
        reason = _get(choice, "finish_reason")
        message: dict[str, Any] = {"role": "assistant", "parts": _chat_parts(_get(choice, "message"))}
        if reason:
            message["finish_reason"] = semconv.FINISH_REASON_MAP.get(str(reason), str(reason))
        out.append(message)
    return out


def _responses_item(item: Any) -> dict[str, Any] | None:
    kind = _get(item, "type")
    role = _get(item, "role")
    if kind in (None, "message") and role is not None:
        content = _get(item, "content")
        if isinstance(content, str):
            parts = [{"type": "text", "content": content}]
        else:
            parts = [
                {"type": "text", "content": _get(c, "text") or ""}
                for c in _seq(content)
                if _get(c, "type") in ("input_text", "output_text", "text")
            ]
        return {"role": role, "parts": parts}
    if kind == "function_call":
        part = {
            "type": "tool_call",
            "id": _get(item, "call_id"),
            "name": _get(item, "name"),
            "arguments": _arguments(_get(item, "arguments")),
        }
        return {"role": "assistant", "parts": [part]}
    if kind == "function_call_output":
        output = _get(item, "output")
        part = {
            "type": "tool_call_response",
            "id": _get(item, "call_id"),
            "response": output if isinstance(output, str) else _text_of(output),
        }
        return {"role": "tool", "parts": [part]}
    if kind == "reasoning":
        text = "".join(t for s in _seq(_get(item, "summary")) if isinstance(t := _get(s, "text"), str))
        return {"role": "assistant", "parts": [{"type": "reasoning", "content": text}]}
    if kind == "compaction":
        return {"role": "assistant", "parts": [{"type": "compaction", "content": ""}]}
    return None


def _responses_input(body: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    instructions = body.get("instructions")
    system = [{"type": "text", "content": instructions}] if isinstance(instructions, str) else []
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"role": "user", "parts": [{"type": "text", "content": raw}]}], system
    return [m for item in _seq(raw) if (m := _responses_item(item)) is not None], system


def _responses_output(response: Any) -> list[Any]:
    return [m for item in _get(response, "output") or () if (m := _responses_item(item)) is not None]


_INPUT = {"anthropic_messages": _anthropic_input, "openai_chat": _chat_input, "openai_responses": _responses_input}
_OUTPUT = {"anthropic_messages": _anthropic_output, "openai_chat": _chat_output, "openai_responses": _responses_output}


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

    __slots__ = ("input", "instructions", "max_chars", "mode", "output", "wire_format")

    def __init__(self, mode: str, max_chars: int, wire_format: str | None, body: Any) -> None:
        self.mode = mode
        self.max_chars = max_chars
        self.wire_format = wire_format
        self.output: list[Any] | None = None
        reader = _INPUT.get(wire_format or "")
        if reader is not None and isinstance(body, Mapping):
            self.input, self.instructions = reader(body)
        else:
            self.input, self.instructions = [], []

    def set_response(self, response: Any) -> None:
        writer = _OUTPUT.get(self.wire_format or "")
        if writer is not None:
            try:
                self.output = writer(response)
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
