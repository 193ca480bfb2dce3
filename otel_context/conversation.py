"""Conversation identity and the bounded state the engine keeps per conversation.

Identity (docs/telemetry.md): the explicit id when the app names one (``with otel_context.conversation("id"):``),
else a key derived from the provider and the first user message. System prompt, tools and model are
deliberately NOT part of the derived key, so that their changes show up as changes within one
conversation (cache breaks) rather than as new conversations.

State per conversation: the last call's items and usage (the anchor of the token estimate), the
compaction memo, the circuit breaker and the cache-break detector. The store is an LRU with idle
expiry: memory does not grow with the number of conversations an app has ever had.
"""

from __future__ import annotations

import contextvars
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from otel_context.compaction.breaker import Breaker
from otel_context.compaction.memo import CompactionMemo
from otel_context.usage import TokenUsage

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


@dataclass
class ConversationState:
    """Everything the engine remembers about one conversation."""

    key: str
    explicit: bool
    last_seen: float = 0.0
    #: The app's items of the last successful call (references, never mutated) and that call's usage.
    last_items: Sequence[Mapping[str, Any]] | None = None
    last_usage: TokenUsage | None = None
    #: time.monotonic() when the last call ended (cache TTL: a cold cache makes clearing free).
    last_call_ended: float | None = None
    memo: CompactionMemo = field(default_factory=CompactionMemo)
    breaker: Breaker = field(default_factory=Breaker)
    #: Model whose breakers_open series counts this conversation while its breaker is open.
    breaker_model: str | None = None
    #: The cache-break detector (otel_context.cache), created lazily when that module is available.
    detector: Any = None
    #: Reported / estimated tokens seen on a too-long error (>1 when our estimate undercounts).
    estimate_factor: float = 1.0
    #: The window the provider stated in a too-long error, when smaller than the one we assumed.
    window_cap: int | None = None

    def unchanged_prefix(self, items: Sequence[Mapping[str, Any]]) -> int:
        """How many leading ``items`` are known equal to the last call's items.

        All of them when the history only grew; all but the last when only the previous call's last item
        changed (apps that move a ``cache_control`` breakpoint onto the newest message re-send the
        previous one without it); else 0. A C-level list comparison: the SDK copies containers but
        shares the app's strings, so equal items are mostly compared by identity at the leaves.
        """
        last = self.last_items
        if not last or len(items) < len(last):
            return 0
        n = len(last)
        # One C-level pass (identical objects compare by identity, the SDK's copies by content), then, when
        # that fails, all but the last item.
        head = items[:n] if type(items) is list else list(items[:n])
        if type(last) is not list:
            last = list(last)
        if head == last:
            return n
        if head[: n - 1] != last[: n - 1]:
            return 0
        return n - 1


class ConversationStore:
    """LRU + idle expiry of :class:`ConversationState` objects."""

    def __init__(
        self,
        max_conversations: int = 1_024,
        idle_seconds: float = 3_600.0,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[ConversationState], None] | None = None,
    ) -> None:
        self._states: OrderedDict[str, ConversationState] = OrderedDict()
        self._lock = threading.Lock()
        self.max_conversations = max_conversations
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self._states)

    def configure(self, max_conversations: int, idle_seconds: float) -> None:
        self.max_conversations = max(1, max_conversations)
        self.idle_seconds = idle_seconds

    def get(self, key: str, *, explicit: bool) -> ConversationState:
        """The state for ``key`` (created when new), marked as most recently used."""
        now = self._clock()
        evicted: list[ConversationState] = []
        with self._lock:
            state = self._states.get(key)
            if state is not None and now - state.last_seen > self.idle_seconds:
                evicted.append(self._states.pop(key))
                state = None
            if state is None:
                state = ConversationState(key=key, explicit=explicit)
                self._states[key] = state
            else:
                self._states.move_to_end(key)
            state.last_seen = now
            # Expire idle conversations from the cold end, then enforce the size bound.
            while self._states:
                oldest_key, oldest = next(iter(self._states.items()))
                if oldest is state:
                    break
                if len(self._states) > self.max_conversations or now - oldest.last_seen > self.idle_seconds:
                    del self._states[oldest_key]
                    evicted.append(oldest)
                else:
                    break
        for gone in evicted:
            if self._on_evict is not None:
                self._on_evict(gone)
        return state

    def peek(self, key: str) -> ConversationState | None:
        """The state for ``key`` if tracked, without touching its recency."""
        return self._states.get(key)

    def clear(self) -> None:
        with self._lock:
            gone = list(self._states.values())
            self._states.clear()
        for state in gone:
            if self._on_evict is not None:
                self._on_evict(state)
