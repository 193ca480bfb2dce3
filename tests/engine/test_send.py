"""One way to send a summary: ``CallState.send`` (the one writer of what a call sends), ``CallState.covers``
(whether a prepared summary applies, by value or by content hash: the same answer), and
``MemoEntry.of_compaction`` (the one constructor of the entries a compaction makes)."""

from __future__ import annotations

import copy
from typing import Any

from otel_context import semconv
from otel_context.contract import CallRequest
from otel_context.conversation import resolve
from otel_context.conversation.memo import MemoEntry, items_hash
from otel_context.engine.planner import EnginePlan, decide, reuse_memo
from otel_context.formats import for_format
from otel_context.settings import Settings

MODEL = "claude-sonnet-4-6"


def _messages(n: int, tag: str = "") -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}{tag} " + "words " * 20}
        for i in range(n)
    ]


def _call(messages: list[dict[str, Any]], system: str = "You are an agent.") -> EnginePlan:
    body = {"model": MODEL, "max_tokens": 1024, "system": system, "messages": messages}
    request = CallRequest("anthropic", "anthropic_messages", body, MODEL, Settings(auto_compact_window=30_000))
    adapter = for_format(request.wire_format)
    items = adapter.items(body)
    resolution = resolve(adapter, request.provider, items, request.settings, None)
    return EnginePlan(request, adapter, resolution, items, MODEL, decide(request, adapter, MODEL).budget)


SUMMARY = {"role": "user", "content": "Summary of the conversation so far."}


def _entry(call: EnginePlan, cut: int) -> MemoEntry:
    entry = MemoEntry.of_compaction(
        call.items, None, call.sent_items, [SUMMARY, *call.items[cut:]], cut, (SUMMARY,), "S", 1, call.scope
    )
    assert entry is not None
    return entry


def test_of_compaction_makes_the_entry_of_the_replaced_prefix() -> None:
    call = _call(_messages(8))
    entry = _entry(call, 4)
    assert (entry.prefix_len, entry.prefix_hash) == (4, items_hash(call.items[:4]))
    assert (entry.replacement, entry.summary, entry.summary_head, entry.scope) == ((SUMMARY,), "S", 1, call.scope)


def test_of_compaction_makes_none_when_the_memo_could_not_replay_it() -> None:
    call = _call(_messages(8))
    repaired = [SUMMARY, {"role": "assistant", "content": "repaired"}, *call.items[5:]]
    assert MemoEntry.of_compaction(call.items, None, call.items, repaired, 4, (SUMMARY,), "S", 1, call.scope) is None
    # A cut inside the replacement of the entry the call sends already.
    base = _entry(call, 4)
    sent = base.apply(call.items)
    assert MemoEntry.of_compaction(call.items, base, sent, [SUMMARY, *sent], 0, (SUMMARY,), "S", 1, "") is None


def test_of_compaction_maps_a_cut_past_an_earlier_summary_back_to_the_apps_items() -> None:
    call = _call(_messages(10))
    base = _entry(call, 4)
    sent = base.apply(call.items)  # the summary, then items 4..9
    newer = MemoEntry.of_compaction(call.items, base, sent, [SUMMARY, *sent[3:]], 3, (SUMMARY,), "T", 1, call.scope)
    assert newer is not None and newer.prefix_len == 4 + 3 - 1
    assert newer.prefix_hash == items_hash(call.items[:6])


def test_send_changes_what_the_call_sends_and_remember_keeps_it_in_the_memo() -> None:
    call = _call(_messages(8))
    entry = _entry(call, 4)
    call.send(entry)
    assert call.entry is entry and list(call.sent_items) == [SUMMARY, *call.items[4:]]
    assert call.body["messages"] == list(call.sent_items) and call.body["system"] == "You are an agent."
    assert len(call.state.memo) == 0  # not remembered unless asked
    kept = [SUMMARY, *call.items[4:]]
    call.send(entry, kept, remember=True)
    assert call.sent_items is kept and call.state.memo.latest is entry
    # The plan's memo stage sends it through the same method on the next call of the conversation.
    later = _call(_messages(8))
    later.state.memo.remember(entry)
    sent = reuse_memo(later)
    assert sent is not None and sent.entry is entry and later.entry is entry and later.body is sent.body


