"""The OpenAI Responses adapter on a realistic history (reasoning, parallel function calls, output parts)."""

from __future__ import annotations

import copy
import itertools

from otel_context.formats import CLEARED_PLACEHOLDER, for_format
from otel_context.formats import OPENAI_RESPONSES as R
from tests.formats.histories import openai_responses_agent_body


def test_items_and_body() -> None:
    body = openai_responses_agent_body()
    snapshot = copy.deepcopy(body)
    assert for_format("openai_responses") is R
    items = R.items(body)
    assert len(items) == 8 and items[0] is body["input"][0]
    assert R.items({"input": "hello"}) == [{"role": "user", "content": "hello"}]
    assert R.items({}) == []
    assert R.system_text(body) == "You are a helpful assistant."
    new = R.with_items(body, items[7:])
    assert new["input"] == [items[7]] and new["instructions"] == body["instructions"]
    assert body == snapshot
    assert R.max_output_tokens(body) == 2048
    assert R.server_state_reason(body) is None
    assert "previous_response_id" in (R.server_state_reason({"previous_response_id": "resp_1"}) or "")
    assert R.server_state_reason({"conversation": "conv_1"}) is not None


def test_round_boundaries_keep_reasoning_and_parallel_calls_whole() -> None:
    items = R.items(openai_responses_agent_body())
    assert R.round_boundaries(items) == [0, 1, 7, 8]
    for cut in R.round_boundaries(items):
        assert R.validate(items[:cut]) == [] and R.validate(items[cut:]) == []
    # Without reasoning the assistant answer after the outputs may start a new part.
    plain = [i for i in items if i.get("type") != "reasoning"]
    assert R.round_boundaries(plain) == [0, 1, 5, 6, 7]


def test_validate() -> None:
    items = R.items(openai_responses_agent_body())
    assert R.validate(items) == []
    problems = R.validate(items[:4])
    assert len(problems) == 2 and all("No tool output found" in p for p in problems)
    problems = R.validate(items[4:])
    assert len(problems) == 2 and all("No tool call found" in p for p in problems)
    (lonely,) = R.validate([items[0], items[1]])
    assert "reasoning" in lonely
    # An output after an item_reference may answer the referenced (stored) call.
    assert (
        R.validate(
            [
                {"type": "item_reference", "id": "fc_9"},
                {"type": "function_call_output", "call_id": "c9", "output": "ok"},
            ]
        )
        == []
    )


def test_repair() -> None:
    items = R.items(openai_responses_agent_body())
    snapshot = copy.deepcopy(items)
    fixed = R.repair(items[:5])  # Paris output missing
    assert R.validate(fixed) == []
    assert fixed == [items[0], items[1], items[2], items[4]]
    assert R.repair(items[:3]) == [items[0]]  # call dropped, then its reasoning has nothing to precede
    assert R.repair(items[4:]) == items[6:]
    assert items == snapshot
    assert R.repair(items) == items


def test_tool_results_and_replacement() -> None:
    items = R.items(openai_responses_agent_body())
    refs = R.tool_results(items)
    assert [(r.item_index, r.call_id, r.tool_name, r.tool_input) for r in refs] == [
        (4, "call_tYDv", "get_weather", {"location": "London"}),
        (5, "call_lC07", "get_weather", {"location": "Paris"}),
    ]
    assert refs[1].text == "Sunny, 20C"
    new = R.with_tool_results_replaced(items, {"call_lC07": CLEARED_PLACEHOLDER})
    assert new[5] == {"type": "function_call_output", "call_id": "call_lC07", "output": CLEARED_PLACEHOLDER}
    assert new[4] is items[4] and R.tool_results(new)[1].cleared


