"""Every tracked conversation of this process: bounded in count and in bytes, with idle expiry.

Memory does not grow with the number of conversations an app has ever had. The process-wide table
(:data:`CONVERSATIONS`) is shared by the engine (transparent mode) and the explicit ``Compactor`` API, so both see
one breaker and one memo per conversation.

What the layers above keep of a conversation (the engine's background record: a prepared summary, the pace)
is theirs, in tables of their own keyed weakly by state, never on the state. The table tells them when it
forgets a state (evicted, idle, cleared: :meth:`ConversationTable.on_forget`), so that what can never be
used again is dropped at once, without this layer knowing what they keep.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from otel_context import process_state, semconv, telemetry
from otel_context.conversation.identity import current_conversation_id, derive_key, first_user_text
from otel_context.conversation.state import (
    ChainLink,
    ConversationState,
    Resolution,
    Snapshot,
    _equal_positions,
    _without_markers,
    merge_replies,
    same_items,
    unchanged_prefix,
)
from otel_context.fork_safe import new_lock
from otel_context.formats.base import WireFormatAdapter
from otel_context.settings import Settings


class ConversationTable:
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
        max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        #: Every state, least recently used first (keyed by (key, serial)).
        self._states: OrderedDict[tuple[str, int], ConversationState] = OrderedDict()
        #: The states of each key, oldest first.
        self._groups: dict[str, list[ConversationState]] = {}
        self._serial = 0
        self._bytes = 0
        self._lock = new_lock(self, "_lock")
        self.max_conversations = max_conversations
        self.idle_seconds = idle_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        #: Told of every state this table forgets, in the order they subscribed (see :meth:`on_forget`).
        self._forget_listeners: list[Callable[[ConversationState], None]] = []
        self._followed: Settings | None = None
        #: Provider-stored responses this process made (Responses ``previous_response_id``) -> their
        #: conversation, least recently used first; a few per tracked conversation at most.
        self._links: OrderedDict[str, ChainLink] = OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    @property
    def held_bytes(self) -> int:
        """Approximate bytes of the apps' histories the tracked snapshots keep alive."""
        return self._bytes

    def follow(self, settings: Settings) -> None:
        """Take the bounds of the settings a call comes with (transparent mode's, or an explicit
        ``Compactor``'s); a call with the same settings object as the previous one changes nothing."""
        if settings is self._followed:
            return
        self.max_conversations = max(1, settings.max_conversations)
        self.idle_seconds = settings.conversation_idle_seconds
        self.max_bytes = max(0, settings.max_state_bytes)
        self._followed = settings

    def on_forget(self, listener: Callable[[ConversationState], None]) -> None:
        """Call ``listener`` with every state this table forgets from now on (evicted, idle, cleared), once
        the table's lock is released: a layer above drops what it keeps for the state (which a call may
        still hold) the moment nothing can use it any more. Subscribed once, at the listener's import."""
        self._forget_listeners.append(listener)

    def states(self) -> list[ConversationState]:
        """Every tracked state, least recently used first (tests and diagnostics)."""
        with self._lock:
            return list(self._states.values())

    def tracks(self, state: ConversationState) -> bool:
        """Whether ``state`` is still tracked (a call may hold one the table evicted meanwhile)."""
        with self._lock:
            return self._states.get(state.ident) is state

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
        if gone:
            self._report(gone)
        if state is not best:  # it had been idle too long: the conversation starts afresh
            return Resolution(state, None, 0)
        return Resolution(state, best_snapshot, max(0, best_unchanged))

    def link(self, link: ChainLink) -> None:
        """Remember the conversation of a response the provider stored, for the calls that continue it."""
        with self._lock:
            state = self._states.get((link.key, link.serial)) if link.serial is not None else None
            if state is not None:
                state.link = link
            links = self._links
            links[link.response] = link
            links.move_to_end(link.response)
            while len(links) > LINKS_PER_CONVERSATION * self.max_conversations:
                links.popitem(last=False)

    def link_of(self, response_id: str) -> ChainLink | None:
        """The conversation of a stored response this process made, if it still remembers it."""
        with self._lock:
            return self._links.get(response_id)

    def resolve_link(self, link: ChainLink) -> Resolution:
        """The state of a call that continues the stored response ``link`` names.

        - The state whose call made it, when that was its last call.
        - When another worker made it: this process's state of the same chain if it is behind (the chain
          moved on elsewhere), so a chain served by several workers keeps one state in each.
        - Else a new state of its key, a branch: an earlier response of the chain is continued, or two
          histories that opened alike shared a state until their chains parted. It takes nothing from other
          histories of the key.
        """
        gone: list[ConversationState] = []
        with self._lock:
            parent = self._states.get((link.key, link.serial)) if link.serial is not None else None
            state = parent
            if parent is None:
                group = self._groups.get(link.key, ())
                state = next((s for s in reversed(group) if _behind(s.link, link)), None)
            elif parent.link is None or parent.link.response != link.response:
                state = None
            if state is None:
                state = self._new(link.key, False)
                if parent is not None:
                    state.inherit(parent, factor=True, baseline=False)
            state = self._touch_and_evict(state, gone)
            snapshot = state.snapshot
        if gone:
            self._report(gone)
        return Resolution(state, snapshot, 0)

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
            if (
                current is not None
                and current is not resolution.snapshot
                and current.replies
                and snapshot.replies
                and same_items(current.items, snapshot.items)
            ):
                # Another call answered the very same items since this one read them (two histories that opened
                # alike, at once): both responses stay known, so neither conversation names the other's.
                merged = merge_replies(current.replies, snapshot.replies)
                snapshot = Snapshot(
                    snapshot.items, snapshot.usage, snapshot.entry, snapshot.tokens, snapshot.chain, merged
                )
            tracked = state.ident in self._states
            if tracked:
                self._bytes += snapshot.size - (state.snapshot.size if state.snapshot is not None else 0)
            state.snapshot = snapshot
            state.last_call_ended = ended
            state.calls += 1
            if tracked:
                self._touch_and_evict(state, evicted)
        if evicted:
            self._report(evicted)
        return state

    def clear(self) -> None:
        with self._lock:
            gone = list(self._states.values())
            self._states.clear()
            self._groups.clear()
            self._links.clear()
            self._bytes = 0
        self._report(gone)

    # -- internals (called with the lock held) ------------------------------------------------------------
    def _new(self, key: str, explicit: bool) -> ConversationState:
        self._serial += 1
        state = ConversationState(key, explicit, 0 if explicit else self._serial)
        self._states[state.ident] = state
        self._groups.setdefault(key, []).append(state)
        return state

    def _touch_and_evict(self, state: ConversationState, gone: list[ConversationState]) -> ConversationState:
        """Mark ``state`` most recently used, then expire idle states and enforce both bounds.

        What goes is added to ``gone``, for the caller to report once the lock is released."""
        now = self._clock()
        if state.last_seen and now - state.last_seen > self.idle_seconds:
            # Idle too long: the conversation starts afresh under the same identity.
            self._drop(state.ident)
            gone.append(state)
            state = self._new(state.key, state.explicit)
        states = self._states
        states.move_to_end(state.ident)
        state.last_seen = now
        while states:
            oldest_ident = next(iter(states))
            oldest = states[oldest_ident]
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
        """Tell the listeners (:meth:`on_forget`) of these forgotten states (evicted, idle, cleared)."""
        for state in gone:
            for listener in self._forget_listeners:
                listener(state)


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
            if n > len(items):
                continue
            if n and items[n - 2 if n > 1 else 0] != snapshot.items[n - 2 if n > 1 else 0]:
                if _reopens(snapshot, items):
                    unchanged = 0  # the one message again, its marker moved: this history goes on
                    if unchanged > best_unchanged:
                        best, best_snapshot, best_unchanged = state, snapshot, unchanged
                continue  # a cheap look at one item rules most other histories out
            unchanged = unchanged_prefix(snapshot, items, same_last_message=True)
            if unchanged == 0 and n:
                continue
        if unchanged > best_unchanged:
            best, best_snapshot, best_unchanged = state, snapshot, unchanged
    return best, best_snapshot, best_unchanged


