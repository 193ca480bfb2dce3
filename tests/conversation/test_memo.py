"""The transparent-mode memo: keyed by content, reused without hashing on append-only histories."""

from __future__ import annotations

from typing import Any

from otel_context.conversation import memo as memo_mod
from otel_context.conversation.memo import CompactionMemo, MemoEntry, items_hash


def _items(n: int) -> list[dict[str, object]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(n)]


def test_hash_ignores_key_order_but_not_content() -> None:
    assert items_hash([{"a": 1, "b": 2}]) == items_hash([{"b": 2, "a": 1}])
    assert items_hash([{"a": 1}]) != items_hash([{"a": 2}])


def test_entry_applies_and_maps_indices() -> None:
    items = _items(10)
    head = ({"role": "user", "content": "summary"},)
    entry = MemoEntry(6, items_hash(items[:6]), head)
    sent = entry.apply(items)
    assert sent == [head[0], *items[6:]]
    assert entry.to_original_index(1) == 6
    assert entry.to_original_index(3) == 8


def test_find_uses_the_verified_entry_without_hashing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    items = _items(10)
    memo = CompactionMemo()
    entry = MemoEntry(6, items_hash(items[:6]), ({"role": "user", "content": "s"},))
    memo.remember(entry)
    calls: list[int] = []

    def counting_hash(xs: Any) -> str:
        calls.append(1)
        return "x"

    monkeypatch.setattr(memo_mod, "items_hash", counting_hash)
    assert memo.find([*items, {"role": "user", "content": "new"}], entry, unchanged_prefix=10) is entry
    assert calls == []
    # Without a verified entry for this call's own snapshot, nothing is trusted unhashed.
    assert memo.find([*items, {"role": "user", "content": "new"}], None, unchanged_prefix=10) is None
    assert calls == [1]


def test_find_rehashes_when_the_prefix_changed_and_rejects_edits() -> None:
    items = _items(10)
    memo = CompactionMemo()
    entry = MemoEntry(6, items_hash(items[:6]), ({"role": "user", "content": "s"},))
    memo.remember(entry)
    # Same content, but not known to be unchanged: found by hash.
    assert memo.find([dict(i) for i in items], unchanged_prefix=0) is entry
    edited = [dict(i) for i in items]
    edited[2] = {"role": "user", "content": "edited"}
    assert memo.find(edited, unchanged_prefix=0) is None


def test_bounded_entries() -> None:
    memo = CompactionMemo(max_entries=2)
    for n in range(4):
        memo.remember(MemoEntry(n + 1, f"h{n}", ()))
    assert len(memo) == 2
    assert memo.latest is not None and memo.latest.prefix_hash == "h3"
