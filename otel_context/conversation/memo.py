"""Transparent mode's memory: which prefix of the app's history was compacted, and into what.

An app that never compacts resends its full, growing history on every call. Without a memo every call
past the threshold would summarize again (one summarizer call per turn, and a different summary each
time, so the provider's prompt cache never hits). With it:

- the summarizer runs once per threshold crossing: the next call carries the same prefix, which is found
  here and replaced by the SAME replacement objects, so the requests after a compaction share a
  byte-identical prefix the provider can cache;
- entries are keyed by a hash of everything the summarizer read: the content they replaced, and the
  call's scope (system prompt, tools and model, :func:`scope_of`). A derived-key collision between two
  conversations can never move one conversation's summary into another, nor can two conversations with the
  same messages under different system prompts or tools share one (the summary of one was written for
  what the other's model does not see). The pair is the entry's :attr:`MemoEntry.address`, the name a
  shared store keeps it under;
- the per-call cost does not grow with the history: the call's snapshot of its conversation (read once,
  immutable) tells how many leading items are equal to the previous call's (a C-level list comparison,
  whose leaf strings are usually the very same objects), and the entry verified against that snapshot's
  items is reused without hashing. Hashing happens once per compaction, and again only when the app
  edited its history. No shortcut trusts anything another call can change in between: the verified
  entry travels with the snapshot it was verified against, not with the memo.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from otel_context import process_state
from otel_context.fork_safe import new_lock

Item = Mapping[str, Any]

#: Entries kept per conversation (newest wins; older ones serve an app that rewinds its history).
MAX_ENTRIES = 4


def items_hash(items: Sequence[Item]) -> str:
    """A content hash of conversation items (canonical JSON, so key order does not matter)."""
    digest = hashlib.sha256()
    for item in items:
        text = json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        digest.update(text.encode("utf-8", "surrogatepass"))  # a lone surrogate must not make the hash raise
        digest.update(b"\x1e")
    return digest.hexdigest()


#: Scopes already hashed, per (system text, model): the tools they came with (a copy: an app may change its
#: own list in place) and the digest. Every call of a conversation resends the same tools, so an equality
#: check (shared leaf strings, mostly) replaces encoding and hashing them; bounded.
_scopes: dict[tuple[str, str], tuple[Any, str]] = {}
_SCOPES_MAX = 256
# Reset and a fork's child: kept (a pure function of its key: a cache of hashes).
process_state.register(__name__, ("_scopes",), on_reset=None, in_forked_child=None)


def scope_of(system: str, tools: Any, model: str) -> str:
    """A digest of what a summarizer reads besides the replaced items: the system prompt (as text), the tool
    definitions and the model. Two conversations whose scopes differ never share a memo entry."""
    kept = _scopes.get((system, model))
    if kept is not None and kept[0] == tools:
        return kept[1]
    text = json.dumps([system, tools, model], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    if len(_scopes) >= _SCOPES_MAX:
        _scopes.clear()  # a miss only costs the hash again
    _scopes[system, model] = (json.loads(text)[1], digest)
    return digest


def entry_address(scope: str, prefix_hash: str) -> str:
    """The content address of a summary: of its scope and of the items it replaced (see :func:`scope_of`)."""
    return hashlib.sha256(f"{scope}\x1e{prefix_hash}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class MemoEntry:
    """``prefix_len`` original items whose hash is ``prefix_hash`` are sent as ``replacement``, for calls
    of the scope ``scope`` (:func:`scope_of`) only."""

    prefix_len: int
    prefix_hash: str
    replacement: tuple[Item, ...]
    #: The summary text (empty for a microcompact entry of a conversation never summarized), for the explicit
    #: API and hooks, and the anchor the next summary updates.
    summary: str = ""
    #: Leading items of ``replacement`` that are the summary's head (its message and the user's messages
    #: kept verbatim): what follows them is the span the next summary adds to the anchor (0: no summary).
    summary_head: int = 0
    #: The scope of the call it was made for (system prompt, tools, model): it applies to that scope only.
    scope: str = ""
    #: Context tokens a call that sends this entry does not send, against the history as the app passed it:
    #: what the compaction removed plus what the entry it built on had (a chain of compactions together). What
    #: each such call's ``otel_context.cost.compaction_saving`` prices. In this process only (the shared
    #: store does not keep it: an entry another worker made saves nothing known here).
    tokens_saved: int = field(default=0, compare=False)

    @classmethod
    def of_compaction(
        cls,
        history: Sequence[Item],
        base: MemoEntry | None,
        sent: Sequence[Item],
        result: Sequence[Item],
        cut: int,
        head: Sequence[Item],
        summary: str,
        summary_head: int,
        scope: str,
        saved: int = 0,
    ) -> MemoEntry | None:
        """The entry a compaction makes, or None when it makes none. ``sent``: what the call sent (the app's
        ``history`` with ``base`` applied, None: as it is); the compaction replaced ``sent[:cut]`` by ``head``
        and ``result`` is what it sends; ``saved``: the context tokens the compaction removed. None when the cut
        falls inside ``base``'s replacement, or the result
        is not ``head`` and the kept items unchanged (a pairing repair touched them): the memo would send
        other items than the compaction's on the following calls. The one constructor of the entries a
        compaction makes, whether adopted by its own call or prepared in the background."""
        min_index = len(base.replacement) if base is not None else 0
        if cut < min_index or list(result) != [*head, *sent[cut:]]:
            return None
        original_cut = base.to_original_index(cut) if base is not None else cut
        prefix = items_hash(history[:original_cut])
        tokens_saved = max(saved, 0) + (base.tokens_saved if base is not None else 0)
        return cls(
            original_cut,
            prefix,
            tuple(head),
            summary,
            summary_head=summary_head,
            scope=scope,
            tokens_saved=tokens_saved,
        )

    @cached_property
    def address(self) -> str:
        """The entry's content address (scope and replaced items): its identity, here and in a shared store."""
        return entry_address(self.scope, self.prefix_hash)

    @property
    def shift(self) -> int:
        """How many more items of the app's history this entry replaces than it sends: the app's item ``k`` at
        or after :attr:`prefix_len` is sent at ``k - shift``."""
        return self.prefix_len - len(self.replacement)

    def changes_only_content_over(self, base: MemoEntry | None) -> bool:
        """Whether this entry is ``base`` (None: the app's items as they are) with the content of items after
        it changed and nothing else: a microcompaction's entry over it, which keeps the shape of the history
        (each cleared tool result stays in place) and the summary before it."""
        if base is None:
            return self.summary == "" and self.summary_head == 0 and self.shift == 0
        return self.summary == base.summary and self.summary_head == base.summary_head and self.shift == base.shift

    def beneath(self, current: MemoEntry) -> MemoEntry:
        """This entry (a summary whose cut lies before ``current``'s end) with ``current`` kept after its cut:
        ``current`` changed only the content of items (see :meth:`changes_only_content_over`), so the items it
        sends from this entry's cut on are the app's same items, cleared. One entry of ``current``'s prefix; what
        it saves is the larger of the two (each counts against the same history, and what the clearing saved
        before the cut is inside what the summary replaced)."""
        tail = current.replacement[self.prefix_len - current.shift :]
        return MemoEntry(
            current.prefix_len,
            current.prefix_hash,
            (*self.replacement, *tail),
            self.summary,
            summary_head=self.summary_head,
            scope=self.scope,
            tokens_saved=max(self.tokens_saved, current.tokens_saved),
        )

    def apply(self, items: Sequence[Item]) -> list[Item]:
        """The items to send for ``items`` (whose prefix this entry matches)."""
        return [*self.replacement, *items[self.prefix_len :]]

    def to_original_index(self, sent_index: int) -> int:
        """Map an index in the sent items (after :meth:`apply`) back to the app's items."""
        return self.prefix_len + (sent_index - len(self.replacement))


