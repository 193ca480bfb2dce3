"""Wire formats: one module each holds everything the package knows about one request/response format.

``for_format("anthropic_messages" | "openai_chat" | "openai_responses")`` returns the shared, stateless
:class:`~otel_context.formats.base.ChatFormat` of a chat format (request adapter for the compactor, response
and stream reading for the instrumentation, usage, content capture, the Compactor API's bodies, the prompt
cache's layout). :func:`endpoint_format` also knows the non-chat endpoints of those APIs, which the
instrumentation's endpoint tables name.

Adding a format: one new module implementing :class:`~otel_context.formats.base.ChatFormat` (its quirks
included: the core asks ``empty_prefill``, ``cache_control_markers``, ``message_shape`` rather than its name),
one line in ``_FORMATS`` below (and a line per non-chat endpoint in ``_ENDPOINTS``), its ``provider`` naming an
``otel_context.providers.Provider`` (a new provider's window rows and model names go there); the
instrumentation's endpoint table of its SDK then names its URL path (docs/design.md, "Adding a wire format").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_context.formats import anthropic_messages, openai_chat, openai_responses
from otel_context.formats.anthropic_messages import AnthropicMessagesAdapter
from otel_context.formats.base import (
    CLEARED_PLACEHOLDER,
    Body,
    ChatFormat,
    EndpointFormat,
    Item,
    MessageShape,
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
#: The wire format of a history whose shape fits several (plain ``role``/``content`` strings) when no SDK
#: client says which: such a history means the same in all of them.
DEFAULT_WIRE_FORMAT = ANTHROPIC_MESSAGES.name

# --- a message's format, by its shape (each format's MessageShape) ------------------------------------------

_ALL_FORMATS = frozenset(_FORMATS)
#: For each role, content part type and own key some format lists: the formats whose messages may have it.
_ROLE_FORMATS: Mapping[str, frozenset[str]] = {
    role: frozenset(n for n, f in _FORMATS.items() if role in f.message_shape.roles)
    for f in _FORMATS.values()
    for role in f.message_shape.roles
}
_PART_FORMATS: Mapping[str, frozenset[str]] = {
    kind: frozenset(n for n, f in _FORMATS.items() if kind in f.message_shape.part_types)
    for f in _FORMATS.values()
    for kind in f.message_shape.part_types
}
_KEY_FORMATS: Mapping[str, frozenset[str]] = {
    key: frozenset(n for n, f in _FORMATS.items() if key in f.message_shape.own_keys)
    for f in _FORMATS.values()
    for key in sorted(f.message_shape.own_keys)
}
_NULL_CONTENT = frozenset(n for n, f in _FORMATS.items() if f.message_shape.null_content)
_TYPED_ITEMS = frozenset(n for n, f in _FORMATS.items() if f.message_shape.typed_items)
#: Message keys some format alone has (a message with one is that format's: tool calls and results).
OWN_MESSAGE_KEYS = tuple(_KEY_FORMATS)


def formats_fitting(message: Any) -> frozenset[str]:
    """The wire formats ``message`` can belong to, by its shape (all of them when it says nothing; none when
    its role, keys and parts belong to different formats)."""
    if not isinstance(message, Mapping):
        return _ALL_FORMATS  # reported by the format's own check, with its index
    if message.get("type", "message") != "message":
        return _TYPED_ITEMS
    fits = _ALL_FORMATS
    owned = [owners for key, owners in _KEY_FORMATS.items() if key in message]
    for owners in owned:
        fits &= owners
    role: Any = message.get("role")
    # As the explicit API always read it: a role that is not a string goes unread beside an own key, and
    # raises TypeError when unhashable without one.
    if (not owned or isinstance(role, str)) and role in _ROLE_FORMATS:
        fits &= _ROLE_FORMATS[role]
    content = message.get("content")
    if content is None and "content" in message:
        fits &= _NULL_CONTENT
    elif isinstance(content, (list, tuple)):
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else getattr(part, "type", None)
            if isinstance(kind, str) and kind in _PART_FORMATS:
                fits &= _PART_FORMATS[kind]
    return fits


def preferred_format(fits: frozenset[str]) -> str:
    """The one of several fitting formats a history is taken in when nothing else tells: the default, else
    the first an SDK client speaks by default (OpenAI chat, when only the two OpenAI formats fit)."""
    if DEFAULT_WIRE_FORMAT in fits:
        return DEFAULT_WIRE_FORMAT
    ordered = [name for name in WIRE_FORMATS if name in fits]
    return next((name for name in ordered if _FORMATS[name].default_for_sdk), ordered[0])


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
    "DEFAULT_WIRE_FORMAT",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "OWN_MESSAGE_KEYS",
    "WIRE_FORMATS",
    "AnthropicMessagesAdapter",
    "Body",
    "ChatFormat",
    "EndpointFormat",
    "Item",
    "MessageShape",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "ToolResultRef",
    "WireFormatAdapter",
    "default_for_client",
    "endpoint_format",
    "for_format",
    "formats_fitting",
    "preferred_format",
]
