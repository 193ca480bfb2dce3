"""What the engine keeps per conversation: an immutable snapshot of the last call, the memo, the breaker.

A call reads its conversation's :class:`Snapshot` once; every check it makes against it holds whatever
other calls do meanwhile. Memo entries are immutable and content-keyed; the breaker and the estimate
factor change under the state's lock.

Only the conversation's own in-process state lives here. What a worker knows of a shared store's value of
the conversation (its revision, what it last wrote: :class:`~otel_context.conversation.shared.SharedRecord`)
is kept by the engine's store-backed sync, so a process without a store carries none of it; what background
compaction prepares for it (a summary, the conversation's pace) is kept by
:mod:`otel_context.engine.background`. Both are in tables keyed weakly by state, so they go with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from otel_context.conversation.breaker import Breaker
from otel_context.conversation.memo import CompactionMemo, MemoEntry
from otel_context.fork_safe import new_lock
from otel_context.usage import TokenUsage

if TYPE_CHECKING:
    from otel_context.cache import CacheBreakDetector

#: The byte bound's conversion: the estimator counts about 4 characters a token, and Python's strings of
#: ASCII text take a byte a character.
BYTES_PER_TOKEN = 4


@dataclass(frozen=True, init=False)
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
    #: With a shared store only: the chained content hash after each item (see
    #: :mod:`otel_context.conversation.shared`), so the next commit hashes only what was appended.
    chain: tuple[str, ...] = ()
    #: The responses that answered exactly ``items`` (the call, and retries or histories that opened alike),
    #: as ``(reply digest, response id)``: a later call names one as its previous response (the provider's cache
    #: diagnostics) only when it sends that very reply back after ``items``. An id of "" marks a digest two
    #: responses shared, which proves nothing. Kept only with ``cache_diagnostics`` on.
    replies: tuple[tuple[str, str], ...] = ()

    def __init__(
        self,
        items: Sequence[Mapping[str, Any]],
        usage: TokenUsage | None,
        entry: MemoEntry | None = None,
        tokens: int = 0,
        chain: tuple[str, ...] = (),
        replies: tuple[tuple[str, str], ...] = (),
    ) -> None:
        # The generated __init__'s fields and order, in one dict update instead of a frozen dataclass's
        # object.__setattr__ per field (every chat call commits one).
        self.__dict__.update(items=items, usage=usage, entry=entry, tokens=tokens, chain=chain, replies=replies)

    @property
    def size(self) -> int:
        """Approximate bytes of the app's objects this snapshot keeps alive (for the store's byte bound)."""
        return BYTES_PER_TOKEN * self.tokens


#: Responses a snapshot remembers for its items (retries, histories that opened alike): a few, whatever the app does.
MAX_REPLIES = 8


def merge_replies(known: tuple[tuple[str, str], ...], new: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """:attr:`Snapshot.replies` of two sets of responses to the same items: a digest that two different
    responses share is kept with no id (neither response can be told from the reply); the newest last, a few."""
    out = list(known)
    for digest, response_id in new:
        for i, (other, other_id) in enumerate(out):
            if other == digest:
                if other_id != response_id:
                    out[i] = (digest, "")
                break
        else:
            out.append((digest, response_id))
    return tuple(out[-MAX_REPLIES:])


def same_items(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two histories are the same items (a C-level list comparison)."""
    return len(a) == len(b) and (a if type(a) is list else list(a)) == (b if type(b) is list else list(b))


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
    """What this process remembers of one conversation itself (one branch of it, for derived keys); what the
    engine keeps alongside it (shared, prepared) is in the engine's own tables (see the module's docstring).

    Thread- and task-safe: the snapshot is replaced whole (:meth:`ConversationTable.commit`), memo
    entries are immutable, and the breaker and estimate factor change under :attr:`lock`.
    """

    #: The link of the provider-stored response (Responses) its last call made: a call that continues that
    #: very response is this conversation's next call; one that continues another is a branch of its own.
    link: ChainLink | None = None

    def __init__(self, key: str, explicit: bool, serial: int = 0) -> None:
        self.key = key
        self.explicit = explicit
        #: Distinguishes the branches of one derived key (0 for explicit ids).
        self.serial = serial
        #: The store's key for this state (made once: the store looks it up twice per call).
        self.ident = (key, serial)
        self.last_seen = 0.0
        #: The last successful call, or None before the first one ended.
        self.snapshot: Snapshot | None = None
        #: time.monotonic() when the last call ended (cache TTL: a cold cache makes clearing free).
        self.last_call_ended: float | None = None
        #: Calls of this conversation that ended in this process (the engine's measure of a pace per call).
        self.calls = 0
        self.memo = CompactionMemo()
        self.breaker = Breaker()
        #: Model whose breakers_open series counts this conversation while its breaker is open.
        self.breaker_model: str | None = None
        #: What this conversation's calls cost so far in this process, USD (``otel_context.conversation.cost``).
        self.spend = 0.0
        #: The cache-break detector (otel_context.cache), created lazily by the engine.
        self.detector: CacheBreakDetector | None = None
        #: Reported / estimated tokens seen on a too-long error (>1 when our estimate undercounts).
        self.estimate_factor = 1.0
        self.lock = new_lock(self, "lock")

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


class ChainLink(NamedTuple):
    """What a call that continues a provider-stored response (Responses ``previous_response_id``) takes from
    the call that made that response: its conversation, and its reported usage, the anchor of the estimate
    (the history itself is at the provider, not in the request)."""

    #: The provider's id of the response (a shared store holds it only hashed, in the link's name).
    response: str
    #: The conversation's key (read from a shared store: "" for an explicit id, which is never written there).
    key: str
    #: The serial of this process's state of it; None when the link was read from a shared store.
    serial: int | None
    input_tokens: int
    output_tokens: int
    #: The chain: a hash of its first stored response's id (the same in every worker, and no provider id).
    chain: str
    #: The response's place in its chain (1: the first), to tell a worker's state that is behind the chain
    #: from a branch of it.
    turn: int


class Resolution(NamedTuple):
    """The state a call uses, the snapshot it read (once), and how much of its history that snapshot proves."""

    state: ConversationState
    snapshot: Snapshot | None
    unchanged: int
