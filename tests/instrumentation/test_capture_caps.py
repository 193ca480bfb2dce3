"""Content capture's size caps: UTF-8 bytes, newest messages kept whole, only content cut (never a part's type,
an id, a role or a tool name), what was cut said, linear in the history."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

import otel_context
from otel_context import semconv
from otel_context.instrumentation._content import fit_json
from tests.instrumentation.instr_support import MODEL_A, MODEL_O, attrs, only_span

CJK = "上下文压缩测试"  # 3 UTF-8 bytes a character


def _captured(simulated_provider: Any, spans: Any, messages: list[dict[str, Any]], cap: int) -> str:
    otel_context.instrument(capture_content="SPAN_ONLY", capture_max_chars=cap)
    try:
        simulated_provider.anthropic().messages.create(model=MODEL_A, max_tokens=100, messages=messages)
    finally:
        otel_context.uninstrument()
    return str(attrs(only_span(spans()))[semconv.GEN_AI_INPUT_MESSAGES])


def test_cap_bounds_utf8_bytes_not_only_characters(simulated_provider: Any, spans: Any) -> None:
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + CJK * 40} for i in range(9)]
    captured = _captured(simulated_provider, spans, history, 600)
    assert len(captured.encode("utf-8")) <= 600
    messages = json.loads(captured)
    assert messages and messages[-1]["parts"][0]["content"].startswith("turn 8 ")  # the newest is kept


def test_everything_is_kept_when_it_fits(simulated_provider: Any, spans: Any) -> None:
    history = [
        {"role": "user", "content": CJK},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "x"},
    ]
    captured = json.loads(_captured(simulated_provider, spans, history, 16_384))
    assert [m["parts"][0]["content"] for m in captured] == [CJK, "ok", "x"]


def test_long_texts_are_cut_before_messages_are_dropped(simulated_provider: Any, spans: Any) -> None:
    history = [
        {"role": "user", "content": "first " + "a" * 5_000},
        {"role": "assistant", "content": "second " + CJK * 2_000},
        {"role": "user", "content": "third"},
    ]
    captured = _captured(simulated_provider, spans, history, 2_000)
    assert len(captured.encode("utf-8")) <= 2_000
    texts = [m["parts"][0]["content"] for m in json.loads(captured)]
    assert len(texts) == 3 and texts[2] == "third"
    assert texts[0].startswith("first a") and re.search(r"\.\.\.\[truncated [\d,]+ characters\]$", texts[0])
    assert texts[1].startswith("second " + CJK) and re.search(r"\.\.\.\[truncated [\d,]+ characters\]$", texts[1])


def test_oldest_messages_are_dropped_last_resort() -> None:
    items = [{"role": "user", "parts": [{"type": "text", "content": f"m{i} " + "b" * 40}]} for i in range(100)]
    fitted = fit_json(items, 500)
    text, kept = fitted.text, json.loads(fitted.text)
    assert len(text.encode("utf-8")) <= 500
    assert 0 < len(kept) < 100
    assert kept[-1]["parts"][0]["content"].startswith("m99 ")
    numbers = [int(m["parts"][0]["content"].split()[0][1:]) for m in kept]
    assert numbers == list(range(100 - len(kept), 100))  # a contiguous newest tail, in order
    assert fitted.omitted == 100 - len(kept)


def test_nothing_fits_gives_an_empty_list() -> None:
    items = [{"role": "user", "parts": [{"type": "text", "content": "x"}] * 50}]
    assert fit_json(items, 40) == ("[]", 1, 0)


def test_six_thousand_messages_are_capped_in_linear_time() -> None:
    """Was 21.9 s (quadratic); the 20 ms target lives in benchmarks/capture.py. This bound only catches a regression
    to quadratic cost."""
    items = [
        {"role": "user", "parts": [{"type": "text", "content": f"message {i} " + "c" * 300}]} for i in range(6_000)
    ]
    started = time.perf_counter()
    text = fit_json(items, 16_384).text
    assert time.perf_counter() - started < 2.0
    assert len(text.encode("utf-8")) <= 16_384
    assert json.loads(text)[-1]["parts"][0]["content"].startswith("message 5999 ")


# --- a long coding session, captured whole and capped, on both SDKs --------------------------------------------

SYSTEM = "You are a careful coding assistant working in the billing repository. " * 20  # ~1,400 bytes: kept whole
TOOL = "read_file_from_the_billing_workspace_with_line_numbers"  # longer than the shortest cut (64 bytes)
TURNS = 14
CAP = 16_384  # the default


def _call_id(turn: int) -> str:
    return f"call_{turn:02d}_" + "0123456789abcdef" * 5  # 88 characters: an id the old cap cut to 16 bytes


def _text(turn: int, what: str, size: int) -> str:
    return (f"turn {turn} {what}: " + "the invoice total is rounded half-even instead of half-up; " * 60)[:size]


def _anthropic_session() -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": _text(turn, "question", 400)})
        assistant: list[dict[str, Any]] = [{"type": "text", "text": _text(turn, "plan", 300)}]
        if turn == TURNS - 3:  # a compaction part among the messages kept but cut
            assistant.insert(0, {"type": "compaction", "content": _text(turn, "summary of the work so far", 2_400)})
        assistant.append({"type": "tool_use", "id": _call_id(turn), "name": TOOL, "input": {"path": f"src/{turn}.py"}})
        messages.append({"role": "assistant", "content": assistant})
        result = {"type": "tool_result", "tool_use_id": _call_id(turn), "content": _text(turn, "file", 3_000)}
        messages.append({"role": "user", "content": [result]})
        messages.append({"role": "assistant", "content": _text(turn, "answer", 600)})
    messages.append({"role": "user", "content": "And the totals of refunds?"})
    return {"model": MODEL_A, "max_tokens": 100, "system": SYSTEM, "messages": messages}


def _chat_session() -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(TURNS):
        messages.append({"role": "user", "content": _text(turn, "question", 400)})
        call = {"id": _call_id(turn), "type": "function", "function": {"name": TOOL, "arguments": '{"path": "a.py"}'}}
        messages.append({"role": "assistant", "content": _text(turn, "plan", 300), "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": _call_id(turn), "content": _text(turn, "file", 3_000)})
        messages.append({"role": "assistant", "content": _text(turn, "answer", 600)})
    messages.append({"role": "user", "content": "And the totals of refunds?"})
    return {"model": MODEL_O, "messages": messages}


def _responses_session() -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for turn in range(TURNS):
        if turn == TURNS - 3:  # a compaction item among the messages kept but cut
            items.append({"type": "compaction", "encrypted_content": "opaque-" + "x" * 200})
        items.append({"role": "user", "content": _text(turn, "question", 400)})
        items.append({"type": "function_call", "call_id": _call_id(turn), "name": TOOL, "arguments": '{"path": "a"}'})
        items.append({"type": "function_call_output", "call_id": _call_id(turn), "output": _text(turn, "file", 3_000)})
        items.append({"role": "assistant", "content": _text(turn, "answer", 600)})
    items.append({"role": "user", "content": "And the totals of refunds?"})
    return {"model": MODEL_O, "instructions": SYSTEM, "input": items}


SESSIONS: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[Any, dict[str, Any]], Any]]] = {
    "anthropic": (_anthropic_session, lambda sim, body: sim.anthropic().messages.create(**body)),
    "openai_chat": (_chat_session, lambda sim, body: sim.openai().chat.completions.create(**body)),
    "openai_responses": (_responses_session, lambda sim, body: sim.openai().responses.create(**body)),
}

_CUT = re.compile(r"^(.*)\.\.\.\[truncated ([\d,]+) characters\]$", re.DOTALL)


def _capture(sim: Any, spans: Any, session: str, cap: int) -> dict[str, Any]:
    make, send = SESSIONS[session]
    spans.clear()
    otel_context.instrument(capture_content="SPAN_ONLY", capture_max_chars=cap)
    try:
        send(sim, make())
    finally:
        otel_context.uninstrument()
    return attrs(only_span(spans()))


def _texts(part: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, text) of the content of a part: the only values the cap may cut."""
    out = []
    for key in ("content", "response"):
        if isinstance(part.get(key), str):
            out.append((key, part[key]))
    return out


