"""OpenAI Chat Completions on the simulated provider, driven by the real openai SDK."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from otel_context.testing import count_request_tokens
from tests.values import body_of

from .helpers import GPT, TIME_TOOL, WEATHER_TOOL, openai_tool


def _req(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": GPT,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
    }
    body.update(over)
    return body


def test_create_text_and_usage(sim: Any, openai_client: Any) -> None:
    body = _req()
    completion = openai_client.chat.completions.create(**body)
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.content.startswith("Simulated reply ")
    usage = completion.usage
    assert usage.prompt_tokens == count_request_tokens(body, "openai_chat")
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert usage.completion_tokens_details.reasoning_tokens == 0
    assert sim.last_exchange.path == "/v1/chat/completions"
    assert sim.last_exchange.usage["prompt_tokens"] == usage.prompt_tokens


def test_request_id_header(openai_client: Any) -> None:
    raw = openai_client.chat.completions.with_raw_response.create(**_req())
    assert raw.headers["x-request-id"].startswith("req_")
    assert raw.parse()._request_id == raw.headers["x-request-id"]


def test_n_choices_and_length_finish(openai_client: Any) -> None:
    completion = openai_client.chat.completions.create(**_req(n=2))
    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.choices[0].message.content != completion.choices[1].message.content
    short = openai_client.chat.completions.create(**_req(max_completion_tokens=3))
    assert short.choices[0].finish_reason == "length"
    assert short.usage.completion_tokens == 3


def test_tool_calls_by_directive(openai_client: Any) -> None:
    completion = openai_client.chat.completions.create(
        **_req(
            tools=[openai_tool(WEATHER_TOOL), openai_tool(TIME_TOOL)],
            messages=[{"role": "user", "content": 'tool:get_time{"tz": "UTC"} tool:get_weather'}],
        )
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert [c.function.name for c in calls] == ["get_time", "get_weather"]
    assert json.loads(calls[0].function.arguments) == {"tz": "UTC"}
    assert all(c.id.startswith("call_") for c in calls)


def test_tool_loop_and_pairing(openai_client: Any) -> None:
    tools = [openai_tool(WEATHER_TOOL)]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "tool:get_weather"}]
    first = openai_client.chat.completions.create(model=GPT, tools=tools, messages=messages)
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    second = openai_client.chat.completions.create(model=GPT, tools=tools, messages=messages)
    assert second.choices[0].finish_reason == "stop"
    assert "received 1 tool result." in second.choices[0].message.content


def test_tool_message_without_tool_calls_is_rejected(openai_client: Any) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_x", "content": "orphan"}]
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(model=GPT, messages=messages)
    assert body_of(info.value)["message"] == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
    )
    assert body_of(info.value)["param"] == "messages.[1].role"


def test_unanswered_tool_calls_are_rejected(openai_client: Any) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "user", "content": "and?"},
    ]
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(model=GPT, messages=messages)
    assert "The following tool_call_ids did not have response messages: call_a" in body_of(info.value)["message"]
    assert body_of(info.value)["type"] == "invalid_request_error"


def test_context_length_exceeded(sim: Any, openai_client: Any) -> None:
    sim.set_window(GPT, 20)
    body = _req(messages=[{"role": "user", "content": "word " * 30}])
    total = count_request_tokens(body, "openai_chat")
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(**body)
    assert info.value.code == "context_length_exceeded"
    assert body_of(info.value)["message"] == (
        f"This model's maximum context length is 20 tokens. However, your messages resulted in {total} tokens. "
        "Please reduce the length of the messages."
    )


def test_stream_with_usage(sim: Any, openai_client: Any) -> None:
    plain = openai_client.chat.completions.create(**_req())
    chunks = list(openai_client.chat.completions.create(**_req(), stream=True, stream_options={"include_usage": True}))
    assert all(c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert sim.last_exchange.response[-1] == (None, "[DONE]")


def test_stream_without_usage_option_has_no_usage(openai_client: Any) -> None:
    chunks = list(openai_client.chat.completions.create(**_req(), stream=True))
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stream_helper_tool_calls(openai_client: Any) -> None:
    with openai_client.chat.completions.stream(
        **_req(
            tools=[openai_tool(WEATHER_TOOL)],
            messages=[{"role": "user", "content": 'tool:get_weather{"city": "Rome"}'}],
        ),
        stream_options={"include_usage": True},
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Rome"}
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.completion_tokens > 0


async def test_async_create_and_stream(async_openai_client: Any) -> None:
    plain = await async_openai_client.chat.completions.create(**_req())
    stream = await async_openai_client.chat.completions.create(**_req(), stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == plain.choices[0].message.content


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"model": GPT}, "missing_required_parameter", "messages"),
        ({"model": GPT, "messages": []}, "empty_array", "messages"),
        ({"model": GPT, "messages": [{"role": "robot", "content": "x"}]}, "invalid_value", "messages[0].role"),
    ],
)
def test_bad_input_gets_openai_error_shape(openai_client: Any, body: dict[str, Any], code: str, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.post("/chat/completions", body=body, cast_to=object)
    assert info.value.code == code
    assert info.value.param == param
    assert info.value.type == "invalid_request_error"


def test_missing_model(openai_client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.post("/chat/completions", body={"messages": [{"role": "user", "content": "x"}]}, cast_to=object)
    assert body_of(info.value)["message"] == "you must provide a model parameter"


def test_strict_models_unknown_model_is_404() -> None:
    from otel_context.testing import SimulatedProvider

    with SimulatedProvider(strict_models=True) as sim:
        client = sim.openai()
        try:
            with pytest.raises(openai.NotFoundError) as info:
                client.chat.completions.create(model="gpt-imaginary", messages=[{"role": "user", "content": "x"}])
            assert info.value.code == "model_not_found"
            assert (
                body_of(info.value)["message"]
                == "The model `gpt-imaginary` does not exist or you do not have access to it."
            )
        finally:
            client.close()


def test_forced_tool_choice(openai_client: Any) -> None:
    tools = [openai_tool(WEATHER_TOOL), openai_tool(TIME_TOOL)]
    required = openai_client.chat.completions.create(**_req(tools=tools, tool_choice="required"))
    assert required.choices[0].message.tool_calls[0].function.name == "get_weather"
    named = openai_client.chat.completions.create(
        **_req(tools=tools, tool_choice={"type": "function", "function": {"name": "get_time"}})
    )
    assert named.choices[0].message.tool_calls[0].function.name == "get_time"
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.create(
            **_req(tools=tools, tool_choice={"type": "function", "function": {"name": "nope"}})
        )
