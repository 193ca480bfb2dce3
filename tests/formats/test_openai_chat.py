"""The OpenAI Chat Completions adapter on a realistic history (system prefix, parallel tool calls, image)."""

from __future__ import annotations

import copy

from otel_context.formats import CLEARED_PLACEHOLDER, for_format
from otel_context.formats import OPENAI_CHAT as C
from tests.formats.histories import openai_chat_agent_body


def test_leading_instructions_are_not_items() -> None:
    body = openai_chat_agent_body()
    body["messages"].insert(1, {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]})
    snapshot = copy.deepcopy(body)
    assert for_format("openai_chat") is C
    items = C.items(body)
    assert items[0]["role"] == "user" and len(items) == 7
    assert C.system_text(body) == "You're a helpful assistant.\nBe brief."
    new = C.with_items(body, items[4:])
    assert [m["role"] for m in new["messages"]] == ["system", "developer", "assistant", "user", "assistant"]
    assert body == snapshot
    assert C.max_output_tokens(body) == 512 and C.max_output_tokens({"max_tokens": 9}) == 9
    assert C.server_state_reason(body) is None


def test_round_boundaries_and_validate() -> None:
    items = C.items(openai_chat_agent_body())
    assert C.round_boundaries(items) == [0, 1, 4, 5, 6, 7]
    assert C.validate(items) == []
    for cut in C.round_boundaries(items):
        assert C.validate(items[:cut]) == [] and C.validate(items[cut:]) == []
    (missing,) = C.validate(items[:3])
    assert "call_vaFQ" in missing and "call_JpNb" not in missing
    problems = C.validate(items[2:])
    assert len(problems) == 2 and all("role 'tool'" in p for p in problems)
    # A user message between the tool messages breaks both rules.
    broken = [items[0], items[1], items[2], {"role": "user", "content": "hurry"}, items[3]]
    assert len(C.validate(broken)) == 2


def test_repair() -> None:
    items = C.items(openai_chat_agent_body())
    snapshot = copy.deepcopy(items)
    fixed = C.repair(items[:3])
    assert C.validate(fixed) == []
    assert fixed[1]["tool_calls"] == [items[1]["tool_calls"][0]] and fixed[2] is items[2]
    assert C.repair(items[:2]) == [items[0]]  # the content-less assistant message disappears with its calls
    assert C.repair(items[2:]) == items[4:]
    assert items == snapshot
    assert C.repair(items) == items


def test_tool_results_and_replacement() -> None:
    items = C.items(openai_chat_agent_body())
    refs = C.tool_results(items)
    assert [(r.item_index, r.call_id, r.tool_name, r.tool_input) for r in refs] == [
        (2, "call_JpNb", "get_current_weather", {"location": "Seattle, WA"}),
        (3, "call_vaFQ", "get_current_weather", {"location": "San Francisco, CA"}),
    ]
    assert refs[1].text == "70 degrees and sunny"
    new = C.with_tool_results_replaced(items, {"call_JpNb": CLEARED_PLACEHOLDER})
    assert new[2] == {"role": "tool", "tool_call_id": "call_JpNb", "content": CLEARED_PLACEHOLDER}
    assert new[3] is items[3] and items[2]["content"] != CLEARED_PLACEHOLDER
    assert C.tool_results(new)[0].cleared


def test_unknown_content_text_and_images() -> None:
    items = C.items(openai_chat_agent_body())
    assert C.has_unknown_content(items) is None
    assert C.has_unknown_content([{"role": "user", "content": [{"type": "hologram"}]}]) is not None
    assert C.has_unknown_content([{"role": "critic", "content": "x"}]) is not None
    assert C.image_count(items[5]) == 1
    assert "San Francisco" in C.item_text(items[1]) and "get_current_weather" in C.item_text(items[1])
    assert C.user_text_items(items) == [
        "What's the weather in Seattle and San Francisco today?",
        "What is in this picture?",
    ]


def test_summary_request_response_and_errors() -> None:
    body = openai_chat_agent_body()
    items = C.items(body)
    req = C.make_summary_request(body, items, "Summarize in <summary>.", 1500, "gpt-4o-mini")
    assert "tools" not in req and req["max_completion_tokens"] == 1500
    assert req["messages"][0] == body["messages"][0]
    assert all(m["role"] != "tool" and "tool_calls" not in m for m in req["messages"])
    assert "call_vaFQ" in repr(req["messages"]) and req["messages"][-1] == {
        "role": "user",
        "content": "Summarize in <summary>.",
    }
    user_turns = [m["content"] for m in req["messages"] if m["role"] == "user"]
    assert user_turns == [
        "What's the weather in Seattle and San Francisco today?",
        "What is in this picture?\n[image]",
        "Summarize in <summary>.",
    ]
    assert "max_tokens" in C.make_summary_request({"max_tokens": 5, "messages": []}, [], "p", 7, "m")
    assert C.response_text({"choices": [{"message": {"role": "assistant", "content": "hi"}}]}) == "hi"
    assert C.response_text({"choices": []}) == ""
    inner = {
        "message": "This model's maximum context length is 128000 tokens.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
    assert C.is_too_long_error(400, inner, "Error code: 400")
    assert C.is_too_long_error(400, {"error": inner}, "")
    assert C.is_too_long_error(400, None, "This model's maximum context length is 8192 tokens")
    assert not C.is_too_long_error(400, {"message": "bad temperature", "code": "decimal_below_min_value"}, "")
