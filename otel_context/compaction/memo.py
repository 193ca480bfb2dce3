"""Transparent mode's memory: which prefix of the app's history was compacted, and into what.

An app that never compacts resends its full, growing history on every call. Without a memo every call
past the threshold would summarize again (one summarizer call per turn, and a different summary each
time, so the provider's prompt cache never hits). With it:

- the summarizer runs once per threshold crossing: the next call carries the same prefix, which is found
  here and replaced by the SAME replacement objects, so the requests after a compaction share a
  byte-identical prefix the provider can cache;
- entries are keyed by a hash of the content they replaced, so a derived-key collision between two
  conversations can never move one conversation's summary into another;
- the per-call cost does not grow with the history: the conversation state tells us how many leading
  items are equal to the previous call's (a C-level list comparison, whose leaf strings are usually the
  very same objects), and the entry verified on the previous call is reused without hashing. Hashing
  happens once per compaction, and again only when the app edited its history.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Item = Mapping[str, Any]

#: Entries kept per conversation (newest wins; older ones serve an app that rewinds its history).
MAX_ENTRIES = 4


def items_hash(items: Sequence[Item]) -> str:
    """A content hash of conversation items (canonical JSON, so key order does not matter)."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode())
        digest.update(b"\x1e")
    return digest.hexdigest()


@dataclass(frozen=True)
class MemoEntry:
    """``prefix_len`` original items whose hash is ``prefix_hash`` are sent as ``replacement``."""

    prefix_len: int
    prefix_hash: str
    replacement: tuple[Item, ...]
    #: The summary text (empty for a microcompact entry), for the explicit API and hooks.
    summary: str = ""

    def apply(self, items: Sequence[Item]) -> list[Item]:
        """The items to send for ``items`` (whose prefix this entry matches)."""
        return [*self.replacement, *items[self.prefix_len :]]

    def to_original_index(self, sent_index: int) -> int:
        """Map an index in the sent items (after :meth:`apply`) back to the app's items."""
        return self.prefix_len + (sent_index - len(self.replacement))


class CompactionMemo:
    """The compactions of one conversation, newest first, and the one verified on the last call."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: list[MemoEntry] = []
        self._max = max_entries
        self._verified: MemoEntry | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def latest(self) -> MemoEntry | None:
        return self._entries[0] if self._entries else None

    def remember(self, entry: MemoEntry) -> None:
        """Record a compaction made on the current call (it becomes the verified entry)."""
        self._entries = [entry, *(e for e in self._entries if e.prefix_hash != entry.prefix_hash)][: self._max]
        self._verified = entry

    def find(self, items: Sequence[Item], unchanged_prefix: int) -> MemoEntry | None:
        """The entry that applies to ``items``, or None.

        ``unchanged_prefix``: how many leading items are known equal to the previous call's items. When
        it covers the entry verified on that call, no hashing is needed (the common, append-only case).
        """
        verified = self._verified
        if verified is not None and verified.prefix_len <= unchanged_prefix:
            return verified
        for entry in sorted(self._entries, key=lambda e: e.prefix_len, reverse=True):
            if entry.prefix_len <= len(items) and items_hash(items[: entry.prefix_len]) == entry.prefix_hash:
                self._verified = entry
                return entry
        self._verified = None
        return None
