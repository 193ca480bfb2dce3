"""The breakpoint placement helper: stable prefix first, at most four, none on or after volatile content."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_context.cache_control import MAX_BREAKPOINTS, looks_volatile, place_cache_breakpoints

TOOLS = [
    {"name": "read_file", "input_schema": {"type": "object"}},
    {"name": "grep", "input_schema": {"type": "object"}},
]


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        {"role": "user", "content": "what now?"},
    ]


def request(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "system": "You are terse.",
        "tools": TOOLS,
        "messages": conversation(),
    }
    body.update(overrides)
    return body


def markers(body: Any) -> list[str]:
    """Where the markers are, as readable paths."""
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            if "cache_control" in value:
                found.append(path)
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")

    for section in ("tools", "system", "messages"):  # the cache's order
        if section in body:
            walk(body[section], section)
    return found


def test_tools_system_and_conversation_each_get_one_breakpoint() -> None:
    body = request()
    before = copy.deepcopy(body)
    out = place_cache_breakpoints(body)
    assert markers(out) == ["tools[1]", "system[0]", "messages[2].content[0]"]
    assert out["system"] == [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    assert out["messages"][2] == {
        "role": "user",
        "content": [{"type": "text", "text": "what now?", "cache_control": {"type": "ephemeral"}}],
    }
    assert body == before, "the caller's body was mutated"
    assert out["messages"][0] is body["messages"][0] and out["tools"][0] is body["tools"][0]


def test_timestamp_in_a_string_system_prompt_keeps_breakpoints_before_it() -> None:
    out = place_cache_breakpoints(request(system="You are terse. Now: 2026-11-30T08:15:02Z"))
    assert markers(out) == ["tools[1]"]
    assert out["system"] == "You are terse. Now: 2026-11-30T08:15:02Z"


def test_volatile_system_block_gets_the_breakpoint_on_the_block_before() -> None:
    system = [
        {"type": "text", "text": "Long stable instructions."},
        {"type": "text", "text": "Session 3f2b8c1e-9d4a-4b7e-8f00-1a2b3c4d5e6f"},
    ]
    out = place_cache_breakpoints(request(system=system))
    assert markers(out) == ["tools[1]", "system[0]"]


def test_existing_breakpoints_count_against_the_limit_and_are_respected() -> None:
    messages = conversation()
    messages[0] = {
        "role": "user",
        "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}],
    }
    tools = [TOOLS[0], {**TOOLS[1], "cache_control": {"type": "ephemeral"}}]
    out = place_cache_breakpoints(request(messages=messages, tools=tools), max_breakpoints=3)
    assert markers(out) == ["tools[1]", "system[0]", "messages[0].content[0]"]
    assert len(markers(place_cache_breakpoints(request(cache_control={"type": "ephemeral"}), max_breakpoints=2))) == 1


def test_a_small_limit_keeps_the_most_stable_prefix() -> None:
    assert markers(place_cache_breakpoints(request(), max_breakpoints=1)) == ["tools[1]"]
    assert markers(place_cache_breakpoints(request(), max_breakpoints=2)) == ["tools[1]", "system[0]"]
    assert markers(place_cache_breakpoints(request(), max_breakpoints=0)) == []


def test_no_tools_no_system() -> None:
    out = place_cache_breakpoints({"model": "m", "max_tokens": 5, "messages": conversation()})
    assert markers(out) == ["messages[2].content[0]"]
    assert "tools" not in out and "system" not in out


def test_thinking_and_empty_text_blocks_never_carry_a_breakpoint() -> None:
    messages = conversation()
    messages.append(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "partial"},
                {"type": "text", "text": ""},
                {"type": "thinking", "thinking": "...", "signature": "s"},
            ],
        }
    )
    out = place_cache_breakpoints(request(messages=messages))
    assert markers(out)[-1] == "messages[3].content[0]"


def test_custom_volatility_keeps_the_breakpoint_before_a_volatile_message() -> None:
    messages = [*conversation(), {"role": "user", "content": "[state] cursor at line 42"}]

    def volatile(section: str, block: Any) -> bool:
        return section == "messages" and isinstance(block, str) and block.startswith("[state]")

    out = place_cache_breakpoints(request(messages=messages), volatile=volatile)
    assert markers(out) == ["tools[1]", "system[0]", "messages[2].content[0]"]
    assert out["messages"][3] is messages[3]


def test_one_hour_ttl_and_its_ordering_rule() -> None:
    out = place_cache_breakpoints(request(), ttl="1h")
    assert {json.dumps(m) for m in _marker_values(out)} == {json.dumps({"type": "ephemeral", "ttl": "1h"})}
    tools = [TOOLS[0], {**TOOLS[1], "cache_control": {"type": "ephemeral"}}]
    with pytest.raises(ValueError, match="before 5-minute ones"):
        place_cache_breakpoints(request(tools=tools), ttl="1h")


def _marker_values(body: Any) -> list[Any]:
    if isinstance(body, dict):
        own = [body["cache_control"]] if "cache_control" in body else []
        return own + [m for v in body.values() for m in _marker_values(v)]
    if isinstance(body, list):
        return [m for v in body for m in _marker_values(v)]
    return []


def test_bad_input_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="automatically"):
        place_cache_breakpoints(request(), wire_format="openai_chat")
    with pytest.raises(ValueError, match="max_breakpoints"):
        place_cache_breakpoints(request(), max_breakpoints=5)
    with pytest.raises(ValueError, match="ttl"):
        place_cache_breakpoints(request(), ttl="2h")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mapping"):
        place_cache_breakpoints([("model", "m")])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "volatile"),
    [
        ("Current time: 2026-11-30 08:15", True),
        ("It is 08:15:02 now.", True),
        ("request 3f2b8c1e-9d4a-4b7e-8f00-1a2b3c4d5e6f", True),
        ("epoch 1764490502", True),
        ("You are a helpful assistant. Version 2.3, released 2025-01-02.", False),
        ("Use at most 10:1 ratio", False),
    ],
)
def test_default_volatility_heuristic(text: str, volatile: bool) -> None:
    assert looks_volatile("system", {"type": "text", "text": text}) is volatile
    assert looks_volatile("messages", {"type": "text", "text": text}) is False


_text = st.text(alphabet="abc 0123456789:-", max_size=12)
_block = st.one_of(
    _text,
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": _text}),
    st.fixed_dictionaries({"type": st.just("text"), "text": _text, "cache_control": st.just({"type": "ephemeral"})}),
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.one_of(_text, st.lists(_block, max_size=3))}
)


@settings(max_examples=100, deadline=None)
@given(
    tools=st.lists(st.fixed_dictionaries({"name": _text}), max_size=3),
    system=st.one_of(_text, st.lists(_block, max_size=3)),
    messages=st.lists(_message, max_size=6),
    limit=st.integers(0, MAX_BREAKPOINTS),
)
def test_never_more_than_the_limit_and_never_mutates(
    tools: list[Any], system: Any, messages: list[Any], limit: int
) -> None:
    body = {"model": "m", "max_tokens": 5, "tools": tools, "system": system, "messages": messages}
    before = copy.deepcopy(body)
    existing = len(markers(body))
    out = place_cache_breakpoints(body, max_breakpoints=limit)
    assert body == before
    assert len(markers(out)) <= max(limit, existing)
    assert len(markers(out)) >= existing
    for path in markers(out):
        assert "thinking" not in json.dumps(_at(out, path))


def _at(body: Any, path: str) -> Any:
    value = body
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        value = value[int(part[1:-1])] if part.startswith("[") else value[part]
    return value