def test_unknown_content_text_and_summary() -> None:
    body = openai_responses_agent_body()
    items = R.items(body)
    assert R.has_unknown_content(items) is None
    assert "additional_tools" in (
        R.has_unknown_content([{"type": "additional_tools", "role": "developer", "tools": []}]) or ""
    )
    assert R.has_unknown_content([{"role": "user", "content": [{"type": "input_hologram"}]}]) is not None
    assert R.has_unknown_content([{"type": "compaction", "encrypted_content": "gAAA"}]) is None
    assert R.item_text({"type": "compaction", "encrypted_content": "gAAAA" * 100}) == ""
    assert (
        R.image_count({"role": "user", "content": [{"type": "input_image", "image_url": "data:", "detail": "auto"}]})
        == 1
    )
    assert "Two cities." in R.item_text(items[1]) and "London" in R.item_text(items[2])
    assert R.user_text_items(items) == ["What's the weather in London and Paris?", "Which one should I visit?"]
    req = R.make_summary_request(body, items, "Write a <summary>.", 3000, "gpt-5-mini")
    assert "tools" not in req and req["max_output_tokens"] == 3000 and req["instructions"] == body["instructions"]
    kinds = {i.get("type", "message") for i in req["input"]}
    assert kinds == {"message"}
    assert "call_lC07" in repr(req["input"]) and req["input"][-1] == {"role": "user", "content": "Write a <summary>."}
    user_turns = [i["content"] for i in req["input"] if i["role"] == "user"]
    assert user_turns == [*R.user_text_items(items), "Write a <summary>."]
    roles = [i["role"] for i in req["input"]]
    assert all(a != b for a, b in itertools.pairwise(roles[:-1]))  # alternating, the prompt its own turn


def test_response_text_and_errors() -> None:
    response = {
        "output": [
            {"type": "reasoning", "id": "rs", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi"}]},
        ]
    }
    assert R.response_text(response) == "Hi"
    body = {
        "message": "Your input exceeds the context window of this model.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
    assert R.is_too_long_error(400, body, "")
    assert R.is_too_long_error(None, {"error": body}, "")
    assert not R.is_too_long_error(400, {"code": "decimal_below_min_value", "message": "Invalid 'temperature'"}, "")


def test_the_providers_compaction_of_a_history_it_holds() -> None:
    """What the engine asks of the format for a stored history: the conversation a request continues, whether
    the app manages the context at the provider itself, the field that asks the provider to compact (a copy),
    and whether an error refuses that field."""
    assert R.continued_conversation({"conversation": "conv_1"}) == "conv_1"
    assert R.continued_conversation({"conversation": {"id": "conv_2"}}) == "conv_2"
    assert R.continued_conversation({"previous_response_id": "resp_1"}) is None
    assert R.continued_conversation({"conversation": ""}) is None
    body = {"model": "gpt-5", "previous_response_id": "resp_1", "input": "More."}
    snapshot = copy.deepcopy(body)
    assert R.context_managed_by_app(body) is None
    assert R.context_managed_by_app({**body, "truncation": "disabled"}) is None  # the default is no choice
    assert "context_management" in (R.context_managed_by_app({**body, "context_management": None}) or "")
    assert "truncation" in (R.context_managed_by_app({**body, "truncation": "auto"}) or "")
    trigger = {**body, "input": [{"role": "user", "content": "x"}, {"type": "compaction_trigger"}]}
    assert "compaction_trigger" in (R.context_managed_by_app(trigger) or "")
    asked = R.with_provider_compaction(body, 167_000)
    assert asked == {**body, "context_management": [{"type": "compaction", "compact_threshold": 167_000}]}
    assert body == snapshot
    unknown = {"message": "Unknown parameter: 'context_management'.", "param": "context_management"}
    assert R.refuses_provider_compaction(400, unknown, "Error code: 400")
    assert R.refuses_provider_compaction(400, {"error": {**unknown, "param": None}}, "")  # named in the message
    too_long = {"message": "Your input exceeds the context window of this model.", "code": "context_length_exceeded"}
    assert not R.refuses_provider_compaction(400, too_long, "")
    assert not R.refuses_provider_compaction(500, unknown, "")  # a failing server says nothing about the field
    for other in (for_format("anthropic_messages"), for_format("openai_chat")):
        assert other.continued_conversation({"conversation": "conv_1"}) is None
        assert other.context_managed_by_app(body) is None
        assert other.with_provider_compaction(body, 1_000) is None
        assert not other.refuses_provider_compaction(400, unknown, "")
