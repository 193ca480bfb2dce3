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
from dataclasses import dataclass
from typing import Any

from otel_context.compaction.breaker import Breaker
from otel_context.compaction.memo import CompactionMemo, MemoEntry
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


#: The byte bound's conversion: the estimator counts about 4 characters a token, and Python's strings of
#: ASCII text take a byte a character.
BYTES_PER_TOKEN = 4


@dataclass(frozen=True)
class Snapshot:
    """What one successful call of a conversation left behind; immutable, so a call reads it once and
    every check it makes against it holds whatever other calls do meanwhile.

    ``items`` is the engine's private list of the call's items (the app's objects, never mutated by us):
    a later call whose own items start with them is proven to be the same history up to there, by a
    C-level list comparison rather than by hashing. ``entry`` is the memo entry the sent items started
    with, verified against these very items, so a later call that extends them may reuse it unhashed.
    """

    items: Sequence[Mapping[str, Any]]
    usage: TokenUsage | None
    entry: MemoEntry | None = None
    #: Estimated tokens of ``items`` (what this snapshot keeps alive of the app's objects).
    tokens: int = 0

    @property
    def size(self) -> int:
        """Approximate bytes of the app's objects this snapshot keeps alive (for the store's byte bound)."""
        return BYTES_PER_TOKEN * self.tokens


def unchanged_prefix(
    snapshot: Snapshot | None, items: Sequence[Mapping[str, Any]], *, same_last_message: bool = False
) -> int:
    """How many leading ``items`` are known equal to the items of ``snapshot``.

    All of them when the history only grew; all but the last when only that call's last item changed
    (apps that move a ``cache_control`` breakpoint onto the newest message re-send the previous one
    without it; with ``same_last_message`` only when that is the whole difference); else 0. A C-level
    list comparison: the SDK copies containers but shares the app's strings, so equal items are mostly
    compared by identity at the leaves.
    """
    if snapshot is None:
        return 0
    last = snapshot.items
    n = len(last)
    if not n or len(items) < n:
        return 0
    head = items[:n] if type(items) is list else list(items[:n])
    if type(last) is not list:
        last = list(last)
    if head == last:
        return n
    if n > 1 and head[: n - 1] == last[: n - 1]:
        if same_last_message and _without_markers(head[n - 1]) != _without_markers(last[n - 1]):
            return 0
        return n - 1
    return 0


def _without_markers(value: Any, depth: int = 0) -> Any:
    """``value`` with its ``cache_control`` markers removed and text content in one shape (string content
    as one text block), to tell a re-sent message whose marker moved from a different message."""
    if depth > 32:
        return object()  # never equal: deep content is not a moved marker
    if isinstance(value, Mapping):
        out = {k: _without_markers(v, depth + 1) for k, v in value.items() if k != "cache_control"}
        if isinstance(out.get("content"), str):
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    if isinstance(value, (list, tuple)):
        return [_without_markers(v, depth + 1) for v in value]
    return value


