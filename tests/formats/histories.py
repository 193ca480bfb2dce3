"""Realistic request bodies of the three wire formats, shaped like the recorded cassettes in
tests/data/cassettes (ids, block order, parallel calls, thinking) — the fixtures of the adapter tests."""

from __future__ import annotations

from typing import Any

Body = dict[str, Any]

WEATHER_TOOL_ANTHROPIC = {
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
}

READ_FILE_TOOL_ANTHROPIC = {
    "name": "read_file",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}


def anthropic_agent_body() -> Body:
    """A tool loop with a parallel batch, then a thinking turn with a tool call, then a plain text turn."""
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are a careful assistant.", "cache_control": {"type": "ephemeral"}}],
        "tools": [WEATHER_TOOL_ANTHROPIC, READ_FILE_TOOL_ANTHROPIC],
        "messages": [
            {"role": "user", "content": "Alice, Bob: who is older? Check both."},  # 0
            {  # 1
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I'll look both up."},
                    {"type": "tool_use", "id": "toolu_01A", "name": "read_file", "input": {"path": "alice.txt"}},
                    {"type": "tool_use", "id": "toolu_01B", "name": "read_file", "input": {"path": "bob.txt"}},
                ],
            },
            {  # 2
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "Alice is 34. " * 50},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01B",
                        "content": [{"type": "text", "text": "Bob is 41."}],
                        "is_error": False,
                    },
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Bob is older (41 vs 34)."}]},  # 3
            {"role": "user", "content": [{"type": "text", "text": "And the weather in Paris?"}]},  # 4
            {  # 5
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "The user wants weather; call the tool.", "signature": "sig1"},
                    {"type": "tool_use", "id": "toolu_02C", "name": "get_weather", "input": {"location": "Paris"}},
                ],
            },
            {  # 6
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02C",
                        "content": "Sunny, 21C",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "It's sunny in Paris, 21C."}]},  # 7
            {"role": "user", "content": "Thanks! Summarize everything."},  # 8
        ],
    }


def openai_chat_agent_body() -> Body:
    """System + a parallel tool batch (as in test_chat_completion_tool_calls_with_content) + follow-up turn."""
    return {
        "model": "gpt-4o-mini",
        "max_completion_tokens": 512,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_current_weather",
                    "description": "Get the current weather in a given location",
                    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
                },
            }
        ],
        "messages": [
            {"role": "system", "content": "You're a helpful assistant."},
            {"role": "user", "content": "What's the weather in Seattle and San Francisco today?"},  # 0
            {  # 1
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_JpNb",
                        "type": "function",
                        "function": {"name": "get_current_weather", "arguments": '{"location": "Seattle, WA"}'},
                    },
                    {
                        "id": "call_vaFQ",
                        "type": "function",
                        "function": {"name": "get_current_weather", "arguments": '{"location": "San Francisco, CA"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_JpNb", "content": "50 degrees and raining " * 40},  # 2
            {
                "role": "tool",
                "tool_call_id": "call_vaFQ",
                "content": [{"type": "text", "text": "70 degrees and sunny"}],
            },  # 3
            {"role": "assistant", "content": "Seattle: 50F and raining. San Francisco: 70F and sunny."},  # 4
            {  # 5
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ],
            },
            {"role": "assistant", "content": "A cat."},  # 6
        ],
    }


def openai_responses_agent_body() -> Body:
    """Instructions + reasoning/function_call loop (as in test_responses_tool_calls) + an assistant answer."""
    return {
        "model": "gpt-5",
        "instructions": "You are a helpful assistant.",
        "max_output_tokens": 2048,
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Get the current weather for a location",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
            }
        ],
        "input": [
            {"type": "message", "role": "user", "content": "What's the weather in London and Paris?"},  # 0
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Two cities."}]},  # 1
            {  # 2
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_tYDv",
                "name": "get_weather",
                "arguments": '{"location":"London"}',
                "status": "completed",
            },
            {  # 3
                "type": "function_call",
                "id": "fc_2",
                "call_id": "call_lC07",
                "name": "get_weather",
                "arguments": '{"location":"Paris"}',
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "call_tYDv", "output": "Rainy, 12C " * 30},  # 4
            {  # 5
                "type": "function_call_output",
                "call_id": "call_lC07",
                "output": [{"type": "input_text", "text": "Sunny, 20C"}],
            },
            {  # 6
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "London is rainy; Paris is sunny.", "annotations": []}],
            },
            {"role": "user", "content": [{"type": "input_text", "text": "Which one should I visit?"}]},  # 7
        ],
    }
