"""Async clients, streams and the Responses API go through the same engine (sans-I/O generators)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from otel_context import semconv
from tests.compaction.support import Otel
from tests.engine.agents import ANTHROPIC_TOOLS, OPENAI_TOOLS, SYSTEM, file_content, user_turn, with_breakpoint
from tests.values import attrs_of

WINDOW = 30_000


async def test_async_anthropic_stream_agent_compacts(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    model = "claude-sonnet-4-6"
    simulated_provider.set_window(model, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    client = simulated_provider.async_anthropic()
    history: list[dict[str, Any]] = []
    for turn in range(25):
        history.append({"role": "user", "content": [{"type": "text", "text": user_turn(turn)}]})
        for _ in range(3):
            async with client.messages.stream(
                model=model, max_tokens=512, system=SYSTEM, tools=ANTHROPIC_TOOLS, messages=with_breakpoint(history)
            ) as stream:
                message = await stream.get_final_message()
            history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
            if message.stop_reason != "tool_use":
                break
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": b.id, "content": file_content(b.input["path"])}
                        for b in message.content
                        if b.type == "tool_use"
                    ],
                }
            )
    assert [e.status for e in simulated_provider.exchanges if e.status != 200] == []
    compacts = otel.compact_spans()
    assert compacts and all(attrs_of(s)[semconv.COMPACTION_OUTCOME] == "success" for s in compacts)
    compact_ids = {s.context.span_id for s in compacts}
    summarizer = [s for s in otel.spans() if s.parent is not None and s.parent.span_id in compact_ids]
    assert len(summarizer) == len(compacts)


async def test_async_openai_reactive_retry(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    model = "gpt-4o"
    simulated_provider.set_window(model, 12_000)
    instrumented(auto_compact_window=100_000)
    client = simulated_provider.async_openai()
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(6):
        history += [
            {"role": "user", "content": f"Turn {turn}. FACT: {turn}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{turn}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{turn}.py"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": file_content(f"f{turn}.py")},
            {"role": "assistant", "content": "ok"},
        ]
    history.append({"role": "user", "content": "And now?"})
    stream = await client.chat.completions.create(
        model=model,
        max_tokens=256,
        tools=OPENAI_TOOLS,
        messages=history,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_REACTIVE
    statuses = [e.status for e in simulated_provider.exchanges]
    assert statuses[0] == 400 and statuses[-1] == 200


def test_openai_responses_agent_compacts(simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]) -> None:
    model = "gpt-4.1"
    simulated_provider.set_window(model, 20_000)
    instrumented(auto_compact_window=20_000)
    client = simulated_provider.openai()
    tools = [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read a file",
            "parameters": OPENAI_TOOLS[0]["function"]["parameters"],
        }
    ]
    items: list[dict[str, Any]] = []
    for turn in range(25):
        items.append({"role": "user", "content": user_turn(turn)})
        for _ in range(3):
            response = client.responses.create(
                model=model, instructions=SYSTEM, tools=tools, input=items, max_output_tokens=512
            )
            calls = [o for o in response.output if o.type == "function_call"]
            items += [o.model_dump(exclude_none=True) for o in response.output]
            if not calls:
                break
            items += [
                {
                    "type": "function_call_output",
                    "call_id": c.call_id,
                    "output": file_content(json.loads(c.arguments)["path"]),
                }
                for c in calls
            ]
    assert [e.status for e in simulated_provider.exchanges if e.status != 200] == []
    compacts = otel.compact_spans()
    assert len(compacts) >= 2
    assert all(attrs_of(s)[semconv.COMPACTION_OUTCOME] == "success" for s in compacts)
