"""The Anthropic Messages adapter on a realistic agent history (parallel batch, thinking loop, cache_control)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from otel_context.formats import ANTHROPIC_MESSAGES as A
from otel_context.formats import CLEARED_PLACEHOLDER, for_format
from tests.formats.histories import anthropic_agent_body


def test_registry_returns_the_singleton() -> None:
    assert for_format("anthropic_messages") is A
    with pytest.raises(ValueError, match="openai_chat"):
        for_format("anthropic")


def test_items_system_and_with_items_share_untouched_parts() -> None:
    body = anthropic_agent_body()
    snapshot = copy.deepcopy(body)
    items = A.items(body)
    assert len(items) == 9 and items[0] is body["messages"][0]
    assert A.system_text(body) == "You are a careful assistant."
    assert A.system_text({"system": "plain"}) == "plain"
    new = A.with_items(body, items[4:])
    assert new["messages"] == body["messages"][4:] and new["system"] is body["system"] and new["tools"] is body["tools"]
    assert body == snapshot
    assert A.max_output_tokens(body) == 1024
    assert A.server_state_reason(body) is None


def test_round_boundaries_keep_parallel_batches_and_thinking_loops_whole() -> None:
    items = A.items(anthropic_agent_body())
    # 2: parallel results; 6: thinking tool_result; 7: continuation of the thinking loop.
    assert A.round_boundaries(items) == [0, 1, 3, 4, 5, 8, 9]
    for cut in A.round_boundaries(items):
        assert A.validate(items[:cut]) == [] and A.validate(items[cut:]) == []


def test_boundary_between_consecutive_assistant_messages_is_refused() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    ]
    assert 2 not in A.round_boundaries(items)


def test_validate_reports_what_the_api_rejects() -> None:
    items = A.items(anthropic_agent_body())
    assert A.validate(items) == []
    (missing,) = A.validate(items[:2])
    assert "messages.1" in missing and "toolu_01A" in missing and "toolu_01B" in missing
    (orphan,) = A.validate(items[2:])
    assert "messages.0" in orphan and "toolu_01A" in orphan
    # Parallel results split over two user messages: the second batch does not answer the call.
    split = [
        items[0],
        items[1],
        {"role": "user", "content": [items[2]["content"][0]]},
        {"role": "user", "content": [items[2]["content"][1]]},
    ]
    problems = A.validate(split)
    assert len(problems) == 2 and any("toolu_01B" in p and "messages.1" in p for p in problems)


def test_repair_drops_orphans_and_emptied_messages_only() -> None:
    items = A.items(anthropic_agent_body())
    snapshot = copy.deepcopy(items)
    fixed = A.repair(items[2:])
    assert A.validate(fixed) == []
    assert fixed == items[3:]  # the orphan results message vanished, nothing else changed
    assert fixed[0] is items[3]
    cut = A.repair(items[:2])
    assert cut == [items[0], {"role": "assistant", "content": [{"type": "text", "text": "I'll look both up."}]}]
    assert items == snapshot
    assert A.repair(items) == items


def test_repair_keeps_results_answered_across_a_dropped_message() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "t", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "ghost", "content": "?"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "ok"}]},
    ]
    fixed = A.repair(items)
    assert A.validate(fixed) == []
    assert fixed == [items[0], items[1], items[3]]


def test_repair_drops_a_thinking_turn_whose_calls_went_unanswered() -> None:
    items = A.items(anthropic_agent_body())
    fixed = A.repair(items[:6])  # the thinking + tool_use message lost its results
    assert fixed == items[:5]
    assert A.validate(fixed) == []


def test_tool_results_and_replacement() -> None:
    items = A.items(anthropic_agent_body())
    refs = A.tool_results(items)
    assert [(r.item_index, r.call_id, r.tool_name) for r in refs] == [
        (2, "toolu_01A", "read_file"),
        (2, "toolu_01B", "read_file"),
        (6, "toolu_02C", "get_weather"),
    ]
    assert refs[0].tool_input == {"path": "alice.txt"} and refs[1].text == "Bob is 41." and not refs[0].cleared
    new = A.with_tool_results_replaced(items, {"toolu_02C": CLEARED_PLACEHOLDER})
    assert new[6]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_02C",
        "content": CLEARED_PLACEHOLDER,
        "cache_control": {"type": "ephemeral"},
    }
    assert all(new[i] is items[i] for i in range(9) if i != 6)
    assert items[6]["content"][0]["content"] == "Sunny, 21C"
    assert A.tool_results(new)[2].cleared


def test_replacement_keeps_tool_references() -> None:
    reference = {"type": "tool_reference", "tool_name": "get_weather"}
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "find a weather tool"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "tool_search", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "found"}, reference]}
            ],
        },
    ]
    new = A.with_tool_results_replaced(items, {"t1": CLEARED_PLACEHOLDER})
    assert new[2]["content"][0]["content"] == [{"type": "text", "text": CLEARED_PLACEHOLDER}, reference]
    assert A.tool_results(new)[0].cleared


def test_unknown_content_is_reported() -> None:
    items = A.items(anthropic_agent_body())
    assert A.has_unknown_content(items) is None
    odd = [*items, {"role": "assistant", "content": [{"type": "fallback", "to": {}, "from": {}}]}]
    assert "fallback" in (A.has_unknown_content(odd) or "")
    assert "role" in (A.has_unknown_content([{"role": "tool", "content": "x"}]) or "")
    assert A.has_unknown_content([{"role": "user", "content": 3}]) is not None
    server: list[dict[str, Any]] = [
        {"role": "user", "content": "news?"},
        {
            "role": "assistant",
            "content": [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "compaction", "content": "earlier: greetings"},
            ],
        },
    ]
    assert A.has_unknown_content(server) is None
    assert A.validate(server) == []


def test_text_images_and_user_messages() -> None:
    item = {
        "role": "user",
        "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc body"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}},
            {"type": "text", "text": "look"},
        ],
    }
    assert A.image_count(item) == 2
    assert "doc body" in A.item_text(item) and "look" in A.item_text(item) and "AAAA" not in A.item_text(item)
    items = A.items(anthropic_agent_body())
    assert "alice.txt" in A.item_text(items[1]) and "call the tool" in A.item_text(items[5])
    assert A.user_text_items(items) == [
        "Alice, Bob: who is older? Check both.",
        "And the weather in Paris?",
        "Thanks! Summarize everything.",
    ]
    assert A.make_user_item("hello") == {"role": "user", "content": "hello"}


def test_summary_request_has_no_tools_and_no_tool_blocks() -> None:
    body = anthropic_agent_body()
    items = A.items(body)
    req = A.make_summary_request(body, items[:8], "Write a <summary>.", 2000, "claude-haiku-4-5")
    assert "tools" not in req and req["model"] == "claude-haiku-4-5" and req["max_tokens"] == 2000
    assert req["system"] == body["system"]
    flat = repr(req["messages"])
    assert "tool_use" not in flat and "tool_result'" not in flat and "thinking" not in flat
    assert "toolu_01A" in flat and "Bob is 41." in flat
    roles = [m["role"] for m in req["messages"]]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    assert req["messages"][-1] == {"role": "user", "content": "Write a <summary>."}
    # Tool results sit with the assistant: the user turns are exactly what the user wrote, then the prompt.
    req2 = A.make_summary_request(body, items, "P", 10, "m")
    user_turns = [m["content"] for m in req2["messages"] if m["role"] == "user"]
    assert user_turns == [*A.user_text_items(items), "P"]
    assistant_text = "\n".join(m["content"] for m in req2["messages"] if m["role"] == "assistant")
    assert "[tool result id=toolu_02C]\nSunny, 21C" in assistant_text


def test_response_text_and_too_long_errors() -> None:
    response = {
        "content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    }
    assert A.response_text(response) == "ab"
    too_long = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"},
    }
    assert A.is_too_long_error(400, too_long, "Error code: 400")
    assert A.is_too_long_error(
        413,
        {"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"}},
        "",
    )
    assert A.is_too_long_error(None, None, "stop_reason model_context_window_exceeded")
    other = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: must be positive"}}
    assert not A.is_too_long_error(400, other, "Error code: 400")
    assert not A.is_too_long_error(
        429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, ""
    )
