"""Microcompact: clearing old tool results, capping oversized ones, on all three wire formats."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_context.compaction.microcompact import (
    MicrocompactResult,
    cap_text,
    microcompact,
    microcompact_items,
    microcompact_messages,
    omission_marker,
)
from otel_context.formats import ANTHROPIC_MESSAGES, CLEARED_PLACEHOLDER, OPENAI_CHAT, OPENAI_RESPONSES, for_format
from otel_context.settings import Settings
from otel_context.tokens import estimate_items, estimate_text
from tests.formats.histories import anthropic_agent_body, openai_chat_agent_body, openai_responses_agent_body
from tests.formats.strategies import Item, histories


def _anthropic_loop(sizes: list[int], tool: str = "read_file", prefix: str = "toolu") -> list[Item]:
    """A user request then one tool call per size, each answered by a result of ``size`` lines."""
    items: list[Item] = [{"role": "user", "content": "Read the files."}]
    for n, size in enumerate(sizes):
        ident = f"{prefix}_{n}"
        items.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": ident, "name": tool, "input": {"path": f"f{n}.py"}}],
            }
        )
        items.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": ident, "content": f"file {n}: " + "x = 1\n" * size}],
            }
        )
    items.append({"role": "assistant", "content": [{"type": "text", "text": "Done."}]})
    return items


def _texts(adapter: Any, items: Sequence[Mapping[str, Any]]) -> list[str]:
    return [r.text for r in adapter.tool_results(items)]


def test_clears_all_but_the_newest_three() -> None:
    items = _anthropic_loop([2_000] * 5)
    snapshot = copy.deepcopy(items)
    result = microcompact(ANTHROPIC_MESSAGES, items, clear_at_least=0)
    assert isinstance(result, MicrocompactResult)
    assert _texts(ANTHROPIC_MESSAGES, result.items)[:2] == [CLEARED_PLACEHOLDER] * 2
    assert _texts(ANTHROPIC_MESSAGES, result.items)[2:] == _texts(ANTHROPIC_MESSAGES, items)[2:]
    assert result.messages_compacted == result.results_cleared == result.cleared == 2
    assert result.tokens_before == estimate_items(ANTHROPIC_MESSAGES, items)
    assert result.tokens_after == estimate_items(ANTHROPIC_MESSAGES, result.items) < result.tokens_before
    assert items == snapshot  # the caller's history is untouched
    assert ANTHROPIC_MESSAGES.validate(result.items) == []
    assert result.items[-1] is items[-1] and result.items[6] is items[6]  # unchanged items are shared


def test_keep_recent_and_tool_allow_list() -> None:
    items = _anthropic_loop([2_000] * 4)
    assert (
        _texts(
            ANTHROPIC_MESSAGES, microcompact(ANTHROPIC_MESSAGES, items, keep_recent=1, clear_at_least=0).items
        ).count(CLEARED_PLACEHOLDER)
        == 3
    )
    assert microcompact(ANTHROPIC_MESSAGES, items, keep_recent=0, clear_at_least=0).results_cleared == 4
    untouched = microcompact(ANTHROPIC_MESSAGES, items, keep_recent=0, tools=frozenset({"grep"}), clear_at_least=0)
    assert untouched.items is not None and untouched.messages_compacted == 0
    assert untouched.tokens_after == untouched.tokens_before
    # Two grep results, then two read_file results, in one tool loop.
    both = _anthropic_loop([2_000] * 2, "grep", "g")[:-1] + _anthropic_loop([2_000] * 2, "read_file", "r")[1:]
    assert ANTHROPIC_MESSAGES.validate(both) == []
    only_grep = microcompact(ANTHROPIC_MESSAGES, both, keep_recent=1, tools={"grep"}, clear_at_least=0)
    names = [(r.tool_name, r.cleared) for r in ANTHROPIC_MESSAGES.tool_results(only_grep.items)]
    assert names == [("grep", True), ("grep", False), ("read_file", False), ("read_file", False)]


def test_clear_at_least_holds_back_small_gains() -> None:
    items = _anthropic_loop([50] * 5)
    assert microcompact(ANTHROPIC_MESSAGES, items).messages_compacted == 0  # default 5,000 tokens
    small = microcompact(ANTHROPIC_MESSAGES, items, clear_at_least=10)
    assert small.results_cleared == 2


def test_caps_one_oversized_result_head_and_tail() -> None:
    items = _anthropic_loop([10, 40_000])  # ~80,000 tokens in the newest result
    result = microcompact(ANTHROPIC_MESSAGES, items, max_tool_result_tokens=1_000)
    assert result.results_capped == 1 and result.results_cleared == 0
    original = _texts(ANTHROPIC_MESSAGES, items)[1]
    capped = _texts(ANTHROPIC_MESSAGES, result.items)[1]
    assert capped.startswith(original[:1_000]) and capped.endswith(original[-500:])
    assert "tokens omitted ..." in capped
    assert 800 <= estimate_text(capped) <= 1_000
    assert ANTHROPIC_MESSAGES.validate(result.items) == []
    # Capping again changes nothing.
    assert microcompact(ANTHROPIC_MESSAGES, result.items, max_tool_result_tokens=1_000).messages_compacted == 0


def test_cap_text_shares_and_marker() -> None:
    text = "".join(f"line {i}\n" for i in range(5_000))
    assert cap_text(text, 100_000) is None
    assert cap_text(text, 0) is None
    out = cap_text(text, 1_000)
    assert out is not None
    head, marker, tail = out.split("\n\n")
    total = estimate_text(text)
    assert len(head) == int(1_000 * 0.6 * len(text) / total) and len(tail) == int(1_000 * 0.3 * len(text) / total)
    omitted = text[len(head) : len(text) - len(tail)]
    assert marker == omission_marker(estimate_text(omitted)) == f"[... {estimate_text(omitted)} tokens omitted ...]"


def test_images_in_old_results_count_and_are_dropped() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR" * 10}}
    items = _anthropic_loop([1, 1, 1, 1])
    items[2] = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": [image, image, image]}],
    }
    result = microcompact(ANTHROPIC_MESSAGES, items)  # 3 images = 6,000 tokens >= clear_at_least
    assert result.results_cleared == 1
    assert ANTHROPIC_MESSAGES.image_count(result.items[2]) == 0
    assert result.tokens_before - result.tokens_after > 5_900


@pytest.mark.parametrize(
    ("adapter", "body"),
    [
        (ANTHROPIC_MESSAGES, anthropic_agent_body()),
        (OPENAI_CHAT, openai_chat_agent_body()),
        (OPENAI_RESPONSES, openai_responses_agent_body()),
    ],
)
def test_every_format(adapter: Any, body: dict[str, Any]) -> None:
    items = adapter.items(body)
    snapshot = copy.deepcopy(body)
    result = microcompact(adapter, items, keep_recent=1, clear_at_least=0)
    refs = adapter.tool_results(result.items)
    assert refs[0].cleared and not refs[-1].cleared
    assert [r.call_id for r in refs] == [r.call_id for r in adapter.tool_results(items)]
    assert adapter.validate(result.items) == []
    assert body == snapshot


def test_settings_entry_point() -> None:
    items = _anthropic_loop([3_000] * 5)
    s = Settings(microcompact_keep_recent=4, microcompact_clear_at_least=0, max_tool_result_tokens=0)
    assert microcompact_items(ANTHROPIC_MESSAGES, items, s).results_cleared == 1
    s2 = Settings(microcompact_tools=frozenset({"grep"}), microcompact_clear_at_least=0)
    assert microcompact_items(ANTHROPIC_MESSAGES, items, s2).messages_compacted == 0


def test_public_convenience_for_apps() -> None:
    body = openai_chat_agent_body()
    messages = body["messages"]
    snapshot = copy.deepcopy(messages)
    out = microcompact_messages(messages, "openai_chat", keep_recent=1, clear_at_least=0)
    assert out is not messages and messages == snapshot
    assert out[0] == messages[0]  # the system message stays
    assert out[3]["content"] == CLEARED_PLACEHOLDER and out[4] is messages[4]
    assert microcompact_messages(_anthropic_loop([3_000] * 5))[2]["content"][0]["content"] == CLEARED_PLACEHOLDER
    with pytest.raises(ValueError, match="unknown wire format"):
        microcompact_messages(messages, "gemini")
    with pytest.raises(TypeError, match="list of message objects"):
        microcompact_messages("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        microcompact_messages([{"role": "user", "content": "x"}, "oops"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="keep_recent"):
        microcompact_messages(messages, "openai_chat", keep_recent=-1)
    with pytest.raises(ValueError, match="tools"):
        microcompact_messages(messages, "openai_chat", tools="grep")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(0, 4), st.sampled_from([0, 500, 5_000]), st.sampled_from([0, 300, 2_000]))
def test_output_validates_and_input_is_never_mutated(
    case: tuple[str, list[Item]], keep_recent: int, clear_at_least: int, cap: int
) -> None:
    wire_format, items = case
    adapter = for_format(wire_format)
    snapshot = copy.deepcopy(items)
    result = microcompact(
        adapter, items, keep_recent=keep_recent, clear_at_least=clear_at_least, max_tool_result_tokens=cap
    )
    assert items == snapshot
    assert adapter.validate(result.items) == []
    assert len(result.items) == len(items)
    before, after = adapter.tool_results(items), adapter.tool_results(result.items)
    assert [r.call_id for r in after] == [r.call_id for r in before]  # results stay, only their text changes
    assert result.tokens_after <= result.tokens_before
    assert sum(a.text != b.text for a, b in zip(after, before, strict=True)) == result.messages_compacted
    if keep_recent:
        assert not any(r.cleared for r in after[len(after) - keep_recent :])
    if cap:
        assert all(estimate_text(r.text) <= cap for r in after)
    again = microcompact(
        adapter, result.items, keep_recent=keep_recent, clear_at_least=clear_at_least, max_tool_result_tokens=cap
    )
    assert again.messages_compacted == 0  # idempotent
