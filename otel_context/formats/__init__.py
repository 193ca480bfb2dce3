"""Wire formats: one module each holds everything the package knows about one request/response format.

``for_format("anthropic_messages" | "openai_chat" | "openai_responses")`` returns the shared, stateless
:class:`~otel_context.formats.base.ChatFormat` of a chat format (request adapter for the compactor, response
and stream reading for the instrumentation, usage, content capture, the Compactor API's bodies, the prompt
cache's layout). :func:`endpoint_format` also knows the non-chat endpoints of those APIs, which the
instrumentation's endpoint tables name.

Adding a format: one new module implementing :class:`~otel_context.formats.base.ChatFormat`, one line in
``_FORMATS`` below (and a line per non-chat endpoint in ``_ENDPOINTS``); the instrumentation's endpoint table
of its SDK then names its URL path.
"""

from __future__ import annotations

from typing import Any

from otel_context.formats import anthropic_messages, openai_chat, openai_responses
from otel_context.formats.anthropic_messages import AnthropicMessagesAdapter
from otel_context.formats.base import (
    CLEARED_PLACEHOLDER,
    Body,
    ChatFormat,
    EndpointFormat,
    Item,
    ToolResultRef,
    WireFormatAdapter,
)
from otel_context.formats.openai_chat import OpenAIChatAdapter
from otel_context.formats.openai_responses import OpenAIResponsesAdapter

#: The formats are stateless, so one instance of each serves every call.
ANTHROPIC_MESSAGES = AnthropicMessagesAdapter()
OPENAI_CHAT = OpenAIChatAdapter()
OPENAI_RESPONSES = OpenAIResponsesAdapter()

_FORMATS: dict[str, ChatFormat] = {
    ANTHROPIC_MESSAGES.name: ANTHROPIC_MESSAGES,
    OPENAI_CHAT.name: OPENAI_CHAT,
    OPENAI_RESPONSES.name: OPENAI_RESPONSES,
}

#: Every endpoint the instrumentation traces, by name: the chat formats and the other endpoints of their APIs.
_ENDPOINTS: dict[str, EndpointFormat] = {
    **_FORMATS,
    "anthropic_count_tokens": anthropic_messages.COUNT_TOKENS,
    "openai_compact": openai_responses.COMPACT,
    "openai_embeddings": openai_chat.EMBEDDINGS,
}

#: The wire format names :func:`for_format` accepts.
WIRE_FORMATS = tuple(_FORMATS)


def for_format(name: str) -> ChatFormat:
    """The chat wire format of that name; ``ValueError`` naming the known formats otherwise."""
    try:
        return _FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown wire format {name!r}; expected one of {', '.join(WIRE_FORMATS)}") from None


def endpoint_format(name: str) -> EndpointFormat:
    """What the instrumentation reads from the calls of one endpoint (a chat format or another endpoint)."""
    try:
        return _ENDPOINTS[name]
    except KeyError:
        raise ValueError(f"unknown endpoint format {name!r}; expected one of {', '.join(_ENDPOINTS)}") from None


def default_for_client(client: Any) -> str | None:
    """The wire format an SDK client speaks unless told otherwise (by the module its class comes from)."""
    module = type(client).__module__ if client is not None else ""
    for fmt in _FORMATS.values():
        if fmt.default_for_sdk and module.startswith(fmt.default_for_sdk):
            return fmt.name
    return None


__all__ = [
    "ANTHROPIC_MESSAGES",
    "CLEARED_PLACEHOLDER",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "WIRE_FORMATS",
    "AnthropicMessagesAdapter",
    "Body",
    "ChatFormat",
    "EndpointFormat",
    "Item",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "ToolResultRef",
    "WireFormatAdapter",
    "default_for_client",
    "endpoint_format",
    "for_format",
]
