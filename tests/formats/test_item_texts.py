"""``item_texts`` says of each item what ``item_text``, ``is_model_output`` and ``user_text_items`` say of it
(its one-pass form, which the retention check reads a long span with), on random valid histories of each
format and on the rarer shapes that take its long way (refusals, legacy function calls, mappings that are
not dicts, custom tool calls, reasoning, malformed entries); and ``compact_json``'s shortcut writes what
``json.dumps`` writes."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_context.formats import for_format
from otel_context.formats._common import compact_json
from tests.formats.strategies import FORMATS, histories

RARE: dict[str, list[Any]] = {
    "anthropic_messages": [
        {"role": "user", "content": [{"type": "text", "text": ""}, {"type": "image", "source": {}}, "junk"]},
        {"role": "user", "content": ({"type": "text", "text": "a tuple"},)},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {"é": [1, 2]}}]},
        {"role": "user", "content": None},
        MappingProxyType({"role": "user", "content": "a proxy"}),
        {"content": "no role"},
        42,
        # The blocks item_texts reads itself (a tool call, a result of one text) and their other forms.
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "a"}]}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": None}]},
        {"role": "user", "content": [MappingProxyType({"type": "tool_result", "tool_use_id": "t", "content": "p"})]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {"k": "v", "n": 1}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n"}]},
        {"role": "assistant", "content": [{"type": "server_tool_use", "id": "t", "name": "web", "input": {"q": "x"}}]},
    ],
    "openai_chat": [
        {"role": "assistant", "content": None, "refusal": "I cannot."},
        {"role": "assistant", "content": "Legacy.", "function_call": {"name": "f", "arguments": "{}"}},
        {
            "role": "assistant",
            "content": "x",
            "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "g", "input": "raw"}}],
        },
        {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image_url", "image_url": {}}]},
        {"role": "user", "content": "", "tool_calls": [{"id": "c"}]},
        MappingProxyType({"role": "user", "content": "a proxy"}),
        # The calls item_texts reads itself (a function with string arguments) and their other forms.
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": {"x": 1}}},
                {"id": "c", "type": "function", "function": {"name": "h"}},
                {"id": "d", "type": "function", "function": {"input": "raw"}},
                {"id": "e", "type": "function", "function": "not a mapping"},
                MappingProxyType({"id": "f", "function": {"name": "p", "arguments": "{}"}}),
                "junk",
                {"id": "g"},
            ],
        },
        {
            "role": "assistant",
            "content": "tuple",
            "tool_calls": ({"id": "a", "function": {"name": "f", "arguments": "{}"}},),
        },
        {"role": "assistant", "content": "none", "tool_calls": None},
        "junk",
    ],
    "openai_responses": [
        {"type": "custom_tool_call", "call_id": "c", "name": "g", "input": "raw"},
        {"type": "custom_tool_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "out"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought"}]},
        {"type": "compaction", "encrypted_content": "x"},
        {"id": "ref_1"},
        {"type": "web_search_call", "id": "w"},
        {"type": "message", "role": "developer", "content": "be brief"},
        {"role": 3, "content": "odd role"},
        None,
    ],
}

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def composed(fmt: str, items: list[Any]) -> list[tuple[str, bool, str]]:
    adapter = for_format(fmt)
    return [(adapter.item_text(i), adapter.is_model_output(i), "\n".join(adapter.user_text_items([i]))) for i in items]


@SETTINGS
@given(histories())
def test_item_texts_says_what_the_three_methods_say(case: tuple[str, list[Any]]) -> None:
    fmt, items = case
    assert for_format(fmt).item_texts(items) == composed(fmt, items)


@SETTINGS
@given(st.sampled_from(FORMATS), st.data())
def test_the_rarer_shapes_too(fmt: str, data: st.DataObject) -> None:
    items = data.draw(st.lists(st.sampled_from(RARE[fmt]), min_size=1, max_size=6))
    assert for_format(fmt).item_texts(items) == composed(fmt, items)


def paired(fmt: str, items: list[Any]) -> list[tuple[Any, ...]]:
    """The tool results of ``items`` as ``item_texts``'s walk meets them (its ``tools``), each paired with its call
    by id the way ``tool_results`` pairs them (the latest call of that id before it)."""
    from otel_context.formats._common import parse_arguments

    tools: list[Any] = []
    adapter = for_format(fmt)
    adapter.item_texts(items, tools)
    calls: dict[str, Any] = {}
    out: list[tuple[Any, ...]] = []
    for use in tools:
        if use.result is None:
            calls[use.call_id] = use
            continue
        call = calls.get(use.call_id)
        arguments = parse_arguments(call.arguments) if call is not None else None
        out.append((use.item_index, use.call_id, call.name if call is not None else None, arguments, use.result))
    return out


def refs(fmt: str, items: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.item_index, r.call_id, r.tool_name, r.tool_input, r.text) for r in for_format(fmt).tool_results(items)]


@SETTINGS
@given(histories())
def test_the_walk_meets_the_tool_calls_and_results_tool_results_reads(case: tuple[str, list[Any]]) -> None:
    """Issue 48: the work trail reads the tools from the retention check's one walk of the span; what it meets is
    what ``tool_results`` reads (the call's name and arguments, the result's text, where it stands)."""
    fmt, items = case
    tools: list[Any] = []
    assert for_format(fmt).item_texts(items, tools) == composed(fmt, items)  # the texts unchanged
    assert paired(fmt, items) == refs(fmt, items)


@SETTINGS
@given(st.sampled_from(FORMATS), st.data())
def test_the_rarer_shapes_give_their_tools_too(fmt: str, data: st.DataObject) -> None:
    items = data.draw(st.lists(st.sampled_from(RARE[fmt]), min_size=1, max_size=6))
    assert paired(fmt, items) == refs(fmt, items)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), st.text() | st.integers() | st.none() | st.lists(st.text(), max_size=2), max_size=4))
def test_compact_json_writes_what_json_dumps_writes(value: dict[str, Any]) -> None:
    """A flat dict of strings takes a shortcut; its text must be the encoder's, byte for byte."""
    assert compact_json(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
