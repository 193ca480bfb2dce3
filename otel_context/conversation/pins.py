"""What an app pins: texts kept verbatim beside every later summary of a conversation, never summarized.

A summary may rephrase or drop anything; some texts an app cannot let it touch (a safety rule, a contract, a
customer's exact words). ``otel_context.pin(text)`` names one for the conversation in force (``with
otel_context.conversation(id):``, or ``conversation=``): from the next compaction on, it goes out verbatim, as a
user message of its own before the summary (marked :data:`~otel_context.compaction.prompt.PINNED_PREFIX`),
within the user-message budget. A derived conversation (no explicit id) has no name to pin to: pinning there
is refused with a message that says so.

Shared like the rest of the head: once a compaction has placed a pin, it is part of the head the memo and the
shared store carry to every worker, and each later compaction (on any worker) keeps the pins it finds in the
head it replaces. A pin made on one worker reaches the others with the next compaction made where it was
pinned; an app that pins on every worker (at the conversation's start) has them everywhere from the first.
"""

from __future__ import annotations

import sys

from otel_context import process_state
from otel_context.conversation.identity import current_conversation_id
from otel_context.fork_safe import new_lock

__all__ = ["MAX_PINS", "MAX_PIN_CHARS", "pin", "pinned", "unpin", "unpinned"]

#: Pins one conversation may hold, and the longest pin (a pin is an instruction, not a document).
MAX_PINS = 32
MAX_PIN_CHARS = 8_000
#: Conversations with pins kept in this process (least recently pinned go first past it).
MAX_CONVERSATIONS = 1_024

_pins: dict[str, tuple[str, ...]] = {}
#: Texts unpinned here, per conversation: a compaction of this process no longer carries them from a head.
_unpinned: dict[str, frozenset[str]] = {}
_lock = new_lock(sys.modules[__name__], "_lock")  # a fork's child gets a free one


def _clear() -> None:
    with _lock:
        _pins.clear()
        _unpinned.clear()


# Reset: cleared (an app's own pins, like the conversations they belong to). A fork's child: kept (the app's
# pins hold in the child as in the parent); its lock is renewed by fork_safe.
process_state.register(__name__, ("_pins", "_unpinned"), on_reset=_clear, in_forked_child=None)


def _conversation(conversation: str | None) -> str:
    cid = conversation if conversation is not None else current_conversation_id()
    if cid is None:
        raise ValueError(
            "otel_context.pin needs a conversation to pin to: call it inside `with otel_context.conversation(id):` "
            "or pass conversation=id (a conversation without an explicit id has no name to pin to)"
        )
    if not isinstance(cid, str) or not cid.strip():
        raise ValueError(f"conversation must be a non-empty string, got {cid!r}")
    return cid


def pin(text: str, *, conversation: str | None = None) -> None:
    """Keep ``text`` verbatim beside every later summary of the conversation (the one in force, or
    ``conversation``). Pinning the same text twice keeps it once."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a pinned text must be a non-empty string, got {text!r}")
    if len(text) > MAX_PIN_CHARS:
        raise ValueError(f"a pinned text is at most {MAX_PIN_CHARS:,} characters, got {len(text):,}")
    cid = _conversation(conversation)
    text = text.strip()
    with _lock:
        current = _pins.pop(cid, ())
        if text not in current:
            if len(current) >= MAX_PINS:
                raise ValueError(f"conversation {cid!r} already has {MAX_PINS} pins; unpin one first")
            current = (*current, text)
        _pins[cid] = current  # the most recently pinned conversation last
        if cid in _unpinned:
            _unpinned[cid] = _unpinned[cid] - {text}
        while len(_pins) > MAX_CONVERSATIONS:
            _unpinned.pop(next(iter(_pins)), None)
            del _pins[next(iter(_pins))]


def unpin(text: str | None = None, *, conversation: str | None = None) -> None:
    """Forget one pin of the conversation (``text``), or all of them (None). A pin a compaction already put in
    the head stays there until the next compaction of this process, which no longer carries it (another
    worker's compaction still does, from the shared head, unless it is unpinned there too)."""
    cid = _conversation(conversation)
    with _lock:
        gone = set(_pins.get(cid, ())) if text is None else {text.strip()}
        left = tuple(t for t in _pins.get(cid, ()) if t not in gone)
        if left:
            _pins[cid] = left
        else:
            _pins.pop(cid, None)
        if len(_unpinned) < MAX_CONVERSATIONS or cid in _unpinned:
            _unpinned[cid] = _unpinned.get(cid, frozenset()) | gone


def pinned(conversation_id: str | None) -> tuple[str, ...]:
    """The pins of a conversation, oldest first (none for a derived one)."""
    if conversation_id is None:
        return ()
    return _pins.get(conversation_id, ())


def unpinned(conversation_id: str | None) -> frozenset[str]:
    """The texts unpinned in this process for a conversation (a compaction does not carry them on)."""
    if conversation_id is None:
        return frozenset()
    return _unpinned.get(conversation_id, frozenset())