def _reopens(snapshot: Snapshot, items: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``items`` resend the one message of ``snapshot`` (a first call) with only its cache marker moved,
    as apps that mark the newest message do on their second call: that history continues, with nothing proven
    beyond what the derived key already says (its first user message)."""
    return len(snapshot.items) == 1 and _without_markers(items[0]) == _without_markers(snapshot.items[0])


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


def _behind(held: ChainLink | None, link: ChainLink) -> bool:
    """Whether a state whose last call made ``held`` is behind ``link`` in the same chain."""
    return held is not None and held.chain == link.chain and held.turn < link.turn


def _close_breaker_gauge(state: ConversationState) -> None:
    """A forgotten conversation no longer counts as an open breaker."""
    if state.breaker.open:
        telemetry.get().instruments.breakers_open.add(-1, {semconv.GEN_AI_REQUEST_MODEL: state.breaker_model or ""})


#: Stored responses remembered per tracked conversation (the newest of each, and a few a chain forked from).
LINKS_PER_CONVERSATION = 4

#: Every conversation this process tracks (LRU + idle expiry, sized from the settings of the calls).
CONVERSATIONS = ConversationTable()
CONVERSATIONS.on_forget(_close_breaker_gauge)
# Reset: every conversation is forgotten. A fork's child: inherited (it goes on with its parent's
# conversations; their locks are renewed by fork_safe).
process_state.register(__name__, ("CONVERSATIONS",), on_reset=CONVERSATIONS.clear, in_forked_child=None)


def resolve(
    adapter: WireFormatAdapter,
    provider: str,
    items: Sequence[Mapping[str, Any]],
    settings: Settings,
    link: ChainLink | None = None,
) -> Resolution:
    """The state of the conversation these items belong to (created when new) and the snapshot read for them.

    An explicit id names the conversation. Without one, a call that continues a stored response (``link``)
    belongs to that response's conversation; else the derived key names a family of conversations that open
    the same way, and the items decide which one of them this call continues (see :class:`ConversationTable`).
    """
    explicit = current_conversation_id()
    CONVERSATIONS.follow(settings)
    if explicit is None and link is not None and link.key:
        return CONVERSATIONS.resolve_link(link)
    key = explicit if explicit is not None else derive_key(provider, first_user_text(adapter, items))
    return CONVERSATIONS.resolve(key, items, explicit=explicit is not None)
