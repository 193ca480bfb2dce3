"""Shared constants and helpers for the simulated provider's own tests."""

from __future__ import annotations

from typing import Any

CLAUDE = "claude-opus-4-6"
GPT = "gpt-4o"

WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
    },
}
TIME_TOOL: dict[str, Any] = {
    "name": "get_time",
    "description": "Time in a zone",
    "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
}


def openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """The Chat Completions form of an Anthropic-style tool definition."""
    return {
        "type": "function",
        "function": {"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]},
    }


def responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """The Responses form of an Anthropic-style tool definition."""
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool["description"],
        "parameters": tool["input_schema"],
    }


def long_text(tokens: int, tag: str = "") -> str:
    """Text of exactly ``tokens`` simulated tokens (4-letter words), distinct per ``tag``."""
    from otel_context.testing import count_tokens

    word = (tag + "abcd")[:4] if tag else "abcd"
    text = " ".join([word] * tokens)
    assert count_tokens(text) == tokens
    return text