class CompactionMemo:
    """The compactions of one conversation, newest first (entries are immutable; the list is replaced whole)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, entries: Sequence[MemoEntry] = ()) -> None:
        self._entries: tuple[MemoEntry, ...] = tuple(entries)[:max_entries]
        self._max = max_entries
        self._lock = new_lock(self, "_lock")

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def latest(self) -> MemoEntry | None:
        entries = self._entries
        return entries[0] if entries else None

    def copy(self) -> CompactionMemo:
        """A memo with the same entries (for a branch of the conversation)."""
        return CompactionMemo(self._max, self._entries)

    @property
    def entries(self) -> tuple[MemoEntry, ...]:
        """Every entry, newest first."""
        return self._entries

    def merge(self, newer: Sequence[MemoEntry]) -> None:
        """Take entries another worker made (content-keyed, so safe to share), in front of ours."""
        with self._lock:
            addresses = {e.address for e in newer}
            self._entries = (*newer, *(e for e in self._entries if e.address not in addresses))[: self._max]

    def remember(self, entry: MemoEntry) -> None:
        """Record a compaction made on the current call."""
        with self._lock:
            kept = (e for e in self._entries if e.address != entry.address)
            self._entries = (entry, *kept)[: self._max]

    def find(
        self, items: Sequence[Item], verified: MemoEntry | None = None, unchanged_prefix: int = 0, scope: str = ""
    ) -> MemoEntry | None:
        """The entry of scope ``scope`` that applies to ``items``, or None.

        ``verified``: the entry the previous call's items started with (from the call's own snapshot), and
        ``unchanged_prefix``: how many leading ``items`` are proven equal to that call's items. When that
        covers ``verified`` (of this scope), it applies without hashing (the common, append-only case);
        otherwise every entry of the scope is checked against the content hash of ``items``' own prefix.
        """
        if verified is not None and verified.prefix_len <= unchanged_prefix and verified.scope == scope:
            return verified
        for entry in sorted(self._entries, key=lambda e: e.prefix_len, reverse=True):
            if (
                entry.scope == scope
                and entry.prefix_len <= len(items)
                and items_hash(items[: entry.prefix_len]) == entry.prefix_hash
            ):
                return entry
        return None
