"""The simulated provider's JSON and SSE shapes against real recorded exchanges (tests/data/cassettes).

The simulator's answers must carry at least the fields the real APIs send (so code that reads a real
response works on a simulated one), with the same event sequences.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import CLAUDE, GPT, WEATHER_TOOL, openai_tool

CASSETTES = Path(__file__).resolve().parents[1] / "data" / "cassettes"
OPENINFERENCE_ANTHROPIC = "openinference/python/instrumentation/openinference-instrumentation-anthropic/tests/openinference/anthropic/cassettes/test_instrumentor"
OPENINFERENCE_OPENAI = "openinference/python/instrumentation/openinference-instrumentation-openai/tests/openinference/instrumentation/openai/cassettes/test_tool_calls"
CONTRIB = "opentelemetry-python-contrib/instrumentation-genai/opentelemetry-instrumentation-openai-v2/tests/cassettes"


def _recorded(name: str) -> Any:
    """The first response body of a cassette: parsed JSON, or a list of (event, data) for SSE."""
    path = CASSETTES / name
    if not path.exists():
        pytest.fail(f"recorded exchange missing: {path}")
    entry = yaml.safe_load(path.read_text())["interactions"][0]["response"]
    raw = entry.get("body", {}).get("string", "")
    if isinstance(raw, bytes):
        raw = gzip.decompress(raw).decode()
    if raw.lstrip().startswith(("event:", "data:")):
        events: list[tuple[str | None, Any]] = []
        for chunk in raw.strip().split("\n\n"):
            name_, data = None, None
            for line in chunk.splitlines():
                if line.startswith("event:"):
                    name_ = line[6:].strip()
                elif line.startswith("data:"):
                    text = line[5:].strip()
                    data = text if text == "[DONE]" else json.loads(text)
            if data is not None:
                events.append((name_, data))
        return events
    return json.loads(raw)


def _missing(real: Any, ours: Any, where: str = "") -> list[str]:
    """Keys present in the real object (recursively through dicts) but absent from ours."""
    out: list[str] = []
    if isinstance(real, dict) and isinstance(ours, dict):
        for key, value in real.items():
            if key not in ours:
                out.append(f"{where}.{key}")
            else:
                out.extend(_missing(value, ours[key], f"{where}.{key}"))
    return out


def test_anthropic_message_json(sim: Any, anthropic_client: Any) -> None:
    real = _recorded(f"{OPENINFERENCE_ANTHROPIC}/test_anthropic_instrumentation_messages_parse.yaml")
    anthropic_client.messages.create(model=CLAUDE, max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    ours = sim.last_exchange.response
    assert _missing(real, ours) == []
    assert set(ours) == set(real)


def test_anthropic_tool_stream(sim: Any, anthropic_client: Any) -> None:
    real = _recorded(f"{OPENINFERENCE_ANTHROPIC}/test_anthropic_instrumentation_multiple_tool_calling_streaming.yaml")
    anthropic_client.messages.create(
        model=CLAUDE,
        max_tokens=500,
        stream=True,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "tool:get_weather"}],
    ).close()
    ours = sim.last_exchange.response
    assert {n for n, _ in ours} <= {n for n, _ in real}
    assert [n for n, _ in real][-2:] == [n for n, _ in ours][-2:] == ["message_delta", "message_stop"]
    assert _missing(real[0][1], ours[0][1]) == []  # message_start with the full usage
    real_delta = next(d for n, d in real if n == "message_delta")
    our_delta = next(d for n, d in ours if n == "message_delta")
    assert _missing(real_delta, our_delta) == []
    real_tool = next(d for n, d in real if n == "content_block_start" and d["content_block"]["type"] == "tool_use")
    our_tool = next(d for n, d in ours if n == "content_block_start")
    assert set(our_tool["content_block"]) >= {"type", "id", "name", "input"}
    assert set(real_tool) == set(our_tool)


def test_chat_completion_json(sim: Any, openai_client: Any) -> None:
    real = _recorded(f"{OPENINFERENCE_OPENAI}/test_cached_tokens.yaml")
    openai_client.chat.completions.create(model=GPT, messages=[{"role": "user", "content": "hi"}])
    assert _missing(real, sim.last_exchange.response) == []
    assert real["choices"][0].keys() == sim.last_exchange.response["choices"][0].keys()


def test_chat_stream_chunks(sim: Any, openai_client: Any) -> None:
    real = _recorded(f"{CONTRIB}/test_chat_completion_multiple_tools_streaming_with_content.yaml")
    openai_client.chat.completions.create(
        model=GPT,
        stream=True,
        stream_options={"include_usage": True},  # as in the recorded request
        tools=[openai_tool(WEATHER_TOOL)],
        messages=[{"role": "user", "content": "tool:get_weather"}],
    ).close()
    ours = sim.last_exchange.response
    assert real[-1] == (None, "[DONE]") == ours[-1]
    assert all(name is None for name, _ in ours)
    assert _missing(real[0][1], ours[0][1]) == []
    real_call = next(
        d for _, d in real if isinstance(d, dict) and d["choices"] and d["choices"][0]["delta"].get("tool_calls")
    )
    our_call = next(
        d for _, d in ours if isinstance(d, dict) and d["choices"] and d["choices"][0]["delta"].get("tool_calls")
    )
    assert (
        _missing(real_call["choices"][0]["delta"]["tool_calls"][0], our_call["choices"][0]["delta"]["tool_calls"][0])
        == []
    )
    assert real[-2][1]["choices"] == ours[-2][1]["choices"] == []  # the usage chunk
    assert _missing(real[-2][1]["usage"], ours[-2][1]["usage"]) == []


def test_responses_stream_sequence(sim: Any, openai_client: Any) -> None:
    real = _recorded(f"{CONTRIB}/test_responses_create_streaming[content_mode0].yaml")
    openai_client.responses.create(model=GPT, input="Say this is a test words:3", stream=True).close()
    ours = sim.last_exchange.response

    def collapse(names: list[str]) -> list[str]:
        return [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]]  # one delta run

    assert collapse([n for n, _ in ours]) == collapse([n for n, _ in real])
    for (real_name, real_data), (_, our_data) in zip(real[:4], ours[:4], strict=True):
        assert _missing(real_data, our_data) == [], real_name
    assert _missing(real[-1][1]["response"]["usage"], ours[-1][1]["response"]["usage"]) == []


def test_responses_json(sim: Any, openai_client: Any) -> None:
    real = _recorded(f"{CONTRIB}/test_responses_create_basic[content_mode0].yaml")
    openai_client.responses.create(model=GPT, input="hi")
    ours = sim.last_exchange.response
    assert _missing(real, ours) == []
    assert _missing(real["output"][0], ours["output"][0]) == []


def test_responses_function_call_json(sim: Any, openai_client: Any) -> None:
    real = _recorded(f"{CONTRIB}/test_responses_create_captures_tool_call_content[content_mode0].yaml")
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER_TOOL["input_schema"]}
    openai_client.responses.create(model=GPT, input="tool:get_weather", tools=[tool])
    real_call = next(item for item in real["output"] if item["type"] == "function_call")
    assert _missing(real_call, sim.last_exchange.response["output"][0]) == []


def test_embeddings_json(sim: Any, openai_client: Any) -> None:
    real = _recorded(f"{CONTRIB}/test_embeddings_with_encoding_format.yaml")
    openai_client.embeddings.create(model="text-embedding-3-small", input="hi")
    assert _missing(real, sim.last_exchange.response) == []
