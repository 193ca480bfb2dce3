"""The estimate of a call whose history holds the previous call's reply, on real instrumented calls.

An app appends the model's reply to its history before the next call. The reply is already counted by the
output tokens the provider reported for it (docs/compaction.md: reported usage + what was appended since), so
the estimate must not count its characters a second time: that overstated every later call by one reply, and
an agent's long answer or thinking then reached the compaction threshold thousands of tokens early.

The simulated provider counts tokens the way it bills them; a ``words:N`` directive asks it for a long reply.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from otel_context import semconv
from tests.compaction.support import Otel

MODEL_ANTHROPIC = "claude-sonnet-4-6"
MODEL_OPENAI = "gpt-4o"
LONG = "Write the whole report now. words:3000"
AFTER = "Thanks. Now a one-line title, please."


def _chat_spans(otel: Otel) -> list[ReadableSpan]:
    return [s for s in otel.spans() if s.name.startswith("chat ")]


def _figures(span: ReadableSpan) -> tuple[int, int, int]:
    """(estimated tokens, reported input tokens, reported output tokens) of one chat span."""
    attributes = span.attributes or {}
    return (
        int(attributes[semconv.CONTEXT_ESTIMATED_TOKENS]),  # type: ignore[arg-type]
        int(attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS]),  # type: ignore[arg-type]
        int(attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]),  # type: ignore[arg-type]
    )


def _assert_counted_once(spans: Sequence[ReadableSpan]) -> None:
    """Each call after the first: the estimate is within 5 % of what the provider then reported, although the
    history grew by a reply of thousands of tokens (counting it twice would overstate it by about that)."""
    assert len(spans) >= 2
    for previous, span in itertools.pairwise(spans):
        estimated, reported, _ = _figures(span)
        replied = _figures(previous)[2]
        assert replied > 2_000, "the previous call's reply must be long for this test to tell anything"
        assert abs(estimated - reported) <= 0.05 * reported, (estimated, reported, replied)


def test_anthropic_reply_appended_is_counted_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    instrumented()
    client = simulated_provider.anthropic()
    history: list[dict[str, Any]] = [{"role": "user", "content": LONG}]
    for ask in (AFTER, LONG, AFTER):
        response = client.messages.create(model=MODEL_ANTHROPIC, max_tokens=8_000, messages=history)
        history = [
            *history,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]},
            {"role": "user", "content": ask},
        ]
    spans = _chat_spans(otel)
    assert len(spans) == 3
    _assert_counted_once(spans[:2])  # the third call follows a short reply: checked below for the tolerance only
    estimated, reported, _ = _figures(spans[2])
    assert abs(estimated - reported) <= 0.05 * reported


def test_anthropic_reply_with_thinking_is_counted_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Thinking blocks are output tokens, and the app must send them back in a tool loop: counted once too."""
    instrumented()
    client = simulated_provider.anthropic()
    history: list[dict[str, Any]] = [{"role": "user", "content": LONG}]
    for ask in (AFTER, LONG):
        response = client.messages.create(
            model=MODEL_ANTHROPIC,
            max_tokens=9_000,
            thinking={"type": "enabled", "budget_tokens": 1_024},
            messages=history,
        )
        assert response.content[0].type == "thinking"
        history = [
            *history,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]},
            {"role": "user", "content": ask},
        ]
    _assert_counted_once(_chat_spans(otel))


def test_openai_chat_reply_appended_is_counted_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    instrumented()
    client = simulated_provider.openai()
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You write reports."},
        {"role": "user", "content": LONG},
    ]
    for ask in (AFTER, LONG):
        response = client.chat.completions.create(model=MODEL_OPENAI, max_tokens=8_000, messages=history)
        history = [
            *history,
            response.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": ask},
        ]
    _assert_counted_once(_chat_spans(otel))


def test_openai_responses_output_items_appended_are_counted_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """The Responses API's output is a list of items (here a message; reasoning and calls too), which the app
    appends to its input as they came."""
    instrumented()
    client = simulated_provider.openai()
    history: list[Any] = [{"role": "user", "content": LONG}]
    for ask in (AFTER, LONG):
        response = client.responses.create(model=MODEL_OPENAI, max_output_tokens=8_000, input=history)
        history = [
            *history,
            *(item.model_dump(exclude_none=True) for item in response.output),
            {"role": "user", "content": ask},
        ]
    _assert_counted_once(_chat_spans(otel))


@pytest.mark.parametrize("sdk", ["anthropic", "openai chat", "openai responses"])
def test_a_tool_loop_counts_the_call_once_and_estimates_its_result(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], sdk: str
) -> None:
    """The reply of a tool loop is the model's call (counted by the output tokens); the app's tool result after
    it is new and estimated: the next estimate covers it, padded (characters / 4 * 4/3), never below what the
    provider then reports."""
    instrumented()
    ask = 'Read it. tool:read_file{"path": "notes.md"}'
    result = "FACT: the river is long. " * 400
    if sdk == "anthropic":
        client = simulated_provider.anthropic()
        tools = [{"name": "read_file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
        first = client.messages.create(
            model=MODEL_ANTHROPIC, max_tokens=1_000, tools=tools, messages=[{"role": "user", "content": ask}]
        )
        call = next(b for b in first.content if b.type == "tool_use")
        client.messages.create(
            model=MODEL_ANTHROPIC,
            max_tokens=1_000,
            tools=tools,
            messages=[
                {"role": "user", "content": ask},
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}]},
            ],
        )
    elif sdk == "openai responses":
        client = simulated_provider.openai()
        tools = [
            {
                "type": "function",
                "name": "read_file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ]
        first = client.responses.create(model=MODEL_OPENAI, tools=tools, input=[{"role": "user", "content": ask}])
        calls = [item for item in first.output if item.type == "function_call"]
        assert calls
        client.responses.create(
            model=MODEL_OPENAI,
            tools=tools,
            input=[
                {"role": "user", "content": ask},
                *(item.model_dump(exclude_none=True) for item in first.output),
                {"type": "function_call_output", "call_id": calls[0].call_id, "output": result},
            ],
        )
    else:
        client = simulated_provider.openai()
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                },
            }
        ]
        first = client.chat.completions.create(
            model=MODEL_OPENAI, max_tokens=1_000, tools=tools, messages=[{"role": "user", "content": ask}]
        )
        message = first.choices[0].message
        assert message.tool_calls
        client.chat.completions.create(
            model=MODEL_OPENAI,
            max_tokens=1_000,
            tools=tools,
            messages=[
                {"role": "user", "content": ask},
                message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": result},
            ],
        )
    spans = _chat_spans(otel)
    assert len(spans) == 2
    _, first_in, first_out = _figures(spans[0])
    estimated, reported, _ = _figures(spans[1])
    assert reported > first_in + first_out + 1_000  # the tool result is most of the second request
    assert reported <= estimated <= reported * 4 / 3 + 50
