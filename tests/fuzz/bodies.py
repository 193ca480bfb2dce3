"""Hypothesis strategies: request bodies of the three wire formats, valid, unusual and malformed.

A :class:`Case` is the keyword arguments of one SDK call (``messages.create``, ``chat.completions.create``,
``responses.create``) plus what the generator knows about it:

* ``malformed``: one entry of the history breaks the format's contract (a ``text`` that is not a string, a
  block or item of an unknown type, a tool call without its id, a role the format does not have, ...). The
  instrumentation must send such a request exactly as the app wrote it, and say why on the span when a
  compaction was due (issue 14, item 6). The generator decides this itself, from what it put in, never by
  asking the product.
* ``due``: the history carries enough text to be over the compaction threshold of the fuzz suite's window.

Everything else is fair game and must simply end the way the uninstrumented call ends: tools, tool calls and
results, images, thinking blocks, empty and huge parts, unknown fields, deep nesting, any unicode.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

CLAUDE = "claude-sonnet-4-6"
GPT = "gpt-4o"
#: The window both the simulated provider and the engine use for the fuzz models (tokens).
WINDOW = 8_000
#: Characters of filler text that put a history well over WINDOW (the sim counts ~4 characters a token).
DUE_CHARS = 48_000

FORMATS = ("anthropic", "chat", "responses")


class Case:
    """One generated call (not a dataclass: its repr shortens long strings, hypothesis prints it as it is)."""

    def __init__(self, fmt: str, kwargs: dict[str, Any], malformed: bool, due: bool) -> None:
        self.fmt, self.kwargs, self.malformed, self.due = fmt, kwargs, malformed, due

    @property
    def model(self) -> str:
        return str(self.kwargs.get("model"))

    def __repr__(self) -> str:
        """Long strings shortened (a failing example stays readable)."""
        return f"Case({self.fmt!r}, {_short(self.kwargs)!r}, malformed={self.malformed}, due={self.due})"


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > 80:
        return f"{value[:40]}...<{len(value)} chars>"
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value


# -- leaves ---------------------------------------------------------------------------------------------------

#: Any unicode (lone surrogates included: JSON escapes them), short; plus a few that matter for byte caps.
_any_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "\u200b", "日本語のテキスト" * 5, "\U0001f600" * 10, "\ud800", "a\x00b", "\r\n\t"]),
)
_word_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=60)
#: Part sizes: empty, small, large (a few KB), huge (over the window on its own).
_size = st.sampled_from([0, 1, 200, 4_000, 20_000, DUE_CHARS])
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.floats(allow_nan=False), _any_text)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12,
)
_unknown_fields = st.dictionaries(st.sampled_from(["x_extra", "metadata", "citations_x", "é"]), _json, max_size=2)


@st.composite
def _filler(draw: st.DrawFn) -> str:
    """Text of a chosen size (repeated so that it costs nothing to generate)."""
    size = draw(_size)
    seed = draw(_word_text)
    return (seed * (size // len(seed) + 1))[:size] if size else draw(_any_text)


def _deep(depth: int) -> Any:
    value: Any = {"leaf": "x"}
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


_deep_json = st.integers(0, 200).map(_deep)
_png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def _maybe_extra(draw: st.DrawFn, entry: dict[str, Any]) -> dict[str, Any]:
    if draw(st.integers(0, 5)) == 0:
        entry.update(draw(_unknown_fields))
    return entry


# -- Anthropic Messages -------------------------------------------------------------------------------------


@st.composite
def _anthropic_block(draw: st.DrawFn, role: str) -> dict[str, Any]:
    if role == "assistant":
        kinds = ["text", "text", "thinking", "redacted_thinking"]
    else:
        kinds = ["text", "text", "image", "document"]
    kind = draw(st.sampled_from(kinds))
    block: dict[str, Any]
    if kind == "text":
        block = {"type": "text", "text": draw(_filler())}
        if draw(st.integers(0, 6)) == 0:
            block["cache_control"] = {"type": "ephemeral"}
    elif kind == "thinking":
        block = {"type": "thinking", "thinking": draw(_filler()), "signature": "sig" + draw(st.text(max_size=8))}
    elif kind == "redacted_thinking":
        block = {"type": "redacted_thinking", "data": draw(st.text(max_size=30))}
    elif kind == "image":
        block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png}}
    else:
        block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": draw(_filler())}}
    return _maybe_extra(draw, block)


@st.composite
def _anthropic_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One or more messages: a plain exchange, or a tool_use followed by its tool_result."""
    if draw(st.booleans()):
        call_id = "toolu_" + draw(st.text(alphabet="abc0123", min_size=1, max_size=6))
        use = {"type": "tool_use", "id": call_id, "name": draw(st.sampled_from(["read_file", "grep", "ü"]))}
        use["input"] = draw(st.one_of(st.fixed_dictionaries({"path": _any_text}), _deep_json.map(lambda d: {"d": d})))
        assistant: list[dict[str, Any]] = draw(st.lists(_anthropic_block("assistant"), max_size=2))
        result_content = draw(
            st.one_of(
                _filler(),
                st.lists(_anthropic_block("user").filter(lambda b: b["type"] in ("text", "image")), max_size=2),
            )
        )
        result = {"type": "tool_result", "tool_use_id": call_id, "content": result_content}
        if draw(st.integers(0, 4)) == 0:
            result["is_error"] = True
        return [{"role": "assistant", "content": [*assistant, use]}, {"role": "user", "content": [result]}]
    role = draw(st.sampled_from(["user", "assistant"]))
    content: Any = draw(st.one_of(_filler(), st.lists(_anthropic_block(role), min_size=1, max_size=3)))
    return [_maybe_extra(draw, {"role": role, "content": content})]