def _structure(message: dict[str, Any]) -> Any:
    """A message without its content: what must never be cut."""
    return (
        {k: v for k, v in message.items() if k != "parts"},
        [{k: v for k, v in p.items() if k not in ("content", "response")} for p in message["parts"]],
    )


@pytest.mark.parametrize("session", sorted(SESSIONS))
def test_a_long_session_keeps_its_structure_and_newest_messages_and_says_what_was_cut(
    simulated_provider: Any, spans: Any, session: str
) -> None:
    full_attrs = _capture(simulated_provider, spans, session, 10_000_000)
    capped_attrs = _capture(simulated_provider, spans, session, CAP)
    full = json.loads(full_attrs[semconv.GEN_AI_INPUT_MESSAGES])
    raw = capped_attrs[semconv.GEN_AI_INPUT_MESSAGES]
    capped = json.loads(raw)
    assert semconv.CAPTURE_MESSAGES_OMITTED not in full_attrs and semconv.CAPTURE_TEXTS_CUT not in full_attrs
    assert len(raw.encode("utf-8")) <= CAP
    # The system prompt is whole (it fits the cap alone), in its own attribute.
    assert capped_attrs[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] == full_attrs[semconv.GEN_AI_SYSTEM_INSTRUCTIONS]
    assert SYSTEM in capped_attrs[semconv.GEN_AI_SYSTEM_INSTRUCTIONS]

    # The oldest are left out, and the span says how many; what is kept is the newest tail, in order.
    omitted = len(full) - len(capped)
    assert omitted > 0 and capped_attrs[semconv.CAPTURE_MESSAGES_OMITTED] == omitted
    tail = full[omitted:]
    # No field that gives a message or a part its meaning is cut: roles, part types, ids, tool names, all equal.
    assert [_structure(m) for m in capped] == [_structure(m) for m in tail]
    types = {p["type"] for m in capped for p in m["parts"]}
    assert {"text", "tool_call", "tool_call_response"} <= types
    assert ("compaction" in types) == (session != "openai_chat")
    if session == "anthropic":  # its summary is content: cut, the part still a compaction part
        (summary,) = [p["content"] for m in capped for p in m["parts"] if p["type"] == "compaction"]
        assert _CUT.match(summary)
    assert {p["name"] for m in capped for p in m["parts"] if p["type"] == "tool_call"} == {TOOL}

    # Only content is cut, each cut text marked with how many characters went; the span counts them.
    cut: list[bool] = []  # per kept message, oldest first: whether a text of it was cut
    longest: list[int] = []  # and the longest text it kept (its kept start, when cut)
    texts_cut = 0
    for kept, whole in zip(capped, tail, strict=True):
        cut.append(False)
        longest.append(0)
        for (key, text), (_, original) in zip(
            [t for p in kept["parts"] for t in _texts(p)], [t for p in whole["parts"] for t in _texts(p)], strict=True
        ):
            if text != original:
                match = _CUT.match(text)
                assert match, (key, text[-60:])
                text, gone = match.group(1), int(match.group(2).replace(",", ""))
                assert original.startswith(text) and len(original) - len(text) == gone
                cut[-1] = True
                texts_cut += 1
            longest[-1] = max(longest[-1], len(text))
    assert sum(cut) >= 2 and capped_attrs[semconv.CAPTURE_TEXTS_CUT] == texts_cut

    # The newest messages are whole: the question, the answer and the tool result before it, at least.
    assert capped[-3:] == tail[-3:] and not any(cut[-3:])
    # The oldest are cut first: no message older than a cut one kept a longer text than it.
    for newer in (i for i, c in enumerate(cut) if c):
        assert max(longest[:newer], default=0) <= longest[newer], (newer, longest)
