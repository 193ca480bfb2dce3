"""What each wire format says about a call: request attributes, response facts, and stream events.

One small class per wire format reads the SDK's pydantic objects or plain JSON dicts alike (``_get``), so
the same code serves parsed responses, raw JSON bodies and stream events. Nothing here touches a span:
the interceptor in ``_core`` decides what becomes an attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_context import semconv
from otel_context.usage import (
    TokenUsage,
    merge_stream_usage,
    usage_from_anthropic,
    usage_from_deepseek,
    usage_from_openai_chat,
    usage_from_openai_responses,
)

__all__ = ["FORMATS", "Accumulator", "ResponseInfo", "WireFormatHandler"]

_FINISH = semconv.FINISH_REASON_MAP


#: Whether a type is a mapping, decided once per type (an ABC ``isinstance`` per field read is slow).
_IS_MAPPING: dict[type, bool] = {dict: True}


def _get(obj: Any, name: str) -> Any:
    """Field ``name`` of an SDK object or a JSON dict (None when absent)."""
    if obj is None:
        return None
    cls = type(obj)
    mapping = _IS_MAPPING.get(cls)
    if mapping is None:
        mapping = issubclass(cls, Mapping)
        if len(_IS_MAPPING) < 1024:  # bounded, whatever the caller passes
            _IS_MAPPING[cls] = mapping
    return obj.get(name) if mapping else getattr(obj, name, None)


def _finish(reason: Any) -> str | None:
    if reason is None:
        return None
    text = str(reason)
    return _FINISH.get(text, text)


@dataclass
class ResponseInfo:
    """The facts of one response that go on the span (all optional: old or odd responses lack fields)."""

    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: tuple[str, ...] = ()
    usage: TokenUsage | None = None


class Accumulator:
    """Folds stream events into a :class:`ResponseInfo`; keeps what was seen when the consumer stops early."""

    __slots__ = ("info", "summary", "texts")

    def __init__(self) -> None:
        self.info = ResponseInfo()
        #: Output text deltas, collected only when content capture is on.
        self.texts: list[str] | None = None
        #: A small JSON-shaped summary of the streamed response for the engine (id, model, usage, blocks).
        self.summary: dict[str, Any] | None = None

    def add(self, event: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class WireFormatHandler:
    """Base: a format whose responses carry nothing we read (count_tokens)."""

    #: contract wire format name for chat formats (None: not a chat format, the engine is not involved).
    wire_format: str | None = None

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        return ResponseInfo(response_id=_get(response, "id"), response_model=_get(response, "model"))

    def new_accumulator(self, provider: str) -> Accumulator | None:
        return None

    def response_text(self, response: Any) -> str:
        return ""


def _sampling_attributes(body: Mapping[str, Any], max_keys: tuple[str, ...]) -> dict[str, Any]:
    """Max tokens (the first of ``max_keys`` the body sets: each format, and each API generation, names it
    differently), temperature and top_p, when the body sets them to numbers."""
    attrs: dict[str, Any] = {}
    for key in max_keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            attrs[semconv.GEN_AI_REQUEST_MAX_TOKENS] = value
            break
    for key, name in (("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE), ("top_p", semconv.GEN_AI_REQUEST_TOP_P)):
        value = body.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attrs[name] = float(value)
    return attrs


# --- Anthropic messages -----------------------------------------------------------------------------------


class AnthropicMessages(WireFormatHandler):
    wire_format: str | None = "anthropic_messages"

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return _sampling_attributes(body, ("max_tokens",))

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        reason = _finish(_get(response, "stop_reason"))
        usage = _get(response, "usage")
        return ResponseInfo(
            response_id=_get(response, "id"),
            response_model=_get(response, "model"),
            finish_reasons=(reason,) if reason else (),
            usage=usage_from_anthropic(usage) if usage is not None else None,
        )

    def new_accumulator(self, provider: str) -> Accumulator:
        return _AnthropicAccumulator()

    def response_text(self, response: Any) -> str:
        parts = [_get(b, "text") or "" for b in _get(response, "content") or () if _get(b, "type") == "text"]
        return "".join(parts)


class _AnthropicAccumulator(Accumulator):
    __slots__ = ()

    def add(self, event: Any) -> None:
        kind = _get(event, "type")
        info = self.info
        if kind == "message_start":
            message = _get(event, "message")
            info.response_id = _get(message, "id")
            info.response_model = _get(message, "model")
            usage = _get(message, "usage")
            if usage is not None:
                info.usage = merge_stream_usage(None, usage)
            self.summary = {"id": info.response_id, "model": info.response_model, "content": []}
        elif kind == "message_delta":
            reason = _finish(_get(_get(event, "delta"), "stop_reason"))
            if reason:
                info.finish_reasons = (reason,)
            usage = _get(event, "usage")
            if usage is not None:
                info.usage = merge_stream_usage(info.usage, usage)
        elif kind == "content_block_start" and self.summary is not None:
            block_type = _get(_get(event, "content_block"), "type")
            self.summary["content"].append({"type": block_type})
        elif kind == "content_block_delta" and self.texts is not None:
            text = _get(_get(event, "delta"), "text")
            if isinstance(text, str):
                self.texts.append(text)


# --- OpenAI chat completions ------------------------------------------------------------------------------


def _chat_usage(usage: Any, provider: str) -> TokenUsage:
    if provider == semconv.PROVIDER_DEEPSEEK:
        return usage_from_deepseek(usage)
    return usage_from_openai_chat(usage)


class OpenAIChat(WireFormatHandler):
    wire_format: str | None = "openai_chat"

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return _sampling_attributes(body, ("max_completion_tokens", "max_tokens"))

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        reasons = tuple(r for c in _get(response, "choices") or () if (r := _finish(_get(c, "finish_reason"))))
        usage = _get(response, "usage")
        return ResponseInfo(
            response_id=_get(response, "id"),
            response_model=_get(response, "model"),
            finish_reasons=reasons,
            usage=_chat_usage(usage, provider) if usage is not None else None,
        )

    def new_accumulator(self, provider: str) -> Accumulator:
        return _OpenAIChatAccumulator(provider)

    def response_text(self, response: Any) -> str:
        choices = _get(response, "choices") or ()
        for choice in choices:
            content = _get(_get(choice, "message"), "content")
            if isinstance(content, str):
                return content
        return ""


class _OpenAIChatAccumulator(Accumulator):
    __slots__ = ("_provider", "_reasons")

    def __init__(self, provider: str) -> None:
        super().__init__()
        self._provider = provider
        self._reasons: dict[int, str] = {}

    def add(self, event: Any) -> None:
        info = self.info
        if info.response_id is None:
            info.response_id = _get(event, "id")
            info.response_model = _get(event, "model")
        for choice in _get(event, "choices") or ():
            if self.texts is not None and not _get(choice, "index"):
                text = _get(_get(choice, "delta"), "content")
                if isinstance(text, str):
                    self.texts.append(text)
            reason = _get(choice, "finish_reason")
            if reason is not None:
                self._reasons[_get(choice, "index") or 0] = _finish(reason) or ""
                info.finish_reasons = tuple(self._reasons[i] for i in sorted(self._reasons))
        usage = _get(event, "usage")
        if usage is not None:
            info.usage = _chat_usage(usage, self._provider)


# --- OpenAI responses -------------------------------------------------------------------------------------

_RESPONSES_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _responses_finish(response: Any) -> tuple[str, ...]:
    status = _get(response, "status")
    if status == "completed":
        for item in _get(response, "output") or ():
            if _get(item, "type") == "function_call":
                return (_finish("tool_calls") or "tool_call",)
        return ("stop",)
    if status == "incomplete":
        reason = _get(_get(response, "incomplete_details"), "reason")
        return (_RESPONSES_INCOMPLETE.get(str(reason), str(reason)),) if reason else ("incomplete",)
    if status == "failed":
        return ("error",)
    return ()


class OpenAIResponses(WireFormatHandler):
    wire_format: str | None = "openai_responses"

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return _sampling_attributes(body, ("max_output_tokens",))

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        usage = _get(response, "usage")
        return ResponseInfo(
            response_id=_get(response, "id"),
            response_model=_get(response, "model"),
            finish_reasons=_responses_finish(response),
            usage=usage_from_openai_responses(usage) if usage is not None else None,
        )

    def new_accumulator(self, provider: str) -> Accumulator:
        return _OpenAIResponsesAccumulator(self)

    def response_text(self, response: Any) -> str:
        parts: list[str] = []
        for item in _get(response, "output") or ():
            if _get(item, "type") == "message":
                parts.extend(
                    _get(c, "text") or "" for c in _get(item, "content") or () if _get(c, "type") == "output_text"
                )
        return "".join(parts)


class _OpenAIResponsesAccumulator(Accumulator):
    __slots__ = ("_handler", "final")

    _FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
    _START = frozenset({"response.created", "response.in_progress"})

    def __init__(self, handler: OpenAIResponses) -> None:
        super().__init__()
        self._handler = handler
        #: The final Response object of the stream, when it arrived.
        self.final: Any = None

    def add(self, event: Any) -> None:
        kind = _get(event, "type")
        if kind in self._FINAL:
            response = _get(event, "response")
            self.final = response
            self.info = self._handler.response_info(response, "")
        elif kind in self._START and self.info.response_id is None:
            response = _get(event, "response")
            self.info.response_id = _get(response, "id")
            self.info.response_model = _get(response, "model")


class OpenAICompact(OpenAIResponses):
    """``responses.compact``: a server-side compaction call; its usage reads like a Responses usage."""

    wire_format = None

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        info = super().response_info(response, provider)
        info.finish_reasons = ()
        return info


class OpenAIEmbeddings(WireFormatHandler):
    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        usage = _get(response, "usage")
        tokens = usage_from_openai_chat(usage) if usage is not None else None
        return ResponseInfo(response_model=_get(response, "model"), usage=tokens)


FORMATS: dict[str, WireFormatHandler] = {
    "anthropic_messages": AnthropicMessages(),
    "anthropic_count_tokens": WireFormatHandler(),
    "openai_chat": OpenAIChat(),
    "openai_responses": OpenAIResponses(),
    "openai_compact": OpenAICompact(),
    "openai_embeddings": OpenAIEmbeddings(),
}