@st.composite
def _anthropic_malformations(draw: st.DrawFn) -> Any:
    """One broken Anthropic message; each is a contract violation the product promises to detect."""
    bad_block = draw(
        st.sampled_from(
            [
                {"type": "text", "text": None},
                {"type": "text", "text": 42},
                {"type": "text", "text": ["nested"]},
                {"type": "text"},
                {"type": "tool_use", "id": "toolu_x", "name": "f", "input": "not an object"},
                {"type": "tool_use", "name": "f", "input": {}},
                {"type": "tool_result", "content": "no id"},
                {"type": "image", "source": None},
                {"type": "thinking", "thinking": None, "signature": "s"},
                {"type": "no_such_block", "text": "?"},
                {"text": "no type"},
                "a bare string",
                7,
            ]
        )
    )
    shape = draw(st.sampled_from(["block", "role", "content", "item"]))
    if shape == "role":
        return {"role": draw(st.sampled_from(["bogus", "", "tool", None, 3])), "content": "hi"}
    if shape == "content":
        return {"role": "user", "content": draw(st.sampled_from([None, 42, {"type": "text", "text": "x"}, True]))}
    if shape == "item":
        return draw(st.sampled_from([{"content": "no role"}, "a bare string", None, [1, 2]]))
    return {"role": "user", "content": [{"type": "text", "text": "before"}, bad_block]}


def _history(
    draw: st.DrawFn, turns: st.SearchStrategy[list[Any]], malformation: st.SearchStrategy[Any]
) -> tuple[list[Any], bool]:
    """A few turns and a last user message; one time in four a malformed entry somewhere (and True)."""
    history: list[Any] = []
    for turn in draw(st.lists(turns, min_size=1, max_size=5)):
        history.extend(turn)
    history.append({"role": "user", "content": draw(st.one_of(_filler(), _word_text))})
    malformed = draw(st.integers(0, 3)) == 0
    if malformed:
        history.insert(draw(st.integers(0, len(history) - 1)), draw(malformation))
    return history, malformed


@st.composite
def anthropic_case(draw: st.DrawFn) -> Case:
    messages, malformed = _history(draw, _anthropic_turns(), _anthropic_malformations())
    kwargs: dict[str, Any] = {
        "model": CLAUDE,
        "max_tokens": draw(st.sampled_from([64, 64, 1, 4096])),
        "messages": messages,
    }
    if draw(st.booleans()):
        kwargs["system"] = draw(
            st.one_of(_any_text.filter(bool), st.just([{"type": "text", "text": "You are terse.", "x": 1}]))
        )
    if draw(st.booleans()):
        kwargs["tools"] = [
            {"name": "read_file", "description": draw(_any_text), "input_schema": {"type": "object"}},
            {"name": "grep", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
        ]
    if draw(st.integers(0, 5)) == 0:
        kwargs["extra_body"] = draw(_unknown_fields)
    return Case("anthropic", kwargs, malformed, _due(messages))


# -- OpenAI Chat Completions ---------------------------------------------------------------------------------


@st.composite
def _chat_part(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.integers(0, 3)) == 0:
        return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _png}}
    return _maybe_extra(draw, {"type": "text", "text": draw(_filler())})


@st.composite
def _chat_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    if draw(st.booleans()):
        calls = [
            {
                "id": f"call_{i}_" + draw(st.text(alphabet="xyz9", max_size=4)),
                "type": "function",
                "function": {
                    "name": draw(st.sampled_from(["read_file", "grep"])),
                    "arguments": draw(st.one_of(st.just('{"path": "a.py"}'), _any_text)),
                },
            }
            for i in range(draw(st.integers(1, 3)))
        ]
        assistant = {"role": "assistant", "content": draw(st.one_of(st.none(), _any_text)), "tool_calls": calls}
        results = [
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": draw(st.one_of(_filler(), st.lists(_chat_part(), max_size=2))),
            }
            for call in calls
        ]
        return [assistant, *results]
    role = draw(st.sampled_from(["user", "assistant", "system", "developer"]))
    content: Any = draw(st.one_of(_filler(), st.lists(_chat_part(), min_size=1, max_size=3)))
    message: dict[str, Any] = {"role": role, "content": content}
    if draw(st.integers(0, 4)) == 0:
        message["name"] = draw(st.text(alphabet="abc_", min_size=1, max_size=5))
    return [_maybe_extra(draw, message)]


