"""OpenAI Responses (and compact) and embeddings on the simulated provider, driven by the real openai SDK."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import openai
import pytest

from otel_context.testing import count_request_tokens, count_tokens
from tests.values import body_of

from .helpers import GPT, WEATHER_TOOL, responses_tool


def test_create_text_and_usage(sim: Any, openai_client: Any) -> None:
    body = {"model": GPT, "input": "Hello", "instructions": "Be brief."}
    response = openai_client.responses.create(**body)
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.output_text.startswith("Simulated reply ")
    assert response.output[0].id.startswith("msg_")
    assert response.usage.input_tokens == count_request_tokens(body, "openai_responses")
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert sim.last_exchange.path == "/v1/responses"


def test_function_call_loop_with_previous_response_id(openai_client: Any) -> None:
    tools = [responses_tool(WEATHER_TOOL)]
    first = openai_client.responses.create(model=GPT, input='tool:get_weather{"city": "Lima"}', tools=tools)
    call = first.output[0]
    assert call.type == "function_call"
    assert json.loads(call.arguments) == {"city": "Lima"}
    assert call.call_id.startswith("call_")
    second = openai_client.responses.create(
        model=GPT,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "warm"}],
        tools=tools,
    )
    assert "received 1 tool result." in second.output_text
    # the stored conversation is counted: more input than the new items alone
    assert second.usage.input_tokens > first.usage.input_tokens


def test_unknown_previous_response(openai_client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.responses.create(model=GPT, input="x", previous_response_id="resp_missing")
    assert info.value.code == "previous_response_not_found"


def test_function_call_output_without_call_is_rejected(openai_client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.responses.create(
            model=GPT, input=[{"type": "function_call_output", "call_id": "call_zz", "output": "x"}]
        )
    assert body_of(info.value)["message"] == "No tool call found for function call output with call_id call_zz."
    assert info.value.param == "input"


def test_function_call_without_output_is_rejected(openai_client: Any) -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "call_q", "name": "f", "arguments": "{}"},
        {"role": "user", "content": "again"},
    ]
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.responses.create(model=GPT, input=items)
    assert body_of(info.value)["message"] == "No tool output found for function call call_q."


def test_context_window_and_auto_truncation(sim: Any, openai_client: Any) -> None:
    sim.set_window(GPT, 30)
    items = [
        {"role": "user", "content": "word " * 15},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "word " * 15},
    ]
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.responses.create(model=GPT, input=items)
    assert info.value.code == "context_length_exceeded"
    truncated = openai_client.responses.create(model=GPT, input=items, truncation="auto")
    assert truncated.usage.input_tokens <= 30


def test_max_output_tokens_gives_incomplete(openai_client: Any) -> None:
    response = openai_client.responses.create(model=GPT, input="go", max_output_tokens=4)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 4


def test_stream_event_types_and_helper(sim: Any, openai_client: Any) -> None:
    plain = openai_client.responses.create(model=GPT, input="Stream me")
    events = list(openai_client.responses.create(model=GPT, input="Stream me", stream=True))
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert "response.output_text.delta" in types
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.usage.input_tokens == plain.usage.input_tokens
    with openai_client.responses.stream(model=GPT, input="Stream me") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == plain.output_text


def test_stream_function_call_events(openai_client: Any) -> None:
    with openai_client.responses.stream(
        model=GPT, input="tool:get_weather", tools=[responses_tool(WEATHER_TOOL)]
    ) as stream:
        types = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in types
    assert "response.function_call_arguments.done" in types
    assert final.output[0].type == "function_call"
    assert json.loads(final.output[0].arguments) == {"city": "sim-city", "unit": "celsius"}


async def test_async_create_and_stream(async_openai_client: Any) -> None:
    plain = await async_openai_client.responses.create(model=GPT, input="async")
    async with async_openai_client.responses.stream(model=GPT, input="async") as stream:
        final = await stream.get_final_response()
    assert final.output_text == plain.output_text


def test_compact_keeps_user_messages_and_facts(sim: Any, openai_client: Any) -> None:
    items = [
        {"role": "user", "content": "Build the parser.\nFACT: the repo uses tabs"},
        {"role": "assistant", "content": "Done. FACT: not at line start"},
        {"role": "user", "content": "Now the tests."},
    ]
    compacted = openai_client.responses.compact(model=GPT, input=items)
    assert compacted.object == "response.compaction"
    kinds = [item.type for item in compacted.output]
    assert kinds == ["message", "message", "compaction"]
    encrypted = compacted.output[-1].encrypted_content
    assert encrypted.startswith("simcompact:")
    summary = base64.b64decode(encrypted.removeprefix("simcompact:")).decode()
    assert "FACT: the repo uses tabs" in summary
    assert "FACT: not at line start" not in summary
    # the compacted window can be sent back: the compaction item is accepted and counted
    raw_items = sim.last_exchange.response["output"]  # the wire items (the SDK types user messages as output messages)
    follow = openai_client.responses.create(model=GPT, input=[*raw_items, {"role": "user", "content": "go on"}])
    assert follow.status == "completed"
    assert follow.usage.input_tokens > 0


def test_embeddings_float_and_base64(openai_client: Any) -> None:
    floats = openai_client.embeddings.create(
        model="text-embedding-3-small", input=["alpha", "beta"], encoding_format="float"
    )
    assert [d.index for d in floats.data] == [0, 1]
    assert len(floats.data[0].embedding) == 1536
    assert abs(sum(v * v for v in floats.data[0].embedding) - 1.0) < 1e-6
    default = openai_client.embeddings.create(
        model="text-embedding-3-small", input=["alpha", "beta"]
    )  # SDK asks for base64
    assert default.data[0].embedding == pytest.approx(floats.data[0].embedding, rel=1e-5)
    assert floats.usage.prompt_tokens == count_tokens("alpha") + count_tokens("beta") == 3
    again = openai_client.embeddings.create(
        model="text-embedding-3-small", input="alpha", encoding_format="float", dimensions=8
    )
    assert len(again.data[0].embedding) == 8


def test_embeddings_raw_base64_is_float32(sim: Any, openai_client: Any) -> None:
    openai_client.embeddings.create(model="text-embedding-3-large", input="x", encoding_format="base64")
    raw = sim.last_exchange.response["data"][0]["embedding"]
    assert len(struct.unpack(f"<{3072}f", base64.b64decode(raw))) == 3072


def test_embeddings_missing_input(openai_client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.post("/embeddings", body={"model": "text-embedding-3-small"}, cast_to=object)
    assert info.value.code == "missing_required_parameter"
