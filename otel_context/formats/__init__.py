"""Wire-format adapters: what the compactor needs to read and rewrite each provider's request bodies.

``for_format("anthropic_messages" | "openai_chat" | "openai_responses")`` returns the shared, stateless
adapter for that format (see :class:`~otel_context.formats.base.WireFormatAdapter`).
"""

from __future__ import annotations

from otel_context.formats.anthropic_messages import AnthropicMessagesAdapter
from otel_context.formats.base import CLEARED_PLACEHOLDER, Body, Item, ToolResultRef, WireFormatAdapter
from otel_context.formats.openai_chat import OpenAIChatAdapter
from otel_context.formats.openai_responses import OpenAIResponsesAdapter

#: The adapters are stateless, so one instance of each serves every call.
ANTHROPIC_MESSAGES = AnthropicMessagesAdapter()
OPENAI_CHAT = OpenAIChatAdapter()
OPENAI_RESPONSES = OpenAIResponsesAdapter()

_ADAPTERS: dict[str, WireFormatAdapter] = {
    ANTHROPIC_MESSAGES.name: ANTHROPIC_MESSAGES,
    OPENAI_CHAT.name: OPENAI_CHAT,
    OPENAI_RESPONSES.name: OPENAI_RESPONSES,
}

#: The wire format names :func:`for_format` accepts.
WIRE_FORMATS = tuple(_ADAPTERS)


def for_format(name: str) -> WireFormatAdapter:
    """The adapter for a wire format name; ``ValueError`` naming the known formats otherwise."""
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise ValueError(f"unknown wire format {name!r}; expected one of {', '.join(WIRE_FORMATS)}") from None


__all__ = [
    "ANTHROPIC_MESSAGES",
    "CLEARED_PLACEHOLDER",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "WIRE_FORMATS",
    "AnthropicMessagesAdapter",
    "Body",
    "Item",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "ToolResultRef",
    "WireFormatAdapter",
    "for_format",
]