def test_compacted_sets_the_estimate_on_the_span_attributes() -> None:
    call = _call(_messages(4))
    call.compacted(1234)
    assert call.estimated_tokens == 1234
    assert call.attributes[semconv.CONTEXT_ESTIMATED_TOKENS] == 1234
    assert call.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True


def test_covers_answers_alike_by_value_and_by_content_hash() -> None:
    messages = _messages(8)
    started = copy.deepcopy(messages[:6])
    entry = _entry(_call(messages), 4)
    cases = {
        "same history, grown": (_call([*copy.deepcopy(messages), *_messages(2, "new")]), True),
        "edited below the cut": (_call([messages[0], {"role": "assistant", "content": "x"}, *messages[2:]]), False),
        "edited above the cut": (_call([*messages[:5], {"role": "assistant", "content": "x"}, *messages[6:]]), True),
        "rewound below the cut": (_call(messages[:3]), False),
        "another system prompt": (_call(list(messages), system="Another."), False),
    }
    for name, (call, expected) in cases.items():
        assert call.covers(entry) is expected, name
        assert call.covers(entry, started) is expected, name
    # A call that already sends a summary as long (or longer) is not covered by it.
    call = _call(list(messages))
    call.send(entry)
    assert not call.covers(entry) and not call.covers(entry, started)


def _cleared(call: EnginePlan, upto: int, base: MemoEntry | None = None) -> MemoEntry:
    """A microcompaction's entry over ``base``: the app's items up to ``upto`` sent with their content changed
    (as a clearing changes tool results), the shape kept."""
    sent = list(call.sent_items)
    start = len(base.replacement) if base is not None else 0
    shift = base.shift if base is not None else 0
    changed = [
        *sent[:start],
        *({**m, "content": "[cleared]"} for m in sent[start : upto - shift]),
        *sent[upto - shift :],
    ]
    summary, head = (base.summary, base.summary_head) if base is not None else ("", 0)
    entry = MemoEntry.of_compaction(
        call.items, base, sent, changed, upto - shift, tuple(changed[: upto - shift]), summary, head, call.scope
    )
    assert entry is not None
    return entry


def test_a_summary_covers_a_call_across_a_clearing_made_since_and_keeps_what_it_cleared() -> None:
    """Issue 49 item 2: a microcompaction changes content, not the history's shape. A summary prepared before
    it (over the entry the call sent then) still covers the call, and what the call then sends is the summary
    followed by the items the clearing changed after its cut, and the rest."""
    messages = _messages(12)
    started = copy.deepcopy(messages)
    summary = _entry(_call(messages), 4)  # made when nothing was compacted (base None)
    call = _call([*copy.deepcopy(messages), *_messages(2, "new")])
    clearing = _cleared(call, 8)  # past the summary's cut
    call.send(clearing)
    assert not call.covers(summary, started)  # the plain test: the call sends a longer prefix
    assert call.covers_prepared(summary, started, None)
    sending = call.sending(summary)
    assert sending.prefix_len == clearing.prefix_len and sending.prefix_hash == clearing.prefix_hash
    assert sending.apply(call.items) == [SUMMARY, *clearing.replacement[4:], *call.items[8:]]
    assert (sending.summary, sending.summary_head) == ("S", 1)
    # Another summary sent since (not a clearing of the same base) is newer: it is not covered.
    other = _call([*copy.deepcopy(messages), *_messages(2, "new")])
    newer = _entry(other, 6)
    other.send(newer)
    assert not other.covers_prepared(summary, started, None)
    # A clearing over a summary that is not the one this summary was made over: not covered either.
    assert not call.covers_prepared(summary, started, newer)
