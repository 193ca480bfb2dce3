"""Conversations: who a call belongs to, and what is remembered about it, in one place.

- :mod:`~otel_context.conversation.identity`: the explicit id (``with otel_context.conversation("id"):``)
  or the key derived from how a conversation opens;
- :mod:`~otel_context.conversation.state`: the immutable snapshot of the last call, and the per-conversation
  state (compaction memo, circuit breaker, cache-break baseline, estimate factor);
- :mod:`~otel_context.conversation.memo` and :mod:`~otel_context.conversation.breaker`: the compactor's
  memory of a conversation and its circuit breaker;
- :mod:`~otel_context.conversation.table`: every tracked conversation of the process, bounded;
- :mod:`~otel_context.conversation.state_store`: a store shared by many worker processes (a package: the
  interface, its in-memory implementation, Redis and its background writer).

Two conversations never share state: see docs/conversations.md for the guarantee and how it is kept.
"""

from __future__ import annotations

from otel_context.conversation import pins
from otel_context.conversation.identity import conversation, current_conversation_id, derive_key
from otel_context.conversation.pins import pin, unpin
from otel_context.conversation.state import (
    BYTES_PER_TOKEN,
    ChainLink,
    ConversationState,
    Resolution,
    Snapshot,
    unchanged_prefix,
)
from otel_context.conversation.table import CONVERSATIONS, ConversationTable, resolve

__all__ = [
    "BYTES_PER_TOKEN",
    "CONVERSATIONS",
    "ChainLink",
    "ConversationState",
    "ConversationTable",
    "Resolution",
    "Snapshot",
    "conversation",
    "current_conversation_id",
    "derive_key",
    "pin",
    "pins",
    "resolve",
    "unchanged_prefix",
    "unpin",
]
