"""Conversation identity and the bounded store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import otel_context
from otel_context.conversation import (
    ConversationState,
    ConversationTable,
    Snapshot,
    current_conversation_id,
    derive_key,
    unchanged_prefix,
)


def test_explicit_id_context_manager_nests_and_resets() -> None:
    assert current_conversation_id() is None
    with otel_context.conversation("outer"):
        assert current_conversation_id() == "outer"
        with otel_context.conversation("inner"):
            assert current_conversation_id() == "inner"
        assert current_conversation_id() == "outer"
    assert current_conversation_id() is None


async def test_explicit_id_is_per_task() -> None:
    async def inside(name: str) -> str | None:
        with otel_context.conversation(name):
            await asyncio.sleep(0)
            return current_conversation_id()

    assert list(await asyncio.gather(inside("a"), inside("b"))) == ["a", "b"]


@pytest.mark.parametrize("bad", ["", "  ", None, 3])
def test_bad_ids_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="non-empty string"), otel_context.conversation(bad):  # type: ignore[arg-type]
        pass


def test_derived_key_depends_on_provider_and_first_user_message_only() -> None:
    assert derive_key("anthropic", "hi") == derive_key("anthropic", "hi")
    assert derive_key("anthropic", "hi") != derive_key("openai", "hi")
    assert derive_key("anthropic", "hi") != derive_key("anthropic", "hello")


def test_store_is_lru_bounded() -> None:
    evicted: list[str] = []
    store = ConversationTable(max_conversations=3)
    store.on_forget(lambda s: evicted.append(s.key))
    for key in ["a", "b", "c"]:
        store.get(key, explicit=True)
    store.get("a", explicit=True)  # a is now the most recent
    store.get("d", explicit=True)
    assert len(store) == 3
    assert evicted == ["b"]


def test_store_expires_idle_conversations() -> None:
    now = [0.0]
    evicted: list[str] = []
    store = ConversationTable(idle_seconds=10, clock=lambda: now[0])
    store.on_forget(lambda s: evicted.append(s.key))
    first = store.get("a", explicit=True)
    now[0] = 5
    store.get("b", explicit=True)
    now[0] = 12
    store.get("b", explicit=True)
    assert evicted == ["a"]
    now[0] = 30
    again = store.get("b", explicit=True)
    assert again is not first and evicted == ["a", "b"]


def test_store_tells_every_listener_of_each_state_it_forgets_after_releasing_its_lock() -> None:
    told: list[tuple[str, str, bool]] = []
    store = ConversationTable(max_conversations=2)

    def listener(name: str) -> Callable[[ConversationState], None]:
        def forgot(state: ConversationState) -> None:
            # A listener may ask the store (tracks() takes its lock): told once the lock is released.
            released = not store._lock.locked()
            told.append((name, state.key, released and not store.tracks(state)))

        return forgot

    store.on_forget(listener("first"))
    store.on_forget(listener("second"))
    for key in ["a", "b", "c"]:  # evicted: a
        store.get(key, explicit=True)
    assert told == [("first", "a", True), ("second", "a", True)]
    told.clear()
    store.clear()  # cleared: every state left
    assert told == [(name, key, True) for key in ["b", "c"] for name in ["first", "second"]]


def test_unchanged_prefix_compares_content() -> None:
    items = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert unchanged_prefix(None, items) == 0
    snapshot = Snapshot(items, None)
    assert unchanged_prefix(snapshot, [dict(i) for i in items] + [{"role": "user", "content": "c"}]) == 2
    assert unchanged_prefix(snapshot, [{"role": "user", "content": "z"}, items[1], items[1]]) == 0
    assert unchanged_prefix(snapshot, [items[0], {"role": "assistant", "content": "b2"}]) == 1
    # Strict about the last message: only a moved cache marker counts as the same message.
    assert unchanged_prefix(snapshot, [items[0], {"role": "assistant", "content": "b2"}], same_last_message=True) == 0
    marked = {"role": "assistant", "content": [{"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]}
    assert unchanged_prefix(Snapshot([items[0], marked], None), items, same_last_message=True) == 1
