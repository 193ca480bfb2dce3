"""JSON nested near the interpreter's recursion limit: the instrumented call goes out as the plain one does.

The SDK itself serializes the body recursively, so there is a depth beyond which even the plain call fails;
just below it, our walks (the engine's estimate, content capture) used to raise ``RecursionError`` and drop the
plan and the captured content. The test finds that depth with the plain SDK call and then makes the
instrumented call a few levels below it (two levels below: our wrapper adds a few frames of its own).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest

import otel_context
from otel_context import semconv
from tests.instrumentation.instr_support import attrs, only_span

MODEL = "claude-sonnet-4-6"


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth):
        value = {"k": value}
    return value


def _messages(depth: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": _nested(depth)}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}]},
    ]


def _frames() -> int:
    frame, count = sys._getframe(), 0
    while frame is not None:
        frame, count = frame.f_back, count + 1  # type: ignore[assignment]
    return count


def _deepest_plain_depth(client: Any) -> int:
    depth = sys.getrecursionlimit() - _frames()
    while depth > 100:
        try:
            client.messages.create(model=MODEL, max_tokens=10, messages=_messages(depth))
            return depth
        except Exception:
            depth -= 4
    raise AssertionError("no depth worked uninstrumented")


def _openai_body(depth: int) -> dict[str, Any]:
    """A Chat Completions request whose tool's parameter schema is nested ``depth`` deep."""
    tool = {"type": "function", "function": {"name": "read_file", "parameters": _nested(depth)}}
    return {"model": "gpt-4o", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}


def _send(sdk: str, sim: Any, depth: int, asynchronous: bool) -> Any:
    """One call nested ``depth`` deep through a new client (an async one on a loop of its own)."""
    if asynchronous:
        return asyncio.run(_asend(sdk, sim, depth))
    if sdk == "anthropic":
        return sim.anthropic().messages.create(model=MODEL, max_tokens=10, messages=_messages(depth))
    return sim.openai().chat.completions.create(**_openai_body(depth))


async def _asend(sdk: str, sim: Any, depth: int) -> Any:
    if sdk == "anthropic":
        async with sim.async_anthropic() as client:
            return await client.messages.create(model=MODEL, max_tokens=10, messages=_messages(depth))
    async with sim.async_openai() as client:
        return await client.chat.completions.create(**_openai_body(depth))


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_at_the_deepest_nesting_the_plain_call_takes_the_instrumented_call_goes_out_too(
    simulated_provider: Any, spans: Any, sdk: str, asynchronous: bool
) -> None:
    """At the deepest nesting the plain call survives (~980 under the default limit of 1000), the instrumented
    call is sent too: the frames of the wrapper (see instrumentation/_depth.py) used to turn it into a
    ``RecursionError`` raised to the app, where the plain call worked or failed with the SDK's own error."""
    limit = sys.getrecursionlimit()
    depth = limit - _frames()
    while True:  # the deepest the plain call is sent at, from here
        try:
            _send(sdk, simulated_provider, depth, asynchronous)
            break
        except Exception:
            depth -= 1
    assert depth > limit - 100  # ~980 (~940 under asyncio.run): the SDK's own serialization is the limit
    simulated_provider.clear()
    otel_context.instrument()
    try:
        _send(sdk, simulated_provider, depth, asynchronous)
    finally:
        otel_context.uninstrument()
    assert [e.status for e in simulated_provider.exchanges] == [200]
    assert sys.getrecursionlimit() == limit  # given back with the instrumentation


def test_deep_tool_input_is_planned_captured_and_sent(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.anthropic()
    depth = _deepest_plain_depth(client) - 2
    messages = _messages(depth)
    simulated_provider.clear()
    spans.clear()  # the SDK's own spans of the uninstrumented probes
    otel_context.instrument(capture_content="SPAN_ONLY")
    try:
        response = client.messages.create(model=MODEL, max_tokens=10, messages=messages)
    finally:
        otel_context.uninstrument()
    assert response.content
    (exchange,) = simulated_provider.exchanges
    assert exchange.status == 200
    assert exchange.body["messages"][0] == messages[0]
    span_attrs = attrs(only_span(spans()))
    assert span_attrs[semconv.CONTEXT_ESTIMATED_TOKENS] > 0  # the engine planned the call (no RecursionError)
    captured = json.loads(span_attrs[semconv.GEN_AI_INPUT_MESSAGES])
    assert captured[1]["parts"][0]["name"] == "read_file"  # the deep arguments are elided, not the message
