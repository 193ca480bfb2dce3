"""The Anthropic Messages API of the simulated provider, driven by the real anthropic SDK."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from otel_context.testing import count_request_tokens
from tests.values import body_of

from .helpers import CLAUDE, TIME_TOOL, WEATHER_TOOL


def _req(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": CLAUDE,
        "max_tokens": 500,
        "messages": [{"role": "user", "content": "Hello there"}],
    }
    body.update(over)
    return body


def test_create_returns_deterministic_text_and_exact_usage(sim: Any, anthropic_client: Any) -> None:
    body = _req(system="Be brief.")
    first = anthropic_client.messages.create(**body)
    second = anthropic_client.messages.create(**body)
    assert first.id.startswith("msg_01") and first.id != second.id
    assert first.content[0].type == "text"
    assert first.content[0].text.startswith("Simulated reply ")
    assert first.content[0].text == second.content[0].text
    assert first.stop_reason == "end_turn"
    assert first.model == CLAUDE
    assert first.usage.input_tokens == count_request_tokens(body, "anthropic_messages")
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens == 0
    assert first.usage.cache_creation is not None
    assert first.usage.output_tokens > 0
    exchange = sim.last_exchange
    assert exchange.path == "/v1/messages"
    assert exchange.body == body
    assert exchange.status == 200
    assert "anthropic-version" in exchange.headers
    assert exchange.response["id"] == second.id
    assert exchange.usage["input_tokens"] == first.usage.input_tokens


def test_request_id_header(anthropic_client: Any) -> None:
    raw = anthropic_client.messages.with_raw_response.create(**_req())
    assert raw.headers["request-id"].startswith("req_")
    assert raw.parse()._request_id == raw.headers["request-id"]


def test_words_directive_and_max_tokens_truncation(anthropic_client: Any) -> None:
    long = anthropic_client.messages.create(**_req(messages=[{"role": "user", "content": "talk words:60"}]))
    assert len(long.content[0].text.split()) == 63  # "Simulated reply <n>:" + 60 words
    cut = anthropic_client.messages.create(
        **_req(max_tokens=5, messages=[{"role": "user", "content": "talk words:60"}])
    )
    assert cut.stop_reason == "max_tokens"
    assert cut.usage.output_tokens == 5


def test_stop_sequences(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(**_req(stop_sequences=["reply"]))
    assert msg.stop_reason == "stop_sequence"
    assert msg.stop_sequence == "reply"
    assert msg.content[0].text == "Simulated "


def test_tool_directive_produces_parallel_tool_use(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(
        **_req(
            tools=[WEATHER_TOOL, TIME_TOOL],
            messages=[{"role": "user", "content": 'Check tool:get_weather{"city": "Paris"} and tool:get_time please'}],
        )
    )
    assert msg.stop_reason == "tool_use"
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert calls[0].input == {"city": "Paris"}
    assert calls[1].input == {"tz": "sim-tz"}
    assert all(c.id.startswith("toolu_01") for c in calls)


def test_directive_for_unoffered_tool_is_ignored(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(
        **_req(tools=[WEATHER_TOOL], messages=[{"role": "user", "content": "tool:delete_everything"}])
    )
    assert msg.stop_reason == "end_turn"


def test_schema_generated_arguments_use_enum_first_value(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(
        **_req(tools=[WEATHER_TOOL], messages=[{"role": "user", "content": "tool:get_weather"}])
    )
    assert msg.content[0].input == {"city": "sim-city", "unit": "celsius"}


def test_agent_loop_terminates_after_tool_results(anthropic_client: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "tool:get_weather"}]
    for _ in range(5):
        msg = anthropic_client.messages.create(model=CLAUDE, max_tokens=200, tools=[WEATHER_TOOL], messages=messages)
        if msg.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": "sunny"}
                    for b in msg.content
                    if b.type == "tool_use"
                ],
            }
        )
    assert msg.stop_reason == "end_turn"
    assert "received 1 tool result." in msg.content[0].text
    assert len(messages) == 3


def test_sse_event_sequence_is_the_real_one(sim: Any, anthropic_client: Any) -> None:
    stream = anthropic_client.messages.create(
        **_req(tools=[WEATHER_TOOL], stream=True, messages=[{"role": "user", "content": "tool:get_weather"}])
    )
    types = [event.type for event in stream]
    assert types[0] == "message_start"
    assert types[1] == "content_block_start"
    assert types[-2:] == ["message_delta", "message_stop"]
    raw = [name for name, _ in sim.last_exchange.response]
    assert "ping" in raw  # sent on the wire, skipped by the SDK
    deltas = [data["delta"]["type"] for name, data in sim.last_exchange.response if name == "content_block_delta"]
    assert set(deltas) == {"input_json_delta"}


def test_stream_helper_accumulates_text_and_usage(anthropic_client: Any) -> None:
    body = _req(messages=[{"role": "user", "content": "go words:40"}])
    plain = anthropic_client.messages.create(**body)
    with anthropic_client.messages.stream(**body) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == plain.content[0].text == final.content[0].text
    assert final.usage.input_tokens == plain.usage.input_tokens
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert final.stop_reason == "end_turn"


def test_stream_helper_tool_use_input_is_parsed(anthropic_client: Any) -> None:
    with anthropic_client.messages.stream(
        **_req(
            tools=[WEATHER_TOOL],
            messages=[{"role": "user", "content": 'tool:get_weather{"city": "Oslo", "unit": "celsius"}'}],
        )
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "tool_use"
    assert final.content[0].input == {"city": "Oslo", "unit": "celsius"}


async def test_async_create_and_stream(async_anthropic_client: Any) -> None:
    msg = await async_anthropic_client.messages.create(**_req())
    assert msg.content[0].text.startswith("Simulated reply")
    async with async_anthropic_client.messages.stream(**_req()) as stream:
        final = await stream.get_final_message()
    assert final.content[0].text == msg.content[0].text


def test_beta_namespace_uses_same_path_with_header(sim: Any, anthropic_client: Any) -> None:
    msg = anthropic_client.beta.messages.create(**_req(), betas=["context-management-2025-06-27"])
    assert msg.content[0].text.startswith("Simulated reply")
    assert sim.last_exchange.path == "/v1/messages"
    assert "context-management-2025-06-27" in sim.last_exchange.headers["anthropic-beta"]


def test_count_tokens_matches_reported_input(sim: Any, anthropic_client: Any) -> None:
    body = _req(tools=[WEATHER_TOOL], system="You are terse.")
    counted = anthropic_client.messages.count_tokens(
        model=body["model"], messages=body["messages"], tools=body["tools"], system=body["system"]
    )
    created = anthropic_client.messages.create(**body)
    assert counted.input_tokens == created.usage.input_tokens == count_request_tokens(body, "anthropic_messages")
    beta = anthropic_client.beta.messages.count_tokens(model=body["model"], messages=body["messages"])
    assert beta.input_tokens == count_request_tokens({"messages": body["messages"]}, "anthropic_messages")


def test_prompt_too_long_is_the_real_error(sim: Any, anthropic_client: Any) -> None:
    sim.set_window(CLAUDE, 50)
    body = _req(messages=[{"role": "user", "content": "word " * 60}])
    total = count_request_tokens(body, "anthropic_messages")
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.create(**body)
    assert info.value.status_code == 400
    assert body_of(info.value)["error"] == {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {total} tokens > 50 maximum",
    }
    assert body_of(info.value)["type"] == "error"
    assert sim.last_exchange.status == 400


def test_window_table_and_override(sim: Any) -> None:
    assert sim.window("claude-sonnet-4-5-20250929") == 200_000
    assert sim.window("gpt-4.1-mini") == 1_047_576
    assert sim.window("some-unknown-model") == 200_000
    sim.set_window("gpt-4o", 1000)
    assert sim.window("gpt-4o-mini") == 1000


def _pair_history(tool_use_id: str, result_id: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "tool:get_weather"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": tool_use_id, "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": result_id, "content": "ok"}]},
    ]


def test_orphan_tool_result_is_rejected(anthropic_client: Any) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.create(**_req(tools=[WEATHER_TOOL], messages=_pair_history("toolu_a", "toolu_b")))
    message = body_of(info.value)["error"]["message"]
    assert message.startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_a"
    )


def test_tool_result_without_tool_use_is_rejected(anthropic_client: Any) -> None:
    history = _pair_history("toolu_a", "toolu_a")
    del history[1]
    history.insert(1, {"role": "assistant", "content": "no tools here"})
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.create(**_req(tools=[WEATHER_TOOL], messages=history))
    assert body_of(info.value)["error"]["type"] == "invalid_request_error"
    assert body_of(info.value)["error"]["message"].startswith(
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_a."
    )


def test_paired_history_is_accepted(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(**_req(tools=[WEATHER_TOOL], messages=_pair_history("toolu_a", "toolu_a")))
    assert msg.stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 10, "messages": []}, "model: Field required"),
        ({"model": CLAUDE, "messages": []}, "max_tokens: Field required"),
        ({"model": CLAUDE, "max_tokens": 10}, "messages: Field required"),
        (
            {"model": CLAUDE, "max_tokens": 10, "messages": [{"role": "robot", "content": "x"}]},
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        ({"model": CLAUDE, "max_tokens": 10, "messages": [{"role": "user"}]}, "messages.0.content: Field required"),
    ],
)
def test_missing_fields_get_invalid_request_error(anthropic_client: Any, body: dict[str, Any], message: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.post("/v1/messages", body=body, cast_to=object)
    assert body_of(info.value)["error"] == {"type": "invalid_request_error", "message": message}


def test_unknown_fields_are_accepted(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(**_req(), extra_body={"brand_new_option": {"x": 1}})
    assert msg.stop_reason == "end_turn"


def test_strict_models_rejects_unknown_model() -> None:
    from otel_context.testing import SimulatedProvider

    with SimulatedProvider(strict_models=True) as sim:
        client = sim.anthropic()
        try:
            with pytest.raises(anthropic.NotFoundError) as info:
                client.messages.create(**_req(model="claude-imaginary-9"))
            assert body_of(info.value)["error"] == {"type": "not_found_error", "message": "model: claude-imaginary-9"}
            assert client.messages.create(**_req()).stop_reason == "end_turn"
        finally:
            client.close()


def test_extended_thinking_block_and_stream(anthropic_client: Any) -> None:
    body = _req(model="claude-haiku-4-5", max_tokens=3000, thinking={"type": "enabled", "budget_tokens": 1024})
    msg = anthropic_client.messages.create(**body)
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking.startswith("Considering ")
    assert msg.content[0].signature
    with anthropic_client.messages.stream(**body) as stream:
        final = stream.get_final_message()
    assert final.content[0].thinking == msg.content[0].thinking
    assert final.content[0].signature == msg.content[0].signature
    assert final.usage.output_tokens == msg.usage.output_tokens


def test_thinking_budget_must_be_below_max_tokens(anthropic_client: Any) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.create(
            **_req(model="claude-haiku-4-5", max_tokens=1000, thinking={"type": "enabled", "budget_tokens": 1024})
        )
    assert "budget_tokens" in body_of(info.value)["error"]["message"]


def test_forced_tool_choice(anthropic_client: Any) -> None:
    forced = anthropic_client.messages.create(
        **_req(tools=[WEATHER_TOOL, TIME_TOOL], tool_choice={"type": "tool", "name": "get_time"})
    )
    assert forced.stop_reason == "tool_use"
    assert forced.content[0].name == "get_time"
    anyone = anthropic_client.messages.create(**_req(tools=[WEATHER_TOOL], tool_choice={"type": "any"}))
    assert anyone.content[0].name == "get_weather"
    none = anthropic_client.messages.create(
        **_req(
            tools=[WEATHER_TOOL],
            tool_choice={"type": "none"},
            messages=[{"role": "user", "content": "tool:get_weather"}],
        )
    )
    assert none.stop_reason == "end_turn"


def test_adaptive_thinking(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(**_req(thinking={"type": "adaptive"}))
    assert msg.content[0].type == "thinking"
    assert msg.usage.output_tokens_details.thinking_tokens > 0


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (
            [{"role": "user", "content": ""}],
            "messages.0: all messages must have non-empty content except for the optional final assistant message",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            "messages: text content blocks must be non-empty",
        ),
    ],
)
def test_empty_content_is_rejected(anthropic_client: Any, messages: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.create(**_req(messages=messages))
    assert body_of(info.value)["error"]["message"] == message


def test_empty_final_assistant_prefill_is_accepted(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(
        **_req(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}])
    )
    assert msg.stop_reason == "end_turn"


def test_thinking_counts_against_max_tokens(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(
        **_req(
            model="claude-haiku-4-5",
            max_tokens=1030,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "go words:900"}],
        )
    )
    assert msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens == 1030
