"""The JSON-native check of anthropic bodies: walked where the history changed, and still right."""

from __future__ import annotations

from typing import Any

import pytest

import otel_context
from otel_context import semconv
from otel_context.instrumentation._json_native import JsonNativeMemo, is_json_native
from tests.instrumentation.instr_support import MODEL_A, attrs, only_span

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Block:
    """Stands for an SDK object in a history (anything that is not a dict, list or JSON scalar)."""


def _history(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"m{i}"}]}
        for i in range(n)
    ]


def test_plain_values_and_the_rest() -> None:
    assert is_json_native({"a": [1, 2.5, True, None, "x", {"b": []}]})
    assert not is_json_native({"a": [{"b": Block()}]})
    assert not is_json_native({"a": (1, 2)})  # a tuple is not what the engine expects: the SDK prepares it


def test_a_resent_history_is_checked_again_where_it_changed() -> None:
    memo = JsonNativeMemo()
    memo.short_list = 2
    history = _history(6)
    assert memo.body_is_native({"model": "m", "messages": history})
    grown = [*history, {"role": "user", "content": [{"type": "text", "text": "next"}, Block()]}]
    assert not memo.body_is_native({"model": "m", "messages": grown})  # the appended message is walked
    # The previous last message is walked again: apps edit it in place (a moved cache_control marker).
    history[-1]["content"].append(Block())
    assert not memo.body_is_native({"model": "m", "messages": [*history, {"role": "user", "content": "x"}]})


def test_a_replaced_element_in_the_seen_part_is_walked() -> None:
    memo = JsonNativeMemo()
    memo.short_list = 2
    history = _history(8)
    assert memo.body_is_native({"messages": history})
    replaced = list(history)
    replaced[2] = {"role": "user", "content": [Block()]}  # a new object: identity says it was not seen
    assert not memo.body_is_native({"messages": replaced})
    assert memo.body_is_native({"messages": history})


def test_short_lists_are_walked_without_being_remembered() -> None:
    memo = JsonNativeMemo()
    assert memo.body_is_native({"messages": _history(memo.short_list)})
    assert not memo.body_is_native(
        {"messages": [*_history(memo.short_list - 1), {"role": "user", "content": [Block()]}]}
    )
    assert len(memo._lists) == 0
    assert memo.body_is_native({"messages": _history(memo.short_list + 1)})
    assert len(memo._lists) == 1


def test_entries_are_bounded() -> None:
    memo = JsonNativeMemo(max_entries=3)
    memo.short_list = 2
    histories = [_history(4) for _ in range(5)]
    for history in histories:
        assert memo.body_is_native({"messages": history})
    assert len(memo._lists) == 3


def test_an_agent_that_appends_sdk_blocks_is_planned_and_sent_right(
    simulated_provider: Any, spans: Any, metric_reader: Any
) -> None:
    """The anthropic agent loop appends ``response.content`` (SDK objects) to a plain history: every call is
    sent, planned (context attributes on the span) and answered, before and after the SDK objects appear."""
    client = simulated_provider.anthropic()
    otel_context.instrument()
    try:
        history: list[dict[str, Any]] = [{"role": "user", "content": "hello, count to three"}]
        for turn in range(4):
            response = client.messages.create(model=MODEL_A, max_tokens=50, messages=history)
            if turn % 2:
                history.append({"role": "assistant", "content": response.content})  # SDK objects
            else:
                history.append({"role": "assistant", "content": response.content[0].text})
            history.append({"role": "user", "content": f"and now {turn}"})
        found = spans(f"chat {MODEL_A}")
        assert len(found) == 4
        for span in found:
            assert attrs(span)[semconv.CONTEXT_ESTIMATED_TOKENS] > 0
        sent = [e for e in simulated_provider.exchanges if e.path.endswith("/messages")]
        assert [len(e.body["messages"]) for e in sent] == [1, 3, 5, 7]
        assert all(e.status == 200 for e in sent)
        # The SDK objects went out as the blocks they stand for.
        assert sent[-1].body["messages"][3]["content"][0]["type"] == "text"
        last = only_span(found[-1:])
        assert attrs(last)[semconv.GEN_AI_USAGE_INPUT_TOKENS] == sent[-1].usage["input_tokens"]
    finally:
        otel_context.uninstrument()
