"""Conversation identity: the explicit id an app names, else a key derived from how the conversation opens.

Identity (docs/conversations.md): the explicit id when the app names one (``with otel_context.conversation("id"):``),
else a key derived from the provider and the first user message. System prompt, tools and model are
deliberately NOT part of the derived key, so that their changes show up as changes within one
conversation (cache breaks) rather than as new conversations. A derived key names a family of
conversations that open the same way; :mod:`otel_context.conversation.table` decides which one a call
continues.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from otel_context import process_state
from otel_context.formats.base import WireFormatAdapter
from otel_context.usage import is_mapping

_explicit_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_context_conversation", default=None)


@contextmanager
def conversation(conversation_id: str) -> Iterator[str]:
    """Name the conversation of every instrumented call made inside the block.

    The id goes on every chat span as ``gen_ai.conversation.id`` and keys the compaction memo, breaker and
    cache-break baseline. Nested blocks override the outer id for their duration (contextvar: threads and
    asyncio tasks each see their own).
    """
    if not isinstance(conversation_id, str) or not conversation_id.strip():
        raise ValueError(f"conversation id must be a non-empty string, got {conversation_id!r}")
    token = _explicit_id.set(conversation_id)
    try:
        yield conversation_id
    finally:
        _explicit_id.reset(token)


def current_conversation_id() -> str | None:
    """The explicit conversation id in force, if any."""
    return _explicit_id.get()


#: Keys already derived: every call of a conversation resends the same first message (usually the very
#: same string object, whose hash Python keeps), so a dictionary hit replaces encoding and hashing it.
#: Bounded in entries and in the length of the texts kept (at most ~4 MB), so it never holds on to much.
_derived: dict[tuple[str, str], str] = {}
_DERIVED_MAX = 1_024
_DERIVED_MAX_CHARS = 4_096
# Reset and a fork's child: kept (a pure function of its key: a cache of hashes).
process_state.register(__name__, ("_derived",), on_reset=None, in_forked_child=None)


def derive_key(provider: str, first_user_text: str | None) -> str:
    """A stable key from the provider and the first user message (None/'' when there is none)."""
    text = first_user_text or ""
    key = _derived.get((provider, text))
    if key is None:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        key = f"{provider}:{digest}"
        if len(text) <= _DERIVED_MAX_CHARS:
            if len(_derived) >= _DERIVED_MAX:
                _derived.clear()  # a miss only costs the hash again
            _derived[provider, text] = key
    return key


def first_user_text(adapter: WireFormatAdapter, items: Sequence[Mapping[str, Any]]) -> str | None:
    """The text of the first user message of ``items`` (what a derived key is made of), if any."""
    for item in items:
        if type(item) is not dict and not is_mapping(item):
            continue  # malformed entries are reported by has_unknown_content when compaction is due
        texts = adapter.user_text_items([item])
        if texts:
            return str(texts[0])
    return None