_CHAT_MALFORMED: list[Any] = [
    {"role": "user", "content": [{"type": "text", "text": None}]},
    {"role": "user", "content": [{"type": "text"}]},
    {"role": "user", "content": [{"type": "no_such_part", "x": 1}]},
    {"role": "user", "content": ["bare string part"]},
    {"role": "user", "content": 42},
    {"role": "user", "content": None},
    {"role": "user"},
    {"role": "tool", "content": "no id"},
    {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "id": "c1"}]},
    {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "f"}}]},
    {"role": "assistant", "content": None, "tool_calls": [{"type": "nope", "id": "c1"}]},
    {"role": "bogus", "content": "hi"},
    {"content": "no role"},
    "a bare string",
]


@st.composite
def chat_case(draw: st.DrawFn) -> Case:
    messages, malformed = _history(draw, _chat_turns(), st.sampled_from(_CHAT_MALFORMED))
    if draw(st.booleans()):
        messages.insert(0, {"role": "system", "content": draw(_any_text)})
    kwargs: dict[str, Any] = {"model": GPT, "messages": messages}
    kwargs[draw(st.sampled_from(["max_tokens", "max_completion_tokens"]))] = draw(st.sampled_from([64, 1, 4096]))
    if draw(st.booleans()):
        kwargs["tools"] = [
            {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "grep", "description": draw(_any_text)}},
        ]
    if draw(st.integers(0, 5)) == 0:
        kwargs["extra_body"] = draw(_unknown_fields)
    return Case("chat", kwargs, malformed, _due(messages))


# -- OpenAI Responses -----------------------------------------------------------------------------------------


@st.composite
def _responses_part(draw: st.DrawFn, role: str) -> dict[str, Any]:
    if role == "assistant":
        return {"type": "output_text", "text": draw(_filler())}
    if draw(st.integers(0, 3)) == 0:
        return {"type": "input_image", "image_url": "data:image/png;base64," + _png}
    return _maybe_extra(draw, {"type": "input_text", "text": draw(_filler())})


@st.composite
def _responses_items(draw: st.DrawFn) -> list[dict[str, Any]]:
    kind = draw(st.sampled_from(["message", "message", "call", "reasoning"]))
    if kind == "call":
        call_id = "call_" + draw(st.text(alphabet="pq8", min_size=1, max_size=5))
        call = {"type": "function_call", "call_id": call_id, "name": "read_file", "arguments": draw(_any_text)}
        output = {"type": "function_call_output", "call_id": call_id, "output": draw(_filler())}
        return [call, output]
    if kind == "reasoning":
        return [
            {"type": "reasoning", "id": "rs_" + draw(st.text(alphabet="0123", min_size=1, max_size=4)), "summary": []}
        ]
    role = draw(st.sampled_from(["user", "assistant", "system", "developer"]))
    content: Any = draw(st.one_of(_filler(), st.lists(_responses_part(role), min_size=1, max_size=3)))
    item: dict[str, Any] = {"role": role, "content": content}
    if draw(st.booleans()):
        item["type"] = "message"
    return [_maybe_extra(draw, item)]


_RESPONSES_MALFORMED: list[Any] = [
    {"role": "user", "content": [{"type": "input_text", "text": None}]},
    {"role": "user", "content": [{"type": "input_text"}]},
    {"role": "user", "content": [{"type": "no_such_part"}]},
    {"role": "user", "content": 42},
    {"role": "user", "content": None},
    {"role": "bogus", "content": "hi"},
    {"type": "function_call", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "output": "no call id"},
    {"type": "function_call_output", "call_id": "c", "output": 5},
    {"type": "no_such_item", "x": 1},
    "a bare string",
]


@st.composite
def responses_case(draw: st.DrawFn) -> Case:
    items, malformed = _history(draw, _responses_items(), st.sampled_from(_RESPONSES_MALFORMED))
    kwargs: dict[str, Any] = {"model": GPT, "input": items, "max_output_tokens": draw(st.sampled_from([64, 16, 4096]))}
    if draw(st.booleans()):
        kwargs["instructions"] = draw(_any_text)
    if draw(st.booleans()):
        kwargs["store"] = False
    if draw(st.booleans()):
        kwargs["tools"] = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]
    if draw(st.integers(0, 5)) == 0:
        kwargs["extra_body"] = draw(_unknown_fields)
    return Case("responses", kwargs, malformed, _due(items))


def _due(history: list[Any]) -> bool:
    """Whether the history holds a part of DUE_CHARS (over the window on its own). Measured on the JSON the
    provider gets, not on the repr: a repr writes a character Python does not print as six (``\\ud7fc``),
    which made 8,000 characters look due."""
    return any(len(json.dumps(entry, ensure_ascii=False, default=str)) >= DUE_CHARS for entry in history)


CASES = {"anthropic": anthropic_case(), "chat": chat_case(), "responses": responses_case()}