def _equal_positions(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many positions hold equal items in both sequences (an edited history keeps most of them)."""
    return sum(1 for x, y in zip(a, b, strict=False) if x is y or x == y)


class ConversationState:
    """Everything the engine remembers about one conversation (one branch of it, for derived keys).

    Thread- and task-safe: the snapshot is replaced whole (:meth:`ConversationStore.commit`), memo
    entries are immutable, and the breaker and estimate factor change under :attr:`lock`.
    """

    def __init__(self, key: str, explicit: bool, serial: int = 0) -> None:
        self.key = key
        self.explicit = explicit
        #: Distinguishes the branches of one derived key (0 for explicit ids).
        self.serial = serial
        self.last_seen = 0.0
        #: The last successful call, or None before the first one ended.
        self.snapshot: Snapshot | None = None
        #: time.monotonic() when the last call ended (cache TTL: a cold cache makes clearing free).
        self.last_call_ended: float | None = None
        self.memo = CompactionMemo()
        self.breaker = Breaker()
        #: Model whose breakers_open series counts this conversation while its breaker is open.
        self.breaker_model: str | None = None
        #: The cache-break detector (otel_context.cache), created lazily by the engine.
        self.detector: Any = None
        #: Reported / estimated tokens seen on a too-long error (>1 when our estimate undercounts).
        self.estimate_factor = 1.0
        self.lock = threading.Lock()

    def raise_estimate_factor(self, factor: float) -> None:
        with self.lock:
            self.estimate_factor = max(self.estimate_factor, factor)

    def inherit(self, parent: ConversationState, *, factor: bool, baseline: bool) -> None:
        """Start this branch of a derived key from ``parent``: its content-keyed memo entries (safe to
        share: they only ever apply to a prefix with the same content), its estimate factor when
        ``factor``, and a branch of its cache-break baseline when ``baseline``. Never its breaker."""
        self.memo = parent.memo.copy()
        if factor:
            self.estimate_factor = parent.estimate_factor
        if baseline and parent.detector is not None:
            self.detector = parent.detector.branch()


@dataclass(frozen=True)
class Resolution:
    """The state a call uses, the snapshot it read (once), and how much of its history that snapshot proves."""

    state: ConversationState
    snapshot: Snapshot | None
    unchanged: int


class ConversationStore:
    """The states of every tracked conversation: bounded in count and in bytes, with idle expiry.

    An explicit id has one state. A derived key can have several, one per history that shares the key
    (every user of a chat app who opens with "Hi"): a call takes the state whose last history its own
    items extend, most specific first, else a fresh one. Nothing in a state is used for a call unless
    it is proven to belong to that call's own history, so two conversations never share content.
    """

    def __init__(
        self,
        max_conversations: int = 1_024,
        idle_seconds: float = 3_600.0,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[ConversationState], None] | None = None,
        max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        #: Every state, least recently used first (keyed by (key, serial)).
        self._states: OrderedDict[tuple[str, int], ConversationState] = OrderedDict()
        #: The states of each key, oldest first.
        self._groups: dict[str, list[ConversationState]] = {}
        self._serial = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self.max_conversations = max_conversations
        self.idle_seconds = idle_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self._states)

    @property
    def held_bytes(self) -> int:
        """Approximate bytes of the apps' histories the tracked snapshots keep alive."""
        return self._bytes

    def configure(self, max_conversations: int, idle_seconds: float, max_bytes: int | None = None) -> None:
        self.max_conversations = max(1, max_conversations)
        self.idle_seconds = idle_seconds
        if max_bytes is not None:
            self.max_bytes = max(0, max_bytes)

    def states(self) -> list[ConversationState]:
        """Every tracked state, least recently used first (tests and diagnostics)."""
        with self._lock:
            return list(self._states.values())

    def get(self, key: str, *, explicit: bool) -> ConversationState:
        """The (first) state of ``key``, created when new, marked as most recently used."""
        gone: list[ConversationState] = []
        with self._lock:
            group = self._groups.get(key)
            state = self._touch_and_evict(group[-1] if group else self._new(key, explicit), gone)
        self._report(gone)
        return state

    def resolve(self, key: str, items: Sequence[Mapping[str, Any]], *, explicit: bool) -> Resolution:
        """The state of the call whose conversation items are ``items`` (see the class doc)."""
        gone: list[ConversationState] = []
        with self._lock:
            group = self._groups.get(key)
            best: ConversationState | None = None
            best_snapshot: Snapshot | None = None
            best_unchanged = -1
            if group:
                if explicit:
                    best = group[-1]
                    best_snapshot = best.snapshot
                    best_unchanged = unchanged_prefix(best_snapshot, items)
                else:
                    best, best_snapshot, best_unchanged = _best_branch(group, items)
            if best is None:
                best = self._new(key, explicit)
                best_snapshot, best_unchanged = None, 0
                if group:
                    _inherit(best, group[:-1], items)
            state = self._touch_and_evict(best, gone)
        self._report(gone)
        if state is not best:  # it had been idle too long: the conversation starts afresh
            return Resolution(state, None, 0)
        return Resolution(state, best_snapshot, max(0, best_unchanged))

    def commit(self, resolution: Resolution, snapshot: Snapshot, ended: float) -> ConversationState:
        """Record what a call of ``resolution`` left behind; returns the state that now holds it.

        When another call of the same state committed since this one read its snapshot, an explicit id
        keeps the newest (its calls share one conversation by the app's word), while a derived key
        branches: the two histories may belong to two users, so this one gets a state of its own (with a
        copy of the memo's content-keyed entries, and the breaker and cache baseline of a new one).
        """
        state = resolution.state
        evicted: list[ConversationState] = []
        with self._lock:
            current = state.snapshot
            if (
                current is not None
                and current is not resolution.snapshot
                and not state.explicit
                and unchanged_prefix(current, snapshot.items) < len(current.items)
            ):
                parent = state
                state = self._new(state.key, False)
                state.inherit(parent, factor=True, baseline=False)
            tracked = (state.key, state.serial) in self._states
            if tracked:
                self._bytes += snapshot.size - (state.snapshot.size if state.snapshot is not None else 0)
            state.snapshot = snapshot
            state.last_call_ended = ended
            if tracked:
                self._touch_and_evict(state, evicted)
        self._report(evicted)
        return state

    def clear(self) -> None:
        with self._lock:
            gone = list(self._states.values())
            self._states.clear()
            self._groups.clear()
            self._bytes = 0
        self._report(gone)

    # -- internals (called with the lock held) ------------------------------------------------------------
    def _new(self, key: str, explicit: bool) -> ConversationState:
        self._serial += 1
        state = ConversationState(key, explicit, 0 if explicit else self._serial)
        self._states[key, state.serial] = state
        self._groups.setdefault(key, []).append(state)
        return state

    def _touch_and_evict(self, state: ConversationState, gone: list[ConversationState]) -> ConversationState:
        """Mark ``state`` most recently used, then expire idle states and enforce both bounds.

        What goes is added to ``gone``, for the caller to report once the lock is released."""
        now = self._clock()
        ident = (state.key, state.serial)
        if state.last_seen and now - state.last_seen > self.idle_seconds:
            # Idle too long: the conversation starts afresh under the same identity.
            self._drop(ident)
            gone.append(state)
            state = self._new(state.key, state.explicit)
            ident = (state.key, state.serial)
        self._states.move_to_end(ident)
        state.last_seen = now
        while self._states:
            oldest_ident, oldest = next(iter(self._states.items()))
            if oldest is state:
                break
            over = len(self._states) > self.max_conversations or self._bytes > self.max_bytes
            if over or now - oldest.last_seen > self.idle_seconds:
                self._drop(oldest_ident)
                gone.append(oldest)
            else:
                break
        return state

    def _drop(self, ident: tuple[str, int]) -> None:
        state = self._states.pop(ident)
        if state.snapshot is not None:
            self._bytes -= state.snapshot.size
        group = self._groups.get(state.key)
        if group is not None:
            group.remove(state)
            if not group:
                del self._groups[state.key]

    def _report(self, gone: list[ConversationState]) -> None:
        if self._on_evict is not None:
            for state in gone:
                self._on_evict(state)


def _best_branch(
    group: list[ConversationState], items: Sequence[Mapping[str, Any]]
) -> tuple[ConversationState | None, Snapshot | None, int]:
    """The branch whose last history ``items`` extends the furthest (newest first on ties), if any.

    A branch that has not finished a call yet matches anything with 0 items proven (it holds nothing a
    call could take from another: its memo entries are content-keyed).
    """
    best: ConversationState | None = None
    best_snapshot: Snapshot | None = None
    best_unchanged = -1
    for state in reversed(group):
        snapshot = state.snapshot
        if snapshot is None:
            unchanged = 0
        else:
            n = len(snapshot.items)
            if n > len(items) or (n and items[n - 2 if n > 1 else 0] != snapshot.items[n - 2 if n > 1 else 0]):
                continue  # a cheap look at one item rules most other histories out
            unchanged = unchanged_prefix(snapshot, items, same_last_message=True)
            if unchanged == 0 and n:
                continue
        if unchanged > best_unchanged:
            best, best_snapshot, best_unchanged = state, snapshot, unchanged
    return best, best_snapshot, best_unchanged


def _inherit(state: ConversationState, others: Sequence[ConversationState], items: Sequence[Mapping[str, Any]]) -> None:
    """A new branch of a derived key takes what it safely can from its closest relative.

    Memo entries are keyed by content, so copying them can never apply another history's summary: it
    only spares a rewound or edited conversation a new summary of the prefix it still shares. The
    cache-break baseline is telemetry about what the provider cached; it is inherited only when most of
    the relative's last history is still in these items (an edit or a rewind of that conversation, not
    another user who opened the same way), so an edit is reported as the cache break it is.
    """
    closest: ConversationState | None = None
    closest_equal = 0
    for other in reversed(others):
        snapshot = other.snapshot
        if snapshot is None:
            continue
        equal = _equal_positions(snapshot.items, items)
        if equal > closest_equal:
            closest, closest_equal = other, equal
    if closest is None or closest.snapshot is None:
        return
    relative = closest_equal >= 2 and 2 * closest_equal >= len(closest.snapshot.items)
    state.inherit(closest, factor=relative, baseline=relative)
